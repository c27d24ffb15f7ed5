"""Other MILP solvers on the zoo rows POET does not prove within 1% in 60 s (docs/benchmarks.md, "Where
it is not within 1%"): is HiGHS, or the time limit, what stops them?

Usage: .venv/bin/python benchmarks/solvers_hard_rows.py [--time-limit 120] [--rows resnet18-cifar:rpi4:1 ...]
           [--python /tmp/solvers/bin/python]

Each row's POET MILP (strategies/poet_milp_model.py, the same instance as benchmarks/planner_zoo.py: 25% of
keep-everything, deadline 1.5x one plain pass) is written as MPS and solved cold, one solver at a time, by
HiGHS (highspy, the planner's solver) and, where they are installed, SCIP (pyscipopt) and OR-Tools' CP-SAT
on both cores. Neither is a poet dependency: to compare, `python3 -m venv /tmp/solvers && /tmp/solvers/bin/pip
install highspy==1.15.1 pyscipopt ortools` and pass `--python /tmp/solvers/bin/python`. Each solver runs in
a process of its own (OR-Tools bundles its own HiGHS, whose symbols clash with highspy's in one process).
Printed per solver: its best plan and its proven bound in joules.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROWS = ("resnet18-cifar:rpi4:1", "resnet18-cifar:nrf52840:1", "mlperf-vww:nrf52840:1")

Solved = tuple[str, float, float]  # (solver version, best objective, proven bound); inf where no plan


def _highs(mps: Path, limit: float) -> Solved:
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.readModel(str(mps))
    h.setOptionValue("time_limit", limit)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.run()
    info = h.getInfo()
    primal = info.objective_function_value if info.primal_solution_status == 2 else math.inf
    return f"{h.versionMajor()}.{h.versionMinor()}.{h.versionPatch()}", primal, info.mip_dual_bound


def _scip(mps: Path, limit: float) -> Solved:
    from pyscipopt import Model

    m = Model()
    m.hideOutput()
    m.readProblem(str(mps))
    m.setParam("limits/time", limit)
    m.setParam("limits/gap", 0.0)
    m.optimize()
    primal = m.getPrimalbound() if m.getNSols() else math.inf
    return f"{m.version():g}", primal, m.getDualbound()


def _cp_sat(mps: Path, limit: float) -> Solved:
    import ortools
    from ortools.linear_solver.python import model_builder as mb

    m = mb.Model()
    m.import_from_mps_file(str(mps))
    s = mb.Solver("sat")
    s.set_time_limit_in_seconds(limit)
    s.set_solver_specific_parameters("num_workers:2")  # the machine's cores: CP-SAT is a portfolio
    st = s.solve(m)
    found = st in (mb.SolveStatus.OPTIMAL, mb.SolveStatus.FEASIBLE)
    try:
        bound = float(s.best_objective_bound)
    except (TypeError, ValueError):  # none proven (NA)
        bound = -math.inf
    return ortools.__version__, (s.objective_value if found else math.inf), bound


SOLVERS: dict[str, Callable[[Path, float], Solved]] = {"HiGHS": _highs, "SCIP": _scip, "CP-SAT": _cp_sat}


def _solve_here() -> None:
    """The worker: `--solve SOLVER MPS LIMIT` prints "version objective bound", or "missing"."""
    solver, mps, limit = sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
    try:
        version, primal, bound = SOLVERS[solver](mps, limit)
    except ImportError:
        print("missing")
        return
    print(version, primal, bound)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--rows", nargs="+", default=list(ROWS), help="model:board:batch (default: %(default)s)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the solvers (default: this one)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from poet.boards import load_board
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import costed, load_profile
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.strategies.poet_milp_model import milp_problem

    print("| model | board | batch | solver | plan J | bound J | gap | s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for row in args.rows:
            name, board_name, batch = row.split(":")
            model, spec = get_model(name)
            g = trace(model, name, spec.input_shape, spec.classes, int(batch), spec.input_dtype)
            cg = costed(g, load_board(board_name), load_profile(board_name), estimate=True)
            prob, fixed_j, scale = milp_problem(cg, keep_all(cg).peak_bytes // 4, 1.5 * cg.one_pass_s)
            mps = Path(tmp) / "row.mps"
            prob.writeMPS(str(mps))
            for solver in SOLVERS:
                t0 = time.perf_counter()
                out = subprocess.run([args.python, __file__, "--solve", solver, str(mps), str(args.time_limit)],
                                     capture_output=True, text=True, check=True).stdout.split()
                if out == ["missing"]:
                    print(f"| {name} | {board_name} | {batch} | {solver} | not installed | | | |", flush=True)
                    continue
                version, primal, bound = out[-3], float(out[-2]), float(out[-1])
                plan_j, bound_j = fixed_j + primal * scale, fixed_j + max(bound, 0.0) * scale
                gap = f"{1 - bound_j / plan_j:.2%}" if math.isfinite(plan_j) else "-"
                shown = f"{plan_j:.6g}" if math.isfinite(plan_j) else "none"
                print(f"| {name} | {board_name} | {batch} | {solver} {version} | {shown} | {bound_j:.6g} | {gap} "
                      f"| {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--solve"]:
        _solve_here()
    else:
        main()
