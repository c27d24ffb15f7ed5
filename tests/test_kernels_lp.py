"""The low-precision kernels of firmware/core/kernels/lowp.c (casts, int8 quantisation, int8 linear and
conv2d forward) through ctypes against numpy references, and the cast / absmax / int8 ops on the
native runtime (a hand-built graph with an fp16-stored activation trains like its fp32 twin).

Casts are bit-exact: fp32 -> fp16 against numpy's float16 (IEEE round to nearest even), fp16 -> fp32
on all 65536 patterns, bf16 against a numpy reference below. Quantisation and the int8 kernels are
exact against numpy references doing the same float32 operations in the same order; the int8 results
are also checked to be within the quantisation error bound of the fp32 result.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fwhelpers import keep_all, native_link
from poet.device import firmware
from poet.device.protocol import BATCH, MODEL, SCHEDULE, WEIGHTS, DeviceError
from poet.graph.dtypes import DT_BF16, DT_F16, DT_F32, DT_I8
from poet.graph.quantise import absmax_scale, quantise
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
    encode_batch,
)

FIRMWARE = Path(__file__).resolve().parents[1] / "firmware"
LIB = FIRMWARE / "build" / "libpoetkernels.so"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="cc / make missing")

F32P = ctypes.POINTER(ctypes.c_float)
U16P = ctypes.POINTER(ctypes.c_uint16)
I8P = ctypes.POINTER(ctypes.c_int8)
INT, FLT = ctypes.c_int, ctypes.c_float

class Conv(ctypes.Structure):
    """kernels.h poet_conv_t: a convolution's shape (ck, the input channels a weight gradient covers, 0 for all
    when not given; pb, the rows of padding below, ph's when not given)."""

    _fields_ = [(n, INT) for n in ("B", "C", "H", "W", "O", "kh", "kw", "stride", "ph", "pw", "groups", "ck", "pb")]

    def __init__(self, *args: int, **kw: int) -> None:
        super().__init__(*args, **kw)
        if len(args) < 13 and "pb" not in kw:
            self.pb = self.ph


CONVP = ctypes.POINTER(Conv)

SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "poet_cast_f32_f16": ([INT, F32P, U16P], None),
    "poet_cast_f16_f32": ([INT, U16P, F32P], None),
    "poet_cast_f32_bf16": ([INT, F32P, U16P], None),
    "poet_cast_bf16_f32": ([INT, U16P, F32P], None),
    "poet_absmax_scale": ([INT, F32P], FLT),
    "poet_quantize_i8": ([INT, FLT, F32P, I8P], None),
    "poet_dequantize_i8": ([INT, FLT, I8P, F32P], None),
    "poet_linear_i8_fwd": ([INT, INT, INT, I8P, FLT, I8P, FLT, F32P, F32P], None),
    "poet_conv2d_i8_fwd": ([CONVP, I8P, FLT, I8P, FLT, F32P, F32P], None),
    "poet_linear_fwd": ([INT, INT, INT, F32P, F32P, F32P, F32P], None),
    "poet_linear_bwd": ([INT, INT, INT, F32P, F32P, F32P, ctypes.c_void_p, ctypes.c_void_p, F32P], None),
    "poet_linear_w8_fwd": ([INT, INT, INT, INT, INT, F32P, I8P, FLT, F32P, F32P], None),
    "poet_linear_w8_bwd_gx": ([INT, INT, INT, F32P, I8P, FLT, F32P], None),
    "poet_conv2d_ex_fwd": ([CONVP] + [F32P] * 4, None),
}


def _load(path: Path) -> ctypes.CDLL:
    so = ctypes.CDLL(str(path))
    for name, (args, res) in SIGNATURES.items():
        fn = getattr(so, name)
        fn.argtypes, fn.restype = args, res
    return so


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    proc = firmware.run_make("kernels-so")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _load(LIB)


