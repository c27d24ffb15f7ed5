"""The gap relaxation's bound (plan/solver/bound.py): never above any plan's energy, and proofs of infeasibility.

Checked against the brute force of test_planner.py (every plan, by dynamic programming) on the
small hand-made graphs, and against the POET MILP's proven optima on random training-shaped
graphs, the POET reference's linear.m0 and small zoo models. A bound above an optimum would make
poet call a plan optimal that is not, so every one of these must hold exactly, not on average.
"""

from __future__ import annotations

import random

import pytest
from poet.plan.solver.bound import Relaxation, binding_rows, gaps_of, relax, relax_rows
from poet.plan.solver.resident_sets import walk
from poet.plan.strategies import plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.fastest import WALK_SMALL, least_time_walk, timed
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes
from poet.plan.types import POET, REFERENCE, CostedGraph, CostedNode
from test_planner import LINEAR_M0, _brute_front, brute_force, chain, deep, linear_m0, node, tiny

TOL = 1e-9


def _rows_all(g, budget, deadline, semantics=POET):  # type: ignore[no-untyped-def]
    return relax_rows(g, budget, deadline, semantics)


def _rows_every_other(g, budget, deadline, semantics=POET):  # type: ignore[no-untyped-def]
    """A bound from some of the RAM rows only, as strategies/relaxed.py starts with."""
    return relax_rows(g, budget, deadline, semantics, rows=binding_rows(g, budget)[::2])


def _resident_sets(g, budget, deadline, semantics=POET):  # type: ignore[no-untyped-def]
    """The row relaxation walked over resident sets (plan/solver/resident_sets.py); no bound off chains."""
    walked = walk(g, budget)
    return Relaxation("no-solution", 0.0) if walked is None else Relaxation("optimal", walked.bound_j)


# the gap relaxation, the row relaxation, the row relaxation on a subset of its rows, and the walk
BOUNDS = {"gaps": relax, "rows": _rows_all, "some-rows": _rows_every_other, "resident-sets": _resident_sets}


