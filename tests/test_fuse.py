"""Fused ops (poet.plan.transform.fuse, firmware/core/ops/norm.c): a classifier head's trained batch norm, ReLU
and global average pool run as one op whose [B, C, HW] maps never exist. The fused graph trains on the
runtime like PyTorch (poet.graph.agreement) under every plan (a recompute of the fused forward moves the
running statistics once), with the input gradient (the layers before train) and without it (only the
head trains)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_tools
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.plan.cost.costs import uncosted
from poet.plan.strategies.builder import build
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.chen import Checkpoints
from poet.plan.transform.fuse import fuse_heads
from test_runtime_ops import _poet_plans
from test_runtime_training import _assert_like_torch, _data, _every_plan

pytestmark = needs_tools("cc", "make")


def _head_net() -> Any:
    import torch
    from torch import nn
    torch.manual_seed(5)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 12, 1), nn.BatchNorm2d(12, momentum=0.3), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 10))


@pytest.mark.parametrize("train", ["all", "last:2"])
def test_a_fused_head_trains_like_torch_under_every_plan(tmp_path: Path, train: str) -> None:
    model = _head_net()
    g = trace(model, "head-net", (1, 8, 8), 10, 3, train=train)
    f = fuse_heads(g)
    ops = [n.op for n in f.nodes]
    # only the head fuses: the first batch norm feeds a conv, not a mean
    assert ops.count("bn_relu_mean") == ops.count("bn_relu_mean_bwd") == 1 and len(f.nodes) == len(g.nodes) - 4
    assert "mean" not in ops and ops.count("batchnorm") == (1 if train == "all" else 0)
    bwd = next(n for n in f.nodes if n.op == "bn_relu_mean_bwd")
    assert bwd.attrs["need_grad_input"] == (train == "all") and bwd.bytes == (4 * 3 * 12 * 64 if train == "all" else 0)
    assert keep_all(uncosted(f)).peak_bytes < keep_all(uncosted(g)).peak_bytes
    data, w0 = _data(g, 3), weights_of(model)
    # and a plan that keeps only the input and the head's input, recomputing the rest (Chen's policy)
    head_in = next(n.deps[0] for n in f.nodes if n.op == "bn_relu_mean")
    plans = [keep_all(uncosted(f)), *_poet_plans(f), build(uncosted(f), 1 << 30, 1e9, Checkpoints("two", {0, head_in}))]
    fused = next(n.id for n in f.nodes if n.op == "bn_relu_mean")
    assert any(fused in st.compute[:-1] for p in plans[1:] for st in p.stages), \
        "no plan recomputes the fused head: the test would not see its statistics move twice"
    runs = _every_plan(tmp_path, f, w0, data, plans)
    for losses, weights in runs[1:]:  # every plan computes the same values (values are not planned)
        assert losses == runs[0][0]
        assert all(np.array_equal(a, b) for a, b in zip(weights, runs[0][1], strict=True))
    _assert_like_torch(f, model, data, runs[0][1], runs[0][0], frozen=g.frozen, graph=g)
    stats = [i for i, (n, _) in enumerate(f.params) if n.startswith("4.running")]
    assert all(not np.array_equal(runs[0][1][i], w0[i]) for i in stats)  # the head's statistics moved


def test_a_head_that_does_not_fuse_is_left_alone() -> None:
    """Without a spatial mean after the ReLU there is no head: the graph is returned as it was."""
    from torch import nn

    g = trace(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                            nn.Linear(256, 10)), "no-head", (1, 8, 8), 10, 2)
    assert fuse_heads(g) is g  # no mean after the ReLU
