"""Static int8 (firmware/core/ops/quant.c): a frozen prefix run in int8 from end to end, its scales
fixed on the host. The kernels against poet.graph.quantise's numpy twins bit for bit (hard and soft
float builds), a hand-built prefix (quantize, conv with ReLU, depthwise conv, residual add, a conv
with an fp32 output) feeding a trained linear on the native runtime against the same numpy forward
and a float64 SGD step, and the model checks that keep int8 tensors out of fp32 ops."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fwhelpers import native_link
from poet.device.protocol import MODEL, DeviceError
from poet.graph.quantise import absmax_scale, add_q, conv2d_q, encode_i8, maxpool2d_q, mean_q, mul_q, quantise
from poet.ops import CODE
from poet.plan.lowering.modelblob import (
    KIND_BACKWARD,
    KIND_FORWARD,
    KIND_INPUT,
    KIND_LOSS,
    KIND_OPTIMIZER,
    BlobNode,
    ModelBlob,
    conv_geometry,
    conv_kernel,
    q_epilogue,
)
from test_kernels_lp import CONVP, F32P, FLT, I8P, INT, Conv, _train, ptr

SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "poet_conv2d_q_fwd": ([CONVP, I8P, FLT, I8P, FLT, F32P, INT, F32P, ctypes.c_void_p], None),
    "poet_add_q_fwd": ([INT, I8P, FLT, I8P, FLT, INT, F32P, ctypes.c_void_p], None),
    "poet_maxpool2d_q_fwd": ([INT] * 11 + [I8P, I8P], None),
    "poet_mean_q_fwd": ([INT, INT, INT, I8P, FLT, INT, F32P, ctypes.c_void_p], None),
    "poet_mul_q_fwd": ([INT, INT, INT, I8P, FLT, I8P, FLT, INT, F32P, ctypes.c_void_p], None),
}


@pytest.fixture(params=["fpu", "soft-float"])
def qlib(request: pytest.FixtureRequest) -> ctypes.CDLL:
    so = request.getfixturevalue("lib" if request.param == "fpu" else "soft_lib")
    for name, (args, res) in SIGNATURES.items():
        fn = getattr(so, name)
        fn.argtypes, fn.restype = args, res
    return so


from test_kernels_lp import lib, soft_lib  # noqa: E402,F401  (the fixtures qlib builds on)


def _out(shape: tuple[int, ...], i8: bool) -> np.ndarray:
    return np.empty(shape, np.int8 if i8 else np.float32)


@pytest.mark.parametrize("seed", range(10))
def test_conv2d_q_matches_numpy(qlib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    depthwise = seed % 3 == 0
    C = int(rng.integers(1, 6))
    groups = C if depthwise else 1
    oc = C if depthwise else int(rng.integers(1, 6))
    kh, stride, ph = int(rng.choice([1, 3])), int(rng.integers(1, 3)), int(rng.integers(0, 2))
    kw, pw = (kh, ph) if seed < 6 else (int(rng.integers(1, 5)), int(rng.integers(0, 3)))  # then rectangles
    B, H, W = int(rng.integers(1, 3)), int(rng.integers(kh, 9)), int(rng.integers(kw, 9))
    xq = rng.integers(-127, 128, (B, C, H, W)).astype(np.int8)
    wq = rng.integers(-127, 128, (oc, C // groups, kh, kw)).astype(np.int8)
    xs, ws = np.float32(rng.uniform(1e-3, 0.1)), np.float32(rng.uniform(1e-3, 0.1))
    b = rng.standard_normal(oc).astype(np.float32) if seed % 2 else None
    relu, i8 = (seed * 3) % 5, bool(seed % 5 != 4)  # relu: poet.graph.quantise.ACTIVATIONS, each twice
    ys = np.float32(rng.uniform(0.01, 0.5)) if i8 else None
    Ho, Wo = (H + 2 * ph - kh) // stride + 1, (W + 2 * pw - kw) // stride + 1
    y = _out((B, oc, Ho, Wo), i8)
    ysa = None if ys is None else np.array([ys], np.float32)
    cv = Conv(B, C, H, W, oc, kh, kw, stride, ph, pw, groups)
    qlib.poet_conv2d_q_fwd(ctypes.byref(cv), ptr(xq, I8P), float(xs), ptr(wq, I8P), float(ws),
                           ptr(b, F32P), int(relu), ptr(ysa, F32P), y.ctypes.data)
    want = conv2d_q(xq, xs, wq, ws, b, stride, (ph, pw), groups, relu, ys)
    assert want.dtype == y.dtype and np.array_equal(y.view(np.uint8), want.view(np.uint8))
    if i8:  # saturation and rounding really happen, so the comparison is not of zeros
        assert np.abs(y.astype(int)).max() > 0
    if relu in (1, 2, 4) and not i8:
        assert (y >= 0).all()
    if relu == 2:  # ReLU6 is ReLU clamped at 6 (at q(6) in int8)
        top = np.float32(6) if not i8 else quantise(np.float32(6), ys)
        assert np.array_equal(y, np.minimum(conv2d_q(xq, xs, wq, ws, b, stride, (ph, pw), groups, 1, ys), top))


@pytest.mark.parametrize("seed", range(8))
def test_conv2d_q_pads_below_otherwise_than_above(qlib: ctypes.CDLL, seed: int) -> None:
    """A row strip of a stage run patch by patch (poet.plan.transform.patches) pads only where it meets the image's
    edge: pb rows below, ph above, each 0 or more; the kernel's output rows (H + ph + pb - kh) / stride + 1 and its
    values the numpy twin's (padding of (above, columns, below)), for dense, depthwise and 1x1 convs."""
    rng = np.random.default_rng(300 + seed)
    kind = seed % 3  # 0 dense 3x3, 1 depthwise 3x3, 2 1x1 (pads 0 on both sides; strips of it are plain)
    C = int(rng.integers(1, 6))
    groups, oc = (C, C) if kind == 1 else (1, int(rng.integers(1, 6)))
    kh = kw = 1 if kind == 2 else 3
    stride = int(rng.integers(1, 3))
    ph, pb = (0, 0) if kind == 2 else (int(rng.integers(0, 2)), int(rng.integers(0, 2)))
    pw = 0 if kind == 2 else 1
    B, H, W = int(rng.integers(1, 3)), int(rng.integers(3, 9)), int(rng.integers(3, 9))
    xq = rng.integers(-127, 128, (B, C, H, W)).astype(np.int8)
    wq = rng.integers(-127, 128, (oc, C // groups, kh, kw)).astype(np.int8)
    xs, ws, ys = (np.float32(rng.uniform(1e-3, 0.1)) for _ in range(3))
    b = rng.standard_normal(oc).astype(np.float32)
    Ho, Wo = (H + ph + pb - kh) // stride + 1, (W + 2 * pw - kw) // stride + 1
    y = np.full((B, oc, Ho + 1, Wo), 99, np.int8)  # a row past the output: the kernel must not write it
    cv = Conv(B, C, H, W, oc, kh, kw, stride, ph, pw, groups, 0, pb)
    qlib.poet_conv2d_q_fwd(ctypes.byref(cv), ptr(xq, I8P), float(xs), ptr(wq, I8P), float(ws), ptr(b, F32P), 2,
                           ptr(np.array([ys], np.float32), F32P), y.ctypes.data)
    want = conv2d_q(xq, xs, wq, ws, b, stride, (ph, pw, pb), groups, 2, ys)
    assert want.shape == (B, oc, Ho, Wo)
    assert np.array_equal(y.reshape(-1)[:want.size], want.reshape(-1)) and (y.reshape(-1)[want.size:] == 99).all()


@pytest.mark.parametrize("seed", range(6))
def test_add_q_matches_numpy(qlib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 500))
    a, b = (rng.integers(-127, 128, n).astype(np.int8) for _ in range(2))
    sa, sb = np.float32(rng.uniform(1e-3, 1)), np.float32(rng.uniform(1e-3, 1))
    relu, i8 = seed % 5, seed < 4  # relu: poet.graph.quantise.ACTIVATIONS
    ys = np.float32(rng.uniform(0.005, 0.05)) if i8 else None
    y = _out((n,), i8)
    ysa = None if ys is None else np.array([ys], np.float32)
    qlib.poet_add_q_fwd(n, ptr(a, I8P), float(sa), ptr(b, I8P), float(sb), int(relu), ptr(ysa, F32P), y.ctypes.data)
    want = add_q(a, sa, b, sb, relu, ys)
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8))
    if i8:
        assert (np.abs(y.astype(int)) == 127).any()  # a small output scale saturates some


