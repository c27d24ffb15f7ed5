"""Solve the POET reference's own instances with poet's planner, under the reference's rules and poet's.

Usage: .venv/bin/python benchmarks/planner_reference.py [--time-limit S] [--solver highs|cbc]

The instances and the reference's own results are in
../shared/benchmarks/poet-reference/README.md. `reference` semantics = its rules
(paging time outside the deadline, no page-out in the producing stage, inputs
recomputable); `poet` semantics fix those defects (docs/planner.md), so energies
differ where paging or input recompute is involved. Both start from the best
baseline plan (warm start) and report the solver's own status.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

from poet.plan.strategies import plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.types import POET, REFERENCE, CostedGraph

REF = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "poet-reference"
# (instance, activation budget in bytes, deadline as a multiple of one plain pass, the reference's result)
CASES = [
    ("linear.m0", 3_300, 1.0, "optimal 0.5 s (CBC), 0.105044 J"),
    ("linear.m0", 3_300, 1.01, "-"),
    ("transformer.m4", 40_000_000, 1.2, "optimal 0.3 s (CBC), 8.256776 J"),
    ("resnet18_cifar.a72", 3_000_000, 7.6, "optimal 101-131 s (HiGHS), 7.889510 J; CBC: nothing in 200 s"),
    ("resnet18_cifar.m4", 737_719, 1.5, "no proof after 455 s (0.663560 J) or 1507 s (0.677983 J), HiGHS"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--solver", default="highs", choices=["highs", "cbc"])
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if not REF.is_dir():
        raise SystemExit(f"{REF} not found: run from a checkout with shared/ beside it")
    print(f"| instance | budget B | deadline | semantics | keep-all peak B | status | energy J | gap | recomputes | "
          f"page-ins | solve s ({args.solver}, limit {args.time_limit:g} s) | the reference |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, budget, factor, theirs in CASES:
        for sem_name, sem in (("reference", REFERENCE), ("poet", POET)):
            g = CostedGraph.from_json(REF / f"{name}.json", reference=sem is REFERENCE)
            t0 = time.perf_counter()
            p = plan_with("poet", g, budget, factor * g.one_pass_s, solver=args.solver,
                          time_limit_s=args.time_limit, semantics=sem)
            wall = time.perf_counter() - t0
            energy = f"{p.energy_j:.6f}" if p.status in ("optimal", "feasible") else "-"
            gap = f"{p.gap:.1%}" if p.status == "feasible" else "-"
            print(f"| {name} | {budget:,} | {factor}x | {sem_name} | {keep_all(g).peak_bytes:,} | {p.status} | "
                  f"{energy} | {gap} | {p.recomputes} | {p.page_ins} | {wall:.1f} | "
                  f"{theirs if sem is REFERENCE else ''} |", flush=True)


if __name__ == "__main__":
    main()
