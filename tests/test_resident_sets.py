"""The walk over resident sets (plan/solver/resident_sets.py): the row relaxation's optimum on chains, exactly.

Its bound is checked never to exceed an optimum in tests/test_bound.py (brute force, MILP); here,
that it is the row relaxation's own optimum where both see the same problem (recompute only, every
tensor counted, a deadline that does not bind), that it steps aside where it does not apply, and
that its walk built as a plan (strategies/relaxed.py) is a real plan, at the bound where it can be.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from poet.plan.solver import resident_sets
from poet.plan.solver.bound import binding_rows, relax_rows
from poet.plan.solver.resident_sets import walk
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes
from poet.plan.strategies.relaxed import _round, walked_plan
from poet.plan.types import POET, CostedGraph, Plan
from test_planner import brute_force, chain, deep, node


def _bound(g: CostedGraph, budget: int, **kw: object) -> float | None:
    walked = walk(g, budget, **kw)  # type: ignore[arg-type]
    return None if walked is None else walked.bound_j


def _budgets(g: CostedGraph) -> list[int]:
    lo, hi = lower_bound_bytes(g), keep_all(g).peak_bytes
    return sorted({lo + (hi - lo) * k // 8 for k in range(8)})


@pytest.mark.parametrize("make", [chain, lambda: deep((4, 4, 4, 4, 4, 4)), lambda: deep((8, 2, 8, 2, 8))],
                         ids=["chain", "deep", "uneven"])
def test_on_a_chain_it_is_the_row_relaxations_optimum(make, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(resident_sets, "MAX_STATES", 100_000)  # keep every row
    g = make()
    compared = 0
    for budget in _budgets(g):
        rows = binding_rows(g, budget)
        if not rows:
            continue
        rel = relax_rows(g, budget, 100 * g.one_pass_s, paging=False)
        walked = _bound(g, budget, paging=False, rows=rows, small=0.0)  # every tensor counted, as the relaxation does
        if rel.status == "infeasible":
            assert walked is None
            continue
        assert rel.status == "optimal" and walked is not None
        assert walked == pytest.approx(rel.bound_j, rel=1e-6), budget
        compared += 1
    assert compared >= 3


def test_with_paging_it_stays_below_the_optimum() -> None:
    g = chain(page_watts=0.01)  # paging cheap: plans page
    compared = 0
    for budget in _budgets(g):
        walked = _bound(g, budget, small=0.0)
        best = solve_poet(g, budget, 100 * g.one_pass_s, time_limit_s=120, bound=False)
        if walked is not None and best.status == "optimal":
            assert walked <= best.energy_j * (1 + 1e-9), budget
            compared += 1
    assert compared >= 3


def test_the_inputs_page_out_paid_once_whole_makes_the_bound_the_optimum(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """At the least RAM the input (not recomputable) is paged out once and in twice: divided over
    the windows, its page-out is almost free and the bound 25% short; paid whole, it is the optimum."""
    g = deep()
    budget = lower_bound_bytes(g)
    best = brute_force(g, budget, 2 * g.one_pass_s)
    assert best is not None
    assert _bound(g, budget) == pytest.approx(best, rel=1e-9)
    monkeypatch.setattr(resident_sets, "MAX_PAID", 0)
    divided = _bound(g, budget)
    assert divided is not None and divided < 0.8 * best


def test_a_graph_with_joins_is_not_a_chain() -> None:
    nodes = [node(0, "input", (), 4, 0.0), node(1, "forward", (0,), 8, 0.01), node(2, "forward", (1,), 8, 0.01),
             node(3, "forward", (1, 2), 8, 0.01),  # a residual add: two inputs that count
             node(4, "loss", (3,), 1, 0.01), node(5, "backward", (3,), 8, 0.01),
             node(6, "backward", (5, 1, 2), 8, 0.01), node(7, "backward", (6, 0), 0, 0.01)]
    g = CostedGraph(tuple(nodes), name="join")
    assert _bound(g, lower_bound_bytes(g)) is None


def test_too_many_resident_sets_give_no_bound(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    g = chain()
    budget = (lower_bound_bytes(g) + keep_all(g).peak_bytes) // 2
    assert _bound(g, budget) is not None
    monkeypatch.setattr(resident_sets, "MAX_STATES", 1)  # every row has the empty set and more
    assert _bound(g, budget) is None


@pytest.mark.parametrize("make", [chain, lambda: deep((4, 4, 4, 4, 4, 4)), lambda: deep((8, 2, 8, 2, 8))],
                         ids=["chain", "deep", "uneven"])
def test_the_walk_built_as_a_plan_fits_and_is_often_at_the_bound(make) -> None:  # type: ignore[no-untyped-def]
    """Its plan is a real one (built and replayed by the simulator), so never below the bound; where it
    is at the bound, poet has proven it optimal without a MILP."""
    g = make()
    at_bound = 0
    for budget in _budgets(g):
        deadline = 3 * g.one_pass_s
        walked = walk(g, budget)
        if walked is None:
            continue
        plan = walked_plan(g, budget, deadline, walked, POET)
        if plan.status != "feasible":
            continue
        assert plan.peak_bytes <= budget
        assert plan.energy_j >= walked.bound_j * (1 - 1e-9)
        if plan.energy_j <= walked.bound_j * (1 + 1e-9):
            at_bound += 1
            solved = solve_poet(g, budget, deadline, time_limit_s=30)
            assert solved.status == "optimal" and solved.energy_j == pytest.approx(plan.energy_j, rel=1e-9)
    assert at_bound >= 1


def test_ds_cnn_at_a_quarter_of_keep_everything_is_proven_optimal_by_the_walk() -> None:
    """MLPerf Tiny's DS-CNN (a chain of 32 KB tensors) at 25% of its keep-everything RAM on the rpi4's
    costs: the walk's plan is at its bound. Built as the rounds build theirs (a tensor recomputed on the
    way to a stage's input held through the row because the next row reads it), it overflowed that
    stage and cost 16% more."""
    from poet.boards import load_board
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import costed, load_profile

    model, spec = get_model("mlperf-kws")
    made = costed(trace(model, "mlperf-kws", spec.input_shape, spec.classes, 1, spec.input_dtype),
                  load_board("rpi4"), load_profile("rpi4"), estimate=True)
    # its ReLUs made in place (docs/spec.md 1): the walk's floor counts each as if its input always left with it,
    # a bound still (at most the best plan's), no longer this one's exactly: the proof is of the graph without
    budget, deadline = keep_all(made).peak_bytes // 4, 1.5 * made.one_pass_s
    loose = walk(made, budget)
    assert loose is not None and any(n.inplace for n in made.nodes)
    best = walked_plan(made, budget, deadline, loose, POET)
    assert best.status == "feasible" and loose.bound_j <= best.energy_j * (1 + 1e-9)
    g = replace(made, nodes=tuple(replace(n, inplace=False) for n in made.nodes))
    walked = walk(g, budget)
    assert walked is not None
    plan = walked_plan(g, budget, deadline, walked, POET)
    assert plan.status == "feasible" and plan.peak_bytes <= budget
    assert plan.energy_j == pytest.approx(walked.bound_j, rel=1e-9)
    none = Plan(strategy="none", stages=[], status="infeasible", arena_budget=budget, deadline_s=deadline)
    rounds_way, _, _ = _round(g, budget, deadline, POET, walked, none, walked.rows)
    assert rounds_way.status != "feasible" or rounds_way.energy_j > plan.energy_j * 1.01