@pytest.fixture(scope="module")
def soft_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The kernels as the soft-float ports (M0, RV32) build them: int8 casts by integer arithmetic."""
    out = tmp_path_factory.mktemp("soft") / "libpoetkernels_soft.so"
    core = FIRMWARE / "core"
    proc = subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared",
                           "-DPOET_SOFT_FLOAT=1", "-o", str(out), str(core / "kernels" / "lowp.c"),
                           *(str(core / "kernels" / f) for f in ("dense.c", "linear.c", "conv.c", "optim.c", "pool.c")),
                           "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return _load(out)


@pytest.fixture(params=["fpu", "soft-float"])
def any_lib(request: pytest.FixtureRequest, lib: ctypes.CDLL) -> ctypes.CDLL:
    return lib if request.param == "fpu" else request.getfixturevalue("soft_lib")


def ptr(a: np.ndarray | None, kind: Any) -> Any:
    if a is None:
        return None
    assert a.flags.c_contiguous
    return a.ctypes.data_as(kind)


# ---------------------------------------------------------------- references

def bf16_ref(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even on the low 16 bits; NaN stays a quiet NaN."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def edge_floats() -> np.ndarray:
    """Zeros, infinities, NaN, the extremes and subnormals of fp32 and fp16, and fp16 ties."""
    f16 = np.finfo(np.float16)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.996, 65520.0, 65536.0, 1e38, 3.4028235e38,
            float(f16.tiny), float(f16.smallest_subnormal), 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26,
            1.4e-45, 1.1754942e-38, 6.1e-5, 1.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -23,
            2049.0, 2051.0, 0.1, 1 / 3, 255.5, 256.5, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8]
    ties = [(np.float32(np.float16(k)) + np.float32(np.float16(k + 1))) / 2 for k in (1.0, 1.5, 3.0)]
    # every fp16 subnormal, and each halfway point between neighbouring subnormals
    sub = np.arange(1, 1024, dtype=np.float32) * np.float32(2.0 ** -24)
    half = (np.arange(0, 1024, dtype=np.float32) + np.float32(0.5)) * np.float32(2.0 ** -24)
    out = np.concatenate([np.array(vals + ties, np.float32), sub, half])
    return np.concatenate([out, -out]).astype(np.float32)


def random_floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random bit patterns (every exponent) plus ordinary values."""
    bits = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([bits, rng.standard_normal(n).astype(np.float32) * 100]).astype(np.float32)


# ---------------------------------------------------------------- casts

def _same_or_nan16(got: np.ndarray, want: np.ndarray) -> None:
    """Bit-exact, except that any NaN only has to be a NaN of the same sign (numpy's payload
    handling differs between its software and F16C paths)."""
    gnan = (got & 0x7C00) == 0x7C00
    gnan &= (got & 0x3FF) != 0
    wnan = np.isnan(want.view(np.float16))
    assert np.array_equal(gnan, wnan)
    assert np.array_equal(got[~gnan], want[~wnan])
    assert np.array_equal(got[gnan] >> 15, want[wnan] >> 15)


def test_f32_to_f16_matches_numpy(lib: ctypes.CDLL) -> None:
    x = np.concatenate([edge_floats(), random_floats(np.random.default_rng(0), 200_000)])
    y = np.empty(x.size, np.uint16)
    lib.poet_cast_f32_f16(x.size, ptr(x, F32P), ptr(y, U16P))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    _same_or_nan16(y, want)
    assert y[np.where(x.view(np.uint32) == 0x7FC00000)[0][0]] == 0x7E00  # the canonical NaN, exactly


def test_f16_to_f32_every_pattern(lib: ctypes.CDLL) -> None:
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    y = np.empty(h.size, np.float32)
    lib.poet_cast_f16_f32(h.size, ptr(h, U16P), ptr(y, F32P))
    want = h.view(np.float16).astype(np.float32)
    finite = ~np.isnan(want)
    assert np.array_equal(y[finite].view(np.uint32), want[finite].view(np.uint32))
    assert np.isnan(y[~finite]).all() and np.array_equal(np.signbit(y[~finite]), np.signbit(want[~finite]))
    # and back: every non-NaN half survives the round trip bit for bit
    back = np.empty(h.size, np.uint16)
    lib.poet_cast_f32_f16(h.size, ptr(y, F32P), ptr(back, U16P))
    assert np.array_equal(back[finite], h[finite])


