"""The POET planner on every zoo model: a plan and a proven lower bound within a time limit, beside
the MILP alone (the formulation before plan/solver/bound.py) and the best heuristic.

Usage: .venv/bin/python benchmarks/planner_zoo.py [--time-limit 60] [--boards nrf52840 rpi4]
           [--batches 1 16] [--models a b ...] [--no-milp-alone] [--deadline 1.5]

Graphs are traced at each batch and costed for each board with its shipped profile (ops the
profile has not measured are estimated: poet.plan.cost.costs.costed(estimate=True)); budgets count the
activation arena only: 50% and 25% of the keep-everything peak, and a quarter of the way from
the smallest feasible (one op's inputs and output) to the peak where those are below it. Per row:
POET (the relaxations of plan/solver/bound.py, their plan, then the MILP where it can be built, all within
--time-limit), its status and gap to the best bound proven; the MILP alone (warm-started from the
best heuristic, the same limit); the best heuristic and its gap to POET's bound.
"""

from __future__ import annotations

import argparse
import time
import warnings

from poet.boards import load_board
from poet.graph.tracer import trace
from poet.models.zoo import ZOO, get_model
from poet.plan.cost.costs import costed, load_profile
from poet.plan.solver import milp
from poet.plan.strategies import best_heuristic, found
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import MAX_MILP_VARIABLES, solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes, milp_size
from poet.plan.types import CostedGraph, Plan


def _status(p: Plan) -> str:
    if p.status == "optimal":
        return "optimal"
    if found(p):
        return f"{p.gap:.2%}" if p.bound_j is not None or p.gap < 1 else "feasible"
    return p.status


def _row(label: str, cg: CostedGraph, budget: int, deadline: float, limit: float, alone: bool) -> str:
    best = best_heuristic(cg, budget, deadline)
    t0 = time.perf_counter()
    p = solve_poet(cg, budget, deadline, time_limit_s=limit, warm_start=best)
    wall = time.perf_counter() - t0
    milp.settle()  # a HiGHS solve left past its limit stops before the next row's clock starts
    bound = p.bound_j
    if not found(p):
        proofs = ("gap relaxation", "row relaxation", "least-time walk")
        proof = next((f"proven by the {w}" for w in proofs if w in p.note),
                     "proven by the MILP" if p.status == "infeasible" else "")
        known = f"{bound:.6g}" if bound is not None else "-"  # a no-solution row still has its bound
        return f"| {label} | {budget:,} | {p.status} | - | {known} | {wall:.1f} | {proof} | - | - |"
    how = ("row relaxation (2nd core)" if "second core's row relaxation" in p.note
           else "least-time MILP (2nd core)" if "second core's least-time MILP" in p.note
           else "least-time walk (2nd core)" if "second core's least-time walk" in p.note
           else "MILP (2nd core)" if "second core's MILP" in p.note
           else "row relaxation" if "row relaxation's plan" in p.note
           else "least-time walk" if "least-time walk's plan" in p.note
           else p.note.split("heuristic's plan (")[1].split(")")[0] if "heuristic's plan (" in p.note else "MILP")
    poet = f"| {label} | {budget:,} | {_status(p)} | {p.energy_j:.6g} | {bound:.6g} | {wall:.1f} | {how} |"
    if not alone:
        old = "not run"
    elif milp_size(cg) > MAX_MILP_VARIABLES:
        old = "not built (too large)"
    else:
        t0 = time.perf_counter()
        q = solve_poet(cg, budget, deadline, time_limit_s=limit, warm_start=best, bound=False)
        old = (f"{q.status}" + (f", gap {q.gap:.1%}" if q.status == "feasible" else "")
               + f", {time.perf_counter() - t0:.0f} s")
        milp.settle()
        if "was not built" in q.note:  # its build would take the limit: the heuristic's plan, one plain pass its bound
            old = f"not built in {limit:g} s: the heuristic's plan, gap {q.gap:.1%}"
    heur = (f"{best.strategy} {best.energy_j:.6g} J, {1 - bound / best.energy_j:.2%}" if best is not None and bound
            else "none fits")
    return f"{poet} {old} | {heur} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=1.5, help="multiple of one plain pass (default 1.5)")
    ap.add_argument("--boards", nargs="+", default=["nrf52840", "rpi4"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--models", nargs="+", help="zoo models (default all)")
    ap.add_argument("--no-milp-alone", action="store_true", help="skip the MILP-alone column (halves the run)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    for board_name in args.boards:
        board, prof = load_board(board_name), load_profile(board_name)
        print(f"\n### {board_name}, deadline {args.deadline:g}x one plain pass, time limit {args.time_limit:g} s\n")
        print("| model | batch | T | budget | arena B | POET | energy J | bound J | s | plan by | MILP alone | "
              "best heuristic, gap to the bound |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name in args.models or list(ZOO):
            model, spec = get_model(name)
            for batch in args.batches:
                try:
                    g = trace(model, name, spec.input_shape, spec.classes, batch, spec.input_dtype)
                except Exception as exc:  # noqa: BLE001 - a model that cannot train at this batch (batch norm at 1)
                    print(f"| {name} | {batch} | - | - | - | cannot trace: {str(exc).splitlines()[0]} "
                          f"| | | | | | |", flush=True)
                    continue
                cg = costed(g, board, prof, estimate=True)
                peak, floor = keep_all(cg).peak_bytes, lower_bound_bytes(cg)
                deadline = args.deadline * cg.one_pass_s
                budgets = [("50%", peak // 2), ("25%", peak // 4)]
                if any(b < floor for _, b in budgets):
                    budgets.append(("floor+25%", floor + (peak - floor) // 4))
                for label, budget in budgets:
                    head = f"| {name} | {batch} | {len(cg)}"
                    if budget < floor:
                        print(f"{head} | {label} | {budget:,} | infeasible: one op needs {floor:,} B | | | | | | |",
                              flush=True)
                        continue
                    print(f"{head} {_row(label, cg, budget, deadline, args.time_limit, not args.no_milp_alone)}",
                          flush=True)


if __name__ == "__main__":
    main()
