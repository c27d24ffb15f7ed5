"""The second core's MILP (plan/solver/race.py): a real subprocess solving the real MILP, its plan replayed
and combined with this process's by the better plan and the higher bound."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import pytest
from poet.plan.simulate import simulate
from poet.plan.solver import race
from poet.plan.strategies import best_heuristic
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import _better, solve_poet
from poet.plan.types import POET, CostedGraph
from test_planner import chain, deep


def _instance() -> tuple[CostedGraph, int, float]:
    g = deep((4, 4, 4, 4, 4))
    return g, int(keep_all(g).peak_bytes * 0.6), 2.0 * g.one_pass_s


def raced(problem: race.Problem) -> race.Result | None:
    """The second core's result for `problem`, its process stopped whatever happens."""
    other = race.Race(problem)
    try:
        return other.result()
    finally:
        other.stop()


def test_the_second_core_finds_the_same_optimum_in_its_own_process() -> None:
    g, budget, deadline = _instance()
    alone = solve_poet(g, budget, deadline, bound=False)  # the MILP here, proven
    assert alone.status == "optimal"
    got = raced(race.Problem(g, budget, deadline, True, True, POET, None, 60.0))
    assert got is not None and not got.error
    assert got.plan.status == "optimal" and math.isclose(got.plan.energy_j, alone.energy_j, rel_tol=1e-9)
    assert got.bound_j is not None and got.bound_j <= got.plan.energy_j * (1 + 1e-7)
    sim = simulate(g, got.plan, budget, deadline)
    assert math.isclose(sim.energy_j, got.plan.energy_j, rel_tol=1e-12)


def test_the_better_plan_and_the_higher_bound_are_kept() -> None:
    g, budget, deadline = _instance()
    worse = best_heuristic(g, budget, deadline)
    assert worse is not None
    worse = replace(worse, status="feasible", bound_j=0.0)
    opt = solve_poet(g, budget, deadline, bound=False)
    assert opt.energy_j < worse.energy_j
    kept = _better(g, replace(worse), race.Result(opt, opt.energy_j), POET, lambda _m: None, 0.0)
    assert kept.stages == opt.stages and kept.status == "optimal" and kept.gap == 0.0
    # a better plan from the other core with a weaker bound: its plan, this process's bound
    mine = replace(worse, bound_j=opt.energy_j)
    kept = _better(g, mine, race.Result(replace(opt, status="feasible", bound_j=0.0), 0.0), POET, lambda _m: None, 0.0)
    assert kept.stages == opt.stages and kept.status == "optimal" and kept.bound_j == opt.energy_j
    # a worse plan from the other core leaves this one, but its bound still counts
    mine = replace(opt, status="feasible", bound_j=0.0)
    kept = _better(g, mine, race.Result(worse, opt.energy_j), POET, lambda _m: None, 0.0)
    assert kept.stages == opt.stages and kept.status == "optimal" and kept.bound_j == opt.energy_j


def test_a_second_core_that_fails_says_why_and_costs_nothing(tmp_path: pytest.TempPathFactory) -> None:
    g, budget, deadline = _instance()
    broken = CostedGraph(tuple(replace(n, compute_j=-1.0) if n.id == 1 else n for n in g.nodes), name="broken")
    got = raced(race.Problem(broken, budget, deadline, True, True, POET, None, 30.0))
    assert got is not None and "costs must be non-negative" in got.error and not got.plan.stages
    mine = solve_poet(g, budget, deadline)
    assert _better(g, replace(mine), got, POET, lambda _m: None, 0.0).stages == mine.stages