def test_bf16_both_ways(lib: ctypes.CDLL) -> None:
    x = np.concatenate([edge_floats(), random_floats(np.random.default_rng(1), 200_000),
                        np.array([3.3961514e38, 3.4028235e38, 1.00390625, 1.01171875], np.float32)])
    y = np.empty(x.size, np.uint16)
    lib.poet_cast_f32_bf16(x.size, ptr(x, F32P), ptr(y, U16P))
    assert np.array_equal(y, bf16_ref(x))
    # ties: 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7 -> 1 (even); 1 + 3*2^-8 -> 1 + 2^-6
    t = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8], np.float32)
    lib.poet_cast_f32_bf16(2, ptr(t, F32P), ptr(out := np.empty(2, np.uint16), U16P))
    assert list(out) == [0x3F80, 0x3F82]
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = np.empty(h.size, np.float32)
    lib.poet_cast_bf16_f32(h.size, ptr(h, U16P), ptr(f, F32P))
    assert np.array_equal(f.view(np.uint32), h.astype(np.uint32) << 16)


# ---------------------------------------------------------------- int8

def test_absmax_and_quantise(any_lib: ctypes.CDLL) -> None:
    lib = any_lib
    rng = np.random.default_rng(2)
    cases = [rng.standard_normal(n).astype(np.float32) * s for n, s in ((1, 1.0), (7, 1e-3), (1000, 50.0))]
    cases += [np.zeros(5, np.float32), np.array([1e-40, -2e-39], np.float32),
              np.array([np.nan, 1.0, -np.inf, 0.5, -2.0], np.float32),
              np.array([3.4028235e38, -1.0], np.float32),
              (np.arange(-300, 301, dtype=np.float32) / 2)]  # .5 ties at scale 1 after a fixed scale below
    for x in cases:
        s = lib.poet_absmax_scale(x.size, ptr(x, F32P))
        assert np.float32(s).view(np.uint32) == absmax_scale(x).view(np.uint32), x
        for scale in (np.float32(s), np.float32(1.0), np.float32(0.37)):
            q = np.empty(x.size, np.int8)
            lib.poet_quantize_i8(x.size, float(scale), ptr(x, F32P), ptr(q, I8P))
            assert np.array_equal(q, quantise(x, scale)), (x, scale)
            back = np.empty(x.size, np.float32)
            lib.poet_dequantize_i8(x.size, float(scale), ptr(q, I8P), ptr(back, F32P))
            with np.errstate(over="ignore"):  # 127 * (FLT_MAX / 127) rounds up to inf, in C as in numpy
                assert np.array_equal(back.view(np.uint32), (q.astype(np.float32) * scale).view(np.uint32))
    # ties go to even and saturation holds: at scale 1, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 126.5 -> 126, 200 -> 127
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 127.49, 200.0, -np.inf, np.nan], np.float32)
    q = np.empty(x.size, np.int8)
    lib.poet_quantize_i8(x.size, 1.0, ptr(x, F32P), ptr(q, I8P))
    assert list(q) == [0, 2, 2, 0, -2, -2, 126, -126, 127, 127, -127, 0]


def test_dequantise_every_code_and_scale_range(any_lib: ctypes.CDLL) -> None:
    """Every int8 code times scales across the exponent range (rounding, overflow to inf)."""
    q = np.arange(-128, 128, dtype=np.int16).astype(np.int8)
    rng = np.random.default_rng(3)
    scales = np.concatenate([np.array([1.0, 1 / 127, 1.1754944e-38, 3.4028235e38 / 127, 3.4028235e38 / 100,
                                       3.4028235e38, 0.0, 2.5e-39, -0.5, np.inf], np.float32),
                             rng.integers(0x00800000, 0x7F800000, 200, dtype=np.uint32).view(np.float32)])
    y = np.empty(q.size, np.float32)
    for s in scales.astype(np.float32):
        any_lib.poet_dequantize_i8(q.size, float(s), ptr(q, I8P), ptr(y, F32P))
        with np.errstate(over="ignore", invalid="ignore"):
            want = q.astype(np.float32) * s
        nan = np.isnan(want)  # inf x 0 only
        assert np.array_equal(np.isnan(y), nan), s
        assert np.array_equal(y[~nan].view(np.uint32), want[~nan].view(np.uint32)), s


