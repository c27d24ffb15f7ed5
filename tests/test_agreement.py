"""The rule every board-versus-PyTorch comparison uses (poet.graph.agreement), checked against what
it must accept and what it must refuse.

It must accept float32 arithmetic that sums in another order: that is all that differs between one
CPU's PyTorch and another's, and between PyTorch and the board. A fixed bound on board-minus-PyTorch
failed exactly there (MLPerf Tiny's autoencoder: a batch norm's bias 6.5e-5 from PyTorch on an AMD
EPYC, against a bound of 5e-5 tuned on another CPU). So each network here is trained again in float32
in an order the reference never ran (one thread, each batch's samples rotated by one), standing in for
the board, and must pass. It must refuse what a wrong kernel does: a learning rate 1% off, a
reduction one term short."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from poet.graph.agreement import FACTOR, UNIT, Reference, reference
from poet.graph.reference import state_tensors, train_steps
from test_runtime_ops import LR, _setup

# (zoo name, batch, steps): the networks test_runtime_ops checks the board against, the fast ones
NETWORKS = [("mlp-digits", 4, 3), ("cnn-digits", 4, 3), ("transformer-block", 2, 3), ("mlperf-ic", 2, 3),
            ("mlperf-ad", 8, 3)]


def _rotated_on_one_thread(model: torch.nn.Module, batches: list, lr: float, **train: object) -> tuple[list, list]:
    """The same steps in float32 with every sum over the batch in an order the reference does not use."""
    rotated = [(np.roll(x, 1, axis=0).copy(), np.roll(y, 1).copy()) for x, y in batches]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        losses = train_steps(model, rotated, lr, **train)
    finally:
        torch.set_num_threads(threads)
    return losses, [t.detach().numpy().astype(np.float32) for _, t in state_tensors(model)]


@pytest.mark.parametrize("name,batch,steps", NETWORKS)
def test_float32_in_another_summation_order_agrees(name: str, batch: int, steps: int) -> None:
    model, g, data = _setup(name, batch, steps=steps)
    other = copy.deepcopy(model)
    ref = reference(model, data, LR, graph=g)
    losses, weights = _rotated_on_one_thread(other, data, LR, graph=g)
    agreed = ref.agree(weights, losses, [n for n, _ in g.params])
    assert agreed.ok, agreed.report()


@pytest.mark.parametrize("name,batch,steps", NETWORKS)
def test_a_wrong_kernel_does_not(name: str, batch: int, steps: int) -> None:
    model, g, data = _setup(name, batch, steps=steps)
    scaled, short = copy.deepcopy(model), copy.deepcopy(model)
    ref = reference(model, data, LR, graph=g)
    names = [n for n, _ in g.params]
    # an update scaled wrong (an optimizer kernel's constant 1% off)
    losses, weights = _rotated_on_one_thread(scaled, data, LR * 1.01, graph=g)
    assert not ref.agree(weights, losses, names).ok
    # a reduction one term short: each batch's gradient without its last sample (the loss still a mean)
    batches = [(x[:-1], y[:-1]) for x, y in data] if batch > 1 else None
    if batches is not None:
        g_losses = train_steps(short, batches, LR * batch / (batch - 1), graph=g)
        weights = [t.detach().numpy().astype(np.float32) for _, t in state_tensors(short)]
        assert not ref.agree(weights, g_losses, names).ok


def _ref(exact: list[np.ndarray], *fp32: list[np.ndarray]) -> Reference:
    return Reference([0.0], list(fp32[0]), [0.0], exact, [([0.0], list(w)) for w in fp32[1:]])


def test_the_bound_is_the_largest_float32_error_times_the_factor() -> None:
    exact = [np.array([1.0, 2.0, 3.0]), np.array([10.0])]
    a = [np.array([1.0, 2.0, 3.0 + 1e-6], np.float32), np.array([10.0], np.float32)]
    b = [np.array([1.0 + 2e-6, 2.0, 3.0], np.float32), np.array([10.0], np.float32)]
    ref = _ref(exact, a, b)
    row = ref.agree(a)
    first = row.rows[0]
    fp32 = max(np.linalg.norm(w[0].astype(np.float64) - exact[0]) for w in (a, b))  # what float32 stored
    assert first.fp32 == pytest.approx(fp32)
    assert first.allowed == pytest.approx(FACTOR * fp32)
    # the second tensor's float32 runs are exact: its bound is the model's relative error at its size
    model_rel = max(np.linalg.norm(np.concatenate([x.astype(np.float64) for x in w]) - np.concatenate(exact))
                    for w in (a, b)) / np.linalg.norm(np.concatenate(exact))
    assert row.rows[1].allowed == pytest.approx(FACTOR * max(model_rel * 10.0, UNIT * 10.0))
    assert row.ok
    # past the bound on the first tensor: refused, and said so with its name
    bad = [np.array([1.0, 2.0, 3.0 + 9 * FACTOR * 1e-6]), exact[1]]
    verdict = ref.agree(bad, names=["w", "b"])
    assert not verdict.ok and [r.name for r in verdict.failures] == ["w"]
    assert verdict.report().startswith("NOT as close") and "\nw: board " in verdict.report()


def test_a_value_float32_got_exact_by_luck_is_judged_at_the_models_error() -> None:
    """A bias of two values that float32 happened to compute exactly: its bound is the model's relative
    float32 error at its size, not zero (nor float32's rounding of it alone)."""
    exact = [np.array([0.5, 0.25]), np.full(1000, 1.0 / 3.0)]
    fp32 = [np.array([0.5, 0.25], np.float32), (exact[1] * (1 + 1e-6)).astype(np.float32)]
    ref = _ref(exact, fp32)
    board = [exact[0] * (1 + 1e-6), exact[1]]
    row = ref.agree(board).rows[0]
    assert row.fp32 == 0 and row.board > FACTOR * UNIT * row.size
    assert row.ok
