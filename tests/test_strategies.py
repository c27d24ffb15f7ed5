"""Baselines under one cost model and one simulator; POET never loses to any of them."""

from __future__ import annotations

import math

import pytest
from poet.plan.simulate import simulate
from poet.plan.strategies import BASELINES, MILP, REGISTRY, STRATEGIES, best_heuristic, found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.strategies.revolve import chain_order
from poet.plan.types import CostedGraph, Plan
from test_planner import LINEAR_M0, chain, deep, linear_m0, tiny


def _costed_zoo(name: str) -> CostedGraph:
    from poet.boards import load_board
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import costed, load_profile

    model, spec = get_model(name)
    g = trace(model, name, spec.input_shape, spec.classes, 16)  # the batch the shipped profile measured
    return costed(g, load_board("nrf52840"), load_profile("nrf52840"))


def _branchy() -> CostedGraph:
    """A residual block: x -> a -> b, add(a, b) reads a again; backward as in test_planner."""
    from test_planner import node
    return CostedGraph((
        node(0, "input", (), 8, 0.0), node(1, "forward", (0,), 16, 0.02), node(2, "forward", (1,), 16, 0.03),
        node(3, "forward", (1, 2), 16, 0.01), node(4, "forward", (3,), 4, 0.01), node(5, "loss", (4,), 1, 0.01),
        node(6, "backward", (4,), 16, 0.01), node(7, "backward", (6, 3), 16, 0.02),
        node(8, "backward", (7, 1), 16, 0.04), node(9, "backward", (8, 7, 0), 0, 0.03),
        node(10, "optimizer", (), 0, 0.01)), name="branchy")


GRAPHS = {"chain": chain, "tiny": tiny, "deep": lambda: deep((4, 4, 4, 4, 4)), "branchy": _branchy,
          "linear.m0": linear_m0, "mlp-digits": lambda: _costed_zoo("mlp-digits"),
          "cnn-digits": lambda: _costed_zoo("cnn-digits")}


def _replay(g: CostedGraph, plan: Plan, budget: int, deadline_s: float) -> None:
    """The simulator's account equals the plan's, and the plan fits and meets the deadline."""
    sim = simulate(g, plan, budget, deadline_s)
    assert math.isclose(sim.energy_j, plan.energy_j, rel_tol=1e-12)
    assert sim.peak_bytes == plan.peak_bytes <= budget


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_poet_is_never_worse_than_any_baseline(name: str) -> None:
    g = GRAPHS[name]()
    peak = keep_all(g).peak_bytes
    wins = 0
    for frac in (1.0, 0.8, 0.6, 0.45):
        budget = int(peak * frac)
        for factor in (1.1, 2.0):
            deadline = factor * g.one_pass_s
            poet = plan_with("poet", g, budget, deadline)
            assert poet.status in ("optimal", "infeasible"), poet.status
            if found(poet):
                _replay(g, poet, budget, deadline)
            for s in BASELINES:
                p = plan_with(s, g, budget, deadline)
                if not found(p):
                    continue
                _replay(g, p, budget, deadline)
                assert found(poet), f"{s} fits {budget} B / {factor}x but POET says infeasible"
                assert poet.energy_j <= p.energy_j * (1 + 1e-9), (s, budget, factor, poet.energy_j, p.energy_j)
                wins += poet.energy_j < p.energy_j * (1 - 1e-6)
    if name not in ("tiny",):
        assert wins > 0, "no budget where POET beats a baseline: the sweep tests nothing"


def test_heuristics_make_the_moves_they_are_named_for() -> None:
    g = deep((4, 4, 4, 4, 4))
    budget, deadline = int(keep_all(g).peak_bytes * 0.75), 3 * g.one_pass_s
    dtr = plan_with("dtr", g, budget, deadline)
    assert found(dtr) and dtr.recomputes > 0 and dtr.page_ins == 0
    cap = plan_with("capuchin", g, budget, deadline)
    assert found(cap) and cap.page_ins > 0  # pages first
    tight = plan_with("capuchin", g, budget, 1.0 * g.one_pass_s + 1e-9)  # no time to page: it must recompute
    assert tight.page_ins == 0
    for s in ("sqrtn", "chen-greedy", "revolve", "checkmate", "remat-only"):
        p = plan_with(s, g, budget, deadline)
        assert found(p) and p.recomputes > 0 and p.page_ins == 0, (s, p.status, p.note)
    assert plan_with("page-only", g, budget, deadline).recomputes == 0
    assert plan_with("checkpoint-all", g, budget, deadline).status == "infeasible"


def test_revolve_is_for_chains() -> None:
    assert chain_order(deep()) is not None
    assert chain_order(_branchy()) is None
    p = plan_with("revolve", _branchy(), 1000, 10.0)
    assert p.status == "not-applicable" and "chain" in p.note


