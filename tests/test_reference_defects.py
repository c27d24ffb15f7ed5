"""The POET reference MILP's defects, each fixed in poet, each shown by a difference a test can see.

The reference's rules are available as semantics=REFERENCE (and CostedGraph.from_json(reference=True)
for its recomputable inputs) so the difference is measured, not asserted from memory.
"""

from __future__ import annotations

import json
import math

import pytest
from poet.plan.simulate import PlanError, simulate
from poet.plan.strategies import found
from poet.plan.strategies.poet_milp import solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes
from poet.plan.types import REFERENCE, CostedGraph
from test_planner import LINEAR_M0, chain, linear_m0, node


def test_reference_semantics_reproduce_the_reference_objective() -> None:
    """Paging time outside the deadline and a recomputable input (the reference's rules) give the
    reference's own 0.105044 J on linear.m0 at 3,300 B / 1.0x; poet's rules find it infeasible."""
    if not LINEAR_M0.exists():
        pytest.skip("reference instances absent")
    g = CostedGraph.from_json(LINEAR_M0, reference=True)
    p = solve_poet(g, 3300, g.one_pass_s, semantics=REFERENCE)
    assert p.status == "optimal" and math.isclose(p.energy_j, 0.105044, rel_tol=1e-5)
    assert p.time_s > g.one_pass_s  # it pages, and that time is not in its deadline
    with pytest.raises(PlanError, match="deadline"):
        simulate(g, p, 3300, g.one_pass_s)  # ... but it is in poet's
    assert solve_poet(linear_m0(), 3300, g.one_pass_s).status == "infeasible"


def test_reference_semantics_page_out_only_after_the_producing_stage() -> None:
    """f1 is dear to recompute and the stage after it has no room for it: poet pages it out in the
    stage that makes it; the reference's rules cannot, so they recompute it (more energy)."""
    from test_planner import node
    g = CostedGraph((
        node(0, "input", (), 2, 0.0), node(1, "forward", (0,), 8, 0.5), node(2, "forward", (0,), 8, 0.01),
        node(3, "forward", (2,), 2, 0.01), node(4, "loss", (3,), 1, 0.01), node(5, "backward", (3,), 2, 0.01),
        node(6, "backward", (5, 2), 2, 0.01), node(7, "backward", (6, 1, 0), 0, 0.01),
        node(8, "optimizer", (), 0, 0.01)), name="side")
    budget, deadline = 12, 5 * g.one_pass_s
    ours = solve_poet(g, budget, deadline)
    assert found(ours) and 1 in ours.stages[1].page_out and ours.recomputes == 0
    ref = solve_poet(g, budget, deadline, semantics=REFERENCE)
    assert found(ref) and 1 not in ref.stages[1].page_out and ref.recomputes > 0
    assert ref.energy_j > ours.energy_j


def test_inputs_are_not_free_to_recompute() -> None:
    """The reference's input node has no deps and costs 0 J, so its MILP 'recomputes' the input for
    free instead of keeping or paging it; poet pins or pages inputs."""
    if not LINEAR_M0.exists():
        pytest.skip("reference instances absent")
    ref_graph = CostedGraph.from_json(LINEAR_M0, reference=True)
    ref = solve_poet(ref_graph, 3300, 1.01 * ref_graph.one_pass_s, semantics=REFERENCE)
    assert any(0 in st.compute[:-1] for st in ref.stages), "the reference's rules recompute the input"
    ours = solve_poet(linear_m0(), 3300, 1.01 * ref_graph.one_pass_s, semantics=REFERENCE)
    assert found(ours) and not any(0 in st.compute[:-1] for st in ours.stages)
    assert ours.energy_j > ref.energy_j  # the free recompute was an accounting error worth this much


def test_duplicated_edges_are_dropped(tmp_path) -> None:
    """An edge listed twice (the reference's hand-written graphs have some) must not count twice."""
    g = chain()
    raw = {"model": "dup", "nodes": [dict(n.__dict__, deps=list(n.deps) * 2) for n in g.nodes]}
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(raw))
    dup = CostedGraph.from_json(path)
    assert all(n.deps == m.deps for n, m in zip(dup.nodes, g.nodes))
    budget, deadline = int(lower_bound_bytes(g) * 1.3), 3 * g.one_pass_s
    a, b = solve_poet(g, budget, deadline), solve_poet(dup, budget, deadline)
    assert found(a) and math.isclose(a.energy_j, b.energy_j, rel_tol=1e-12)


def test_a_tensor_nobody_reads_frees_itself_right_after_its_compute() -> None:
    """The self-free term: a node's output that no later node reads (the loss value here, made
    large) occupies RAM only while it is computed, not for the rest of the step."""
    g = CostedGraph((
        node(0, "input", (), 4, 0.0), node(1, "forward", (0,), 8, 0.01), node(2, "loss", (1,), 100, 0.01),
        node(3, "backward", (1, 0), 4, 0.01), node(4, "backward", (3, 0), 0, 0.01),
        node(5, "optimizer", (), 0, 0.01)), name="selffree")
    budget = 4 + 8 + 100  # exactly what computing the loss needs
    plan = solve_poet(g, budget, 2 * g.one_pass_s)
    assert found(plan) and plan.peak_bytes == budget
    sim = simulate(g, plan, budget)
    after_loss = sim.memory_trace[sim.memory_trace.index(budget) + 1:]
    assert max(after_loss) <= 4 + 8 + 4, "the loss value must leave right after it is made"
