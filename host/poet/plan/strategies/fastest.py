"""A plan that meets the deadline where no heuristic's does: the walk over resident sets with time as its cost.

At a tight budget on the nRF52840 (MobileNetV1 at 25% of keep-everything) every heuristic that fits
runs far past the deadline (capuchin: 7.1 s for a 3.2 s deadline), and HiGHS, asked for the least
energy under the deadline with no plan to start from, finds none: not in 60 s, nor with a zero
objective in 1,500 s. Two ways find one, each on its own core (strategies/poet_milp.py):
- this process: on chains, the walk over resident sets (plan/solver/resident_sets.py) with each cost in
  joules replaced by its seconds in the deadline, built as a plan as the rounds build the energy
  walk's (strategies/relaxed.py): under that deadline in 1.5 s at batch 1 and 16;
- the second core (plan/solver/race_worker.py): the POET MILP asked for the least time, from the
  heuristics' slow plan, stopped at its first plan under the deadline: 45 s at batch 1 (a plan of
  less energy than the walk's), 66 s at batch 16.
Either plan then starts the energy MILP.
"""

from __future__ import annotations

import math
from dataclasses import replace

from poet.plan.simulate import DEADLINE_RTOL
from poet.plan.solver.effort import Effort
from poet.plan.solver.resident_sets import walk
from poet.plan.strategies.builder import checked
from poet.plan.strategies.relaxed import walked_plan
from poet.plan.types import CostedGraph, Plan, Semantics
from poet.progress import Say

# tensors under these fractions of the largest taken as resident, tried in turn: more taken so, fewer sets a
# row, so more rows walked (MobileNetV1 at 25%: at the energy walk's 1/8 most rows have too many sets and
# its plan is 0.8% over the deadline; at 1/4 still over; at 1/2 under)
WALK_SMALL = (0.25, 0.5)


def timed(graph: CostedGraph, semantics: Semantics) -> CostedGraph:
    """The graph with each cost in joules replaced by its seconds in the deadline (paging's only
    where it counts there)."""
    paging = semantics.paging_in_deadline
    nodes = tuple(replace(n, compute_j=n.compute_s, page_in_j=n.page_in_s if paging else 0.0,
                          page_out_j=n.page_out_s if paging else 0.0) for n in graph.nodes)
    return CostedGraph(nodes, graph.name, graph.param_bytes)


def least_time_walk(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool, paging: bool,
                    semantics: Semantics, budget_s: float, say: Say | None = None) -> Plan | None:
    """The least-time walk's plan, accounted on `graph`, if it fits `arena_budget` and meets
    `deadline_s`; a plan with status infeasible and no stages if the walk's bound proves that no
    plan meets the deadline (its least time is a lower bound on every plan's, as its least energy
    is on their energy); None if neither, or the walk does not apply (not a chain, too many sets, more
    work than the reference machine does in `budget_s`: plan/solver/effort.py)."""
    say = say or (lambda _msg: None)
    effort = Effort.of(budget_s)
    fast = timed(graph, semantics)
    # the walks with page-outs divided first: a second each where the whole page-outs' walk may take 15
    # (MobileNetV1 at 25%, the same plans); then those, whose bounds are higher
    for whole, small in ((w, s) for w in (False, True) for s in WALK_SMALL):
        rel = walk(fast, arena_budget, recompute, paging, effort, small=small, whole=whole)
        if rel is None:
            continue
        if rel.bound_j > deadline_s * (1 + 2 * DEADLINE_RTOL):  # beyond what the simulator lets pass
            return Plan(strategy="fastest", stages=[], status="infeasible", arena_budget=arena_budget,
                        deadline_s=deadline_s, solver="bound",
                        note=f"no plan meets the deadline: the least-time walk over resident sets "
                             f"(plan/solver/resident_sets.py) proves every plan takes at least {rel.bound_j:.6g} s")
        built = walked_plan(fast, arena_budget, math.inf, rel, semantics)  # the deadline is checked on the whole plan
        if not built.stages:
            say(f"the least-time walk has no plan: {built.note}")
            continue
        out = on_graph(graph, built, "least-time walk", arena_budget, deadline_s, semantics)
        say("the least-time walk's plan " + (f"meets the deadline: {out.time_s:.6g} s, {out.energy_j:.6g} J"
                                             if out.status == "feasible" else f"takes {out.time_s:.6g} s"))
        if out.status == "feasible":
            return out
    return None


def on_graph(graph: CostedGraph, plan: Plan, solver: str, arena_budget: int, deadline_s: float,
             semantics: Semantics) -> Plan:
    """A plan made on the timed graph, accounted on the real one (strategy "fastest", `solver` its maker)."""
    return checked(graph, Plan(strategy="fastest", stages=plan.stages, status="infeasible", solver=solver,
                               arena_budget=arena_budget, deadline_s=deadline_s), arena_budget, deadline_s, semantics)