def _quantised(lib: ctypes.CDLL, x: np.ndarray) -> tuple[np.ndarray, np.float32]:
    flat = np.ascontiguousarray(x.reshape(-1))
    s = np.float32(lib.poet_absmax_scale(flat.size, ptr(flat, F32P)))
    q = np.empty(flat.size, np.int8)
    lib.poet_quantize_i8(flat.size, float(s), ptr(flat, F32P), ptr(q, I8P))
    return q.reshape(x.shape), s


def _i8_bound(xq: np.ndarray, xs: np.float32, wq: np.ndarray, ws: np.float32, terms: int,
              x_abs: np.ndarray, w_abs: np.ndarray) -> np.ndarray:
    """|y_int8 - y_fp32| per output: each product's error is below |x| ws/2 + |w| xs/2 + xs ws/4."""
    return (x_abs * ws / 2 + w_abs * xs / 2 + terms * xs * ws / 4) * 1.001 + 1e-5


@pytest.mark.parametrize("seed", range(6))
def test_linear_with_its_weight_stored_int8(lib: ctypes.CDLL, seed: int) -> None:
    """Weight-only int8 (poet.plan.transform.placement w8): the forward and the input gradient are the fp32
    kernels' on the dequantised weight q * scale, bit for bit, and match PyTorch's on it."""
    import torch

    rng = np.random.default_rng(90 + seed)
    B, fin, fout = int(rng.integers(1, 5)), int(rng.integers(1, 40)), int(rng.integers(1, 20))
    x = rng.standard_normal((B, fin)).astype(np.float32)
    w = rng.standard_normal((fout, fin)).astype(np.float32)
    b = rng.standard_normal(fout).astype(np.float32) if seed % 2 else None
    g = rng.standard_normal((B, fout)).astype(np.float32)
    wq, ws = _quantised(lib, w)
    wd = (wq.astype(np.float32) * np.float32(ws)).astype(np.float32)
    y8, y = np.empty((B, fout), np.float32), np.empty((B, fout), np.float32)
    lib.poet_linear_w8_fwd(B, fin, fout, 0, fout, ptr(x, F32P), ptr(wq, I8P), float(ws), ptr(b, F32P), ptr(y8, F32P))
    lib.poet_linear_fwd(B, fin, fout, ptr(x, F32P), ptr(wd, F32P), ptr(b, F32P), ptr(y, F32P))
    assert np.array_equal(y8.view(np.uint32), y.view(np.uint32))
    gx8, gx = np.empty((B, fin), np.float32), np.empty((B, fin), np.float32)
    lib.poet_linear_w8_bwd_gx(B, fin, fout, ptr(g, F32P), ptr(wq, I8P), float(ws), ptr(gx8, F32P))
    lib.poet_linear_bwd(B, fin, fout, ptr(g, F32P), None, ptr(wd, F32P), None, None, ptr(gx, F32P))
    assert np.array_equal(gx8.view(np.uint32), gx.view(np.uint32))
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    yt = torch.nn.functional.linear(xt, torch.from_numpy(wd.astype(np.float64)),
                                    None if b is None else torch.from_numpy(b.astype(np.float64)))
    yt.backward(torch.from_numpy(g.astype(np.float64)))
    assert np.allclose(y8, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert np.allclose(gx8, xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert not np.array_equal(wd, w)  # the stored weight is not the fp32 one: the check is of q * scale


@pytest.mark.parametrize("seed", range(8))
def test_linear_i8(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    B, fin, fout = (int(v) for v in rng.integers(1, 40, size=3))
    x = rng.standard_normal((B, fin)).astype(np.float32)
    w = (rng.standard_normal((fout, fin)) / np.sqrt(fin)).astype(np.float32)
    b = rng.standard_normal(fout).astype(np.float32) if seed % 2 else None
    xq, xs = _quantised(lib, x)
    wq, ws = _quantised(lib, w)
    y = np.empty((B, fout), np.float32)
    lib.poet_linear_i8_fwd(B, fin, fout, ptr(xq, I8P), float(xs), ptr(wq, I8P), float(ws), ptr(b, F32P),
                           ptr(y, F32P))
    acc = xq.astype(np.int32) @ wq.astype(np.int32).T
    want = acc.astype(np.float32) * np.float32(xs * ws)
    if b is not None:
        want = want + b
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if b is None else b)
    bound = _i8_bound(xq, xs, wq, ws, fin, np.abs(x) @ np.ones((fin, fout)), np.ones((B, fin)) @ np.abs(w).T)
    assert (np.abs(y - ref) <= bound).all()


def _conv_int_ref(xq: np.ndarray, wq: np.ndarray, stride: int, ph: int, pw: int, groups: int) -> np.ndarray:
    B, C, H, W = xq.shape
    oc, Cg, kh, kw = wq.shape
    Ho, Wo = (H + 2 * ph - kh) // stride + 1, (W + 2 * pw - kw) // stride + 1
    xp = np.zeros((B, C, H + 2 * ph, W + 2 * pw), np.int64)
    xp[:, :, ph:ph + H, pw:pw + W] = xq
    out = np.zeros((B, oc, Ho, Wo), np.int64)
    Og = oc // groups
    for o in range(oc):
        g = o // Og
        for ky in range(kh):
            for kx in range(kw):
                patch = xp[:, g * Cg:(g + 1) * Cg, ky:ky + stride * Ho:stride, kx:kx + stride * Wo:stride]
                out[:, o] += np.einsum("bchw,c->bhw", patch, wq[o, :, ky, kx].astype(np.int64))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_conv2d_i8(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(30 + seed)
    groups = int(rng.choice([1, 1, 2, 3]))
    C, oc = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
    kh, stride, ph = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 2))
    kw, pw = (kh, ph) if seed < 4 else (int(rng.integers(1, 5)), int(rng.integers(0, 3)))  # then rectangles
    B, H, W = int(rng.integers(1, 3)), int(rng.integers(kh, 9)), int(rng.integers(kw, 9))
    x = rng.standard_normal((B, C, H, W)).astype(np.float32)
    w = rng.standard_normal((oc, C // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32) if seed % 2 else None
    xq, xs = _quantised(lib, x)
    wq, ws = _quantised(lib, w)
    Ho, Wo = (H + 2 * ph - kh) // stride + 1, (W + 2 * pw - kw) // stride + 1
    y = np.empty((B, oc, Ho, Wo), np.float32)
    cv = ctypes.byref(Conv(B, C, H, W, oc, kh, kw, stride, ph, pw, groups))
    lib.poet_conv2d_i8_fwd(cv, ptr(xq, I8P), float(xs), ptr(wq, I8P), float(ws), ptr(b, F32P), ptr(y, F32P))
    want = _conv_int_ref(xq, wq, stride, ph, pw, groups).astype(np.float32) * np.float32(xs * ws)
    if b is not None:
        want = want + b[None, :, None, None]
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    yf = np.empty_like(y)
    lib.poet_conv2d_ex_fwd(cv, ptr(x, F32P), ptr(w, F32P), ptr(b, F32P), ptr(yf, F32P))
    terms = (C // groups) * kh * kw
    # |x| <= xs * 127 and |w| <= ws * 127 bound each product's error; the fp32 kernel's own rounding is far below
    bound = terms * (127 * xs * ws / 2 * 2 + xs * ws / 4) * 1.001 + 1e-4
    assert (np.abs(y - yf) <= bound).all()


# ---------------------------------------------------------------- ops on the native runtime

def _mlp_nodes(B: int, fin: int, hid: int, classes: int, store: int | None) -> list[BlobNode]:
    """input -> linear -> relu -> linear -> CE, and the backward. With `store` (DT_F16 or DT_BF16)
    the relu output is also cast to that type after it is made, and cast back for the backward,
    which then reads only the narrow copy (relu_bwd and the second linear's weight gradient)."""
    n = B * hid
    nodes = [BlobNode(CODE["input"], KIND_INPUT, (), 4 * B * fin, (B * fin,)),
             BlobNode(CODE["linear"], KIND_FORWARD, (0,), 4 * n, (B, fin, hid, 0, 1)),
             BlobNode(CODE["relu"], KIND_FORWARD, (1,), 4 * n, (n,))]
    relu = 2
    if store is not None:
        nodes.append(BlobNode(CODE["cast"], KIND_FORWARD, (2,), 2 * n, (n, DT_F32, store, -1)))
    nodes += [BlobNode(CODE["linear"], KIND_FORWARD, (relu,), 4 * B * classes, (B, hid, classes, 2, 3))]
    logits = len(nodes) - 1
    nodes += [BlobNode(CODE["cross_entropy"], KIND_LOSS, (logits,), 4, (B, classes)),
              BlobNode(CODE["cross_entropy_bwd"], KIND_BACKWARD, (logits,), 4 * B * classes, (B, classes))]
    saved = relu
    if store is not None:
        nodes.append(BlobNode(CODE["cast"], KIND_FORWARD, (3,), 4 * n, (n, store, DT_F32, -1)))
        saved = len(nodes) - 1
    g = len(nodes) - 1 if store is None else len(nodes) - 2
    nodes += [BlobNode(CODE["linear_bwd"], KIND_BACKWARD, (g, saved), 4 * n, (B, hid, classes, 2, 3, 1))]
    nodes += [BlobNode(CODE["relu_bwd"], KIND_BACKWARD, (len(nodes) - 1, saved), 4 * n, (n,))]
    nodes += [BlobNode(CODE["linear_bwd"], KIND_BACKWARD, (len(nodes) - 1, 0), 0, (B, fin, hid, 0, 1, 0)),
              BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ())]
    return nodes


def _train(tmp_path: Path, blob: ModelBlob, w0: list[np.ndarray], data: list[tuple[np.ndarray, np.ndarray]],
           lr: float = 0.1) -> tuple[list[float], list[np.ndarray]]:
    sched = keep_all(blob)
    losses = []
    with native_link(tmp_path) as link:
        link.load_model(blob, w0)
        link.upload(SCHEDULE, sched.encode())
        for x, y in data:
            link.upload(BATCH, encode_batch(x, y, blob.x_scale(w0)))
            res = link.step(lr)
            losses.append(res.loss)
        flat = link.read_params(blob)
    return losses, flat


@pytest.mark.parametrize("store", [DT_F16, DT_BF16])
def test_half_stored_activation_trains_like_fp32(tmp_path: Path, store: int) -> None:
    """The relu output kept at half size for the backward: losses and weights after a few SGD steps
    stay within the narrow type's rounding of the fp32 model's; the fp32 model is unchanged."""
    B, fin, hid, classes = 4, 6, 12, 3
    rng = np.random.default_rng(5)
    w0 = [(rng.uniform(-1, 1, s) / np.sqrt(s[-1])).astype(np.float32)
          for s in ((hid, fin), (hid,), (classes, hid), (classes,))]
    data = [(rng.standard_normal((B, fin)).astype(np.float32), rng.integers(0, classes, B).astype(np.int32))
            for _ in range(4)]
    elems = [int(np.prod(w.shape)) for w in w0]
    ref_loss, ref_w = _train(tmp_path, ModelBlob(B, B * fin, elems, _mlp_nodes(B, fin, hid, classes, None)), w0,
                             data)
    lp_loss, lp_w = _train(tmp_path, ModelBlob(B, B * fin, elems, _mlp_nodes(B, fin, hid, classes, store)), w0,
                           data)
    assert lp_loss[0] == ref_loss[0]  # the forward pass reads only fp32 tensors
    eps = 2.0 ** -11 if store == DT_F16 else 2.0 ** -8  # unit roundoff of the stored type
    for a, r in zip(lp_w, ref_w, strict=True):
        assert np.linalg.norm(a - r) <= 4 * eps * np.linalg.norm(r)
    for a, r in zip(lp_loss, ref_loss, strict=True):
        assert abs(a - r) <= 4 * eps * abs(r)
    assert any(not np.array_equal(a, r) for a, r in zip(lp_w, ref_w, strict=True))  # the narrow copy was used


def _i8_nodes(B: int, conv: bool) -> tuple[ModelBlob, list[np.ndarray]]:
    """input -> (int8 linear | int8 conv) -> CE and an fp32 backward of the same layer from the
    fp32 input: the quantised forward feeds the loss, the weights train in fp32."""
    rng = np.random.default_rng(7)
    if conv:
        C, H, W, oc, k, geom = 2, 5, 5, 3, 3, conv_geometry(1, 2, 1)
        Ho = (H + 2 - k) // 2 + 1
        xe, ye, we = B * C * H * W, B * oc * Ho * Ho, oc * C * k * k
        attrs: tuple[int, ...] = (B, C, H, W, oc, conv_kernel(k, k, 1), geom, 0, 1)
        op, bwd_op = CODE["conv2d_i8"], CODE["conv2d_bwd"]
        shapes = [(oc, C, k, k), (oc,)]
    else:
        fin, classes = 10, 4
        xe, ye, we = B * fin, B * classes, classes * fin
        attrs = (B, fin, classes, 0, 1)
        op, bwd_op = CODE["linear_i8"], CODE["linear_bwd"]
        shapes = [(classes, fin), (classes,)]
    nodes = [BlobNode(CODE["input"], KIND_INPUT, (), 4 * xe, (xe,)),
             BlobNode(CODE["absmax"], KIND_FORWARD, (0,), 4, (xe, -1)),
             BlobNode(CODE["cast"], KIND_FORWARD, (0, 1), xe, (xe, DT_F32, DT_I8, -1)),
             BlobNode(CODE["absmax"], KIND_FORWARD, (), 4, (we, 0)),
             BlobNode(CODE["cast"], KIND_FORWARD, (3,), we, (we, DT_F32, DT_I8, 0)),
             BlobNode(op, KIND_FORWARD, (2, 1, 4, 3), 4 * ye, attrs),
             BlobNode(CODE["cross_entropy"], KIND_LOSS, (5,), 4, (B, ye // B)),
             BlobNode(CODE["cross_entropy_bwd"], KIND_BACKWARD, (5,), 4 * ye, (B, ye // B)),
             BlobNode(bwd_op, KIND_BACKWARD, (7, 0), 0, (*attrs, 0)),
             BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ())]
    w0 = [(rng.uniform(-1, 1, s) / 3).astype(np.float32) for s in shapes]
    return ModelBlob(B, xe, [int(np.prod(s)) for s in shapes], nodes), w0


@pytest.mark.parametrize("conv", [False, True])
def test_int8_forward_ops_on_the_runtime(tmp_path: Path, conv: bool) -> None:
    """absmax, cast to int8 (of an activation and of a weight parameter) and the int8 layer give the
    loss the numpy reference gives from the same quantisation."""
    B = 2
    blob, w0 = _i8_nodes(B, conv)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((B, blob.x_elems // B)).astype(np.float32)
    y = np.zeros(B, np.int32)
    losses, _ = _train(tmp_path, blob, w0, [(x, y)], lr=0.0)
    xq = quantise(x, xs := absmax_scale(x))
    wq = quantise(w0[0], ws := absmax_scale(w0[0]))
    if conv:
        a = blob.nodes[5].attrs
        acc = _conv_int_ref(xq.reshape(B, a[1], a[2], a[3]), wq, 2, 1, 1, 1).reshape(B, -1)
        bias = np.repeat(w0[1], acc.shape[1] // w0[1].size)
    else:
        acc, bias = xq.astype(np.int64) @ wq.astype(np.int64).T, w0[1]
    logits = (acc.astype(np.float32) * np.float32(xs * ws) + bias).astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    want = float(np.mean(lse - logits[np.arange(B), y]))
    assert abs(losses[0] - want) <= 1e-5 * max(1.0, abs(want))


def test_runtime_refuses_mistyped_casts(tmp_path: Path) -> None:
    """Sizes follow the types: an fp16 tensor is 2 bytes per element, int8 1; an fp32 op cannot read a
    narrow tensor; int8 casts need an absmax scale."""
    B, fin, hid, classes = 2, 3, 4, 2
    good = _mlp_nodes(B, fin, hid, classes, DT_F16)
    elems = [hid * fin, hid, classes * hid, classes]

    def refused(nodes: list[BlobNode]) -> int:
        with native_link(tmp_path) as link:
            with pytest.raises(DeviceError) as e:
                link.upload(MODEL, ModelBlob(B, B * fin, elems, nodes).encode())
        return int(e.value.detail)

    with native_link(tmp_path) as link:
        link.upload(MODEL, ModelBlob(B, B * fin, elems, good).encode())
    cast = next(i for i, n in enumerate(good) if n.op == CODE["cast"])
    n = good[cast]
    bad = list(good)
    bad[cast] = BlobNode(n.op, n.kind, n.deps, 4 * B * hid, n.attrs)  # fp16 output with fp32 bytes
    assert refused(bad) == cast
    bad = list(good)
    bad[cast] = BlobNode(n.op, n.kind, n.deps, n.bytes, (B * hid, DT_F16, DT_BF16, -1))  # no such pair
    assert refused(bad) == cast
    bad = list(good)  # an fp32 relu reading the fp16 copy (same byte count as a relu of half as many)
    bad.insert(cast + 1, BlobNode(CODE["relu"], KIND_FORWARD, (cast,), 2 * B * hid, (B * hid // 2,)))
    bad = _renumber(bad, cast + 1)
    assert refused(bad) == cast + 1
    bad = list(good)  # int8 without its scale
    bad[cast] = BlobNode(n.op, n.kind, n.deps, B * hid, (B * hid, DT_F32, DT_I8, -1))
    assert refused(bad) == cast


def _renumber(nodes: list[BlobNode], inserted: int) -> list[BlobNode]:
    """Deps after an inserted node shift by one."""
    out = []
    for i, n in enumerate(nodes):
        if i <= inserted:
            out.append(n)
            continue
        out.append(BlobNode(n.op, n.kind, tuple(d + 1 if d >= inserted else d for d in n.deps), n.bytes, n.attrs))
    return out


def test_cast_sweep_model_runs(tmp_path: Path) -> None:
    """`poet profile --casts`'s per-size graph and schedule are valid and run every direction
    CAST_ROUNDS times; a line fits exactly."""
    from poet.device.profile import CAST_ROUNDS, cast_directions, cast_model, cast_schedule, fit_cycles

    blob, where = cast_model(256)
    assert sorted(where) == sorted(cast_directions())
    with native_link(tmp_path) as link:
        link.upload(MODEL, blob.encode())
        link.upload(WEIGHTS, b"")
        link.upload(SCHEDULE, cast_schedule(blob).encode())
        link.upload(BATCH, encode_batch(np.ones((1, 256), np.float32), np.zeros(1, np.int32)))
        res = link.step(0.0)
    for node in where.values():
        assert sum(1 for r in res.records if r.node == node and r.kind in ("forward", "recompute")) == CAST_ROUNDS
    f = fit_cycles([64, 128, 256], [3.0 * 64 + 10, 3.0 * 128 + 10, 3.0 * 256 + 10])
    assert (f["cycles_per_elem"], f["cycles_fixed"], f["r2"]) == (3.0, 10.0, 1.0)
