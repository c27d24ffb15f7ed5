"""A plan that meets the deadline where no heuristic's does: the POET MILP with time as its objective.

At a tight budget on the nRF52840 (MobileNetV1 at 25% of keep-everything) every heuristic that fits
runs far past the deadline (capuchin: 7.1 s for a 3.2 s deadline), and HiGHS, asked for the least
energy under the deadline with no plan to start from, finds none: not in 60 s, nor with a zero
objective in 1,500 s. Asked instead for the least time, from the heuristic's slow plan, it has a
plan under the deadline in about 45 s. That plan is then a start for the energy MILP.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from poet.plan.strategies import best_heuristic
from poet.plan.strategies.builder import checked
from poet.plan.strategies.poet_milp import run_milp
from poet.plan.types import CostedGraph, Plan, Semantics


def timed(graph: CostedGraph, semantics: Semantics) -> CostedGraph:
    """The graph with each cost in joules replaced by its seconds in the deadline (paging's only
    where it counts there)."""
    paging = semantics.paging_in_deadline
    nodes = tuple(replace(n, compute_j=n.compute_s, page_in_j=n.page_in_s if paging else 0.0,
                          page_out_j=n.page_out_s if paging else 0.0) for n in graph.nodes)
    return CostedGraph(nodes, graph.name, graph.param_bytes)


def fastest(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool, paging: bool,
            semantics: Semantics, time_limit_s: float, say: Callable[[str], None] | None = None) -> Plan | None:
    """A plan that fits `arena_budget` and meets `deadline_s`, found by minimising time from the
    heuristics' plan that fits (the least energy among them, whatever its time), stopped at the
    first under the deadline; None if there is no plan to start from or none met it in time."""
    say = say or (lambda _msg: None)
    start = best_heuristic(graph, arena_budget, math.inf, recompute, paging, semantics)
    if start is None:
        return None
    say(f"no heuristic meets the deadline: the least time from {start.strategy}'s plan ({start.time_s:.6g} s)")
    plan, _ = run_milp(timed(graph, semantics), arena_budget, start.time_s * (1 + 1e-6), recompute, paging, semantics,
                       start, time_limit_s, strategy="fastest", stop=lambda s: s <= deadline_s)
    out = checked(graph, Plan(strategy="fastest", stages=plan.stages, status="infeasible", solver="highs",
                              arena_budget=arena_budget, deadline_s=deadline_s), arena_budget, deadline_s, semantics)
    if not plan.stages or out.status != "feasible":
        say(f"none under the deadline in {time_limit_s:.0f} s" + (f" (the fastest: {plan.energy_j:.6g} s)"
                                                                  if plan.stages else ""))
        return None
    say(f"a plan under the deadline: {out.time_s:.6g} s, {out.energy_j:.6g} J")
    return out
