"""Every planning strategy poet knows, under one cost model and one simulator: the registry.

A strategy is a module beside this one that declares `NAME = Strategy(name, one line of help,
plan)`, plan(graph, arena_budget, deadline_s, semantics, options) -> Plan (base.py); entering
it in REGISTRY is all `--strategy`, `poet sweep` and the MILPs' warm start need. The heuristics
run on builder.py; the MILP strategies (poet.py) are the POET MILP (poet_milp.py) with some
decisions left out.

`plan_with(name, ...)` returns a Plan whose status says what it is worth:
optimal / feasible (a MILP proved it, or stopped with a gap), feasible (a heuristic's
plan that fits and meets the deadline), infeasible (with the reason in note),
no-solution (a MILP found nothing in its time limit), not-applicable (revolve on a
graph that is not a chain). Every plan with stages has been replayed by simulate.py.
"""

from __future__ import annotations

import time

from poet.plan.simulate import PlanError, simulate
from poet.plan.strategies import capuchin, checkpoint_all, chen, dtr, poet, revolve
from poet.plan.strategies.base import Options, Strategy, found
from poet.plan.types import POET, CostedGraph, Plan, Semantics
from poet.progress import Say

# The order --help and `poet sweep` list them in, and the heuristics run in for a MILP's starting
# plan (of equal plans the first is kept).
REGISTRY: tuple[Strategy, ...] = (
    poet.POET, poet.REMAT_ONLY, poet.PAGE_ONLY,
    checkpoint_all.CHECKPOINT_ALL, chen.SQRTN, chen.CHEN_GREEDY, revolve.REVOLVE,
    poet.CHECKMATE, dtr.DTR, capuchin.CAPUCHIN,
)

STRATEGIES: dict[str, str] = {s.name: s.help for s in REGISTRY}  # name -> its line of --help
MILP = tuple(s.name for s in REGISTRY if s.milp)
BASELINES = tuple(s for s in STRATEGIES if s != "poet")
_HEURISTICS = tuple(s for s in REGISTRY if not s.milp)


def named(name: str) -> Strategy:
    """The registry's entry called `name`."""
    for s in REGISTRY:
        if s.name == name:
            return s
    raise ValueError(f"unknown strategy {name!r}; one of {', '.join(STRATEGIES)}")


# Above this many nodes the heuristics take seconds to minutes each (benchmarks/graph_sizes.py):
# each says what it found and how long it took, so a long solve is not a silent one.
PROGRESS_NODES = 1000


def _timed(s: Strategy, graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics,
           say: Say) -> Plan:
    """One heuristic's plan, its solve time set, and a line about it on a large graph."""
    t0 = time.perf_counter()
    plan = s.plan(graph, arena_budget, deadline_s, semantics, Options())
    plan.solve_time_s = time.perf_counter() - t0
    if len(graph) > PROGRESS_NODES:
        say(f"{s.name}: {plan.status}" + (f", {plan.energy_j:.6g} J" if found(plan) else "")
            + f" in {plan.solve_time_s:.1f} s")
    return plan


def _makes_only(plan: Plan, recompute: bool, paging: bool) -> bool:
    """The plan makes only the decisions allowed."""
    return (recompute or not plan.recomputes) and (paging or not (plan.page_ins or plan.page_outs))


def best_heuristic(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool = True,
                   paging: bool = True, semantics: Semantics = POET, progress: Say | None = None) -> Plan | None:
    """The least-energy plan of the heuristics that fits and meets the deadline, using only the
    allowed decisions; the MILPs start from it. Milliseconds each on the zoo's graphs, minutes
    on one of graphfile.MAX_NODES nodes: on a graph that large each reports as it ends."""
    say = progress or (lambda _msg: None)
    if len(graph) > PROGRESS_NODES:
        say(f"{len(graph):,} nodes: running the {len(_HEURISTICS)} heuristics for a starting plan "
            f"(seconds to minutes each at this size)")
    best = None
    for s in _HEURISTICS:
        p = _timed(s, graph, arena_budget, deadline_s, semantics, say)
        if not found(p) or not _makes_only(p, recompute, paging):
            continue
        if best is None or p.energy_j < best.energy_j:
            best = p
    return best


def plan_with(name: str, graph: CostedGraph, arena_budget: int, deadline_s: float, solver: str = "highs",
              time_limit_s: float = 60.0, gap: float = 0.0, progress: Say | None = None,
              warm: bool = True, semantics: Semantics = POET, starts: list[Plan] | None = None) -> Plan:
    """Plan with strategy `name`; MILPs start from the best heuristic plan unless warm=False, or
    from a better plan among `starts` (other strategies' plans for the same budget and deadline
    that fit and meet it: a plan of any strategy is a POET plan too, if it makes only the
    decisions the MILP has)."""
    strategy = named(name)
    if not strategy.milp:
        return _timed(strategy, graph, arena_budget, deadline_s, semantics, progress or (lambda _msg: None))

    def start(recompute: bool, paging: bool) -> Plan | None:
        best = best_heuristic(graph, arena_budget, deadline_s, recompute, paging, semantics, progress)
        for p in starts or []:
            if p.stages and _makes_only(p, recompute, paging) and (best is None or p.energy_j < best.energy_j):
                try:
                    simulate(graph, p, arena_budget, deadline_s, semantics)
                except PlanError:
                    continue
                best = p
        return best

    options = Options(solver=solver, time_limit_s=time_limit_s, gap=gap, progress=progress,
                      start=start if warm else None)
    return strategy.plan(graph, arena_budget, deadline_s, semantics, options)