@pytest.mark.parametrize("seed", range(8))
def test_maxpool2d_q_matches_numpy(qlib: ctypes.CDLL, seed: int) -> None:
    """Any window, stride, padding and ceil_mode; -128 never appears in a quantised tensor but is the
    padding's stand-in, so a window of -127s shows it is never picked."""
    rng = np.random.default_rng(300 + seed)
    kh, kw = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    ph, pw = int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))
    B, C = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    H, W = int(rng.integers(max(1, kh - 2 * ph), 10)), int(rng.integers(max(1, kw - 2 * pw), 10))
    sh, sw, ceil = int(rng.integers(1, 4)), int(rng.integers(1, 4)), seed % 2
    x = rng.integers(-127, 128, (B, C, H, W)).astype(np.int8)
    if seed == 0:
        x[:] = -127
    want = maxpool2d_q(x, (kh, kw), (sh, sw), (ph, pw), bool(ceil))
    y = np.full(want.shape, 99, np.int8)
    qlib.poet_maxpool2d_q_fwd(B, C, H, W, kh, kw, sh, sw, ph, pw, ceil, ptr(x, I8P), ptr(y, I8P))
    assert np.array_equal(y, want)
    assert want.min() >= -127


@pytest.mark.parametrize("seed", range(6))
def test_mean_q_matches_numpy(qlib: ctypes.CDLL, seed: int) -> None:
    """Global average pooling (inner 1) and means over a middle extent, int8 out or fp32, each activation."""
    rng = np.random.default_rng(400 + seed)
    outer, r, inner = int(rng.integers(1, 5)), int(rng.integers(1, 60)), (1 if seed < 3 else int(rng.integers(1, 4)))
    x = rng.integers(-60, 128, (outer, r, inner)).astype(np.int8)  # means above 0: ReLU leaves something
    xs, relu, i8 = np.float32(rng.uniform(0.01, 0.5)), seed % 5, seed != 5
    ys = np.float32(rng.uniform(0.002, 0.02)) if i8 else None
    y = _out((outer, inner), i8)
    ysa = None if ys is None else np.array([ys], np.float32)
    qlib.poet_mean_q_fwd(outer, r, inner, ptr(x, I8P), float(xs), relu, ptr(ysa, F32P), y.ctypes.data)
    want = mean_q(x, xs, r, inner, relu, ys)
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8))
    assert np.abs(want.astype(np.float64)).max() > 0  # not a comparison of zeros


