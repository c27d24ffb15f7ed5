"""Solve the POET reference's own instances with poet's planner and print a table.

Usage: .venv/bin/python benchmarks/planner_reference.py [--time-limit S] [--solver highs|cbc]

The instances and the reference's own results are in
../shared/benchmarks/poet-reference/README.md. Our semantics differ on purpose
(paging time counts in the deadline, inputs are not free to recompute, tensors
leave RAM right after their last use inside a stage), so energies need not match
where paging or input recompute is involved.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

from poet.plan import CostedGraph
from poet.solve import keep_all, solve_poet

REF = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "poet-reference"
# (instance, activation budget in bytes, deadline as a multiple of one plain pass), as in the reference README
CASES = [
    ("linear.m0", 3_300, 1.0),
    ("linear.m0", 3_300, 1.01),
    ("transformer.m4", 40_000_000, 1.2),
    ("resnet18_cifar.a72", 3_000_000, 7.6),
    ("resnet18_cifar.m4", 737_719, 1.5),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--solver", default="highs", choices=["highs", "cbc"])
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if not REF.is_dir():
        raise SystemExit(f"{REF} not found: run from a checkout with shared/ beside it")
    print(f"| instance | budget B | deadline | keep-all peak B | status | energy J | gap | recomputes | "
          f"page-ins | solve s ({args.solver}, limit {args.time_limit:g} s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, budget, factor in CASES:
        g = CostedGraph.from_json(REF / f"{name}.json")
        t0 = time.perf_counter()
        p = solve_poet(g, budget, factor * g.one_pass_s, solver=args.solver, time_limit_s=args.time_limit)
        wall = time.perf_counter() - t0
        energy = f"{p.energy_j:.6f}" if p.status in ("optimal", "feasible") else "-"
        gap = f"{p.gap:.1%}" if p.status == "feasible" else "-"
        print(f"| {name} | {budget:,} | {factor}x | {keep_all(g).peak_bytes:,} | {p.status} | {energy} | {gap} | "
              f"{p.recomputes} | {p.page_ins} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
