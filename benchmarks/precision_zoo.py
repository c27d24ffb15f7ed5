"""Energy, time and peak RAM of fp32, greedy and auto precision per zoo model on the nRF52840 (or --board).

Usage: .venv/bin/python benchmarks/precision_zoo.py [--board nrf52840] [--profile P] [--deadline 3]
       [--time-limit S] [--models a:batch,b:batch]

Each model is traced at its batch (below), costed for the board and planned by the POET MILP at up to
three arena budgets: `tight`, halfway between the smallest arena an fp32 plan fits at the deadline and
what keeping every fp32 activation needs (so paging and recomputation matter); `roomy`, the keep-all
peak (nothing needs paging: the casts can only cost); `below fp32`, halfway between the smallest arena
a greedy plan fits in and the smallest an fp32 plan fits in (no fp32 plan exists there). At each
budget: fp32 (no casts), greedy (every saved tensor the rules allow stored in 16 bits, the cheaper cast
type on this board, and every linear and conv2d forward in int8, casts ignored when choosing but
counted in the plan) and auto (poet.precision.select: fp32's and greedy's MILPs, then one MILP with a
switch per tensor and per layer warm-started from the better: `solved` 3).
RAM = the fixed part (parameters, gradients, optimizer state, staged batch, firmware static) + the
plan's peak arena; above the board's RAM it is the profile's cost model with more memory, not a plan
the real board could hold. Layer shapes the profile lacks (every zoo model but the digits ones) are
estimated from the nearest measured shape of the same op (poet.costs.estimate_op).

Cast costs come from the profile's `casts:` section (`poet profile --casts`). When the profile has none,
the nrf52840 fits of docs/benchmarks.md "Precision: cast and int8 kernel costs" (emulated, 2026-11-21)
are used, and the output says so.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path
from typing import Any

from poet.boards import load_board
from poet.errors import PoetError
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import costed, load_profile
from poet.plan.cost.memory import budget_for
from poet.plan.strategies import found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.transform.precision import select
from poet.plan.types import CostedGraph

# the emulated nrf52840's cast fits (cycles = r n + c), docs/benchmarks.md, for profiles without `casts:`
NRF52840_CASTS: dict[str, Any] = {
    "clock_hz": 64e6,
    "fp32->fp16": {"cycles_per_elem": 24.0, "cycles_fixed": 206.0},
    "fp16->fp32": {"cycles_per_elem": 17.0, "cycles_fixed": 200.0},
    "fp32->bf16": {"cycles_per_elem": 11.0, "cycles_fixed": 204.0},
    "bf16->fp32": {"cycles_per_elem": 5.0, "cycles_fixed": 196.0},
}
# (model, batch) per board: every zoo model on the nrf52840 (the large ones at batch 1: their MILPs
# have hundreds of stages), the model small enough for the mkr1000's 32 KB there
MODELS = {
    "nrf52840": (("mlp-digits", 16), ("cnn-digits", 16), ("lenet", 4), ("transformer-block", 2), ("bert-tiny", 1),
                 ("mobilenetv2-cifar-0.35", 1), ("mobilenetv2-cifar", 1), ("resnet18-cifar", 1),
                 ("vgg16-cifar", 1), ("bert-base", 1)),
    "mkr1000": (("mlp-tiny", 8),),
}


def with_casts(prof: dict[str, Any], board: str) -> tuple[dict[str, Any], str]:
    if prof.get("casts"):
        return prof, "the profile's casts fits"
    if board != "nrf52840":
        raise SystemExit(f"profiles/{board}.yaml has no casts section: run `poet profile --board {board} --casts`")
    return dict(prof, casts=NRF52840_CASTS), "docs/benchmarks.md's emulated nrf52840 fits (profile has none)"


def _smallest(cg: CostedGraph, deadline: float, time_limit: float) -> int | None:
    """The smallest arena a plan fits at the deadline, or None where the MILP finds none or is too large to
    build (then the tight and below-fp32 rows are left out)."""
    try:
        return min_arena_budget(cg, deadline, time_limit_s=time_limit)
    except PoetError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="nrf52840", help="nrf52840 (default) or mkr1000")
    ap.add_argument("--profile", help="op-cost profile (default profiles/<board>.yaml)")
    ap.add_argument("--deadline", type=float, default=3.0, help="multiple of one plain fp32 pass (default 3)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="per MILP, seconds (default 20)")
    ap.add_argument("--models", help="comma-separated model:batch (default: every zoo model for the nrf52840)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    board = load_board(args.board)
    prof, source = with_casts(load_profile(board.name, Path(args.profile) if args.profile else None), board.name)
    static = int(prof["runtime_static_bytes"])
    models = ([(m.split(":")[0], int(m.split(":")[1])) for m in args.models.split(",")] if args.models
              else MODELS.get(board.name, ()))
    print(f"{board.name}; cast costs: {source}; deadline {args.deadline:g}x one fp32 pass; POET MILP (highs, "
          f"{args.time_limit:g} s per solve)\n")
    print("| model (batch) | budget | RAM | mode | stored 16-bit | int8 layers | energy uJ | time ms | peak RAM B |"
          " vs fp32 energy | solved | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, batch in models:
        model, spec = get_model(name)
        g = trace(model, name, spec.input_shape, spec.classes, batch, spec.input_dtype)
        cg = costed(g, board, prof, estimate=True)
        fixed = budget_for(g, 1 << 40, static).fixed
        deadline = args.deadline * cg.one_pass_s
        full = keep_all(cg).peak_bytes
        smallest = _smallest(cg, deadline, args.time_limit)
        budgets = [("roomy", full)]
        if smallest is not None and smallest < full:
            budgets.insert(0, ("tight", (smallest + full) // 2))
        # below what any fp32 plan fits in: half-size storage is what makes a plan possible at all
        low = select("greedy", g, board, prof, full, deadline)
        smallest_low = _smallest(low.cg, deadline, args.time_limit)
        if smallest is not None and smallest_low is not None and smallest_low < smallest:
            budgets.insert(0, ("below fp32", (smallest_low + smallest) // 2))
        for label, arena in budgets:
            base = math.nan
            for mode in ("fp32", "greedy", "auto"):
                t0 = time.perf_counter()
                sel = select(mode, g, board, prof, arena, deadline, time_limit_s=args.time_limit)
                plan = sel.plan or plan_with("poet", sel.cg, arena, deadline, time_limit_s=args.time_limit)
                wall = time.perf_counter() - t0
                stored = f"{len(sel.changes)} ({sum(c.bytes_saved for c in sel.changes):,} B)"
                solved = sel.tried if mode == "auto" else 1
                row = f"| {name} ({batch}) | {label} | {fixed + arena:,} | {mode} | {stored} | {len(sel.int8)} |"
                if plan is None or not found(plan):
                    print(f"{row} infeasible | - | - | - | {solved} | {wall:.1f} |", flush=True)
                    continue
                if mode == "fp32":
                    base = plan.energy_j
                vs = f"{plan.energy_j / base - 1:+.1%}" if math.isfinite(base) else "(no fp32 plan)"
                print(f"{row} {plan.energy_j * 1e6:,.1f} | {plan.time_s * 1e3:,.2f} | {fixed + plan.peak_bytes:,} | "
                      f"{vs} | {solved} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