@pytest.mark.parametrize("seed", range(6))
def test_mul_q_matches_numpy(qlib: ctypes.CDLL, seed: int) -> None:
    """b [outer, inner] repeated over a [outer, r, inner]: squeeze-and-excitation's (inner 1), a row's
    (outer 1) and same shapes (r 1); int8 out or fp32, each activation."""
    rng = np.random.default_rng(500 + seed)
    outer, r, inner = [(3, 7, 1), (1, 5, 4), (4, 1, 3), (2, 3, 2), (6, 4, 1), (1, 1, 9)][seed]
    a = rng.integers(-127, 128, (outer, r, inner)).astype(np.int8)
    b = rng.integers(-127, 128, (outer, inner)).astype(np.int8)
    sa, sb, relu, i8 = np.float32(rng.uniform(0.01, 0.1)), np.float32(rng.uniform(0.001, 0.01)), seed % 5, seed != 5
    ys = np.float32(rng.uniform(0.001, 0.01)) if i8 else None
    y = _out((outer, r, inner), i8)
    ysa = None if ys is None else np.array([ys], np.float32)
    qlib.poet_mul_q_fwd(outer, r, inner, ptr(a, I8P), float(sa), ptr(b, I8P), float(sb), relu, ptr(ysa, F32P),
                        y.ctypes.data)
    want = mul_q(a, sa, b.reshape(outer, 1, inner), sb, relu, ys)
    assert np.array_equal(y.view(np.uint8), want.view(np.uint8))
    assert np.abs(want.astype(np.float64)).max() > 0


# ---------------------------------------------------------------- a prefix on the native runtime

