"""The POET planner: solving the MILP of poet_milp_model.py (the formulation is written out there).

solve_poet shares the time limit between the relaxations (strategies/relaxed.py, which bound the
energy from below and may find the optimum themselves) and the MILP, racing the two in two processes
(plan/solver/race.py) where both run, and starts the MILP from the best heuristic's plan; run_milp builds
and solves one MILP; solve_switched chooses between two forms of a graph inside one MILP (precision);
min_arena_budget finds the smallest RAM a plan within the deadline fits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from poet.errors import PoetError
from poet.plan.simulate import simulate
from poet.plan.solver import clock, milp, race
from poet.plan.strategies.base import Options
from poet.plan.strategies.fastest import least_time_walk
from poet.plan.strategies.poet_milp_model import (
    Milp,
    Realise,
    Switch,
    build,
    extract,
    extract_switched,
    milp_size,
    set_start,
    set_switched_start,
    value_of,
)
from poet.plan.strategies.relaxed import ROUNDS, relaxed
from poet.plan.types import POET, CostedGraph, Plan, Semantics
from poet.progress import Say

# Above this many binaries the MILP takes minutes and gigabytes to build and HiGHS finds no
# bound in any sensible time (BERT-base, T=646); the best baseline plan is returned instead.
MAX_MILP_VARIABLES = 150_000  # in milp_size() units: mobilenetv2 ~86k builds in 30 s


# The relaxations' share of the time limit when the MILP follows (strategies/relaxed.py).
RELAXED_SHARE = 0.5
WALK_SHARE = 0.1  # of the limit, at most, for the least-time walk where no heuristic meets the deadline (MobileNetV1:
# 1.5 s; DS-CNN, whose equal tensors make many sets a row, 8 s, where the relaxations alone take 5 s)


# How fast the MILP builds (milp_size units per second; mobilenetv2's 86k take 30 s on the 2-core
# machine): POET builds it only if at least as much time would be left to solve it.
BUILD_VARS_PER_S = 2_500


# Above this many (milp_size) the build takes seconds and is announced before it starts.
SAY_BUILD_ABOVE = 20_000


def solve_poet(graph: CostedGraph, arena_budget: int, deadline_s: float, solver: str = "highs",
               time_limit_s: float = 60.0, gap: float = 0.0, progress: Say | None = None,
               recompute: bool = True, paging: bool = True, strategy: str = "poet",
               warm_start: Plan | None = None, semantics: Semantics = POET, bound: bool = True) -> Plan:
    """The least-energy plan that fits `arena_budget` bytes and meets `deadline_s`.

    warm_start: a plan (any strategy's, it must fit and meet the deadline) the solver starts
    from, so a time-limited solve returns nothing worse than it. bound=False: the MILP alone,
    without the relaxations' bounds (what tests of those bounds check them against).
    """
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    start = warm_start if warm_start is not None and warm_start.stages else None
    size = milp_size(graph)
    buildable = size <= MAX_MILP_VARIABLES
    # the MILP follows only if the time it leaves would build it and solve it as long
    milp_after = buildable and 2 * size / BUILD_VARS_PER_S <= time_limit_s * (1 - RELAXED_SHARE)
    if not (bound and (solver == "highs" or not milp_after) and size >= race.RACE_ABOVE and race.cores() >= 2):
        return _solve_poet(graph, arena_budget, deadline_s, solver, time_limit_s, gap, say, recompute, paging,
                           strategy, start, semantics, bound, size, milp_after)
    # a second core solves the MILP for the whole limit from the heuristic's start, or where no MILP is
    # built runs the relaxations' rounds from their LP (plan/solver/race.py)
    what = "MILP" if milp_after else "row relaxation"
    origin = ("its LP" if not milp_after else f"{start.strategy}'s plan" if start
              else "the first plan it finds under the deadline, by least time (no heuristic's meets it)")
    say(f"a second core runs the {what} meanwhile, from {origin}")
    other = race.Race(race.Problem(graph, arena_budget, deadline_s, recompute, paging, semantics, start,
                                   0.95 * time_limit_s, what=what))
    try:
        plan = _solve_poet(graph, arena_budget, deadline_s, solver, time_limit_s, gap, say, recompute, paging,
                           strategy, start, semantics, bound, size, milp_after, other)
        if plan.status in ("optimal", "infeasible"):
            return plan
        got = other.result()
    finally:
        other.stop()
    return _better(graph, plan, got, semantics, say, t0)


def _better(graph: CostedGraph, plan: Plan, got: race.Result | None, semantics: Semantics, say: Say,
            t0: float) -> Plan:
    """The better of this process's plan and the second core's, against the higher of their bounds."""
    if got is None or got.error:
        say(f"the second core's {got.by if got else 'solve'} gave nothing{': ' + got.error if got else ' in time'}")
        return plan
    theirs, mine_j = got.plan, plan.bound_j
    say(f"the second core's {got.by}: "
        + (f"{theirs.status}, {theirs.energy_j:.6g} J" if theirs.stages else theirs.status)
        + (f", bound {got.bound_j:.6g} J" if got.bound_j is not None else ""))
    if theirs.stages and (not plan.stages or theirs.energy_j < plan.energy_j):
        simulate(graph, theirs, plan.arena_budget, plan.deadline_s, semantics)
        by = f"the second core's {got.by}"
        theirs.strategy, theirs.note = plan.strategy, "; ".join(x for x in (theirs.note, by) if x)
        plan = theirs
    bounds = [b for b in (mine_j, got.bound_j) if b is not None]  # theirs.bound_j is at most got.bound_j
    plan.solve_time_s = time.perf_counter() - t0
    if not bounds:
        return plan
    best = max(bounds)
    if not plan.stages:  # neither found a plan: the bound still says what none can beat
        plan.bound_j = best
        return plan
    plan.bound_j = min(best, plan.energy_j)
    if milp.proven(plan.energy_j, best):
        plan.status, plan.gap = "optimal", 0.0
    else:
        plan.gap = milp.relative_gap(plan.energy_j, best)
    return plan


def _solve_poet(graph: CostedGraph, arena_budget: int, deadline_s: float, solver: str, time_limit_s: float, gap: float,
                say: Say, recompute: bool, paging: bool, strategy: str, start: Plan | None,
                semantics: Semantics, bound: bool, size: int, milp_after: bool,
                other: race.Race | None = None) -> Plan:
    """solve_poet in this process, racing `other` if given: the relaxations' bound is shared with it,
    and the MILP here stops once `other` has a proven plan. size: milp_size(graph)."""
    t0 = time.perf_counter()
    end = clock.ends_at(0.95 * time_limit_s)  # a margin of the limit for reading the plan back
    buildable = size <= MAX_MILP_VARIABLES
    if bound and start is None:  # no heuristic meets the deadline: the least-time walk's plan may (fastest.py)
        start = least_time_walk(graph, arena_budget, deadline_s, recompute, paging, semantics,
                                WALK_SHARE * time_limit_s, say)
        if start is not None and not start.stages:  # its bound proves no plan meets the deadline
            say(start.note)
            return replace(start, strategy=strategy, solve_time_s=time.perf_counter() - t0)
    if bound:
        # the relaxations (plan/solver/bound.py) first: a bound, often a plan at it; half the time if the
        # MILP follows, all of it if not
        share = time_limit_s * (RELAXED_SHARE if milp_after else 1.0)
        opts = Options(time_limit_s=share, gap=gap, progress=say)
        rel = relaxed(graph, arena_budget, deadline_s, semantics, opts, recompute, paging, start,
                      densify=(1 if other else 0) if milp_after else ROUNDS,
                      on_bound=other.share_bound if other else None, stop=other.proved if other else None)
        if rel.status == "infeasible" and rel.bound_j is None:
            plan = Plan(strategy=strategy, stages=[], status="infeasible", arena_budget=arena_budget,
                        deadline_s=deadline_s, solver="bound", solve_time_s=time.perf_counter() - t0,
                        note=f"no plan fits the budget and deadline: {rel.note.removeprefix('no plan fits: ')}")
            say(plan.note)
            return plan
        bound_j = rel.bound_j if rel.bound_j is not None else 0.0
        if rel.status in ("optimal", "feasible") and rel.stages and (start is None or rel.energy_j < start.energy_j):
            start = rel
    else:  # every plan computes every node once
        bound_j = sum(n.compute_j for n in graph.nodes)

    def adopt(start: Plan, status: str, solver_name: str, note: str) -> Plan:
        """The best plan so far as this strategy's; it must fit and meet the deadline, whoever made it."""
        simulate(graph, start, arena_budget, deadline_s, semantics)
        return Plan(strategy=strategy, stages=start.stages, status=status, energy_j=start.energy_j,
                    time_s=start.time_s, peak_bytes=start.peak_bytes, arena_budget=arena_budget,
                    deadline_s=deadline_s, solver=solver_name,
                    gap=0.0 if status == "optimal" else milp.relative_gap(start.energy_j, bound_j),
                    note=note, bound_j=bound_j, solve_time_s=time.perf_counter() - t0)

    def maker(p: Plan) -> str:
        return ("the row relaxation's plan" if p.strategy == "relaxed" else f"the {p.solver}'s plan"
                if p.strategy == "fastest" else f"a heuristic's plan ({p.strategy})")

    if start is not None and milp.proven(start.energy_j, bound_j):
        say(f"{start.strategy}'s plan costs {start.energy_j:.6g} J, the lower bound: optimal without the MILP")
        return adopt(start, "optimal", "bound", f"{maker(start)}, at the lower bound")
    if start is not None and start.energy_j - bound_j <= gap * start.energy_j:
        return adopt(start, "feasible", start.solver, f"{maker(start)}, within the requested gap of the lower bound")
    if buildable and start is not None and not milp_after:
        buildable = False  # the limit would go to building it, none to solving
        note = (f"the MILP (about {size:,} variables, {size / BUILD_VARS_PER_S:.0f} s to build) was not built "
                f"within --time-limit {time_limit_s:g} s")
    else:
        note = f"the MILP would have about {size:,} variables (> {MAX_MILP_VARIABLES:,}): not built"
    if not buildable:
        if start is not None:  # the best plan found stands in, said to be one, with its distance to the bound
            gap_ = milp.relative_gap(start.energy_j, bound_j)
            plan = adopt(start, "feasible", start.solver or "heuristic",
                         f"{note}; {maker(start)}, within {gap_:.2%} of the lower bound")
        else:
            plan = Plan(strategy=strategy, stages=[], status="no-solution", arena_budget=arena_budget,
                        deadline_s=deadline_s, solver="none", gap=math.inf, note=note, bound_j=bound_j)
        say(plan.note)
        return plan
    stop = None
    if other is not None:
        other.share_bound(bound_j)
        if other.proved() and start is not None:
            return adopt(start, "feasible", start.solver or "heuristic", f"{maker(start)}; the MILP was not built")

        def stop(_incumbent_j: float) -> bool:
            return other.proved()
    plan, _ = run_milp(graph, arena_budget, deadline_s, recompute, paging, semantics, start, clock.left(end), say,
                       solver, gap,
                       bound_j, stop_at_bound=bound, strategy=strategy, stop=stop)
    plan.solve_time_s = time.perf_counter() - t0
    if start is not None and plan.status == "feasible" and plan.energy_j >= start.energy_j * (1 - milp.PROVEN_REL_TOL):
        plan.note = "; ".join(x for x in (plan.note, f"{maker(start)}: the MILP found none better") if x)
    if plan.status == "feasible" and not (other is not None and other.proved()):
        # the one part of the plan the clock decides (plan/solver/effort.py): say so
        plan.note = "; ".join(x for x in (plan.note, f"the MILP stopped at --time-limit {time_limit_s:g} s before "
                                          "proving its plan: a longer limit, or a less busy machine, may find a "
                                          "better one") if x)
    if plan.bound_j is None and bound and plan.status == "no-solution":  # none found; none can cost less
        plan.bound_j = bound_j
    return plan


def run_milp(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool, paging: bool,
             semantics: Semantics, warm_start: Plan | None, time_limit_s: float,
             say: Say | None = None, solver: str = "highs", gap: float = 0.0,
             bound_j: float | None = None, stop_at_bound: bool = False, seed: int = 0, strategy: str = "poet",
             stop: Callable[[float], bool] | None = None) -> tuple[Plan, float | None]:
    """Build the MILP and solve it within `time_limit_s` (the build included), from `warm_start`
    if given; its plan, gap against the higher of the solver's bound and `bound_j`, and the
    solver's bound in joules. stop_at_bound: a plan at `bound_j` is optimal, stop there; stop(J):
    HiGHS asks it as it searches, with its incumbent's energy in joules, and stops when it says so."""
    say = say or (lambda _msg: None)
    end = clock.ends_at(time_limit_s)
    size = milp_size(graph)
    if size > SAY_BUILD_ABOVE:
        say(f"building the MILP: about {size:,} variables (up to a minute at {MAX_MILP_VARIABLES:,})")
    m = build(graph, arena_budget, deadline_s, recompute=recompute, paging=paging, semantics=semantics)
    warm = warm_start is not None and set_start(graph, m, warm_start)
    if warm_start is not None:
        say(f"warm start from {warm_start.strategy} ({warm_start.energy_j:.6g} J)"
            + ("" if warm else ": its decisions are outside this MILP's variables, not used"))
    say(f"{solver}: solving {graph.name} (T={len(graph)}, {len(m.prob.variables())} variables, "
        f"{m.prob.numConstraints()} constraints), budget {arena_budget} B, deadline {deadline_s:.6g} s")
    # a plan at the relaxations' bound is optimal: the solver need not prove it with its own
    stop_at = ((bound_j * (1 + milp.PROVEN_REL_TOL / 2) - m.fixed_j(graph)) / m.scale
               if stop_at_bound and bound_j is not None else None)
    fixed_j, scale = m.fixed_j(graph), m.scale
    out = milp.solve(m.prob, solver, max(1.0, clock.left(end)), gap, warm, say, stop_at,
                     seed, None if stop is None else lambda obj: stop(fixed_j + obj * scale))
    plan = _outcome_plan(out, strategy, arena_budget, deadline_s)
    if out.status in ("optimal", "feasible"):
        plan.stages = extract(graph, m)
        _account(plan, m, graph, graph, out, semantics, bound_j)
    say(_solved_line(out, plan))
    return plan, None if out.bound is None else m.fixed_j(graph) + out.bound * m.scale


def _outcome_plan(out: milp.Outcome, strategy: str, arena_budget: int, deadline_s: float) -> Plan:
    return Plan(strategy=strategy, stages=[], status=out.status, arena_budget=arena_budget, deadline_s=deadline_s,
                solve_time_s=out.solve_time_s, gap=out.gap, solver=out.solver, note=out.note)


def _account(plan: Plan, m: Milp, graph: CostedGraph, realised: CostedGraph, out: milp.Outcome,
             semantics: Semantics = POET, bound_j: float | None = None) -> None:
    """Replay the plan, check its energy is the MILP objective, and state its gap in joules:
    1 - (the least energy the solver's bound, or `bound_j` if higher, allows) / (the plan's energy)."""
    sim = simulate(realised, plan, plan.arena_budget, plan.deadline_s, semantics)
    objective = m.fixed_j(graph) + value_of(m.energy_terms(graph))
    if not math.isclose(sim.energy_j, objective, rel_tol=1e-9, abs_tol=1e-15):
        raise AssertionError(f"simulated energy {sim.energy_j!r} J != MILP objective {objective!r} J")
    plan.energy_j, plan.time_s, plan.peak_bytes = sim.energy_j, sim.time_s, sim.peak_bytes
    solver_j = None if out.bound is None else m.fixed_j(graph) + out.bound * m.scale
    best = max((b for b in (solver_j, bound_j) if b is not None), default=None)
    plan.bound_j = min(best, plan.energy_j) if best is not None else None
    if out.status != "optimal" and best is not None and milp.proven(plan.energy_j, best):
        plan.status, plan.note = "optimal", "; ".join(x for x in (plan.note, "proven by the lower bound") if x)
    plan.gap = 0.0 if plan.status == "optimal" else milp.relative_gap(plan.energy_j, best)


def _solved_line(out: milp.Outcome, plan: Plan) -> str:
    return (f"{out.solver}: {out.status} in {out.solve_time_s:.2f} s"
            + (f", gap {plan.gap:.2%}" if out.status == "feasible" else "")
            + (f" ({out.note})" if out.note else "")
            + (f", {plan.energy_j:.6g} J, {plan.time_s:.6g} s, peak {plan.peak_bytes} B, "
               f"{plan.recomputes} recomputes, {plan.page_ins} page-ins" if plan.stages else ""))


def solve_switched(graph: CostedGraph, switches: tuple[Switch, ...], realise: Realise, arena_budget: int,
                   deadline_s: float, solver: str = "highs", time_limit_s: float = 60.0, gap: float = 0.0,
                   progress: Say | None = None, recompute: bool = True, paging: bool = True,
                   warm_start: tuple[list[bool], Plan] | None = None,
                   strategy: str = "poet") -> tuple[Plan, list[bool], CostedGraph]:
    """The least-energy plan over every way of setting the switches (module docstring).

    realise(chosen) gives the graph the choice stands for and, per node of `graph`, its id
    there (None: a node of an unchosen switch, and only those). The plan returned is a plan of
    that graph, replayed by simulate.py, its energy the MILP objective. warm_start: a choice
    and a plan of its realised graph for the solver to start from.
    """
    say = progress or (lambda _msg: None)
    size = milp_size(graph)
    if size > MAX_MILP_VARIABLES:
        say(f"the switched MILP would have about {size:,} variables (> {MAX_MILP_VARIABLES:,}): not built")
        return (Plan(strategy=strategy, stages=[], status="no-solution", arena_budget=arena_budget,
                     deadline_s=deadline_s, solver="none", gap=math.inf, note="too large to build"),
                [False] * len(switches), graph)
    m = build(graph, arena_budget, deadline_s, recompute=recompute, paging=paging, switches=switches)
    warm = False
    if warm_start is not None:
        warm = set_switched_start(graph, m, realise, *warm_start)
        say(f"warm start from {warm_start[1].strategy} ({warm_start[1].energy_j:.6g} J)"
            + ("" if warm else ": its decisions are outside this MILP's variables, not used"))
    say(f"{solver}: solving {graph.name} with {len(switches)} switches (T={len(graph)}, "
        f"{len(m.prob.variables())} variables, {m.prob.numConstraints()} constraints), budget {arena_budget} B, "
        f"deadline {deadline_s:.6g} s")
    out = milp.solve(m.prob, solver, time_limit_s, gap, warm, say)
    plan = _outcome_plan(out, strategy, arena_budget, deadline_s)
    if out.status not in ("optimal", "feasible"):
        say(_solved_line(out, plan))
        return plan, [False] * len(switches), graph
    chosen = [round(z.varValue or 0.0) == 1 for z in m.Z]
    sub, where = realise(chosen)
    dropped = {t for sw, c in zip(switches, chosen, strict=True) for t in (sw.replaced if c else sw.nodes)}
    if {t for t, w in enumerate(where) if w is None} != dropped:
        raise AssertionError("realise() dropped other nodes than the unchosen switches'")
    plan.stages = extract_switched(graph, m, sub, where)
    _account(plan, m, graph, sub, out)
    say(f"{sum(chosen)} of {len(chosen)} switches on; " + _solved_line(out, plan))
    return plan, chosen, sub


def min_arena_budget(graph: CostedGraph, deadline_s: float, solver: str = "highs",
                     time_limit_s: float = 60.0, progress: Say | None = None,
                     semantics: Semantics = POET) -> int | None:
    """The smallest arena budget of any plan meeting `deadline_s` (None: no plan meets it, proven;
    PoetError: the graph is too large for the MILP that finds it, or the solver found no plan in its
    time limit, which proves nothing).

    If the solver stops on its time limit the best budget found so far is returned
    (an upper bound of the minimum) and progress() says so.
    """
    say = progress or (lambda _msg: None)
    if deadline_s < graph.one_pass_s * (1 - 1e-12):
        say(f"deadline {deadline_s:.6g} s is below one plain pass ({graph.one_pass_s:.6g} s)")
        return None
    size = milp_size(graph)
    if size > MAX_MILP_VARIABLES:  # the same MILP with the budget a variable: as large, as hopeless
        raise PoetError(f"the smallest feasible budget of {graph.name} is not known: the MILP that finds it would "
                        f"have about {size:,} variables (> {MAX_MILP_VARIABLES:,}), too many to build; try a larger "
                        f"--ram or a looser --deadline")
    m = build(graph, None, deadline_s, semantics=semantics)
    say(f"{solver}: minimising the arena budget of {graph.name}, deadline {deadline_s:.6g} s")
    out = milp.solve(m.prob, solver, time_limit_s, 0.0, say=say)
    say(f"{out.solver}: {out.status} in {out.solve_time_s:.2f} s"
        + (f", {out.objective:.0f} B, no budget below {math.ceil(out.bound or 0)} B proven"
           if out.status == "feasible" and out.objective is not None else ""))
    if out.status == "infeasible":
        return None
    if out.status not in ("optimal", "feasible") or m.budget is None:
        raise PoetError(f"the smallest feasible budget of {graph.name} is not known: {out.solver} found no plan "
                        f"in {time_limit_s:g} s ({out.status}; not proven infeasible); raise --time-limit or "
                        "--ram, or relax --deadline", status=1)
    return int(round(m.budget.varValue or 0.0))