def test_solve_poet_races_on_two_cores_and_stops_the_race(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the race on for every size, POET's plan is still the proven optimum, and no race outlives
    the solve."""
    if race.cores() < 2:
        pytest.skip("one core: no race")
    started: list[race.Race] = []
    real = race.Race

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, problem: race.Problem) -> None:
            pickle.dumps(problem)
            super().__init__(problem)
            started.append(self)

    monkeypatch.setattr(race, "RACE_ABOVE", 0)
    monkeypatch.setattr(race, "Race", Spy)
    g = chain()
    peak = keep_all(g).peak_bytes
    for frac in (0.7, 0.5):
        budget, deadline = int(peak * frac), 1.5 * g.one_pass_s
        p = solve_poet(g, budget, deadline)
        q = solve_poet(g, budget, deadline, bound=False)
        assert p.status == q.status
        if q.status == "optimal":
            assert math.isclose(p.energy_j, q.energy_j, rel_tol=1e-7)
    assert started and all(s._proc.poll() is not None for s in started)


def test_a_stop_ends_the_search_with_the_incumbent() -> None:
    """HiGHS asks stop() as it searches, with its incumbent's energy: a stop that says yes at once
    leaves the start (not proven); one that never does leaves the proven optimum."""
    from poet.plan.strategies.poet_milp import run_milp

    g, budget, deadline = _instance()
    start = best_heuristic(g, budget, deadline)
    assert start is not None
    seen: list[float] = []

    def at_once(incumbent_j: float) -> bool:
        seen.append(incumbent_j)
        return True

    stopped, _ = run_milp(g, budget, deadline, True, True, POET, start, 60.0, stop=at_once)
    assert seen and math.isclose(seen[0], start.energy_j, rel_tol=1e-6)
    assert stopped.status == "feasible" and math.isclose(stopped.energy_j, start.energy_j, rel_tol=1e-9)
    full, _ = run_milp(g, budget, deadline, True, True, POET, start, 60.0, stop=lambda _j: False)
    assert full.status == "optimal" and full.energy_j < start.energy_j


@pytest.mark.time_limited  # the limit is what it tests
def test_the_racers_limit_counts_from_when_the_race_starts() -> None:
    """The worker's start-up and imports come out of its limit, not on top of it: the problem it reads
    carries the moment the race started plus the limit, on the clock both processes share."""
    import time

    g, budget, deadline = _instance()
    before = time.monotonic()
    other = race.Race(race.Problem(g, budget, deadline, True, True, POET, None, 30.0))
    after = time.monotonic()
    try:
        sent: race.Problem = pickle.loads(other._in.read_bytes())
        assert before + 30.0 <= sent.ends_at <= after + 30.0
    finally:
        other.stop()


def test_no_plan_from_either_core_still_reports_the_bound() -> None:
    """Neither MILP found a plan in time: the plan has no stages, and the higher bound is still said."""
    g, budget, deadline = _instance()
    none = solve_poet(g, budget, deadline)
    mine = replace(none, stages=[], status="no-solution", energy_j=0.0, bound_j=0.5 * none.energy_j)
    theirs = race.Result(replace(mine, bound_j=None), 0.75 * none.energy_j)
    kept = _better(g, mine, theirs, POET, lambda _m: None, 0.0)
    assert kept.status == "no-solution" and not kept.stages and kept.bound_j == 0.75 * none.energy_j


def test_the_second_core_runs_the_relaxations_rounds_from_their_lp() -> None:
    """what="row relaxation": its plan fits, its bound is below the MILP's proven optimum, and it says
    what made it."""
    g, budget, deadline = _instance()
    opt = solve_poet(g, budget, deadline, bound=False)
    assert opt.status == "optimal"
    got = raced(race.Problem(g, budget, deadline, True, True, POET, None, 60.0, what="row relaxation"))
    assert got is not None and not got.error and got.by == "row relaxation"
    assert got.bound_j is not None and got.bound_j <= opt.energy_j * (1 + 1e-7)
    assert got.plan.stages and got.plan.energy_j >= opt.energy_j * (1 - 1e-9)
    simulate(g, got.plan, budget, deadline)


def test_where_no_milp_is_built_the_second_core_runs_the_relaxation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MILP too large to build: the second core runs the relaxations instead of idling."""
    if race.cores() < 2:
        pytest.skip("one core: no race")
    from poet.plan.strategies import poet_milp

    g, budget, deadline = _instance()
    opt = solve_poet(g, budget, deadline, bound=False)
    whats: list[str] = []
    real = race.Race

    class Spy(real):  # type: ignore[misc,valid-type]
        def __init__(self, problem: race.Problem) -> None:
            whats.append(problem.what)
            super().__init__(problem)

    monkeypatch.setattr(race, "RACE_ABOVE", 0)
    monkeypatch.setattr(race, "Race", Spy)
    monkeypatch.setattr(poet_milp, "MAX_MILP_VARIABLES", 0)  # not built: the relaxations alone
    p = solve_poet(g, budget, deadline)
    assert whats == ["row relaxation"]
    assert p.bound_j is not None and p.bound_j <= opt.energy_j * (1 + 1e-7)
    assert p.stages and p.energy_j >= opt.energy_j * (1 - 1e-9)
    simulate(g, p, budget, deadline)
