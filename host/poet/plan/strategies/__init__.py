"""Every planning strategy poet knows, under one cost model and one simulator.

One module per heuristic beside this one (builder, chen, revolve, dtr, capuchin); the MILP
strategies are poet.solve with some variables left out.

`plan_with(name, ...)` returns a Plan whose status says what it is worth:
optimal / feasible (a MILP proved it, or stopped with a gap), feasible (a heuristic's
plan that fits and meets the deadline), infeasible (with the reason in note),
no-solution (a MILP found nothing in its time limit), not-applicable (revolve on a
graph that is not a chain). Every plan with stages has been replayed by simulate.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from poet.plan.simulate import PlanError, simulate
from poet.plan.solve import Progress, solve_poet
from poet.plan.strategies.builder import checkpoint_all
from poet.plan.strategies.capuchin import capuchin
from poet.plan.strategies.chen import chen_greedy, sqrtn
from poet.plan.strategies.dtr import dtr
from poet.plan.strategies.revolve import revolve
from poet.plan.types import POET, STRATEGIES, CostedGraph, Plan, Semantics

MILP = ("poet", "remat-only", "page-only", "checkmate")
BASELINES = tuple(s for s in STRATEGIES if s != "poet")

_HEURISTICS: dict[str, Callable[..., Plan]] = {
    "checkpoint-all": checkpoint_all,
    "sqrtn": sqrtn,
    "chen-greedy": chen_greedy,
    "revolve": revolve,
    "dtr": dtr,
    "capuchin": capuchin,
}


def found(plan: Plan) -> bool:
    """The plan fits the budget and meets the deadline."""
    return plan.status in ("optimal", "feasible")


# Above this many nodes the heuristics take seconds to minutes each (benchmarks/graph_sizes.py):
# each says what it found and how long it took, so a long solve is not a silent one.
PROGRESS_NODES = 1000


def _timed(name: str, graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
           say: Callable[[str], None]) -> Plan:
    """One heuristic's plan, its solve time set, and a line about it on a large graph."""
    t0 = time.perf_counter()
    plan = _HEURISTICS[name](graph, arena_budget, deadline_s, semantics)
    plan.solve_time_s = time.perf_counter() - t0
    if len(graph) > PROGRESS_NODES:
        say(f"{name}: {plan.status}" + (f", {plan.energy_j:.6g} J" if found(plan) else "")
            + f" in {plan.solve_time_s:.1f} s")
    return plan


def best_heuristic(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool = True,
                   paging: bool = True, semantics: Semantics = POET, progress: Progress = None) -> Plan | None:
    """The least-energy plan of the heuristics that fits and meets the deadline, using only the
    allowed decisions; the MILPs start from it. Milliseconds each on the zoo's graphs, minutes
    on one of graphfile.MAX_NODES nodes: on a graph that large each reports as it ends."""
    say = progress or (lambda _msg: None)
    if len(graph) > PROGRESS_NODES:
        say(f"{len(graph):,} nodes: running the {len(_HEURISTICS)} heuristics for a starting plan "
            f"(seconds to minutes each at this size)")
    best = None
    for name in _HEURISTICS:
        p = _timed(name, graph, arena_budget, deadline_s, semantics, say)
        if not found(p) or (not recompute and p.recomputes) or (not paging and (p.page_ins or p.page_outs)):
            continue
        if best is None or p.energy_j < best.energy_j:
            best = p
    return best


def plan_with(name: str, graph: CostedGraph, arena_budget: int, deadline_s: float, solver: str = "highs",
              time_limit_s: float = 60.0, gap: float = 0.0, progress: Progress = None,
              warm: bool = True, semantics: Semantics = POET, starts: list[Plan] | None = None) -> Plan:
    """Plan with strategy `name`; MILPs start from the best heuristic plan unless warm=False, or
    from a better plan among `starts` (other strategies' plans for the same budget and deadline
    that fit and meet it: a plan of any strategy is a POET plan too)."""
    if name in _HEURISTICS:
        return _timed(name, graph, arena_budget, deadline_s, semantics, progress or (lambda _msg: None))
    kw = dict(solver=solver, time_limit_s=time_limit_s, gap=gap, progress=progress, strategy=name,
              semantics=semantics)
    if warm and name != "checkmate":
        best = best_heuristic(graph, arena_budget, deadline_s, recompute=name != "page-only",
                              paging=name != "remat-only", semantics=semantics, progress=progress)
        for p in starts or []:
            if name == "poet" and p.stages and (best is None or p.energy_j < best.energy_j):
                try:
                    simulate(graph, p, arena_budget, deadline_s, semantics)
                except PlanError:
                    continue
                best = p
        kw["warm_start"] = best
    if name == "poet":
        return solve_poet(graph, arena_budget, deadline_s, **kw)  # type: ignore[arg-type]
    if name == "remat-only":
        return solve_poet(graph, arena_budget, deadline_s, paging=False, **kw)  # type: ignore[arg-type]
    if name == "page-only":
        return solve_poet(graph, arena_budget, deadline_s, recompute=False, **kw)  # type: ignore[arg-type]
    if name == "checkmate":
        # no deadline: no remat plan recomputes more than every node in every stage
        loose = graph.one_pass_s * (len(graph) + 1)
        plan = solve_poet(graph, arena_budget, loose, paging=False, **kw)  # type: ignore[arg-type]
        plan.deadline_s = deadline_s
        if found(plan):
            try:
                simulate(graph, plan, arena_budget, deadline_s, semantics)
            except PlanError as exc:
                plan.status, plan.note = "infeasible", f"its least-energy plan misses the deadline: {exc}"
        return plan
    raise ValueError(f"unknown strategy {name!r}; one of {', '.join(STRATEGIES)}")
