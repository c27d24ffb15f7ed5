"""The plan simulator: every rule of docs/spec.md section 1 is enforced, energy is exact."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import pytest
from poet.plan.simulate import PlanError, simulate
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.types import CostedGraph, CostedNode, Plan, Stage

# id, kind, deps, bytes
SPEC = [
    (0, "input", (), 4),
    (1, "forward", (0,), 8),      # logits
    (2, "loss", (1,), 2),
    (3, "backward", (1,), 8),     # cross-entropy backward reads the logits
    (4, "backward", (3, 0), 0),   # linear backward, no grad input
    (5, "optimizer", (), 0),
]


def tiny() -> CostedGraph:
    return CostedGraph(tuple(
        CostedNode(id=i, name=f"n{i}", kind=k, deps=d, bytes=b, compute_s=0.1 * (i + 1),
                   compute_j=0.01 * (i + 1), page_in_s=0.003 * b, page_in_j=0.0005 * b,
                   page_out_s=0.004 * b, page_out_j=0.0007 * b,
                   recomputable=k in ("forward", "loss"))
        for i, k, d, b in SPEC))


def paged_plan() -> Plan:
    """Pages the input out and back in, recomputes the logits for the backward pass. Frees as the
    spec's rule says: a tensor paged out at the end of its stage, any other one not kept right
    after its last use (the loss, read by nobody, right after its own compute)."""
    return Plan("hand", [
        Stage(compute=[0]),
        Stage(compute=[1], page_out=[0], free=[0]),
        Stage(compute=[2], free_after={2: [1, 2]}),
        Stage(page_in=[0], compute=[1, 3], free_after={3: [1]}),
        Stage(compute=[4], free_after={4: [0, 3]}),
        Stage(compute=[5]),
    ], status="feasible")


def test_keep_all_passes_and_accounts_exactly() -> None:
    g = tiny()
    plan = keep_all(g)
    sim = simulate(g, plan, arena_budget=20, deadline_s=g.one_pass_s)
    # stage 1: 4+8, stage 2: +2 then free 2, stage 3: +8 then free 1, stage 4: free 0 and 3
    assert sim.memory_trace == [4, 12, 14, 12, 20, 12, 12, 8, 0, 0]
    assert sim.peak_bytes == plan.peak_bytes == 20
    assert sim.energy_j == pytest.approx(sum(n.compute_j for n in g.nodes), rel=1e-12)
    assert sim.energy_by_kind_j["forward"] == pytest.approx(0.01 + 0.02 + 0.03)
    assert sim.energy_by_kind_j["backward"] == pytest.approx(0.04 + 0.05)
    assert sim.energy_by_kind_j["optimizer"] == pytest.approx(0.06)
    assert sim.time_s == pytest.approx(g.one_pass_s)
    assert (sim.recomputes, sim.page_ins, sim.page_outs) == (0, 0, 0)


def test_paging_and_recompute_energy_exact() -> None:
    g = tiny()
    sim = simulate(g, paged_plan(), arena_budget=20)
    n0, n1 = g.nodes[0], g.nodes[1]
    assert sim.peak_bytes == 20
    assert sim.energy_by_kind_j["recompute"] == n1.compute_j
    assert sim.energy_by_kind_j["page_in"] == n0.page_in_j
    assert sim.energy_by_kind_j["page_out"] == n0.page_out_j
    expected = sum(n.compute_j for n in g.nodes) + n1.compute_j + n0.page_in_j + n0.page_out_j
    assert math.isclose(sim.energy_j, expected, rel_tol=1e-12)
    assert math.isclose(sim.time_s, g.one_pass_s + n1.compute_s + n0.page_in_s + n0.page_out_s)
    assert (sim.recomputes, sim.page_ins, sim.page_outs) == (1, 1, 1)
    assert len(sim.memory_trace) == sum(
        len(s.page_in) + len(s.compute) + len(s.page_out) + len(s.free) + len(s.free_before)
        + sum(map(len, s.free_after.values())) for s in paged_plan().stages)
    # 0 | 0+1, page-out 0, free 0 | +2, free 1 and 2 | page-in 0, +1, +3, free 1 | 4 (0 B), free 0, 3 | 5
    assert sim.memory_trace == [4, 12, 12, 8, 10, 2, 0, 4, 12, 20, 12, 12, 8, 0, 0]


def _edit(base: Callable[[], Plan], t: int, **lists: list[int]) -> Plan:
    plan = copy.deepcopy(base())
    for name, value in lists.items():
        setattr(plan.stages[t], name, value)
    return plan


def keep_all_t() -> Plan:
    return keep_all(tiny())


BAD = {
    "last compute is not t": (_edit(keep_all_t, 1, compute=[0]), "last compute must be node 1"),
    "no compute": (_edit(keep_all_t, 2, compute=[]), "last compute must be node 2"),
    "not ascending": (_edit(paged_plan, 3, compute=[3, 1, 3]), "not strictly ascending"),
    "dep not resident": (_edit(keep_all_t, 0, free_after={0: [0]}), "stage 1, node 1 .*dep 0 .*not resident"),
    "dep of a recompute": (_edit(paged_plan, 3, page_in=[]), "stage 3, node 1 .*dep 0"),
    "page-in not in aux": (_edit(paged_plan, 1, page_out=[], free=[], free_after={1: [0]}),
                           "stage 3, node 0 .*not in aux"),
    "page-out not resident": (_edit(paged_plan, 2, page_out=[0]), "stage 2, node 0 .*page-out"),
    "free not resident": (_edit(keep_all_t, 3, free_after={3: [1, 2]}), "stage 3, node 2 .*free"),
    "resident twice (page-in)": (_edit(paged_plan, 1, free=[]), "stage 3, node 0 .*twice"),
    "resident twice (recompute)": (_edit(keep_all_t, 2, compute=[1, 2], free_after={2: [2]}),
                                   "stage 2, node 1 .*twice"),
    "input recomputed": (_edit(paged_plan, 3, page_in=[], compute=[0, 1, 3]),
                         "stage 3, node 0 .*non-recomputable"),
    "backward recomputed": (_edit(keep_all_t, 4, compute=[3, 4]), "stage 4, node 3 .*non-recomputable"),
    "leak": (_edit(keep_all_t, 4, free_after={4: [0]}), "node 3 .*left resident"),
    "page-in of a bytes-0 node": (_edit(keep_all_t, 5, page_in=[4]), "stage 5, node 4 .*bytes == 0"),
    "free of a bytes-0 node": (_edit(keep_all_t, 5, free=[5]), "stage 5, node 5 .*free"),
    # where a tensor leaves is the rule's, not the plan's choice
    "freed before a later compute of the stage reads it": (
        _edit(paged_plan, 3, free_after={1: [1]}),
        "stage 3, node 1 .*freed right after compute 1, but compute 3 uses it later in the stage"),
    "freed before its page-out": (_edit(paged_plan, 1, free=[], free_after={1: [0]}),
                                  "stage 1, node 0 .*freed right after compute 1, but it is paged out"),
    "freed at the end instead of after its last use": (
        _edit(keep_all_t, 3, free_after={}, free=[1]),
        "stage 3, node 1 .*freed at the end of the stage, later than the rule: its last use in the "
        "stage is compute 3"),
    "kept tensor not used, freed after a compute": (
        _edit(keep_all_t, 2, free_after={2: [2, 0]}),
        "stage 2, node 0 .*freed right after compute 2, later than the rule: the stage does not use it"),
    "free_after of a node the stage does not compute": (
        _edit(keep_all_t, 3, free_after={2: [1]}), "stage 3: free_after names node 2"),
    "freed before a recompute makes it again": (
        _edit(keep_all_t, 2, free_before=[1], compute=[1, 2]),
        "stage 2, node 1 .*freed before the first compute, but compute 2 uses it later"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_rule_violations_raise(case: str) -> None:
    plan, message = BAD[case]
    with pytest.raises(PlanError, match=message):
        simulate(tiny(), plan)


def test_memory_budget_checked_at_every_event() -> None:
    g = tiny()
    simulate(g, keep_all(g), arena_budget=20)
    with pytest.raises(PlanError, match="stage 3, node 3 .*memory 20 B above the arena budget 19 B"):
        simulate(g, keep_all(g), arena_budget=19)
    with pytest.raises(PlanError, match="stage 1, node 1 .*memory 12 B above"):
        simulate(g, paged_plan(), arena_budget=11)


def test_memory_budget_checked_right_after_the_page_ins() -> None:
    """Stage 3 pages x back in while it still holds h, which it frees before its computes: the
    peak is that moment alone, every compute and page-out needs at most 12 B, so only a check
    right after the page-ins sees a budget of 13 B broken."""
    g = CostedGraph(tuple(
        CostedNode(id=i, name=f"n{i}", kind=k, deps=d, bytes=b, compute_s=1e-3, compute_j=1e-3,
                   page_in_s=1e-3, page_in_j=1e-3, page_out_s=1e-3, page_out_j=1e-3,
                   recomputable=k == "forward")
        for i, k, d, b in [(0, "input", (), 4), (1, "forward", (0,), 8), (2, "loss", (1,), 2),
                           (3, "backward", (2, 0), 2), (4, "optimizer", (), 0)]))
    plan = Plan("hand", [
        Stage(compute=[0]),
        Stage(compute=[1], page_out=[0], free=[0]),
        Stage(compute=[2]),  # keeps h (1) for stage 3, which does not read it
        Stage(page_in=[0], free_before=[1], compute=[3], free_after={3: [0, 2, 3]}),
        Stage(compute=[4]),
    ], status="feasible")
    sim = simulate(g, plan, arena_budget=14)
    # 0 | +1, page-out 0, free 0 | +2 | page-in 0: 14, free 1, +3, free 0 2 3 | 4 (0 B)
    assert sim.memory_trace == [4, 12, 12, 8, 10, 14, 6, 8, 4, 2, 0, 0]
    assert sim.peak_bytes == 14
    with pytest.raises(PlanError, match=r"stage 3, node 0 .*memory 14 B above the arena budget 13 B"):
        simulate(g, plan, arena_budget=13)


def test_deadline_checked() -> None:
    g = tiny()
    simulate(g, keep_all(g), deadline_s=g.one_pass_s)
    with pytest.raises(PlanError, match="stage 5, node 5 .*above the deadline"):
        simulate(g, keep_all(g), deadline_s=g.one_pass_s * 0.999)
    with pytest.raises(PlanError, match="deadline"):
        simulate(g, paged_plan(), deadline_s=g.one_pass_s)


def test_stage_count_checked() -> None:
    g = tiny()
    plan = keep_all(g)
    plan.stages.pop()
    with pytest.raises(PlanError, match="6 nodes"):
        simulate(g, plan)


def test_plan_error_is_a_value_error() -> None:
    assert issubclass(PlanError, ValueError)