B, CIN, HW, C1, CLASSES = 2, 2, 6, 4, 3
XE = B * CIN * HW * HW
FE = B * C1 * HW * HW  # every prefix tensor after the input: C1 channels at HW x HW
# parameters: the frozen prefix (int8 weights, an fp32 bias, four scales), then the trained linear
P_W1, P_B1, P_WDW, P_W3, P_S_IN, P_S1, P_S2, P_S3, P_LW, P_LB = range(10)
SHAPES = [(C1, CIN, 3, 3), (C1,), (C1, 1, 3, 3), (C1, C1, 1, 1), (1,), (1,), (1,), (1,), (CLASSES, FE // B),
          (CLASSES,)]
FROZEN = [True] * 8 + [False] * 2
INT8 = [True, False, True, True] + [False] * 6


def _prefix_nodes() -> list[BlobNode]:
    """input -> quantize -> conv 3x3 + ReLU -> depthwise 3x3 + ReLU -> add (the conv's output) + ReLU
    -> conv 1x1 (fp32 out) -> linear -> CE, and the trained linear's backward only."""
    c3, k3 = conv_geometry(1, 1, 1), conv_kernel(3, 3, 1)
    return [BlobNode(CODE["input"], KIND_INPUT, (), 4 * XE, (XE,)),
            BlobNode(CODE["quantize"], KIND_FORWARD, (0,), XE, (XE, P_S_IN)),
            BlobNode(CODE["conv2d_q"], KIND_FORWARD, (1,), FE,
                     (B, CIN, HW, HW, C1, k3, c3, P_W1, P_B1, q_epilogue(P_S1, True))),
            BlobNode(CODE["conv2d_q"], KIND_FORWARD, (2,), FE,
                     (B, C1, HW, HW, C1, k3, conv_geometry(1, 1, C1), P_WDW, -1, q_epilogue(P_S2, True))),
            BlobNode(CODE["add_q"], KIND_FORWARD, (2, 3), FE, (FE, q_epilogue(P_S3, True))),
            BlobNode(CODE["conv2d_q"], KIND_FORWARD, (4,), 4 * FE,
                     (B, C1, HW, HW, C1, conv_kernel(1, 1, 0), conv_geometry(0, 1, 1), P_W3, -1,
                      q_epilogue(-1, False))),
            BlobNode(CODE["linear"], KIND_FORWARD, (5,), 4 * B * CLASSES, (B, FE // B, CLASSES, P_LW, P_LB)),
            BlobNode(CODE["cross_entropy"], KIND_LOSS, (6,), 4, (B, CLASSES)),
            BlobNode(CODE["cross_entropy_bwd"], KIND_BACKWARD, (6,), 4 * B * CLASSES, (B, CLASSES)),
            BlobNode(CODE["linear_bwd"], KIND_BACKWARD, (8, 5), 0, (B, FE // B, CLASSES, P_LW, P_LB, 0)),
            BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ())]


def _blob(nodes: list[BlobNode]) -> ModelBlob:
    return ModelBlob(B, XE, [int(np.prod(s)) for s in SHAPES], nodes, FROZEN, [False] * len(SHAPES), INT8)


def _prefix(w: list[np.ndarray], x: np.ndarray, scales: list[np.float32] | None) -> tuple[np.ndarray, list]:
    """The prefix's fp32 output for input x: with `scales` (input, conv, depthwise, add) as the board
    runs it in int8, bit for bit; without, in fp32, returning the scales calibration gives."""
    w1, wdw, w3 = (w[p].reshape(SHAPES[p]) for p in (P_W1, P_WDW, P_W3))
    x = x.reshape(B, CIN, HW, HW)
    if scales is None:
        import torch
        import torch.nn.functional as F

        t = torch.from_numpy
        h1 = F.relu(F.conv2d(t(x), t(w1), t(w[P_B1]), padding=1))
        h2 = F.relu(F.conv2d(h1, t(wdw), padding=1, groups=C1))
        h3 = F.relu(h1 + h2)
        out = F.conv2d(h3, t(w3)).numpy()
        return out, [absmax_scale(v) for v in (x, h1.numpy(), h2.numpy(), h3.numpy())]
    s_in, s1, s2, s3 = scales

    def wq(p: int) -> tuple[np.ndarray, np.float32]:
        s = absmax_scale(w[p])
        return quantise(w[p].reshape(SHAPES[p]), s), s

    q0 = quantise(x, s_in)
    q1 = conv2d_q(q0, s_in, *wq(P_W1), w[P_B1], 1, 1, 1, True, s1)
    q2 = conv2d_q(q1, s1, *wq(P_WDW), None, 1, 1, C1, True, s2)
    q3 = add_q(q1, s1, q2, s2, True, s3)
    return conv2d_q(q3, s3, *wq(P_W3), None, 1, 0, 1, False, None), []


def test_an_int8_prefix_feeds_a_trained_layer_on_the_runtime(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    w = [(rng.uniform(-1, 1, s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 4)).astype(np.float32) for s in SHAPES]
    data = [(rng.standard_normal((B, XE // B)).astype(np.float32), rng.integers(0, CLASSES, B).astype(np.int32))
            for _ in range(3)]
    _, scales = _prefix(w, data[0][0], None)  # calibrated on the first batch, as the host would
    for p, s in zip((P_S_IN, P_S1, P_S2, P_S3), scales, strict=True):
        w[p] = np.array([s], np.float32)
    lr = 0.05
    losses, got = _train(tmp_path, _blob(_prefix_nodes()), w, data, lr=lr)
    # the reference: the prefix in numpy as the board runs it, the linear, its loss and SGD in float64
    lw, lb = w[P_LW].reshape(CLASSES, -1).astype(np.float64), w[P_LB].astype(np.float64)
    for (x, y), loss in zip(data, losses, strict=True):
        h = _prefix(w, x, scales)[0].reshape(B, -1).astype(np.float64)
        logits = h @ lw.T + lb
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        assert abs(loss - float(np.mean(-np.log(p[np.arange(B), y])))) <= 1e-5 * max(1.0, abs(loss))
        d = (p - np.eye(CLASSES)[y]) / B
        lw, lb = lw - lr * d.T @ h, lb - lr * d.sum(0)
    np.testing.assert_allclose(got[P_LW], lw.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[P_LB], lb, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[P_LW], w[P_LW].ravel())  # it trained
    # the frozen prefix comes back as uploaded: int8 weights as the board holds them, the rest exact
    for p in range(8):
        want = w[p].ravel() if not INT8[p] else np.frombuffer(encode_i8(w[p])[4:4 + w[p].size], np.int8) * \
            np.frombuffer(encode_i8(w[p])[:4], "<f4")[0]
        assert np.array_equal(got[p], want.astype(np.float32))


def _refused(tmp_path: Path, nodes: list[BlobNode]) -> int:
    with native_link(tmp_path) as link:
        with pytest.raises(DeviceError) as e:
            link.upload(MODEL, _blob(nodes).encode())
    return int(e.value.detail)


def test_the_runtime_keeps_int8_tensors_and_scales_where_they_belong(tmp_path: Path) -> None:
    good = _prefix_nodes()
    with native_link(tmp_path) as link:
        link.upload(MODEL, _blob(good).encode())

    def with_node(i: int, **change: Any) -> list[BlobNode]:
        n = good[i]
        out = list(good)
        out[i] = BlobNode(change.get("op", n.op), n.kind, change.get("deps", n.deps), change.get("bytes", n.bytes),
                          change.get("attrs", n.attrs))
        return out

    conv = good[2].attrs
    # the weight must be a frozen int8 parameter, the bias frozen fp32
    assert _refused(tmp_path, with_node(2, attrs=(*conv[:7], P_B1, P_B1, conv[9]))) == 2
    assert _refused(tmp_path, with_node(2, attrs=(*conv[:8], P_LB, conv[9]))) == 2
    # a scale is a one-element frozen parameter: not a trained one, not a bigger one
    assert _refused(tmp_path, with_node(2, attrs=(*conv[:9], q_epilogue(P_LB, True)))) == 2
    assert _refused(tmp_path, with_node(1, attrs=(XE, P_B1))) == 1
    # an activation past hardsigmoid's (4), and a bit above the activation's three
    assert _refused(tmp_path, with_node(2, attrs=(*conv[:9], q_epilogue(P_S1, True) | 1 << 18))) == 2
    assert _refused(tmp_path, with_node(2, attrs=(*conv[:9], q_epilogue(P_S1, True) | 1 << 19))) == 2
    # the output's size follows its type: int8 bytes for an int8 epilogue, fp32 for an fp32 one
    assert _refused(tmp_path, with_node(2, bytes=4 * FE)) == 2
    assert _refused(tmp_path, with_node(5, bytes=FE)) == 5
    # an fp32 op cannot read an int8 tensor of the right byte count, nor an int8 op an fp32 one
    assert _refused(tmp_path, with_node(3, op=CODE["relu"], bytes=FE, attrs=(FE // 4,))) == 3
    assert _refused(tmp_path, with_node(4, deps=(2, 0), bytes=FE)) == 4  # the input is fp32
    assert _refused(tmp_path, with_node(2, deps=(0,))) == 2
    # dequantize reads only an int8 tensor with a scale
    assert _refused(tmp_path, with_node(5, op=CODE["dequantize"], deps=(0,), bytes=4 * XE, attrs=(XE,))) == 5


# ---------------------------------------------------------------- the rewrite of a traced model

class _Net(torch.nn.Module):
    """conv + BN + ReLU, depthwise conv + BN + ReLU, a 1x1 conv added to the first block's output,
    ReLU, a 1x1 conv, then the linear that trains (`--train last:1`)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn2, self.relu2 = nn.BatchNorm2d(8), nn.ReLU()
        self.conv3, self.relu3 = nn.Conv2d(8, 8, 1), nn.ReLU()
        self.conv4 = nn.Conv2d(8, 4, 1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.bn2(self.conv2(h)))
        y = self.relu3(self.conv3(y) + h)
        return self.fc(torch.flatten(self.conv4(y), 1))


def _net() -> torch.nn.Module:
    torch.manual_seed(3)
    m = _Net()
    with torch.no_grad():  # statistics and affine maps far from the identity, so folding shows
        for bn in (m.bn1, m.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.2, 3.0)
            bn.weight.uniform_(0.5, 2.0)
            bn.bias.uniform_(-0.5, 0.5)
    return m


def test_rewrite_folds_fuses_and_quantises_the_frozen_prefix() -> None:
    from poet.graph.tracer import trace
    from poet.plan.cost.memory import pool_for
    from poet.plan.transform.static_int8 import FOLDED, rewrite

    m = _net()
    g = trace(m, "net", (1, 8, 8), 5, 2, train="last:1")
    prefix = rewrite(g)
    assert prefix is not None
    q = prefix.graph
    fwd = [n.op for n in q.nodes if n.kind in ("input", "forward")]
    # only int8 layers read the input: it is staged int8 (the host quantises each batch), no quantize node
    assert fwd == ["input", "conv2d_q", "conv2d_q", "conv2d_q", "add_q", "conv2d_q", "flatten", "linear"]
    staged = q.nodes[0]
    assert staged.attrs["i8"] == 1 and staged.bytes == 2 * 64 and q.params[staged.attrs["scale"]][0].endswith("#scale")
    convs = [n for n in q.nodes if n.op == "conv2d_q"]
    # int8 inside, fp32 where the trained part reads it; ReLU fused where the fp32 graph had one
    assert [n.bytes for n in convs] == [2 * 8 * 64, 2 * 8 * 64, 2 * 8 * 64, 4 * 2 * 4 * 64]
    assert [n.attrs["relu"] for n in convs] == [1, 1, 0, 0]
    assert [n.attrs["out_scale"] >= 0 for n in convs] == [True, True, True, False]
    add = next(n for n in q.nodes if n.op == "add_q")
    assert add.attrs["relu"] == 1 and add.deps == [convs[2].id, convs[0].id]
    assert not any(n.op.startswith("batchnorm") for n in q.nodes)
    names = [n for n, _ in q.params]
    assert not any(n.startswith(("bn1.", "bn2.")) for n in names)  # folded away, not uploaded
    assert "conv1.weight" not in names and f"conv1.weight{FOLDED}" in names and f"conv1.bias{FOLDED}" in names
    assert "conv3.weight" in names  # no batch norm after it: its own tensors
    assert set(q.frozen) == set(names) - {"fc.weight", "fc.bias"}
    # the activations the trained part needs are the same; the prefix's flash and arena shrink
    assert pool_for(q).params == pool_for(g).params
    assert pool_for(q).flash.frozen < pool_for(g).flash.frozen
    assert pool_for(q).staging == 2 * 64 + 4 * 2 and pool_for(g).staging == 4 * 2 * 64 + 4 * 2
    assert max(n.bytes for n in q.nodes if n.op == "conv2d_q" and n.attrs["out_scale"] >= 0) * 4 == \
        max(n.bytes for n in g.nodes if n.op == "conv2d")


def _model_weights(m: torch.nn.Module) -> dict[str, np.ndarray]:
    from poet.graph.reference import state_tensors, weights_of

    return dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True))


def test_a_traced_int8_prefix_trains_on_the_runtime_like_its_reference(tmp_path: Path) -> None:
    """Folded, calibrated and lowered: the board's steps equal the prefix's exact forward feeding a
    float64 linear, and that forward stays within int8's error of the fp32 model's."""
    from poet.graph.reference import as_graph
    from poet.graph.tracer import trace
    from poet.plan.lowering.lower import model_blob
    from poet.plan.transform.static_int8 import rewrite

    m = _net()
    g = trace(m, "net", (1, 8, 8), 5, 2, train="last:1")
    prefix = rewrite(g)
    assert prefix is not None
    q = prefix.graph
    rng = np.random.default_rng(4)
    data = [(rng.standard_normal((2, 64)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    w = prefix.weights(_model_weights(m), data[0][0])
    boundary = next(n.id for n in q.nodes if n.op == "conv2d_q" and n.attrs["out_scale"] < 0)
    # int8 against fp32 (the eval-mode model up to conv4): within a few quantisation steps on the
    # calibration batch; on another, values past the calibrated range saturate, so on average
    for x_np, worst in ((data[0][0], True), (data[1][0], False)):
        with torch.no_grad(), as_graph(m, g):
            x = torch.from_numpy(x_np).reshape(2, 1, 8, 8)
            h = m.relu1(m.bn1(m.conv1(x)))
            y = m.relu3(m.conv3(m.relu2(m.bn2(m.conv2(h)))) + h)
            want = m.conv4(y).numpy()
        err = np.abs(prefix.forward(w, x_np)[boundary] - want)
        assert (err.max() if worst else err.mean()) <= 0.05 * (np.abs(want).max() if worst else np.abs(want).mean())
        assert err.max() > 0
    blob = model_blob(q)
    lr = 0.05
    losses, after = _train(tmp_path, blob, w, data, lr=lr)
    names = [n for n, _ in q.params]
    lw = w[names.index("fc.weight")].astype(np.float64)
    lb = w[names.index("fc.bias")].astype(np.float64)
    for (xb, yb), loss in zip(data, losses, strict=True):
        hb = prefix.forward(w, xb)[boundary].reshape(2, -1).astype(np.float64)
        logits = hb @ lw.T + lb
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        assert abs(loss - float(np.mean(-np.log(p[np.arange(2), yb])))) <= 1e-5 * max(1.0, abs(loss))
        d = (p - np.eye(5)[yb]) / 2
        lw, lb = lw - lr * d.T @ hb, lb - lr * d.sum(0)
    np.testing.assert_allclose(after[names.index("fc.weight")], lw.ravel(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[names.index("fc.bias")], lb, rtol=1e-5, atol=1e-6)
    # PyTorch fed the prefix's outputs (what `poet train` checks and evaluates with) trains the same:
    # the board's trained layer as close to float64 PyTorch's as float32 PyTorch's (poet.graph.agreement)
    from poet.graph.agreement import reference
    from poet.graph.reference import accuracy, forward, state_tensors

    fed = prefix.fed(m, w)
    batches = [(xb.reshape(2, 1, 8, 8), yb) for xb, yb in data]
    ref = reference(m, batches, lr, frozen=g.frozen, graph=g, fed=fed)
    model_names = [n for n, _ in state_tensors(m)]
    trained = [model_names.index("fc.weight"), model_names.index("fc.bias")]
    board = list(ref.weights)  # the board's, in the model's order: only the trained ones are judged
    for i in trained:
        board[i] = after[names.index(model_names[i])]
    agreed = ref.agree(board, losses, names=model_names, only=trained)
    assert agreed.ok, agreed.report()
    # in eval mode too (no batch-norm counter calls): the fed logits are the reference's
    xs = np.concatenate([xb for xb, _ in batches])
    hs = np.concatenate([prefix.forward(w, xb)[boundary].reshape(2, -1) for xb, _ in data])
    want = hs @ m.fc.weight.detach().numpy().T + m.fc.bias.detach().numpy()
    m.eval()
    with torch.no_grad():
        np.testing.assert_allclose(forward(m, xs, fed).numpy(), want, rtol=1e-5, atol=1e-5)
        assert np.abs(forward(m, xs).numpy() - want).max() > 1e-3  # unfed, the fp32 prefix: the feeding is seen
    assert accuracy(m, xs, want.argmax(1), fed) == 1.0


class _PoolNet(torch.nn.Module):
    """An ImageNet-style frozen prefix: conv + BN + ReLU, a 2x2 max pool (the fast kernel's), a conv and
    ReLU6, ResNet's 3x3/2 pad 1 max pool, a conv and hardswish, SqueezeNet's ceil_mode pool, then the trained
    linear."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.conv3 = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 4, 3, padding=1)
        self.se = nn.Conv2d(8, 8, 1)  # squeeze-and-excitation's excite, one layer
        self.fc, self.fc2 = nn.Linear(4 * 2 * 2, 5), nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)  # 10x10 -> 5x5
        h = F.max_pool2d(F.relu6(self.conv2(h)), 3, 2, 1)  # -> 3x3
        h = F.hardsigmoid(self.se(F.adaptive_avg_pool2d(h, 1))) * h  # mean_q, conv2d_q, mul_q
        h = F.max_pool2d(F.hardswish(self.conv3(h)), 2, 2, ceil_mode=True)  # -> 2x2
        return self.fc(torch.flatten(h, 1)) + self.fc2(F.adaptive_avg_pool2d(h, 1).flatten(1))  # mean_q


def test_max_pools_stay_int8_in_the_prefix_and_train_like_the_reference(tmp_path: Path) -> None:
    """Issue 49: max pooling, ReLU6, hardswish and global average pooling ended the int8 prefix, so
    ResNet-18's ImageNet stem kept its whole body fp32 (10.7 MiB of weights), and torchvision's MobileNetV2
    did not fit. Pooled in int8 at its input's scale, the activations fused as the epilogue's, the mean as
    mean_q, the prefix runs to the trained layers, and the board's steps agree with PyTorch fed the prefix's
    exact outputs."""
    from poet.graph.agreement import reference
    from poet.graph.reference import state_tensors
    from poet.graph.tracer import trace
    from poet.plan.lowering.lower import model_blob
    from poet.plan.transform.static_int8 import rewrite

    torch.manual_seed(5)
    m = _PoolNet()
    with torch.no_grad():
        m.conv2.weight.mul_(4.0)  # so ReLU6 clamps some of its outputs
    g = trace(m, "pools", (1, 10, 10), 5, 2, train="last:2")
    prefix = rewrite(g)
    assert prefix is not None
    q = prefix.graph
    fwd = [n.op for n in q.nodes if n.kind in ("input", "forward")]
    assert fwd == ["input", "conv2d_q", "maxpool2d_q", "conv2d_q", "maxpool2d_q", "mean_q", "conv2d_q", "mul_q",
                   "conv2d_q", "maxpool2d_q", "dequantize", "flatten", "linear", "mean", "flatten", "linear", "add"]
    # the squeeze is int8; the trained head's pool stays fp32 (as the shipped profiles measured it)
    assert next(n for n in q.nodes if n.op == "mean_q").bytes == 2 * 8
    pools = [n for n in q.nodes if n.op == "maxpool2d_q"]
    assert [n.bytes for n in pools] == [2 * 8 * 25, 2 * 8 * 9, 2 * 4 * 4]  # int8
    assert [n.attrs["relu"] for n in q.nodes if n.op == "conv2d_q"] == [1, 2, 4, 3]  # ReLU, ReLU6, hard sigmoid, swish
    se = next(n for n in q.nodes if n.op == "mul_q")
    assert se.attrs["inner"] == 1 and se.bytes == 2 * 8 * 9 and q.nodes[se.deps[1]].bytes == 2 * 8  # int8
    makers = [q.nodes[p.deps[0]] for p in pools]  # each pool's output is at its input's scale
    assert [p.attrs["scale"] for p in pools] == [mk.attrs["out_scale"] for mk in makers]
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((2, 100)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    w = prefix.weights(_model_weights(m), data[0][0])
    with torch.no_grad():
        h = F.max_pool2d(torch.relu(m.bn1(m.conv1(torch.from_numpy(data[0][0]).reshape(2, 1, 10, 10)))), 2)
        assert (m.conv2(h) > 6).any()  # the clamp is reached
    # per sample, at any batch (poet train evaluates its test set through the prefix in one batch)
    whole = prefix.forward(w, np.concatenate([data[0][0], data[1][0][:1]]))
    for nid, v in prefix.forward(w, data[0][0]).items():
        assert np.array_equal(whole[nid][:2], v) and whole[nid].shape[0] == 3
    lr = 0.05
    losses, after = _train(tmp_path, model_blob(q), w, data, lr=lr)
    names = [n for n, _ in q.params]
    ref = reference(m, [(xb.reshape(2, 1, 10, 10), yb) for xb, yb in data], lr, frozen=g.frozen, graph=g,
                    fed=prefix.fed(m, w))
    model_names = [n for n, _ in state_tensors(m)]
    trained = [model_names.index(n) for n in ("fc.weight", "fc.bias", "fc2.weight", "fc2.bias")]
    board = list(ref.weights)
    for i in trained:
        board[i] = after[names.index(model_names[i])]
    agreed = ref.agree(board, losses, names=model_names, only=trained)
    assert agreed.ok, agreed.report()
