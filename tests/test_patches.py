"""Patch-based execution of a static-int8 prefix's first stage (poet.plan.transform.patches): every cut and count of
strips gives the stage's output bit for bit, in the host's reference of the int8 prefix and on the C runtime under
any plan; the choice patches only a stage that does not fit, and a plan's record makes the same graph again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fwhelpers import native_link
from poet.boards import load_board
from poet.device.link import Link
from poet.device.protocol import BATCH, SCHEDULE
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.plan.cost.costs import costed, load_profile, uncosted
from poet.plan.cost.memory import pool_for
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.transform import patches
from poet.plan.transform.rewrites import Rewrites
from poet.plan.transform.static_int8 import Int8Prefix, rewrite
from poet.plan.types import Plan
from test_runtime_ops import _frugal_plan
from test_static_int8 import _model_weights

nn = torch.nn


class _Stage(nn.Module):
    """A first stage as MobileNetV2's: a strided 3x3 conv, a depthwise and a pointwise conv, an inverted residual
    block (its add reads rows its expansion reads more of: a row copy), a strided depthwise conv whose output the
    trained head reads in fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 2, 1), nn.ReLU6(), nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.ReLU6(),
                                  nn.Conv2d(8, 4, 1))
        self.expand, self.dw = nn.Sequential(nn.Conv2d(4, 12, 1), nn.ReLU6()), nn.Conv2d(12, 12, 3, 1, 1, groups=12)
        self.project = nn.Conv2d(12, 4, 1)
        self.down = nn.Conv2d(4, 4, 3, 2, 1, groups=4)
        self.fc = nn.Linear(4 * 5 * 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = h + self.project(torch.relu(self.dw(self.expand(h))))
        return self.fc(torch.flatten(self.down(h), 1))


def _prefix() -> tuple[nn.Module, Int8Prefix, list[np.ndarray], np.ndarray]:
    torch.manual_seed(5)
    m = _Stage()
    g = trace(m, "stage", (1, 19, 19), 3, 2, train="last:1")
    prefix = rewrite(g)
    assert prefix is not None
    x = np.random.default_rng(6).standard_normal((4, 1 * 19 * 19)).astype(np.float32)
    return m, prefix, prefix.weights(_model_weights(m), x), x


def test_every_cut_and_count_of_strips_makes_the_stage_bit_for_bit() -> None:
    m, prefix, w, x = _prefix()
    q = prefix.graph
    cuts = patches.cuts(q)
    names = [q.nodes[c].name for c in cuts]
    # the stem's three convs; inside the block the add still reads the stem's output, so the block ends at the add
    assert names == ["stem/1/forward", "stem/3/forward", "stem/4/forward", "add/forward"], names
    base = prefix.forward(w, x)
    assert base, "the prefix has an fp32 output to compare"
    copies, pads = 0, set()
    for cut in cuts:
        for strips in range(2, q.nodes[cut].shape[2] + 1):
            p = prefix.patched(patches.Patching(q.nodes[cut].name, strips))
            out = p.forward(w, x)
            assert set(out) == set(p.boundary)
            moved = patches.renumbered(q, cut, p.graph)
            for i, v in base.items():
                assert np.array_equal(v.view(np.uint32), out[moved[i]].view(np.uint32)), (cut, strips)
            copies += sum(n.op == "slice_q" and n.deps[0] != 0 for n in p.graph.nodes)
            pads |= {(n.attrs["pad"], n.attrs["padb"]) for n in p.graph.nodes
                     if n.op == "conv2d_q" and "padb" in n.attrs}
    assert copies > 0, "no strip read fewer rows of a stage tensor than another: the row copies went untested"
    assert {(1, 0), (0, 0), (0, 1)} <= pads, pads  # the first strip, the inner ones, the last
    # the scales stay the whole maps': the patched prefix calibrates as the unpatched one
    again = prefix.patched(patches.Patching(names[-1], 3))
    assert all(np.array_equal(a, b) for a, b in zip(again.weights(_model_weights(m), x), w, strict=True))


def _steps(link: Link, g: TrainingGraph, w: list[np.ndarray], plan: Plan, data: list[tuple[np.ndarray, np.ndarray]],
           in_place_ops: bool = True) -> tuple[list[float], list[np.ndarray]]:
    """The steps of `plan` on the board (lowered with or without in-place computes), the input staged int8, the
    board's peak the schedule's; losses and weights."""
    lowered, blob = lower(plan, g, in_place_ops=in_place_ops), model_blob(g)
    link.load_model(blob, w)
    link.upload(SCHEDULE, lowered.schedule.encode())
    losses = []
    for xb, yb in data:
        link.upload(BATCH, encode_batch(xb, yb, blob.x_scale(w)))
        res = link.step(0.05)
        assert res.peak_live_bytes == lowered.peak_live_bytes and res.peak_extent_bytes == lowered.extent_bytes
        assert not in_place_ops or res.peak_live_bytes == plan.peak_bytes
        losses.append(res.loss)
    return losses, link.read_params(blob)


def test_a_patched_prefix_trains_bit_for_bit_as_the_unpatched_on_the_runtime(tmp_path: Path) -> None:
    """The C runtime's slice_q, cat_q and strip convs: the same losses and weights as the unpatched prefix, under a
    plan that keeps everything and one that pages and recomputes (board peak = planned peak, _steps checks), and
    the losses those of the host's float64 step fed by the reference's patched forward."""
    _, prefix, w, x = _prefix()
    q = prefix.graph
    cut = patches.cuts(q)[-1]
    p = prefix.patched(patches.Patching(q.nodes[cut].name, 4))
    assert {"slice_q", "cat_q"} <= {n.op for n in p.graph.nodes}
    rng = np.random.default_rng(7)
    data = [(rng.standard_normal((2, 1, 19, 19)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(3)]
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        losses, weights = _steps(link, q, w, keep_all(uncosted(q)), data)
        # keep everything; and page or recompute every strip tensor the step reads again (the head's input)
        board = load_board("nrf52840")
        frugal = _frugal_plan(costed(p.graph, board, load_profile(board.name), estimate=True))
        assert frugal.page_ins and frugal.recomputes
        for plan in (keep_all(uncosted(p.graph)), frugal):
            got, got_w = _steps(link, p.graph, w, plan, data)
            assert got == losses and all(np.array_equal(a, b) for a, b in zip(got_w, weights, strict=True))
    boundary = next(iter(p.boundary))
    names = [n for n, _ in q.params]
    lw, lb = (w[names.index(k)].astype(np.float64).reshape(3, -1) for k in ("fc.weight", "fc.bias"))
    lb = lb.reshape(-1)
    for (xb, yb), loss in zip(data, losses, strict=True):
        h = p.forward(w, xb.reshape(2, -1))[boundary].reshape(2, -1).astype(np.float64)
        logits = h @ lw.T + lb
        e = np.exp(logits - logits.max(1, keepdims=True))
        pr = e / e.sum(1, keepdims=True)
        assert abs(loss - float(np.mean(-np.log(pr[np.arange(2), yb])))) <= 1e-5 * max(1.0, abs(loss))
        d = (pr - np.eye(3)[yb]) / 2
        lw, lb = lw - 0.05 * d.T @ h, lb - 0.05 * d.sum(0)


def test_the_choice_patches_only_a_stage_that_does_not_fit_and_the_record_makes_it_again() -> None:
    """patches.choose at a budget of `ram` (no firmware static here): an option fits when its widest op and its
    fixed part fit; unpatched when it fits, else the fitting option of fewest MACs, else the one needing least."""
    _, prefix, _, _ = _prefix()
    q = prefix.graph
    opts = patches.options(q)

    def ram(o: patches.Option) -> int:
        return o.need + pool_for(o.graph).fixed

    assert opts[0].patching is None and ram(opts[0]) > min(ram(o) for o in opts)
    roomy = patches.choose(q, ram(opts[0]), 0)
    assert roomy.patching is None and roomy.graph is q
    budget = ram(opts[0]) - 1  # the unpatched stage no longer fits
    tight = patches.choose(q, budget, 0)
    fit = [o for o in opts if ram(o) <= budget]
    assert tight.patching is not None and tight in fit and tight.flops == min(o.flops for o in fit)
    assert tight.flops > opts[0].flops  # the halo: strips' overlapping rows computed twice
    least = patches.choose(q, 1024, 0)
    assert ram(least) == min(ram(o) for o in opts)
    # plan.json's record: the same graph from a fresh trace
    made = prefix.patched(tight.patching)
    record = Rewrites(int8_prefix=True, patches=tight.patching)
    g2, prefix2 = Rewrites.from_json(record.to_json()).apply(prefix.source)
    assert prefix2 is not None and prefix2.patching == tight.patching
    assert model_blob(g2).encode() == model_blob(made.graph).encode()
    with pytest.raises(ValueError, match="strips"):
        patches.patch(q, patches.cuts(q)[0], 1)
    with pytest.raises(ValueError, match="no int8 stage"):
        prefix.patched(replace(tight.patching, cut="fc/forward"))
