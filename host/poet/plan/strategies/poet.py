"""The POET MILP (poet_milp.py) as strategies: poet itself, the same MILP with the paging or the
recompute decisions left out, and Checkmate's MILP (recompute only, no deadline) under our cost model.

Each starts from the best heuristic plan that makes only the decisions it has (Options.start),
so a time-limited solve returns nothing worse than that plan; checkmate starts cold.
"""

from __future__ import annotations

from dataclasses import replace

from poet.plan.simulate import PlanError, simulate
from poet.plan.strategies.base import Options, Strategy, found
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.types import CostedGraph, Plan, Semantics


def _solve(name: str, graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
           options: Options, recompute: bool = True, paging: bool = True) -> Plan:
    start = options.start(recompute, paging) if options.start is not None else None
    return solve_poet(graph, arena_budget, deadline_s, solver=options.solver, time_limit_s=options.time_limit_s,
                      gap=options.gap, progress=options.progress, recompute=recompute, paging=paging,
                      strategy=name, warm_start=start, semantics=semantics)


def poet(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics, options: Options) -> Plan:
    return _solve("poet", graph, arena_budget, deadline_s, semantics, options)


def remat_only(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
               options: Options) -> Plan:
    return _solve("remat-only", graph, arena_budget, deadline_s, semantics, options, paging=False)


def page_only(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
              options: Options) -> Plan:
    return _solve("page-only", graph, arena_budget, deadline_s, semantics, options, recompute=False)


def checkmate(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
              options: Options) -> Plan:
    """The least-energy recompute-only plan whatever its time, refused if it misses the deadline."""
    # no deadline: no remat plan recomputes more than every node in every stage
    loose = graph.one_pass_s * (len(graph) + 1)
    plan = _solve("checkmate", graph, arena_budget, loose, semantics, replace(options, start=None), paging=False)
    plan.deadline_s = deadline_s
    if found(plan):
        try:
            simulate(graph, plan, arena_budget, deadline_s, semantics)
        except PlanError as exc:
            plan.status, plan.note = "infeasible", f"its least-energy plan misses the deadline: {exc}"
    return plan


POET = Strategy("poet", "the POET MILP: recompute and page, least energy within RAM and deadline", poet, milp=True)
REMAT_ONLY = Strategy("remat-only", "the POET MILP without paging", remat_only, milp=True)
PAGE_ONLY = Strategy("page-only", "the POET MILP without recomputation (the paging-only optimum)", page_only,
                     milp=True)
CHECKMATE = Strategy("checkmate", "Checkmate: the least-energy recompute-only plan, ignoring the deadline", checkmate,
                     milp=True)