def test_checkmate_ignores_the_deadline_and_is_refused_when_it_misses_it() -> None:
    g = deep((4, 4, 4, 4, 4))
    budget = int(keep_all(g).peak_bytes * 0.6)
    loose = plan_with("checkmate", g, budget, 10 * g.one_pass_s)
    assert found(loose) and loose.time_s > 1.05 * g.one_pass_s
    tight = plan_with("checkmate", g, budget, 1.05 * g.one_pass_s)
    assert tight.status == "infeasible" and "deadline" in tight.note


def test_warm_start_gives_a_plan_no_worse_than_the_start() -> None:
    """With a time limit too short to search, the MILP returns the heuristic's plan or better."""
    g = deep((4,) * 9)
    budget, deadline = int(keep_all(g).peak_bytes * 0.6), 3 * g.one_pass_s
    start = best_heuristic(g, budget, deadline)
    assert start is not None
    for solver in ("highs", "cbc"):
        p = solve_poet(g, budget, deadline, solver=solver, time_limit_s=60, warm_start=start)
        assert found(p) and p.energy_j <= start.energy_j * (1 + 1e-9)


def test_the_registry_is_the_one_list_of_strategies() -> None:
    """--strategy's choices and help, the MILPs and the heuristics the MILPs start from all come from REGISTRY."""
    names = [s.name for s in REGISTRY]
    assert len(set(names)) == len(names) and list(STRATEGIES) == names
    assert all(s.help and "\n" not in s.help and STRATEGIES[s.name] == s.help for s in REGISTRY)
    assert MILP == ("poet", "remat-only", "page-only", "checkmate")
    with pytest.raises(ValueError, match="unknown strategy 'nope'; one of poet, remat-only"):
        plan_with("nope", chain(), 1000, 1.0)


def test_every_strategy_has_a_plan_maker() -> None:
    g = chain()
    for s in STRATEGIES:
        p = plan_with(s, g, keep_all(g).peak_bytes, 2 * g.one_pass_s)
        assert p.strategy == s and found(p)


@pytest.mark.slow
@pytest.mark.time_limited  # a plan no worse than the heuristics' is all it asserts: the warm start's
@pytest.mark.parametrize("model", ["linear", "resnet18_cifar", "vgg16_cifar", "transformer", "bert"])
@pytest.mark.parametrize("platform", ["m0", "m4", "a72"])
def test_every_reference_instance_gets_a_plan_the_simulator_accepts(model: str, platform: str) -> None:
    """At 60% of the keep-all peak (or the smallest feasible arena) and 2x: a plan, replayed clean,
    no worse than any heuristic's (the MILP starts from the best of them)."""
    from poet.plan.strategies.poet_milp_model import lower_bound_bytes
    path = LINEAR_M0.with_name(f"{model}.{platform}.json")
    if not path.exists():
        pytest.skip(f"{path} absent")
    g = CostedGraph.from_json(path)
    budget = max(int(keep_all(g).peak_bytes * 0.6), lower_bound_bytes(g))
    deadline = 2 * g.one_pass_s
    p = plan_with("poet", g, budget, deadline, time_limit_s=10)
    heur = [plan_with(s, g, budget, deadline) for s in ("dtr", "capuchin", "chen-greedy", "sqrtn")]
    if not found(p):
        assert p.status in ("infeasible", "no-solution") and not any(found(h) for h in heur)
        return
    _replay(g, p, budget, deadline)
    for h in heur:
        if found(h):
            assert p.energy_j <= h.energy_j * (1 + 1e-9)


def test_a_milp_too_big_to_build_returns_the_best_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    import poet.plan.solver.resident_sets as resident_sets
    import poet.plan.strategies.poet_milp as poet_milp
    import poet.plan.strategies.relaxed as relaxed_plans

    g = deep((4, 4, 4, 4, 4))
    budget, deadline = int(keep_all(g).peak_bytes * 0.6), 3 * g.one_pass_s
    monkeypatch.setattr(poet_milp, "MAX_MILP_VARIABLES", 10)
    with monkeypatch.context() as m:  # nor the walk nor the rounds (strategies/relaxed.py), which find the optimum
        m.setattr(resident_sets, "MAX_NODES", 0)
        m.setattr(relaxed_plans, "ROUNDS", 0)
        p = plan_with("poet", g, budget, deadline, time_limit_s=10)
        best = best_heuristic(g, budget, deadline)
        assert best is not None and p.status == "feasible" and p.energy_j == best.energy_j
        # said to be a heuristic's, with the bound it is measured against
        assert "not built" in p.note and f"heuristic's plan ({best.strategy})" in p.note and p.solver == "heuristic"
        assert p.bound_j is not None and p.gap == pytest.approx(1 - p.bound_j / p.energy_j) and 0 < p.gap < 1
        _replay(g, p, budget, deadline)
        cold = plan_with("poet", g, budget, deadline, warm=False, time_limit_s=10)
        assert cold.status == "no-solution" and not cold.stages
    # with time for it, the row relaxation's own plan, no worse than the heuristics' and proven here
    relaxed = plan_with("poet", g, budget, deadline, warm=False)
    assert relaxed.status == "optimal" and relaxed.energy_j <= p.energy_j and "row relaxation" in relaxed.note
    _replay(g, relaxed, budget, deadline)
