"""A plan under the deadline where no heuristic has one (strategies/fastest.py): the walk over resident sets
minimising time, built as a plan, which starts this process's MILP; and the POET MILP minimising time from the
heuristics' slow plan, then the energy MILP from it, on the second core (race_worker.py)."""

from __future__ import annotations

import math
import pickle
import time
from dataclasses import replace

import pytest
from poet.plan.simulate import simulate
from poet.plan.solver import race, race_worker
from poet.plan.solver.race_worker import fastest
from poet.plan.strategies import best_heuristic
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.fastest import least_time_walk, timed
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes
from poet.plan.types import POET, REFERENCE, Plan
from test_planner import chain
from test_race import raced

BUDGET = 1536  # chain()'s least RAM: at 1.02x one pass no heuristic meets the deadline, a plan does


def test_it_finds_a_plan_under_a_deadline_no_heuristic_meets() -> None:
    g = chain()
    deadline = 1.02 * g.one_pass_s
    assert best_heuristic(g, BUDGET, deadline) is None
    plan = fastest(g, BUDGET, deadline, True, True, POET, 60.0)
    assert plan is not None and plan.status == "feasible" and plan.strategy == "fastest"
    sim = simulate(g, plan, BUDGET, deadline)  # fits and meets the deadline, or raises
    assert math.isclose(sim.energy_j, plan.energy_j, rel_tol=1e-12) and plan.time_s <= deadline


def test_the_least_time_walk_meets_a_deadline_no_heuristic_meets() -> None:
    g = chain()
    deadline = 1.02 * g.one_pass_s
    plan = least_time_walk(g, BUDGET, deadline, True, True, POET, 60.0)
    assert plan is not None and plan.status == "feasible" and plan.solver == "least-time walk"
    sim = simulate(g, plan, BUDGET, deadline)
    assert math.isclose(sim.energy_j, plan.energy_j, rel_tol=1e-12) and plan.time_s <= deadline


def test_the_least_time_walk_proves_a_deadline_below_its_bound_infeasible() -> None:
    """chain() at its least RAM takes at least 1.016x one pass: at 1.01x no plan meets the deadline (the
    MILP agrees), and the walk proves it before any MILP is built."""
    g = chain()
    deadline = 1.01 * g.one_pass_s
    said = least_time_walk(g, BUDGET, deadline, True, True, POET, 60.0)
    assert said is not None and said.status == "infeasible" and not said.stages
    assert solve_poet(g, BUDGET, deadline, bound=False).status == "infeasible"
    plan = solve_poet(g, BUDGET, deadline)
    assert plan.status == "infeasible" and plan.solver == "bound" and "least-time walk" in plan.note


def test_one_core_starts_its_milp_from_the_least_time_walk() -> None:
    g = chain()
    deadline = 1.02 * g.one_pass_s
    said: list[str] = []
    plan = solve_poet(g, BUDGET, deadline, progress=said.append)
    assert any(m.startswith("the least-time walk's plan meets the deadline") for m in said)
    assert any(m.startswith("warm start from fastest") for m in said) or plan.solver == "bound"
    opt = solve_poet(g, BUDGET, deadline, bound=False)
    assert plan.status == opt.status == "optimal" and math.isclose(plan.energy_j, opt.energy_j, rel_tol=1e-9)


