"""Bit masks for the backward of ReLU and ReLU6 (poet.plan.transform.masks): the activations whose backward needs
only where its gradient passes save a bit per element (act_mask) that their backward reads (mask_bwd). The kernels
give relu_bwd's and hardtanh_bwd's bits, the graph changes only where the fp32 map has no other backward reader, and
the board trains the masked graph under every plan bit for bit as the graph without masks, at a lower peak."""

from __future__ import annotations

import ctypes
from dataclasses import replace as dc_replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fwhelpers import assert_models_refused, native_link
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.ops import CODE
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import model_blob
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.transform.masks import mask_words, with_masks
from test_kernels_nn import F32P, FLT, INT, lib  # noqa: F401 (lib: the fixture that builds the kernels)
from test_kernels_opt import bits
from test_runtime_ops import _poet_plans, _run

nn = torch.nn


class _Acts(nn.Module):
    """A frozen conv, then ReLU6 and ReLU behind trained biases (their maps needed by nothing else in the backward),
    and a ReLU whose output a trained conv's weight gradient reads (its map needed anyway)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 6, 3, padding=1)
        self.a = nn.Conv2d(6, 8, 1)
        self.b = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c = nn.Conv2d(8, 6, 1)
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = nn.functional.relu6(self.a(x))
        x = torch.relu(self.b(x))
        x = torch.relu(self.c(x))
        return self.head(x.mean((2, 3)))


TRAIN = "last:1+bias:4+layers:c"


def _graph() -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    model = _Acts()
    return model, trace(model, "acts", (1, 6, 6), 4, 2, train=TRAIN)


def test_masks_replace_the_backwards_that_need_only_where_the_gradient_passes() -> None:
    _, g = _graph()
    m = with_masks(g)
    masks = [n for n in m.nodes if n.op == "act_mask"]
    # a's ReLU6 and c's ReLU: nothing else in the backward reads their maps; b's ReLU output is c's input, which
    # c's weight gradient reads, so that ReLU keeps relu_bwd (bits beside the map it keeps would only add bytes)
    acts = [m.nodes[k.deps[0]] for k in masks]
    assert [(a.op, m.nodes[a.deps[0]].module) for a in acts] == [("hardtanh", "a"), ("relu", "c")]
    assert [k.attrs for k in masks] == [{"n": 2 * 8 * 36, "lo": 0.0, "hi": 6.0, "bounded": 1},
                                        {"n": 2 * 6 * 36, "lo": 0.0, "hi": 0.0, "bounded": 0}]
    for k in masks:
        count = k.attrs["n"]
        assert k.bytes == 4 * mask_words(count) and k.shape == [mask_words(count)] and k.deps == [k.id - 1]
        (reader,) = [n for n in m.nodes if k.id in n.deps]
        assert reader.op == "mask_bwd" and reader.saved == [k.id] and reader.attrs == {"n": count}
    kept = [n for n in m.nodes if n.op in ("relu_bwd", "hardtanh_bwd")]
    assert [m.nodes[n.deps[1]].name for n in kept] == ["relu_1/forward"]
    assert any(n.op == "conv2d_bwd" and kept[0].deps[1] in n.deps for n in m.nodes)
    assert with_masks(m) is m
    frozen = trace(_Acts(), "acts", (1, 6, 6), 4, 2, train="last:1")  # no activation has a backward
    assert with_masks(frozen) is frozen


def test_the_mask_kernels_are_relu_and_hardtanh_backwards_bit_for_bit(kernels: ctypes.CDLL) -> None:  # noqa: F811
    """Every element kind: below, at and above each bound, signed zeros, infinities and NaN, over counts that end
    inside a word and on one."""
    fp = ctypes.POINTER(ctypes.c_float)
    up = ctypes.POINTER(ctypes.c_uint32)

    def f(a: np.ndarray) -> object:
        return a.ctypes.data_as(fp)

    special = np.array([-np.inf, -7, -6, -1e-38, -0.0, 0.0, 1e-38, 3, 5.999999, 6, 6.000001, 7, np.inf, np.nan],
                       np.float32)
    rng = np.random.default_rng(4)
    for n in (1, 31, 32, 33, 97):
        x = np.concatenate([special, rng.standard_normal(n).astype(np.float32) * 5])[:n].copy()
        g = rng.standard_normal(n).astype(np.float32)
        g[::3] *= -1
        g[1::5] = -0.0
        words = np.zeros(mask_words(n), np.uint32)
        for lo, hi, bounded in ((0.0, 0.0, 0), (0.0, 6.0, 1), (-1.0, 1.0, 1)):
            y = np.empty(n, np.float32)
            want = np.full(n, np.nan, np.float32)
            if bounded:
                kernels.poet_hardtanh_fwd(n, ctypes.c_float(lo), ctypes.c_float(hi), f(x), f(y))
                kernels.poet_hardtanh_bwd(n, ctypes.c_float(lo), ctypes.c_float(hi), f(g), f(x), f(want))
            else:
                kernels.poet_relu_fwd(n, f(x), f(y))
                kernels.poet_relu_bwd(n, f(g), f(y), f(want))
            kernels.poet_act_mask(n, ctypes.c_float(lo), ctypes.c_float(hi), bounded, f(y), words.ctypes.data_as(up))
            got = np.full(n, np.nan, np.float32)
            kernels.poet_mask_bwd(n, f(g), words.ctypes.data_as(up), f(got))
            assert np.array_equal(bits(got), bits(want)), (n, lo, hi)
            inplace = g.copy()
            kernels.poet_mask_bwd(n, f(inplace), words.ctypes.data_as(up), f(inplace))
            assert np.array_equal(bits(inplace), bits(want))
            if n % 32:  # the last word's bits past n are clear
                assert int(words[-1]) >> (n % 32) == 0


@pytest.fixture(scope="module")
def kernels(lib: ctypes.CDLL) -> ctypes.CDLL:  # noqa: F811
    u32p = ctypes.POINTER(ctypes.c_uint32)
    lib.poet_act_mask.argtypes = [INT, FLT, FLT, INT, F32P, u32p]
    lib.poet_mask_bwd.argtypes = [INT, F32P, u32p, F32P]
    lib.poet_act_mask.restype = lib.poet_mask_bwd.restype = None
    return lib


def test_the_board_trains_a_masked_graph_as_the_graph_without_masks(tmp_path: Path) -> None:
    """keep-all and POET's tighter plans of the masked graph: losses and weights those of the graph without masks
    bit for bit, and its keep-all peak lower (the fp32 maps the backward kept are bits now)."""
    model, g = _graph()
    m = with_masks(g)
    assert keep_all(uncosted(m)).peak_bytes < keep_all(uncosted(g)).peak_bytes
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((2, 1, 6, 6)).astype(np.float32), rng.integers(0, 4, 2).astype(np.int32))
            for _ in range(3)]
    w0 = weights_of(model)
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        want = _run(link, g, w0, keep_all(uncosted(g)), data)
        plans = [keep_all(uncosted(m)), *_poet_plans(m)]
        assert len(plans) > 1
        for plan in plans:
            losses, weights = _run(link, m, w0, plan, data)
            assert losses == want[0] and all(np.array_equal(a, b) for a, b in zip(weights, want[1], strict=True))


def test_the_board_refuses_a_mask_backward_that_reads_no_mask(tmp_path: Path) -> None:
    _, g = _graph()
    blob = model_blob(with_masks(g))
    k = next(i for i, n in enumerate(blob.nodes) if n.op == CODE["mask_bwd"])
    mask = blob.nodes[k].deps[1]
    act = blob.nodes[mask].deps[0]  # the activation's fp32 output, as many bytes as its mask? no: 32x as many

    def with_node(i: int, **kw: object) -> object:
        return dc_replace(blob, nodes=[*blob.nodes[:i], dc_replace(blob.nodes[i], **kw), *blob.nodes[i + 1:]])

    n = blob.nodes[k].attrs[0]
    bad = [(with_node(k, deps=(blob.nodes[k].deps[0], act)), k),  # an fp32 map where the bits go
           (with_node(k, attrs=(n - 1,), bytes=4 * (n - 1)), k),  # fewer elements than the mask has
           (with_node(mask, attrs=(n, *blob.nodes[mask].attrs[1:3], 2)), mask)]  # a bound flag that is no flag
    assert_models_refused(tmp_path, [blob], bad)