def _budgets(g: CostedGraph, n: int = 6) -> list[int]:
    """From the smallest any op needs to the keep-everything peak."""
    lo, hi = lower_bound_bytes(g), keep_all(g).peak_bytes
    return sorted({lo + (hi - lo) * k // n for k in range(n + 1)} | {lo - 1})


@pytest.mark.parametrize("bound", sorted(BOUNDS))
@pytest.mark.parametrize("make", [tiny, deep], ids=["tiny", "deep"])
def test_bound_never_exceeds_the_brute_force_optimum(make, bound: str) -> None:  # type: ignore[no-untyped-def]
    g, bound_of = make(), BOUNDS[bound]
    for budget in _budgets(g):
        for factor in (1.0, 1.05, 1.3, 2.0):
            deadline = factor * g.one_pass_s
            best = brute_force(g, budget, deadline)
            rel = bound_of(g, budget, deadline)
            if rel.status == "infeasible":
                assert best is None, f"relaxation says no plan at {budget} B, {factor}x; brute force found {best}"
                continue
            assert rel.status == "optimal" or bound in ("some-rows", "resident-sets")
            if best is not None:
                assert rel.bound_j <= best * (1 + TOL), (budget, factor, rel.bound_j, best)


@pytest.mark.parametrize("small", WALK_SMALL)
@pytest.mark.parametrize("make", [tiny, deep], ids=["tiny", "deep"])
def test_the_least_time_walk_never_exceeds_the_least_time(make, small: float) -> None:  # type: ignore[no-untyped-def]
    """Walked with each cost in seconds (strategies/fastest.py), the walk bounds every plan's time: what lets
    poet call a deadline infeasible on its word."""
    g = make()
    compared = 0
    for budget in _budgets(g):
        front = _brute_front(g, budget)
        walked = walk(timed(g, POET), budget, small=small)
        if walked is None or not front:
            continue
        assert walked.bound_j <= min(s for _, s in front) * (1 + TOL), budget
        compared += 1
        for factor in (1.0, 1.01, 1.05, 1.3):
            said = least_time_walk(g, budget, factor * g.one_pass_s, True, True, POET, 60.0)
            if said is not None and said.status == "infeasible":
                assert brute_force(g, budget, factor * g.one_pass_s) is None, (budget, factor)
    assert compared >= 3


def _random_graph(seed: int) -> CostedGraph:
    """A training-shaped DAG: forward ops reading one or two earlier ones (skips), a loss, then a
    backward op per forward op, in reverse, reading the running gradient and some of the op's
    forward tensors; sizes, speeds and paging power drawn at random."""
    rng = random.Random(seed)
    w = rng.choice([0.02, 0.2, 2.0])
    n_fwd = rng.randint(4, 9)
    nodes: list[CostedNode] = [node(0, "input", (), rng.randint(1, 8), 0.0, w)]
    for k in range(1, n_fwd + 1):
        deps = {k - 1} | ({rng.randrange(k)} if k > 1 and rng.random() < 0.4 else set())
        nodes.append(node(k, "forward", tuple(sorted(deps)), rng.randint(1, 12), rng.uniform(0.001, 0.05), w))
    nodes.append(node(n_fwd + 1, "loss", (n_fwd,), 1, 0.001, w))
    grad = n_fwd + 1
    for k in range(n_fwd, 0, -1):
        reads = {k} | set(nodes[k].deps) if rng.random() < 0.5 else set(nodes[k].deps)
        i = len(nodes)
        nodes.append(node(i, "backward", (grad, *sorted(reads)), rng.randint(0, 10), rng.uniform(0.001, 0.08), w))
        grad = i
    nodes.append(node(len(nodes), "optimizer", (), 0, 0.01, w))
    return CostedGraph(tuple(nodes), name=f"random{seed}")


@pytest.mark.parametrize("seed", range(30))
def test_bound_never_exceeds_the_milp_optimum_on_random_graphs(seed: int) -> None:
    g = _random_graph(seed)
    lo, hi = lower_bound_bytes(g), keep_all(g).peak_bytes
    proven = 0
    for budget in (lo, (lo + hi) // 2, lo + (hi - lo) // 4):
        for factor in (1.02, 1.5):
            deadline = factor * g.one_pass_s
            opt = solve_poet(g, budget, deadline, time_limit_s=60, bound=False)  # the MILP alone
            for name, bound_of in BOUNDS.items():
                rel = bound_of(g, budget, deadline)
                if rel.status == "infeasible":
                    assert opt.status == "infeasible", f"{name}: relaxation infeasible, MILP found {opt.energy_j} J"
                    continue
                if opt.status == "optimal":
                    proven += 1
                    assert rel.bound_j <= opt.energy_j * (1 + TOL), (name, budget, factor, rel.bound_j, opt.energy_j)
    assert proven, "no instance of this graph was solved to a proof: the check checked nothing"


@pytest.mark.parametrize("semantics", [POET, REFERENCE], ids=["poet", "reference"])
def test_bound_on_the_reference_linear_m0(semantics) -> None:  # type: ignore[no-untyped-def]
    g = linear_m0()
    if semantics is REFERENCE:
        g = CostedGraph.from_json(LINEAR_M0, reference=True)
    for factor in (1.01, 1.2):
        deadline = factor * g.one_pass_s
        rel = relax(g, 3300, deadline, semantics)
        opt = plan_with("poet", g, 3300, deadline, semantics=semantics)
        assert opt.status == "optimal"
        assert rel.bound_j <= opt.energy_j * (1 + TOL)
        # and tight: linear.m0's optimum recomputes two tensors and pages two, all of it priced here
        assert rel.bound_j >= opt.energy_j * (1 - 1e-3)


def test_gaps_are_the_stretches_between_reads() -> None:
    g = tiny()
    # tensor 1 is made at 1, read by 2 and by 7: one gap (1 read at 2, next at 7)
    assert [(x.after, x.until) for x in gaps_of(g) if x.tensor == 1] == [(2, 7)]
    # tensor 0 (the batch) is read at 1 and 8
    assert [(x.after, x.until) for x in gaps_of(g) if x.tensor == 0] == [(1, 8)]


def test_bound_is_one_plain_pass_with_room_to_spare() -> None:
    g = chain()
    rel = relax(g, keep_all(g).peak_bytes, 1.5 * g.one_pass_s)
    assert rel.status == "optimal" and rel.binding_stages == 0
    assert rel.bound_j == pytest.approx(sum(n.compute_j for n in g.nodes))


def test_an_impossible_deadline_or_budget_is_proven_infeasible() -> None:
    g = chain()
    assert relax(g, lower_bound_bytes(g) - 1, 10 * g.one_pass_s).status == "infeasible"
    assert relax(g, keep_all(g).peak_bytes, 0.99 * g.one_pass_s).status == "infeasible"


def test_the_relaxations_plan_holds_a_link_of_a_chain_too_long_to_recompute_in_one_stage() -> None:
    """The row relaxation makes a tensor again "between rows" however long its recompute chain;
    made at the stage that reads it, the chain can need more RAM than there is (ResNet-18 at 25% of
    keep-everything on the nrf52840: infeasible before). The relaxed strategy then keeps a link of
    the chain from where it was made, and the plan fits."""
    from poet.plan.simulate import simulate
    from poet.plan.strategies.builder import build
    from poet.plan.strategies.relaxed import Rows, relaxed

    g = _random_graph(5)
    budget, deadline = lower_bound_bytes(g), 1.5 * g.one_pass_s
    rel = relax_rows(g, budget, deadline)
    assert rel.status == "optimal"
    plain = build(g, budget, deadline, Rows(g, rel, deadline, POET))
    assert plain.status == "infeasible" and "nothing left to evict" in plain.note
    p = relaxed(g, budget, deadline)
    assert p.status == "feasible" or p.status == "optimal"
    assert p.bound_j is not None and p.bound_j <= p.energy_j * (1 + TOL)
    simulate(g, p, budget, deadline)  # raises if it does not fit or is late


def test_rounds_with_rows_where_the_plan_did_not_break_reach_the_bound_of_every_row() -> None:
    """When the plan breaks nowhere the rows do not see, only the bound is loose: the relaxed
    strategy adds rows on a finer grid each round (densify) until every binding stage has one,
    and its bound is then the full row relaxation's."""
    from poet.plan.strategies.base import Options
    from poet.plan.strategies.relaxed import relaxed

    g = deep((4,) * 12)
    budget, deadline = lower_bound_bytes(g), 1.5 * g.one_pass_s
    every_row = relax_rows(g, budget, deadline)
    assert every_row.status == "optimal"
    first = relaxed(g, budget, deadline, options=Options(gap=0.0), densify=0)
    finer = relaxed(g, budget, deadline, options=Options(gap=0.0))
    assert first.bound_j is not None and finer.bound_j is not None
    assert first.bound_j < every_row.bound_j * (1 - 1e-3)  # 16 rows of 26: a looser bound
    assert finer.bound_j >= every_row.bound_j * (1 - TOL)
    assert finer.energy_j <= first.energy_j


@pytest.mark.parametrize("seed", range(6))
def test_rounds_from_the_lp_bound_every_plan_and_their_plan_fits(seed: int) -> None:
    """lp_first (the second core's path where no MILP is built): the LP round's plan and the rows where
    it broke seed the rounds; the bound, LP's included, stays below the MILP's proven optimum."""
    from poet.plan.simulate import simulate
    from poet.plan.strategies.base import Options
    from poet.plan.strategies.relaxed import relaxed

    g = _random_graph(seed)
    lo, hi = lower_bound_bytes(g), keep_all(g).peak_bytes
    said: list[str] = []
    checked = 0
    for budget in (lo + (hi - lo) // 4, (lo + hi) // 2):
        deadline = 1.5 * g.one_pass_s
        opt = solve_poet(g, budget, deadline, time_limit_s=60, bound=False)
        p = relaxed(g, budget, deadline, options=Options(progress=said.append), lp_first=True)
        if opt.status == "infeasible":
            assert not p.stages
            continue
        assert p.bound_j is not None
        if opt.status == "optimal":
            checked += 1
            assert p.bound_j <= opt.energy_j * (1 + TOL), (budget, p.bound_j, opt.energy_j)
        if p.stages:
            assert p.energy_j >= opt.energy_j * (1 - TOL) if opt.status == "optimal" else True
            simulate(g, p, budget, deadline)  # raises if it does not fit or is late
    assert any("its LP" in m for m in said) or not checked
