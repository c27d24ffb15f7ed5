"""Solve time and gap of the POET MILP on every zoo model at 50% and 25% of its checkpoint-all peak.

(and at a quarter of the way from the smallest feasible arena to the peak, since a small model's first
layer alone may need more than half its peak)

Usage: .venv/bin/python benchmarks/planner_zoo.py [--time-limit S] [--deadline 1.5] [--models a,b]

Graphs are traced at batch 1 and costed for the nRF52840 (ops the shipped profile has
not measured are estimated from FLOPs, see poet.costs.costed), budgets count the
activation arena only. For each budget: the best baseline (all of them, same cost
model and simulator), then POET warm-started from it.
"""

from __future__ import annotations

import argparse
import time
import warnings

from poet.boards import load_board
from poet.graph.tracer import trace
from poet.models.zoo import ZOO, get_model
from poet.plan.costs import costed, load_profile
from poet.plan.strategies import BASELINES, found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import lower_bound_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=1.5, help="multiple of one plain pass (default 1.5)")
    ap.add_argument("--models", help="comma-separated zoo models (default all)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    board, prof = load_board("nrf52840"), load_profile("nrf52840")
    names = args.models.split(",") if args.models else list(ZOO)
    print(f"| model | T | budget | arena B | best baseline | its energy J | POET status | POET energy J | gap | "
          f"vs baseline | solve s (highs, limit {args.time_limit:g} s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        model, spec = get_model(name)
        g = trace(model, name, spec.input_shape, spec.classes, 1, spec.input_dtype)
        cg = costed(g, board, prof, estimate=True)
        peak, floor = keep_all(cg).peak_bytes, lower_bound_bytes(cg)
        deadline = args.deadline * cg.one_pass_s
        # the issue's 50% and 25% of the peak; small models' first op alone needs more, so also a
        # budget a quarter of the way from the smallest possible (one op's inputs and output) to the peak
        for label, budget in (("50%", peak // 2), ("25%", peak // 4), ("floor+25%", floor + (peak - floor) // 4)):
            if budget < floor:
                print(f"| {name} | {len(cg)} | {label} | {budget:,} | - | - | infeasible (one op needs "
                      f"{floor:,} B) | - | - | - | - |", flush=True)
                continue
            base = [plan_with(s, cg, budget, deadline) for s in BASELINES if s not in ("checkmate", "remat-only",
                                                                                     "page-only")]
            ok = [p for p in base if found(p)]
            best = min(ok, key=lambda p: p.energy_j) if ok else None
            t0 = time.perf_counter()
            p = plan_with("poet", cg, budget, deadline, time_limit_s=args.time_limit)
            wall = time.perf_counter() - t0
            energy = f"{p.energy_j:.6g}" if found(p) else "-"
            gap = f"{p.gap:.1%}" if p.status == "feasible" else ("0" if p.status == "optimal" else "-")
            vs = (f"{100 * (p.energy_j / best.energy_j - 1):+.1f}%" if best and found(p) else "-")
            print(f"| {name} | {len(cg)} | {label} | {budget:,} | {best.strategy if best else 'none'} | "
                  f"{f'{best.energy_j:.6g}' if best else '-'} | {p.status} | {energy} | {gap} | {vs} | {wall:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