def test_a_milp_that_does_not_improve_the_walks_plan_says_whose_it_is(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Stopped by its limit with nothing better than its start (MobileNetV1 at batch 16), the MILP's plan is
    the least-time walk's, and the note says so (the zoo's "plan by")."""
    from poet.plan.strategies import poet_milp

    def the_start(graph, budget, deadline, recompute, paging, semantics, start, *args, **kw):  # type: ignore[no-untyped-def]
        return replace(start, strategy="poet", status="feasible", solver="highs"), None

    monkeypatch.setattr(poet_milp, "run_milp", the_start)
    monkeypatch.setattr(poet_milp, "relaxed", lambda g, budget, deadline, *a, **kw: Plan(
        "relaxed", [], "infeasible", arena_budget=budget, deadline_s=deadline, bound_j=0.0))
    g = chain()
    plan = solve_poet(g, BUDGET, 1.02 * g.one_pass_s)
    assert plan.status == "feasible" and "the least-time walk's plan: the MILP found none better" in plan.note


def test_none_where_no_plan_meets_the_deadline_or_fits() -> None:
    g = chain()
    assert fastest(g, BUDGET, 0.99 * g.one_pass_s, True, True, POET, 60.0) is None  # below one plain pass
    assert fastest(g, lower_bound_bytes(g) - 1, 2 * g.one_pass_s, True, True, POET, 60.0) is None


def test_its_objective_is_the_deadlines_time() -> None:
    g = chain()
    for semantics, paging_counts in ((POET, True), (REFERENCE, False)):
        t = timed(g, semantics)
        for n, m in zip(g.nodes, t.nodes, strict=True):
            assert m.compute_j == n.compute_s
            assert m.page_in_j == (n.page_in_s if paging_counts else 0.0)
            assert m.page_out_j == (n.page_out_s if paging_counts else 0.0)


def test_the_second_core_starts_from_it_and_reaches_the_optimum() -> None:
    g = chain()
    deadline = 1.02 * g.one_pass_s
    opt = solve_poet(g, BUDGET, deadline, bound=False)
    assert opt.status == "optimal"
    got = raced(race.Problem(g, BUDGET, deadline, True, True, POET, None, 60.0))
    assert got is not None and not got.error and got.plan.status == "optimal"
    assert math.isclose(got.plan.energy_j, opt.energy_j, rel_tol=1e-9)
    simulate(g, got.plan, BUDGET, deadline)



def test_with_no_time_left_after_it_the_second_core_says_its_plan_is_the_least_time_one(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The energy MILP needs MIN_MILP_S: with less left, the least-time plan is the result, and says so
    (the worker's main, in this process)."""
    g = chain()
    deadline = 1.02 * g.one_pass_s
    monkeypatch.setattr(race_worker, "MIN_MILP_S", math.inf)  # never time enough, however much is left
    problem = race.Problem(g, BUDGET, deadline, True, True, POET, None, 60.0, bound_file=str(tmp_path / "bound"),
                           ends_at=time.monotonic() + 60.0)
    (tmp_path / "in").write_bytes(pickle.dumps(problem))
    race_worker._main(str(tmp_path / "in"), str(tmp_path / "out"))
    got: race.Result = pickle.loads((tmp_path / "out").read_bytes())
    assert got.by == "least-time MILP" and got.bound_j is None and got.plan.strategy == "fastest"
    simulate(g, got.plan, BUDGET, deadline)


@pytest.mark.slow
def test_mobilenet_v1_at_a_quarter_of_keep_everything_on_the_nrf52840_has_a_plan_from_the_walk() -> None:
    """MLPerf Tiny's MobileNetV1 (mlperf-vww), batch 1, 25% of keep-everything, the zoo's deadline: no
    heuristic's plan meets the deadline; the least-time walk's does. (Before the input was read in place,
    the walk's plan met it only built the first way, paging in at each row what the walk pages in there;
    with the input free both ways meet it here, and at the budgets (1/3 to 1/5 of keep-everything) and
    deadlines (1.05x to 1.5x) tried near it both or neither do.)"""
    from poet.boards import load_board
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import costed, load_profile

    model, spec = get_model("mlperf-vww")
    g = costed(trace(model, "mlperf-vww", spec.input_shape, spec.classes, 1, spec.input_dtype),
               load_board("nrf52840"), load_profile("nrf52840"), estimate=True)
    budget, deadline = keep_all(g).peak_bytes // 4, 1.5 * g.one_pass_s
    assert best_heuristic(g, budget, deadline) is None
    plan = least_time_walk(g, budget, deadline, True, True, POET, 600.0)
    assert plan is not None
    simulate(g, plan, budget, deadline)
