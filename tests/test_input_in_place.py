"""The input where it lies (docs/spec.md section 1, issue 48): the input node's tensor is the staged batch, read in
place for the whole step, so it takes no arena bytes and no plan keeps, pages, frees or recomputes a copy of it;
the board runs such plans reading the staging region, at the peak the planner planned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tools
from fwhelpers import native_link
from poet.boards import load_board
from poet.device.protocol import BATCH, SCHEDULE
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import ModelChoice
from poet.plan.cost.costs import costed, load_profile
from poet.plan.cost.memory import arena_bytes, pool_for
from poet.plan.lowering.lower import forward_lowered, lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import COMPUTE, OK, validate
from poet.plan.simulate import simulate
from poet.plan.strategies import STRATEGIES, found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.types import CostedGraph, Plan

DEMO_BATCH = 16  # poet demo's


def _costed(name: str, batch: int = DEMO_BATCH) -> tuple[object, TrainingGraph, CostedGraph]:
    model, g = traced(ModelChoice(name=name, batch=batch))
    board = load_board("nrf52840")
    return model, g, costed(g, board, load_profile(board.name), estimate=True)


def _touches_input(plan: Plan) -> list[str]:
    """What a plan does with node 0 beyond computing it in stage 0."""
    out = []
    for t, st in enumerate(plan.stages):
        freed = [*st.free_before, *st.free, *(i for f in st.free_after.values() for i in f)]
        for what, nodes in (("pages in", st.page_in), ("pages out", st.page_out), ("frees", freed),
                            ("computes", st.compute if t else st.compute[:-1])):
            if 0 in nodes:
                out.append(f"stage {t} {what} the input")
    return out


@pytest.mark.parametrize("name", ["mlp-digits", "cnn-digits"])
def test_no_plan_keeps_or_pages_the_input(name: str) -> None:
    """Every strategy, from the smallest feasible arena to keep-all's, at the demo's deadline (3x): none holds the
    input in the arena, and the schedule lowered from it computes node 0 once and never names it again."""
    _, g, cg = _costed(name)
    assert g.nodes[0].kind == "input" and g.nodes[0].bytes > 0
    assert cg.nodes[0].bytes == arena_bytes(g.nodes[0]) == 0 and cg.nodes[0].compute_j == 0.0
    assert pool_for(g).staging >= g.nodes[0].bytes  # where its bytes are: the fixed part of the pool
    deadline = 3 * cg.one_pass_s
    full = keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, deadline)
    assert smallest is not None
    blob = model_blob(g)
    planned = 0
    for strategy in STRATEGIES:
        for budget in sorted({smallest, (smallest + full) // 2, full}):
            plan = plan_with(strategy, cg, budget, deadline)
            if not found(plan):
                continue
            planned += 1
            assert _touches_input(plan) == [], (strategy, budget)
            low = lower(plan, g, blob)
            assert [i.op for i in low.schedule.instrs if i.node == 0] == [COMPUTE], (strategy, budget)
            assert low.peak_live_bytes == simulate(cg, plan).peak_bytes == plan.peak_bytes <= budget
            assert validate(low.schedule.encode(), blob, low.extent_bytes) == (OK, 0xFFFFFFFF)
    assert planned >= len(STRATEGIES)  # at least keep-all's budget has a plan of every strategy
    fwd = forward_lowered(blob).schedule  # predict's reads the staged batch too
    assert [i.op for i in fwd.instrs if i.node == 0] == [COMPUTE]


@needs_tools("cc", "make")
def test_the_board_reads_the_input_in_place_at_the_planned_peak(tmp_path: Path) -> None:
    """mlp-digits at the smallest arena (it recomputes) and at keep-all's, on the native runtime: every step's
    peak is the plan's, byte for byte, the input counted nowhere in the arena, and both end at the same
    weights, which are PyTorch's same steps'."""
    model, g, cg = _costed("mlp-digits")
    deadline = 3 * cg.one_pass_s
    smallest = min_arena_budget(cg, deadline)
    assert smallest is not None
    tight = plan_with("poet", cg, smallest, deadline)
    assert found(tight) and tight.recomputes > 0
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((g.batch, *g.input_shape)).astype(np.float32),
             rng.integers(0, g.classes, size=g.batch).astype(np.int32)) for _ in range(3)]
    w0 = weights_of(model)
    blob = model_blob(g)
    ends = []
    with native_link(tmp_path) as link:
        for plan in (keep_all(cg), tight):
            link.load_model(blob, w0)
            link.upload(SCHEDULE, lower(plan, g, blob).schedule.encode())
            for x, y in data:
                link.upload(BATCH, encode_batch(x, y))
                assert link.step(0.05).peak_live_bytes == plan.peak_bytes
            flat = link.read_params(blob)
            ends.append([w.reshape(shape) for w, (_, shape) in zip(flat, g.params, strict=True)])
    assert all(np.array_equal(a, b) for a, b in zip(*ends, strict=True))
    agreed = reference(model, data, 0.05).agree(ends[0], names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
