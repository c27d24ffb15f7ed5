"""The planner's one clock (plan/solver/clock.py): without limits, what a solve returns does not depend on
how fast time passes, in this process or in the race's second one; with limits, a limit of zero is
past at once. The test suite runs without limits (conftest.py), so these tests are what keeps every
other solve's verdict independent of the machine's speed and load."""

from __future__ import annotations

import itertools
import math
import time

import highspy
import pytest
from poet.plan.solver import clock, race
from poet.plan.strategies.base import Options
from poet.plan.strategies.poet_milp import run_milp, solve_poet
from poet.plan.strategies.relaxed import relaxed
from poet.plan.types import POET
from test_race import _instance, raced


def _leaping(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    """Every reading of Python's clocks an hour (step_s) after the last: a machine as slow as can be."""
    for name in ("monotonic", "perf_counter"):
        ticks = itertools.count(time.monotonic(), step_s)
        monkeypatch.setattr(time, name, lambda ticks=ticks: next(ticks))


def _solver_limits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The time limits HiGHS is given from now on (PuLP's API and plan/solver/bound.py's both set them so)."""
    given: list[float] = []
    real = highspy.Highs.setOptionValue

    def recording(self: highspy.Highs, name: str, value: object) -> object:
        if name == "time_limit":
            given.append(float(value))  # type: ignore[arg-type]
        return real(self, name, value)

    monkeypatch.setattr(highspy.Highs, "setOptionValue", recording)
    return given


def test_without_limits_the_clock_never_runs_out(monkeypatch: pytest.MonkeyPatch) -> None:
    assert clock.unlimited()  # conftest.py: every test not marked time_limited
    end = clock.ends_at(0.0)
    _leaping(monkeypatch, 3600.0)
    assert clock.left(end) == math.inf and not clock.past(end)
    assert clock.solver_limit(0.5) is None


@pytest.mark.time_limited  # the limit is what it tests: forced to zero, and the clock made to move
def test_with_limits_a_limit_of_zero_is_past_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not clock.unlimited()
    end = clock.ends_at(0.0)
    _leaping(monkeypatch, 1.0)
    assert clock.past(end) and clock.left(end) < 0
    assert clock.solver_limit(0.5) == 0.5


def test_a_solve_is_the_same_however_fast_time_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heuristics, the relaxations, the resident-set walk and the MILP, with an hour passing at every
    look at the clock: the same proven plan as in calm time, and HiGHS never given a limit."""
    g, budget, deadline = _instance()
    calm = solve_poet(g, budget, deadline)
    given = _solver_limits(monkeypatch)
    _leaping(monkeypatch, 3600.0)
    hurried = solve_poet(g, budget, deadline)
    assert given == []
    assert calm.status == "optimal"
    assert (hurried.status, hurried.energy_j, hurried.stages) == (calm.status, calm.energy_j, calm.stages)


@pytest.mark.time_limited  # with limits the MILP is given one (the test above can fail) ...
def test_with_limits_the_milp_is_given_them(monkeypatch: pytest.MonkeyPatch) -> None:
    g, budget, deadline = _instance()
    given = _solver_limits(monkeypatch)
    run_milp(g, budget, deadline, True, True, POET, None, 600.0)
    assert given and all(0 < limit <= 600.0 for limit in given)


@pytest.mark.time_limited  # ... and the searches before it none: they are budgeted in work (effort.py)
def test_with_limits_the_relaxations_keep_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    g, budget, deadline = _instance()
    given = _solver_limits(monkeypatch)
    rel = relaxed(g, budget, deadline, options=Options(time_limit_s=600.0))
    assert rel.stages and given == []


def test_the_second_core_runs_to_its_proof_without_limits() -> None:
    """A race given a millisecond still proves its plan: the worker process inherits no-limits."""
    g, budget, deadline = _instance()
    got = raced(race.Problem(g, budget, deadline, True, True, POET, None, 1e-3))
    assert got is not None and not got.error
    assert got.plan.status == "optimal"
