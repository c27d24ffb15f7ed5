"""The real firmware image on the emulated nRF52840 (QEMU mps2-an386), driven over serial.

These are the spine's acceptance checks: the board's weights and losses after N steps are as close
to float64 PyTorch's on the host as float32 PyTorch's are (poet.graph.agreement); a tight schedule
(POET's below keep-everything where one exists, else one that pages and recomputes anyway) and
keep-everything give bit-identical weights; the board's peak arena use equals the planner's.
"""

import numpy as np
import pytest
from conftest import data_batches, needs_qemu, run_steps
from poet.boards import load_board
from poet.device.connect import open_device
from poet.device.protocol import DeviceError
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import costed, load_profile, uncosted
from poet.plan.lowering.lower import lower
from poet.plan.pipeline import plan_step
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from test_runtime_ops import _frugal_plan

pytestmark = needs_qemu
STEPS = 3
LR = 0.1


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    board = load_board("nrf52840")
    with open_device(board, None, workdir=tmp_path_factory.mktemp("qemu"), quiet=True) as dev:
        yield dev


def _setup(name: str, batch: int = 16):
    model, spec = get_model(name)
    g = trace(model, name, spec.input_shape, spec.classes, batch)
    return model, g


def _tight_plan(dev, g):
    """A plan at a budget between the smallest feasible and keep-everything, with a deadline that allows paging."""
    board = dev.board
    cg = costed(g, board, load_profile(board.name))
    deadline = 50 * cg.one_pass_s
    full = keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, deadline)
    arena = smallest + (full - smallest) // 4
    from poet.plan.cost.memory import budget_for

    fixed = budget_for(g, board.ram_bytes, dev.runtime_static).fixed
    return plan_step(g, cg, board, fixed + arena, dev.runtime_static, deadline, progress=lambda _m: None)


def _run(dev, g, weights, sched: bytes, data, expect_peak=None):
    res = run_steps(dev, g, weights, sched, data, LR, None, lambda _m: None, expect_peak=expect_peak)
    return res, dev.read_weights(g)


def _frugal(dev, g):
    """A plan that pages and recomputes whatever the budget (test_runtime_ops._Frugal), at no more than
    keep-everything's peak, and its lowering."""
    cg = costed(g, dev.board, load_profile(dev.board.name))
    plan = _frugal_plan(cg)
    assert plan.page_outs > 0 and plan.page_ins > 0 and plan.recomputes > 0
    assert plan.peak_bytes <= keep_all(cg).peak_bytes
    return plan, lower(plan, g)


# mlp-digits: POET's plan below keep-everything (it recomputes). cnn-digits has none (its smallest arena is
# keep-everything's, one backward op's inputs and output, since the input takes no arena bytes), so a frugal
# plan that pages and recomputes anyway: the board runs both on a convolutional net
@pytest.mark.parametrize("name,how", [("mlp-digits", "poet"), ("cnn-digits", "frugal")],
                         ids=["mlp-digits", "cnn-digits"])
def test_board_matches_pytorch_and_tight_equals_keep_all(device, name, how):
    model, g = _setup(name)
    w0 = weights_of(model)
    data = data_batches(g, STEPS)

    if how == "poet":
        p = _tight_plan(device, g)
        assert p.plan.recomputes + p.plan.page_outs > 0, "the budget must force recompute or paging"
        assert p.plan.peak_bytes < p.keep_all_peak
        plan, lowered = p.plan, p.lowered
    else:
        plan, lowered = _frugal(device, g)
    tight_losses, tight = _run(device, g, w0, lowered.schedule.encode(), data, expect_peak=plan.peak_bytes)

    full_plan = keep_all(uncosted(g))
    full_losses, full = _run(device, g, w0, lower(full_plan, g).schedule.encode(), data,
                             expect_peak=full_plan.peak_bytes)

    # recompute and paging change nothing: bit-identical weights and losses
    assert tight_losses == full_losses
    for a, b in zip(tight, full, strict=True):
        assert np.array_equal(a, b)

    agreed = reference(model, data, LR).agree(tight, tight_losses, names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
    assert not np.array_equal(w0[0], tight[0])  # training did move the weights


def test_peak_is_what_the_planner_predicted(device):
    _, g = _setup("mlp-digits")
    p = _tight_plan(device, g)
    model, _ = _setup("mlp-digits")
    device.load_model(g, weights_of(model))
    device.load_schedule(p.lowered.schedule.encode())
    x, y = data_batches(g, 1)[0]
    res = device.step(x, y, LR)
    assert res.peak_live_bytes == p.plan.peak_bytes <= p.budget.arena
    assert res.peak_extent_bytes == p.lowered.extent_bytes <= p.budget.arena
    kinds = {r.kind for r in res.records}
    assert {"forward", "backward", "optimizer"} <= kinds
    assert ("recompute" in kinds) == (p.plan.recomputes > 0)
    assert ("page_out" in kinds) == (p.plan.page_outs > 0)


@pytest.mark.parametrize("corrupt,code", [
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC"),
    (lambda b: b"XSCH" + b[4:], "MAGIC"),
    (lambda b: b[:10], "SHORT"),
])
def test_board_refuses_a_corrupted_schedule(device, corrupt, code):
    model, g = _setup("mlp-digits")
    device.load_model(g, weights_of(model))
    good = lower(keep_all(uncosted(g)), g).schedule.encode()
    with pytest.raises(DeviceError, match=code):
        device.load_schedule(corrupt(good))
    device.load_schedule(good)  # the board is still usable afterwards
