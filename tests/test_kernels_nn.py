"""Every fp32 kernel of firmware/core/kernels/*.c, called through ctypes on a native build of the
kernels (`make -C firmware kernels-so`), against torch.autograd on random small shapes.

Forward outputs and every gradient must be within REL_TOL = 1e-5 relative error (norm of the
difference over the norm of the reference). The references are computed by torch in float64 from
the very float32 inputs the kernel gets (hyperparameters rounded to float32 as well, since that is
what the kernel receives): a float32 torch reference carries its own rounding, about as large as the
kernel's, which would make a 1e-5 bound on sums over a few hundred terms flaky, and would test
agreement between two roundings rather than the kernel's accuracy.

Backward kernels run twice on the same buffers: input gradients start as NaN (an element the kernel
forgets to write shows) and must come out the same both times (written), parameter gradients start
at zero and must double (accumulated).
"""

from __future__ import annotations

import ctypes
import itertools
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from poet.device import firmware
from test_kernels_lp import CONVP, Conv

FIRMWARE = Path(__file__).resolve().parents[1] / "firmware"
LIB = FIRMWARE / "build" / "libpoetkernels.so"
REL_TOL = 1e-5

F32P = ctypes.POINTER(ctypes.c_float)
I32P = ctypes.POINTER(ctypes.c_int32)
INTP = ctypes.POINTER(ctypes.c_int)
INT, FLT, U32 = ctypes.c_int, ctypes.c_float, ctypes.c_uint32


class Update(ctypes.Structure):
    """kernels.h poet_update_t."""

    _fields_ = [("opt", ctypes.c_uint8), ("step", U32), ("lr", FLT), ("momentum", FLT), ("beta1", FLT),
                ("beta2", FLT), ("eps", FLT), ("step_size", FLT), ("bc2_sqrt", FLT)]


class Grad(ctypes.Structure):
    """kernels.h poet_grad_t: where a backward kernel hands a parameter gradient."""

    _fields_ = [("g", F32P), ("w", F32P), ("s0", F32P), ("s1", F32P), ("u", ctypes.POINTER(Update))]


UPDP, GRADP = ctypes.POINTER(Update), ctypes.POINTER(Grad)

# name -> argument types (every kernel returns void but poet_conv2d_out)
SIGNATURES: dict[str, list[Any]] = {
    "poet_conv2d_out": [INT] * 4,
    "poet_conv2d_ex_fwd": [CONVP] + [F32P] * 4,
    "poet_conv2d_ex_bwd": [CONVP] + [F32P] * 3 + [GRADP] * 2 + [F32P],
    "poet_linear_bwd": [INT] * 3 + [F32P] * 3 + [GRADP] * 2 + [F32P],
    "poet_gelu_fwd": [INT, INT, F32P, F32P],
    "poet_gelu_bwd": [INT, INT, F32P, F32P, F32P],
    "poet_tanh_fwd": [INT, F32P, F32P],
    **{f"poet_{a}_{d}": [INT] + [F32P] * (2 if d == "fwd" else 3) for a in ("silu", "hardswish", "hardsigmoid")
       for d in ("fwd", "bwd")},
    "poet_tanh_bwd": [INT, F32P, F32P, F32P],
    "poet_sigmoid_fwd": [INT, F32P, F32P],
    "poet_sigmoid_bwd": [INT, F32P, F32P, F32P],
    "poet_hardtanh_fwd": [INT, FLT, FLT, F32P, F32P],
    "poet_hardtanh_bwd": [INT, FLT, FLT, F32P, F32P, F32P],
    "poet_mean_fwd": [INT, INT, INT, F32P, F32P],
    "poet_mean_bwd": [INT, INT, INT, F32P, F32P],
    "poet_mse_fwd": [INT, F32P, F32P],
    "poet_mse_bwd": [INT] + [F32P] * 3,
    "poet_l1_fwd": [INT, F32P, F32P],
    "poet_l1_bwd": [INT] + [F32P] * 3,
    "poet_avgpool2d_fwd": [INT] * 11 + [F32P] * 2,
    "poet_maxpool2d_general_fwd": [INT] * 11 + [F32P] * 2,
    "poet_maxpool2d_general_bwd": [INT] * 11 + [F32P] * 3,
    "poet_pool_out": [INT] * 5,
    "poet_avgpool2d_bwd": [INT] * 11 + [F32P] * 2,
    "poet_global_avgpool2d_fwd": [INT, INT, INT, F32P, F32P],
    "poet_global_avgpool2d_bwd": [INT, INT, INT, F32P, F32P],
    "poet_batchnorm2d_stats": [INT, INT, INT, FLT, F32P, F32P, F32P],
    "poet_batchnorm2d_fwd_train": [INT, INT, INT, FLT, FLT] + [F32P] * 8,
    "poet_batchnorm2d_bwd_train": [INT, INT, INT, FLT] + [F32P] * 5 + [GRADP] * 2 + [F32P],
    "poet_bn_relu_mean_bwd": [INT, INT, INT, FLT] + [F32P] * 4 + [GRADP] * 2 + [F32P],
    "poet_batchnorm2d_fwd_eval": [INT, INT, INT, FLT] + [F32P] * 6,
    "poet_batchnorm2d_bwd_eval": [INT, INT, INT, FLT] + [F32P] * 5 + [GRADP] * 2 + [F32P],
    "poet_layernorm_fwd": [INT, INT, FLT] + [F32P] * 6,
    "poet_layernorm_bwd": [INT, INT, FLT] + [F32P] * 8,
    "poet_softmax_fwd": [INT, INT, F32P, F32P],
    "poet_softmax_bwd": [INT, INT, F32P, F32P, F32P],
    "poet_log_softmax_fwd": [INT, INT, F32P, F32P],
    "poet_log_softmax_bwd": [INT, INT, F32P, F32P, F32P],
    "poet_matmul_fwd": [INT] * 4 + [F32P] * 3,
    "poet_matmul_bwd_a": [INT] * 4 + [F32P] * 3,
    "poet_matmul_bwd_b": [INT] * 4 + [F32P] * 3,
    "poet_add_fwd": [INT, F32P, F32P, F32P],
    "poet_sub_fwd": [INT, F32P, F32P, F32P],
    "poet_mul_fwd": [INT, F32P, F32P, F32P],
    "poet_add_bwd": [INT, F32P, F32P, F32P],
    "poet_sub_bwd": [INT, F32P, F32P, F32P],
    "poet_mul_bwd": [INT, F32P, F32P, F32P],
    "poet_add_bcast_fwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_sub_bcast_fwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_add_bcast_bwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_sub_bcast_bwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_add_rep_fwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_sub_rep_fwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_mul_rep_fwd": [INT, INT, INT, F32P, F32P, F32P],
    "poet_add_rep_bwd": [INT, INT, INT, F32P, F32P],
    "poet_sub_rep_bwd": [INT, INT, INT, F32P, F32P],
    "poet_mul_rep_bwd_b": [INT, INT, INT, F32P, F32P, F32P],
    "poet_scale_fwd": [INT, FLT, FLT, F32P, F32P],
    "poet_dropout": [INT, ctypes.c_uint32, ctypes.c_uint32, FLT, INT, F32P, F32P],
    "poet_dropout_key": [ctypes.c_uint32, ctypes.c_uint32],
    "poet_scale_bwd": [INT, FLT, F32P, F32P],
    "poet_embedding_fwd": [INT, INT, INT, I32P, F32P, F32P],
    "poet_embedding_bwd": [INT, INT, INT, I32P, F32P, F32P],
    "poet_select_fwd": [INT] * 4 + [F32P] * 2,
    "poet_select_bwd": [INT] * 4 + [F32P] * 2,
    "poet_permute4_fwd": [INTP, INTP, F32P, F32P],
    "poet_permute4_bwd": [INTP, INTP, F32P, F32P],
    "poet_transpose_last2_fwd": [INT] * 3 + [F32P] * 2,
    "poet_transpose_last2_bwd": [INT] * 3 + [F32P] * 2,
    "poet_transpose12_fwd": [INT] * 4 + [F32P] * 2,
    "poet_transpose12_bwd": [INT] * 4 + [F32P] * 2,
    "poet_update_init": [UPDP, INT, FLT, FLT, FLT, FLT, U32],
    "poet_optimize": [UPDP, U32, F32P, F32P, F32P, F32P],
}

Buffers = dict[str, np.ndarray]


def native_cc() -> str | None:
    return next((cc for cc in ("cc", "gcc") if shutil.which(cc)), None)


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    cc = native_cc()
    if cc is None:
        pytest.skip("no native C compiler (cc or gcc): cannot build firmware/build/libpoetkernels.so")
    proc = firmware.run_make(f"CC={cc}", "kernels-so")
    assert proc.returncode == 0, f"make kernels-so failed:\n{proc.stdout}\n{proc.stderr}"
    dll = ctypes.CDLL(str(LIB))
    for name, args in SIGNATURES.items():
        fn = getattr(dll, name)
        fn.argtypes = args
        fn.restype = INT if name in ("poet_conv2d_out", "poet_pool_out") else \
            FLT if name in ("poet_mse_fwd", "poet_l1_fwd") else ctypes.c_uint32 if name == "poet_dropout_key" else None
    return dll


# ---- helpers --------------------------------------------------------------------------------------


def fp(a: np.ndarray | None) -> Any:
    """A float* to a's data, or NULL."""
    if a is None:
        return None
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(F32P)


def gp(a: np.ndarray | None) -> Any:
    """A poet_grad_t* that adds into a (a stored gradient), or NULL."""
    return None if a is None else ctypes.pointer(Grad(g=fp(a)))


def ip(a: np.ndarray) -> Any:
    assert a.dtype == np.int32 and a.flags.c_contiguous
    return a.ctypes.data_as(I32P)


def f32(v: float) -> float:
    """v as the kernel receives it through a float parameter."""
    return float(np.float32(v))


def randn(rng: np.random.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return np.asarray(rng.standard_normal(shape) * scale + shift, dtype=np.float32)


def nan(*shape: int) -> np.ndarray:
    return np.full(shape, np.nan, np.float32)


def ints(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A random int in [lo, hi]."""
    return int(rng.integers(lo, hi + 1))


def leaf(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a).double().requires_grad_(True)


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a).double()


def npy(t: torch.Tensor | None) -> np.ndarray:
    assert t is not None
    return t.detach().numpy()


def rel_err(got: np.ndarray, want: np.ndarray | torch.Tensor) -> float:
    w = npy(want) if isinstance(want, torch.Tensor) else np.asarray(want, np.float64)
    g = np.asarray(got, np.float64)
    assert g.size == w.size, f"{g.shape} vs {w.shape}"
    g, w = g.reshape(-1), w.reshape(-1)
    ref = float(np.linalg.norm(w))
    diff = float(np.linalg.norm(g - w))
    return diff / ref if ref > 0 else diff


def assert_close(got: np.ndarray, want: np.ndarray | torch.Tensor, what: str = "output") -> None:
    assert np.isfinite(got).all(), f"{what}: non-finite values (an element never written?)"
    err = rel_err(got, want)
    assert err <= REL_TOL, f"{what}: relative error {err:.3g} > {REL_TOL}"


def check_backward(call: Callable[[Buffers], object], acc: dict[str, Any], out: dict[str, Any]) -> None:
    """Runs a backward kernel twice. `acc`: parameter gradients (start at zero, must accumulate);
    `out`: input gradients (start NaN, must be overwritten). Values are the references."""
    bufs = {k: np.zeros(tuple(v.shape), np.float32) for k, v in acc.items()}
    bufs |= {k: nan(*v.shape) for k, v in out.items()}
    call(bufs)
    first = {k: v.copy() for k, v in bufs.items()}
    for k in out:
        bufs[k].fill(np.nan)
    call(bufs)
    for k, want in acc.items():
        assert_close(first[k], want, k)
        assert_close(bufs[k], 2 * (npy(want) if isinstance(want, torch.Tensor) else want),
                     f"{k} after a second call (must accumulate)")
    for k, want in out.items():
        assert_close(first[k], want, k)
        np.testing.assert_array_equal(bufs[k], first[k], err_msg=f"{k}: a second call must overwrite it")


SEEDS = range(4)


# ---- convolution ----------------------------------------------------------------------------------


def conv_case(rng: np.random.Generator, kind: str) -> Conv:
    """A random convolution of one kind; "rectangular" has its own kernel height and width and its own
    padding of rows and of columns (DS-CNN's first layer is 10x4, padded 5 and 1)."""
    kh = ints(rng, 1, 5)
    kw = ints(rng, 1, 5) if kind == "rectangular" else kh
    stride = ints(rng, 1, 3)
    ph = ints(rng, 0, kh // 2 + 1)
    pw = ints(rng, 0, kw // 2 + 1) if kind == "rectangular" else ph
    if kind in ("plain", "rectangular"):
        groups, C, Co = 1, ints(rng, 1, 4), ints(rng, 1, 4)
    elif kind == "grouped":
        groups = ints(rng, 2, 3)
        C, Co = groups * ints(rng, 1, 3), groups * ints(rng, 1, 3)
    else:  # depthwise
        C = Co = groups = ints(rng, 1, 5)
    lo_h, lo_w = max(1, kh - 2 * ph), max(1, kw - 2 * pw)
    return Conv(ints(rng, 1, 3), C, ints(rng, lo_h, lo_h + 7), ints(rng, lo_w, lo_w + 7), Co, kh, kw, stride, ph, pw,
                groups)


@pytest.mark.parametrize("kind", ["plain", "grouped", "depthwise", "rectangular"])
@pytest.mark.parametrize("seed", SEEDS)
def test_conv2d(lib: ctypes.CDLL, kind: str, seed: int) -> None:
    rng = np.random.default_rng([1, seed, len(kind)])
    cv = conv_case(rng, kind)
    B, C, H, W, Co, stride, groups = cv.B, cv.C, cv.H, cv.W, cv.O, cv.stride, cv.groups
    dims = (ctypes.byref(cv),)
    bias = seed % 2 == 0
    x, w = randn(rng, B, C, H, W), randn(rng, Co, C // groups, cv.kh, cv.kw)
    b = randn(rng, Co) if bias else None
    x64, w64 = leaf(x), leaf(w)
    b64 = leaf(b) if b is not None else None
    y_ref = F.conv2d(x64, w64, b64, stride=stride, padding=(cv.ph, cv.pw), groups=groups)
    Ho, Wo = lib.poet_conv2d_out(H, cv.kh, stride, cv.ph), lib.poet_conv2d_out(W, cv.kw, stride, cv.pw)
    assert (B, Co, Ho, Wo) == tuple(y_ref.shape)

    y = nan(B, Co, Ho, Wo)
    lib.poet_conv2d_ex_fwd(*dims, fp(x), fp(w), fp(b), fp(y))
    assert_close(y, y_ref, "y")

    g = randn(rng, B, Co, Ho, Wo)
    y_ref.backward(t64(g))
    acc: dict[str, Any] = {"dw": w64.grad} | ({"db": b64.grad} if b64 is not None else {})
    check_backward(lambda bf: lib.poet_conv2d_ex_bwd(*dims, fp(g), fp(x), fp(w), gp(bf["dw"]), gp(bf.get("db")),
                                                     fp(bf["gx"])), acc, {"gx": x64.grad})

    # a frozen weight: no dw, so x is not needed (NULL must not be read)
    gx, db = nan(B, C, H, W), np.zeros(Co, np.float32)
    lib.poet_conv2d_ex_bwd(*dims, fp(g), None, fp(w), None, gp(db), fp(gx))
    assert_close(gx, x64.grad, "gx without dw")
    assert_close(db, g.astype(np.float64).sum(axis=(0, 2, 3)), "db without dw")
    # the first layer: no gx, so w is not needed
    dw = np.zeros_like(w)
    lib.poet_conv2d_ex_bwd(*dims, fp(g), fp(x), None, gp(dw), None, None)
    assert_close(dw, w64.grad, "dw without gx")


def test_conv2d_comparison_detects_a_wrong_weight(lib: ctypes.CDLL) -> None:
    """The 1e-5 bound is tight enough to see one weight off by 1%, and grouping changes the result."""
    rng = np.random.default_rng(3)
    B, C, H, W, Co, k, stride, pad, groups = 2, 4, 9, 9, 4, 3, 2, 1, 2
    x, w = randn(rng, B, C, H, W), randn(rng, Co, C // groups, k, k)
    y_ref = F.conv2d(t64(x), t64(w), stride=stride, padding=pad, groups=groups)
    bad = w.copy()
    bad[1, 0, 2, 1] *= 1.01
    y = nan(*y_ref.shape)
    cv = Conv(B, C, H, W, Co, k, k, stride, pad, pad, groups)
    lib.poet_conv2d_ex_fwd(ctypes.byref(cv), fp(x), fp(bad), None, fp(y))
    assert rel_err(y, y_ref) > 10 * REL_TOL
    lib.poet_conv2d_ex_fwd(ctypes.byref(cv), fp(x), fp(w), None, fp(y))
    assert rel_err(y, y_ref) <= REL_TOL
    # the kernel read transposed (kw x kh: a kernel mixing up the two) does not pass
    flat = Conv(B, C, H, W, Co, 1, k * k, stride, 0, 0, groups)
    y_flat = nan(B, Co, (H - 1) // stride + 1, (W - k * k) // stride + 1)
    lib.poet_conv2d_ex_fwd(ctypes.byref(flat), fp(x), fp(w), None, fp(y_flat))
    assert_close(y_flat, F.conv2d(t64(x), t64(w.reshape(Co, C // groups, 1, k * k)), stride=stride, groups=groups),
                 "a 1 x k*k kernel")
    # the same weights read as if ungrouped (a kernel ignoring groups) do not pass either
    wide = np.zeros((Co, C, k, k), np.float32)
    for o in range(Co):
        grp = o // (Co // groups)
        wide[o, grp * (C // groups):(grp + 1) * (C // groups)] = w[o]
    assert_close(y, F.conv2d(t64(x), t64(wide), stride=stride, padding=pad), "block-diagonal ungrouped twin")
    assert rel_err(y, F.conv2d(t64(x), t64(np.tile(w, (1, groups, 1, 1))), stride=stride, padding=pad)) > 1e-2


# ---- pointwise ------------------------------------------------------------------------------------

ACTIVATIONS = ["gelu", "gelu_tanh", "tanh", "sigmoid", "hardtanh", "relu6", "silu", "hardswish", "hardsigmoid"]


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_activation(lib: ctypes.CDLL, name: str, seed: int) -> None:
    rng = np.random.default_rng([4, seed, ACTIVATIONS.index(name)])
    n = ints(rng, 2, 400)
    x = randn(rng, n, scale=3.0)
    lo, hi = (0.0, 6.0) if name == "relu6" else (f32(rng.uniform(-2, -0.1)), f32(rng.uniform(0.1, 2)))
    if name in ("hardtanh", "relu6"):
        x[:2] = [lo, hi]  # torch passes no gradient at the bounds themselves
        x *= 1.0 if name == "hardtanh" else 3.0
    if name in ("hardswish", "hardsigmoid"):
        x[:4] = [-3.0, 3.0, -2.5, 2.5]  # the corners, where each takes PyTorch's side
    ref: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "tanh": torch.tanh,
        "sigmoid": torch.sigmoid, "hardtanh": lambda t: F.hardtanh(t, lo, hi), "relu6": F.relu6,
        "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    }
    x64 = leaf(x)
    y_ref = ref[name](x64)
    g = randn(rng, n)
    y_ref.backward(t64(g))
    y, gx = nan(n), nan(n)
    if name.startswith("gelu"):
        tanh = int(name == "gelu_tanh")
        lib.poet_gelu_fwd(n, tanh, fp(x), fp(y))
        lib.poet_gelu_bwd(n, tanh, fp(g), fp(x), fp(gx))  # reads the input
    elif name in ("tanh", "sigmoid"):
        getattr(lib, f"poet_{name}_fwd")(n, fp(x), fp(y))
        getattr(lib, f"poet_{name}_bwd")(n, fp(g), fp(y), fp(gx))  # reads the output
    elif name in ("silu", "hardswish", "hardsigmoid"):
        getattr(lib, f"poet_{name}_fwd")(n, fp(x), fp(y))
        getattr(lib, f"poet_{name}_bwd")(n, fp(g), fp(x), fp(gx))  # reads the input
    else:
        lib.poet_hardtanh_fwd(n, lo, hi, fp(x), fp(y))
        lib.poet_hardtanh_bwd(n, lo, hi, fp(g), fp(x), fp(gx))  # reads the input
    assert_close(y, y_ref, "y")
    assert_close(gx, x64.grad, "gx")


def test_gelu_forms_differ(lib: ctypes.CDLL) -> None:
    """The erf and tanh forms are told apart at this tolerance, so the flag is really tested."""
    x = np.linspace(-4, 4, 101, dtype=np.float32)
    y = nan(101)
    lib.poet_gelu_fwd(101, 1, fp(x), fp(y))
    assert rel_err(y, F.gelu(t64(x))) > 10 * REL_TOL
    assert_close(y, F.gelu(t64(x), approximate="tanh"))


# ---- reductions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_mean(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([5, seed])
    shape = [ints(rng, 1, 6) for _ in range(ints(rng, 1, 4))]
    a = ints(rng, 0, len(shape) - 1)
    b = ints(rng, a, len(shape) - 1)
    outer, r, inner = math.prod(shape[:a]), math.prod(shape[a:b + 1]), math.prod(shape[b + 1:])
    x = randn(rng, *shape, shift=1.0)
    x64 = leaf(x)
    y_ref = x64.mean(dim=tuple(range(a, b + 1)))
    y = nan(outer * inner)
    lib.poet_mean_fwd(outer, r, inner, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, *y_ref.shape)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_mean_bwd(outer, r, inner, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})


def _pool_case(rng: np.random.Generator) -> tuple[int, ...]:
    """A pooling window PyTorch takes (padding up to half the window, the window within the padded map) on a
    small map: B, C, H, W, kh, kw, sh, sw, ph, pw."""
    kh, kw = ints(rng, 1, 5), ints(rng, 1, 5)
    ph, pw = ints(rng, 0, kh // 2), ints(rng, 0, kw // 2)
    B, C, H, W = ints(rng, 1, 2), ints(rng, 1, 3), ints(rng, max(1, kh - 2 * ph), 9), ints(rng, max(1, kw - 2 * pw), 9)
    return B, C, H, W, kh, kw, ints(rng, 1, 3), ints(rng, 1, 3), ph, pw


@pytest.mark.parametrize("seed", range(12))
def test_avgpool2d(lib: ctypes.CDLL, seed: int) -> None:
    """Any window, stride and padding PyTorch takes (padding up to half the window), both divisors; the
    windows overlap (stride below the window) in some, skip elements (stride above it) in others."""
    rng = np.random.default_rng([16, seed])
    B, C, H, W, kh, kw, sh, sw, ph, pw = _pool_case(rng)
    include = seed % 2
    x = randn(rng, B, C, H, W)
    x64 = leaf(x)
    y_ref = F.avg_pool2d(x64, (kh, kw), (sh, sw), (ph, pw), count_include_pad=bool(include))
    y = nan(*y_ref.shape)
    args = (B, C, H, W, kh, kw, sh, sw, ph, pw, include)
    lib.poet_avgpool2d_fwd(*args, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, *y_ref.shape)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_avgpool2d_bwd(*args, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})


@pytest.mark.parametrize("seed", range(16))
def test_maxpool2d_general(lib: ctypes.CDLL, seed: int) -> None:
    """Any window, stride, padding and ceil_mode PyTorch takes, on odd and even maps: windows overlap
    (stride below the window: a gradient lands twice on one maximum), skip elements, run into the padding
    and, with ceil_mode, past the map's end."""
    rng = np.random.default_rng([17, seed])
    B, C, H, W, kh, kw, sh, sw, ph, pw = _pool_case(rng)
    ceil = seed % 2
    x = randn(rng, B, C, H, W)
    x64 = leaf(x)
    y_ref = F.max_pool2d(x64, (kh, kw), (sh, sw), (ph, pw), ceil_mode=bool(ceil))
    assert lib.poet_pool_out(H, kh, sh, ph, ceil) == y_ref.shape[2]
    assert lib.poet_pool_out(W, kw, sw, pw, ceil) == y_ref.shape[3]
    y = nan(*y_ref.shape)
    args = (B, C, H, W, kh, kw, sh, sw, ph, pw, ceil)
    lib.poet_maxpool2d_general_fwd(*args, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, *y_ref.shape)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_maxpool2d_general_bwd(*args, fp(g), fp(x), fp(bf["gx"])), {}, {"gx": x64.grad})


@pytest.mark.parametrize(("n", "k", "s", "p"), [(7, 3, 2, 1), (6, 3, 2, 0), (8, 3, 2, 1), (13, 3, 2, 0), (5, 2, 2, 1)])
def test_pool_out_ceil_mode(lib: ctypes.CDLL, n: int, k: int, s: int, p: int) -> None:
    """The extents of the stems poet meets (ResNet's 3x3/2 pad 1, SqueezeNet's 3x3/2 ceil_mode) and the
    case where ceil_mode's last window would start in the padding and is dropped (5, 2, 2, 1)."""
    for ceil in (0, 1):
        want = F.max_pool2d(torch.zeros(1, 1, n, 1), (k, 1), (s, 1), (p, 0), ceil_mode=bool(ceil)).shape[2]
        assert lib.poet_pool_out(n, k, s, p, ceil) == want


def test_avgpool2d_divisors_differ(lib: ctypes.CDLL) -> None:
    """With padding the two divisors give different maps, so the flag is really tested; the window as
    large as the map is the global mean (MLPerf Tiny's DS-CNN pools its 25x5 map so)."""
    x = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    outs = []
    for include in (0, 1):
        y = nan(1, 1, 3, 3)
        lib.poet_avgpool2d_fwd(1, 1, 5, 5, 3, 3, 2, 2, 1, 1, include, fp(x), fp(y))
        assert_close(y, F.avg_pool2d(t64(x), 3, 2, 1, count_include_pad=bool(include)))
        outs.append(y)
    assert not np.allclose(*outs)
    y = nan(1, 1, 1, 1)
    lib.poet_avgpool2d_fwd(1, 1, 5, 5, 5, 5, 1, 1, 0, 0, 1, fp(x), fp(y))
    assert y[0, 0, 0, 0] == np.float32(13.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_global_avgpool2d(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([6, seed])
    B, C, H, W = ints(rng, 1, 3), ints(rng, 1, 5), ints(rng, 1, 7), ints(rng, 1, 7)
    x = randn(rng, B, C, H, W)
    x64 = leaf(x)
    y_ref = F.adaptive_avg_pool2d(x64, 1)
    y = nan(B, C)
    lib.poet_global_avgpool2d_fwd(B, C, H * W, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, B, C, 1, 1)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_global_avgpool2d_bwd(B, C, H * W, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})


# ---- regression losses ----------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["mse", "l1"])
@pytest.mark.parametrize("seed", range(4))
def test_regression_loss(lib: ctypes.CDLL, loss: str, seed: int) -> None:
    """mse_loss and l1_loss (mean) and their gradient in the prediction; l1's is 0 where p equals t."""
    rng = np.random.default_rng([17, seed])
    n = ints(rng, 1, 700)
    p, t = randn(rng, n), randn(rng, n)
    p[: n // 5] = t[: n // 5]  # ties: l1's subgradient is 0 there, as PyTorch's sign
    p64 = leaf(p)
    ref = (F.mse_loss if loss == "mse" else F.l1_loss)(p64, t64(t))
    got = getattr(lib, f"poet_{loss}_fwd")(n, fp(p), fp(t))
    assert abs(got - ref.item()) <= REL_TOL * abs(ref.item())
    ref.backward()
    check_backward(lambda bf: getattr(lib, f"poet_{loss}_bwd")(n, fp(p), fp(t), fp(bf["gx"])), {}, {"gx": p64.grad})


# ---- batch norm -----------------------------------------------------------------------------------


def bn_case(rng: np.random.Generator, seed: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """x [B, C, *spatial] with a different mean and spread per channel (BatchNorm1d and 2d shapes),
    and affine parameters unless seed says none."""
    B, C = ints(rng, 2, 4), ints(rng, 1, 5)
    spatial = [(), (ints(rng, 1, 6),), (ints(rng, 1, 5), ints(rng, 1, 5))][seed % 3]
    x = randn(rng, B, C, *spatial)
    ch = (C,) + (1,) * len(spatial)
    x = (x * rng.uniform(0.5, 3, ch) + rng.uniform(-3, 3, ch)).astype(np.float32)
    affine = seed % 4 != 3
    return x, randn(rng, C, shift=1.0) if affine else None, randn(rng, C) if affine else None


def lf(a: np.ndarray | None) -> torch.Tensor | None:
    return leaf(a) if a is not None else None


@pytest.mark.parametrize("seed", range(6))
def test_batchnorm_train(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([7, seed])
    x, w, b = bn_case(rng, seed)
    B, C = x.shape[:2]
    HW = x.size // (B * C)
    eps, momentum = f32(1e-5), f32(rng.uniform(0.05, 0.5))
    run_mean, run_var = randn(rng, C), rng.uniform(0.5, 2, C).astype(np.float32)

    x64, w64, b64 = leaf(x), lf(w), lf(b)
    rm64, rv64 = t64(run_mean).clone(), t64(run_var).clone()
    y_ref = F.batch_norm(x64, rm64, rv64, w64, b64, training=True, momentum=momentum, eps=eps)
    dims = tuple(d for d in range(x.ndim) if d != 1)
    mean_ref = x64.detach().mean(dim=dims)
    rstd_ref = 1 / torch.sqrt(x64.detach().var(dim=dims, unbiased=False) + eps)

    y, mean, rstd = nan(*x.shape), nan(C), nan(C)
    rm, rv = run_mean.copy(), run_var.copy()
    lib.poet_batchnorm2d_fwd_train(B, C, HW, eps, momentum, fp(x), fp(w), fp(b), fp(y), fp(mean), fp(rstd),
                                   fp(rm), fp(rv))
    assert_close(y, y_ref, "y")
    assert_close(mean, mean_ref, "saved mean")
    assert_close(rstd, rstd_ref, "saved rstd")
    assert_close(rm, rm64, "running mean")
    assert_close(rv, rv64, "running var")
    stats_mean, stats_rstd = nan(C), nan(C)
    lib.poet_batchnorm2d_stats(B, C, HW, eps, fp(x), fp(stats_mean), fp(stats_rstd))
    np.testing.assert_array_equal(stats_mean, mean)
    np.testing.assert_array_equal(stats_rstd, rstd)
    # no saved statistics and no running statistics wanted: the output is the same
    y2 = nan(*x.shape)
    lib.poet_batchnorm2d_fwd_train(B, C, HW, eps, momentum, fp(x), fp(w), fp(b), fp(y2), None, None, None, None)
    np.testing.assert_array_equal(y2, y)

    g = randn(rng, *x.shape)
    y_ref.backward(t64(g))
    acc: dict[str, Any] = {"dw": w64.grad, "db": b64.grad} if w64 is not None and b64 is not None else {}
    for saved in (True, False):  # the forward's statistics, or recomputed from x (NULL)
        m, r = (mean, rstd) if saved else (None, None)
        check_backward(lambda bf, m=m, r=r: lib.poet_batchnorm2d_bwd_train(
            B, C, HW, eps, fp(g), fp(x), fp(w), fp(m), fp(r), gp(bf.get("dw")), gp(bf.get("db")), fp(bf["gx"])),
            acc, {"gx": x64.grad})


def test_batchnorm_train_backward_goes_through_the_statistics(lib: ctypes.CDLL) -> None:
    """A backward that treated the batch statistics as constants (the eval-mode gradient) is wrong
    in training mode by far more than the tolerance."""
    rng = np.random.default_rng(8)
    x, w, _ = bn_case(rng, 2)
    B, C = x.shape[:2]
    HW = x.size // (B * C)
    g = randn(rng, *x.shape)
    x64 = leaf(x)
    F.batch_norm(x64, None, None, t64(w), None, training=True, eps=1e-5).backward(t64(g))
    mean, rstd = nan(C), nan(C)
    lib.poet_batchnorm2d_stats(B, C, HW, f32(1e-5), fp(x), fp(mean), fp(rstd))
    naive = g * (w * rstd).reshape((C,) + (1,) * (x.ndim - 2))
    assert rel_err(naive, x64.grad) > 1e-2
    gx = nan(*x.shape)
    lib.poet_batchnorm2d_bwd_train(B, C, HW, f32(1e-5), fp(g), fp(x), fp(w), fp(mean), fp(rstd), None, None, fp(gx))
    assert_close(gx, x64.grad, "gx")


@pytest.mark.parametrize("seed", range(6))
def test_batchnorm_eval(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([9, seed])
    x, w, b = bn_case(rng, seed)
    B, C = x.shape[:2]
    HW = x.size // (B * C)
    eps = f32(1e-5)
    run_mean, run_var = randn(rng, C), rng.uniform(0.5, 2, C).astype(np.float32)
    x64, w64, b64 = leaf(x), lf(w), lf(b)
    y_ref = F.batch_norm(x64, t64(run_mean), t64(run_var), w64, b64, training=False, eps=eps)
    rm, rv = run_mean.copy(), run_var.copy()
    y = nan(*x.shape)
    lib.poet_batchnorm2d_fwd_eval(B, C, HW, eps, fp(x), fp(w), fp(b), fp(rm), fp(rv), fp(y))
    assert_close(y, y_ref, "y")
    np.testing.assert_array_equal(rm, run_mean)  # frozen statistics stay
    np.testing.assert_array_equal(rv, run_var)
    y_train = nan(*x.shape)
    lib.poet_batchnorm2d_fwd_train(B, C, HW, eps, 0.1, fp(x), fp(w), fp(b), fp(y_train), None, None, None, None)
    assert rel_err(y_train, y_ref) > 1e-2  # the modes really differ on this input

    g = randn(rng, *x.shape)
    y_ref.backward(t64(g))
    acc: dict[str, Any] = {"dw": w64.grad, "db": b64.grad} if w64 is not None and b64 is not None else {}
    check_backward(lambda bf: lib.poet_batchnorm2d_bwd_eval(
        B, C, HW, eps, fp(g), fp(x), fp(w), fp(rm), fp(rv), gp(bf.get("dw")), gp(bf.get("db")), fp(bf["gx"])),
        acc, {"gx": x64.grad})


# ---- layer norm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_layernorm(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([10, seed])
    lead = [ints(rng, 1, 4) for _ in range(ints(rng, 1, 2))]
    D = ints(rng, 2, 40)
    rows = math.prod(lead)
    eps = f32([1e-5, 1e-12][seed % 2])  # torch's default and BERT's
    x = (randn(rng, *lead, D, scale=2.0) + randn(rng, *lead, 1, scale=3.0)).astype(np.float32)
    affine = seed % 3 != 2
    w, b = (randn(rng, D, shift=1.0), randn(rng, D)) if affine else (None, None)
    x64, w64, b64 = leaf(x), lf(w), lf(b)
    y_ref, mean_ref, rstd_ref = torch.native_layer_norm(x64, [D], w64, b64, eps)
    y, mean, rstd = nan(*x.shape), nan(rows), nan(rows)
    lib.poet_layernorm_fwd(rows, D, eps, fp(x), fp(w), fp(b), fp(y), fp(mean), fp(rstd))
    assert_close(y, y_ref, "y")
    assert_close(mean, mean_ref, "saved mean")
    assert_close(rstd, rstd_ref, "saved rstd")

    g = randn(rng, *x.shape)
    y_ref.backward(t64(g))
    acc: dict[str, Any] = {"dw": w64.grad, "db": b64.grad} if w64 is not None and b64 is not None else {}
    for saved in (True, False):
        m, r = (mean, rstd) if saved else (None, None)
        check_backward(lambda bf, m=m, r=r: lib.poet_layernorm_bwd(
            rows, D, eps, fp(g), fp(x), fp(w), fp(m), fp(r), fp(bf.get("dw")), fp(bf.get("db")), fp(bf["gx"])),
            acc, {"gx": x64.grad})


# ---- softmax, matmul ------------------------------------------------------------------------------


# softmax's shift of 20 needs the max subtraction; log_softmax's 90 overflows exp in float32 unless the max is
# taken out. Each keeps its own generator stream (11, 17) so the cases stay the ones it always drew.
@pytest.mark.parametrize(("op", "stream", "shift"), [("softmax", 11, 20.0), ("log_softmax", 17, 90.0)])
@pytest.mark.parametrize("seed", SEEDS)
def test_softmax(lib: ctypes.CDLL, op: str, stream: int, shift: float, seed: int) -> None:
    """poet_softmax and poet_log_softmax over the last axis against PyTorch; both backwards read the saved y."""
    rng = np.random.default_rng([stream, seed])
    rows, D = ints(rng, 1, 12), ints(rng, 1, 40)
    x = randn(rng, rows, D, scale=4.0, shift=shift)
    x64 = leaf(x)
    y_ref = getattr(torch, op)(x64, -1)
    y = nan(rows, D)
    getattr(lib, f"poet_{op}_fwd")(rows, D, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, rows, D)
    y_ref.backward(t64(g))
    bwd = getattr(lib, f"poet_{op}_bwd")
    check_backward(lambda bf: bwd(rows, D, fp(g), fp(y), fp(bf["gx"])), {}, {"gx": x64.grad})


@pytest.mark.parametrize("seed", SEEDS)
def test_matmul(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([12, seed])
    batch, M, K, N = ints(rng, 1, 4), ints(rng, 1, 9), ints(rng, 1, 9), ints(rng, 1, 9)
    a, b = randn(rng, batch, M, K), randn(rng, batch, K, N)
    a64, b64 = leaf(a), leaf(b)
    y_ref = a64 @ b64
    y = nan(batch, M, N)
    lib.poet_matmul_fwd(batch, M, K, N, fp(a), fp(b), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, batch, M, N)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_matmul_bwd_a(batch, M, K, N, fp(g), fp(b), fp(bf["ga"])), {}, {"ga": a64.grad})
    check_backward(lambda bf: lib.poet_matmul_bwd_b(batch, M, K, N, fp(g), fp(a), fp(bf["gb"])), {}, {"gb": b64.grad})


# ---- elementwise ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("seed", SEEDS)
def test_elementwise(lib: ctypes.CDLL, op: str, seed: int) -> None:
    rng = np.random.default_rng([13, seed, len(op)])
    shape = [ints(rng, 1, 6) for _ in range(ints(rng, 1, 4))]
    n = math.prod(shape)
    a, b = randn(rng, *shape), randn(rng, *shape)
    a64, b64 = leaf(a), leaf(b)
    y_ref = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op](a64, b64)
    y = nan(*shape)
    getattr(lib, f"poet_{op}_fwd")(n, fp(a), fp(b), fp(y))
    assert_close(y, y_ref, "y")
    y_alias = a.copy()  # the header allows y = a
    getattr(lib, f"poet_{op}_fwd")(n, fp(y_alias), fp(b), fp(y_alias))
    np.testing.assert_array_equal(y_alias, y)

    g = randn(rng, *shape)
    y_ref.backward(t64(g))
    if op == "mul":  # one kernel per operand: the gradient times the other operand
        check_backward(lambda bf: lib.poet_mul_bwd(n, fp(g), fp(b), fp(bf["ga"])), {}, {"ga": a64.grad})
        check_backward(lambda bf: lib.poet_mul_bwd(n, fp(g), fp(a), fp(bf["gb"])), {}, {"gb": b64.grad})
        return
    bwd = getattr(lib, f"poet_{op}_bwd")
    check_backward(lambda bf: bwd(n, fp(g), fp(bf["ga"]), fp(bf["gb"])), {}, {"ga": a64.grad, "gb": b64.grad})
    gb = nan(*shape)
    g_alias = g.copy()  # ga may alias g
    bwd(n, fp(g_alias), fp(g_alias), fp(gb))
    assert_close(g_alias, a64.grad, "ga aliasing g")
    assert_close(gb, b64.grad, "gb beside an aliased ga")
    g_alias = g.copy()
    bwd(n, fp(g_alias), None, fp(g_alias))
    assert_close(g_alias, b64.grad, "gb aliasing g")


@pytest.mark.parametrize("form", ["row", "trailing", "channel"])
@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("seed", SEEDS)
def test_broadcast(lib: ctypes.CDLL, form: str, op: str, seed: int) -> None:
    """x [.., C] + v[C] (a row vector), x[B, S, D] + v[S, D] (the graph's trailing-shape operand) and
    x[B, C, H, W] + v[C, 1, 1] (a per-channel vector)."""
    rng = np.random.default_rng([14, seed, len(form), len(op)])
    if form == "row":
        xs = [ints(rng, 1, 4) for _ in range(ints(rng, 1, 2))] + [ints(rng, 1, 8)]
        outer, C, inner, vshape = math.prod(xs[:-1]), xs[-1], 1, [xs[-1]]
    elif form == "trailing":
        xs = [ints(rng, 1, 3), ints(rng, 1, 5), ints(rng, 1, 6)]
        outer, C, inner, vshape = xs[0], xs[1] * xs[2], 1, xs[1:]
    else:
        xs = [ints(rng, 1, 3), ints(rng, 1, 5), ints(rng, 1, 4), ints(rng, 1, 4)]
        outer, C, inner, vshape = xs[0], xs[1], xs[2] * xs[3], [xs[1], 1, 1]
    x, v = randn(rng, *xs), randn(rng, *vshape)
    x64, v64 = leaf(x), leaf(v)
    y_ref = x64 + v64 if op == "add" else x64 - v64
    y = nan(*xs)
    getattr(lib, f"poet_{op}_bcast_fwd")(outer, C, inner, fp(x), fp(v), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, *xs)
    y_ref.backward(t64(g))
    bwd = getattr(lib, f"poet_{op}_bcast_bwd")
    check_backward(lambda bf: bwd(outer, C, inner, fp(g), fp(bf["gx"]), fp(bf["gv"])), {},
                   {"gx": x64.grad, "gv": v64.grad})
    gv = nan(*vshape)
    bwd(outer, C, inner, fp(g), None, fp(gv))
    assert_close(gv, v64.grad, "gv alone")


@pytest.mark.parametrize("form", ["trailing", "excite", "middle", "same"])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("seed", SEEDS)
def test_repeated_operand(lib: ctypes.CDLL, form: str, op: str, seed: int) -> None:
    """The graph's add, sub and mul with b[outer, inner] repeated over a[outer, r, inner]: b a's trailing
    shape (outer 1), squeeze-and-excitation's scale [N, C, 1, 1] over its map (inner 1), [N, 1, D] over
    [N, S, D] (neither 1), and r = 1; forward and the gradients to both operands."""
    rng = np.random.default_rng([16, seed, len(form), len(op)])
    outer, r, inner = ints(rng, 2, 4), ints(rng, 2, 7), ints(rng, 2, 5)
    outer, r, inner = {"trailing": (1, r, inner), "excite": (outer, r, 1), "middle": (outer, r, inner),
                       "same": (outer, 1, inner)}[form]
    a, b = randn(rng, outer, r, inner), randn(rng, outer, 1, inner)
    a64, b64 = leaf(a), leaf(b)
    y_ref = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op](a64, b64)
    y = nan(outer, r, inner)
    fwd = getattr(lib, f"poet_{op}_rep_fwd")
    fwd(outer, r, inner, fp(a), fp(b), fp(y))
    assert_close(y, y_ref, "y")
    y_alias = a.copy()  # the header allows y = a
    fwd(outer, r, inner, fp(y_alias), fp(b), fp(y_alias))
    np.testing.assert_array_equal(y_alias, y)

    g = randn(rng, outer, r, inner)
    y_ref.backward(t64(g))
    if op == "mul":  # a's gradient is the forward with g for a; b's sums g * a over the repeats
        check_backward(lambda bf: lib.poet_mul_rep_fwd(outer, r, inner, fp(g), fp(b), fp(bf["ga"])), {},
                       {"ga": a64.grad})
        check_backward(lambda bf: lib.poet_mul_rep_bwd_b(outer, r, inner, fp(g), fp(a), fp(bf["gb"])), {},
                       {"gb": b64.grad})
    else:  # a's gradient is g itself (the graph passes it on); b's is +/- g summed over the repeats
        bwd = getattr(lib, f"poet_{op}_rep_bwd")
        check_backward(lambda bf: bwd(outer, r, inner, fp(g), fp(bf["gb"])), {}, {"gb": b64.grad})


@pytest.mark.parametrize("form", ["affine", "div", "rsub"])
@pytest.mark.parametrize("seed", SEEDS)
def test_scale(lib: ctypes.CDLL, form: str, seed: int) -> None:
    """The graph's scale: x * m + a, x / s as m = 1/s, s - x as m = -1, a = s."""
    rng = np.random.default_rng([15, seed, len(form)])
    n = ints(rng, 1, 300)
    x = randn(rng, n)
    s = f32(rng.uniform(0.5, 8.0))
    x64 = leaf(x)
    if form == "affine":
        mul, add = f32(rng.uniform(-3, 3)), f32(rng.uniform(-3, 3))
        y_ref = x64 * mul + add
    elif form == "div":
        mul, add = f32(1 / s), 0.0
        y_ref = x64 / s
    else:
        mul, add = -1.0, s
        y_ref = s - x64
    y = nan(n)
    lib.poet_scale_fwd(n, mul, add, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, n)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_scale_bwd(n, mul, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", SEEDS)
def test_dropout(lib: ctypes.CDLL, p: float, seed: int) -> None:
    """poet_dropout against PyTorch's dropout with graph/dropout.py's mask: the C and Python masks
    agree bit for bit, forward and backward, and drop about a share p."""
    from poet.graph import dropout

    rng = np.random.default_rng([17, seed])
    n, salt, step = ints(rng, 1, 5000), ints(rng, 0, 40), ints(rng, 1, 10**6)
    assert lib.poet_dropout_key(salt, step) == dropout.key(salt, step)
    keep = dropout.keep(n, salt, step, p)
    x = randn(rng, n)
    x64 = leaf(x)
    y_ref = torch.where(torch.from_numpy(keep), x64 * float(dropout.scale(p)), torch.zeros((), dtype=torch.float64))
    y = nan(n)
    row = int(rng.integers(0, 2))  # 0 and 1 both mean a draw per element (blobs before stochastic depth: 0)
    lib.poet_dropout(n, dropout.key(salt, step), dropout.threshold(p), dropout.scale(p), row, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    assert np.array_equal(y == 0, ~keep)
    g = randn(rng, n)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_dropout(n, dropout.key(salt, step), dropout.threshold(p), dropout.scale(p),
                                               row, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})
    if n >= 2000:
        assert abs(float((~keep).mean()) - p) < 0.05
    # another step, another mask
    assert not np.array_equal(keep, dropout.keep(n, salt, step + 1, p)) or n < 8


@pytest.mark.parametrize("p", [0.2, 0.5])
@pytest.mark.parametrize("seed", SEEDS)
def test_dropout_by_rows(lib: ctypes.CDLL, p: float, seed: int) -> None:
    """Stochastic depth: poet_dropout with row > 1 keeps or drops whole rows, row r taking the per-element
    mask's draw r (the Python twin's keep(rows) is the mask PyTorch's reference fills); the last row
    may be short. Forward and backward against PyTorch in float64 with that mask."""
    from poet.graph import dropout

    rng = np.random.default_rng([19, seed])
    rows, row, salt, step = ints(rng, 1, 40), ints(rng, 2, 300), ints(rng, 0, 40), ints(rng, 1, 10**6)
    n = rows * row - ints(rng, 0, row - 1)  # a short last row: the board's n need not fill it
    keep = dropout.keep(n, salt, step, p, row)
    drawn = dropout.keep(rows, salt, step, p)  # the mask's elements, one a row
    assert np.array_equal(keep, np.repeat(drawn, row)[:n])
    x = randn(rng, n)
    x64 = leaf(x)
    mask = torch.from_numpy(np.repeat(drawn, row)[:n].astype(np.float64))
    y_ref = x64 * mask * float(dropout.scale(p))
    y = nan(n)
    lib.poet_dropout(n, dropout.key(salt, step), dropout.threshold(p), dropout.scale(p), row, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    assert np.array_equal(y == 0, ~keep)
    g = randn(rng, n)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_dropout(n, dropout.key(salt, step), dropout.threshold(p), dropout.scale(p),
                                               row, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})
    # a row's elements share one draw: not the per-element mask
    assert rows < 4 or not np.array_equal(keep, dropout.keep(n, salt, step, p))


# ---- embedding, select, layout --------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_embedding(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([16, seed])
    V, D = ints(rng, 1, 20), ints(rng, 1, 8)
    lead = [ints(rng, 1, 4), ints(rng, 1, 8)]
    n = math.prod(lead)
    ids = rng.integers(0, V, lead).astype(np.int32)
    ids.reshape(-1)[-1] = ids.reshape(-1)[0]  # a repeated id: its gradient rows must sum
    w = randn(rng, V, D)
    w64 = leaf(w)
    y_ref = F.embedding(torch.from_numpy(ids).long(), w64)
    y = nan(*lead, D)
    lib.poet_embedding_fwd(n, V, D, ip(ids), fp(w), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, *lead, D)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_embedding_bwd(n, V, D, ip(ids), fp(g), fp(bf["dw"])), {"dw": w64.grad}, {})


def test_embedding_ignores_out_of_range_ids(lib: ctypes.CDLL) -> None:
    rng = np.random.default_rng(17)
    V, D = 5, 3
    ids = np.array([2, -1, 5, 2, 1000], np.int32)
    w, g = randn(rng, V, D), randn(rng, 5, D)
    y = nan(5, D)
    lib.poet_embedding_fwd(5, V, D, ip(ids), fp(w), fp(y))
    np.testing.assert_array_equal(y[[0, 3]], w[[2, 2]])
    np.testing.assert_array_equal(y[[1, 2, 4]], 0)
    dw = np.zeros((V, D), np.float32)
    lib.poet_embedding_bwd(5, V, D, ip(ids), fp(g), fp(dw))
    want = np.zeros((V, D), np.float32)
    want[2] = g[0] + g[3]
    np.testing.assert_array_equal(dw, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_select(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([18, seed])
    B, S, D = ints(rng, 1, 4), ints(rng, 1, 6), ints(rng, 1, 8)
    index = ints(rng, 0, S - 1)
    x = randn(rng, B, S, D)
    x64 = leaf(x)
    y_ref = x64[:, index]
    y = nan(B, D)
    lib.poet_select_fwd(B, S, D, index, fp(x), fp(y))
    assert_close(y, y_ref, "y")
    g = randn(rng, B, D)
    y_ref.backward(t64(g))
    check_backward(lambda bf: lib.poet_select_bwd(B, S, D, index, fp(g), fp(bf["gx"])), {}, {"gx": x64.grad})


def assert_exact(got: np.ndarray, want: torch.Tensor, what: str) -> None:
    """Layout kernels only move values: float32 in, float32 out, no rounding to allow."""
    np.testing.assert_array_equal(got, npy(want).astype(np.float32).reshape(got.shape), err_msg=what)


@pytest.mark.parametrize("seed", range(2))
def test_permute4(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([19, seed])
    d = [ints(rng, 1, 4) for _ in range(4)]
    x = randn(rng, *d)
    dims = (ctypes.c_int * 4)(*d)
    for p in itertools.permutations(range(4)):
        x64 = leaf(x)
        y_ref = x64.permute(*p)
        y = nan(*y_ref.shape)
        perm = (ctypes.c_int * 4)(*p)
        lib.poet_permute4_fwd(dims, perm, fp(x), fp(y))
        assert_exact(y, y_ref, f"permute {p}")
        g = randn(rng, *y_ref.shape)
        y_ref.backward(t64(g))
        gx = nan(*d)
        lib.poet_permute4_bwd(dims, perm, fp(g), fp(gx))
        assert_exact(gx, x64.grad, f"permute {p} backward")


@pytest.mark.parametrize("seed", SEEDS)
def test_transposes(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([20, seed])
    b, m, n = ints(rng, 1, 4), ints(rng, 1, 7), ints(rng, 1, 7)
    x = randn(rng, b, m, n)
    x64 = leaf(x)
    y_ref = x64.transpose(-1, -2)
    y = nan(b, n, m)
    lib.poet_transpose_last2_fwd(b, m, n, fp(x), fp(y))
    assert_exact(y, y_ref, "transpose(-1, -2)")
    g = randn(rng, b, n, m)
    y_ref.backward(t64(g))
    gx = nan(b, m, n)
    lib.poet_transpose_last2_bwd(b, m, n, fp(g), fp(gx))
    assert_exact(gx, x64.grad, "transpose(-1, -2) backward")

    d = [ints(rng, 1, 4), ints(rng, 1, 5), ints(rng, 1, 5), ints(rng, 1, 6)]  # [B, S, heads, dh] and back
    x = randn(rng, *d)
    x64 = leaf(x)
    y_ref = x64.transpose(1, 2)
    y = nan(d[0], d[2], d[1], d[3])
    lib.poet_transpose12_fwd(*d, fp(x), fp(y))
    assert_exact(y, y_ref, "transpose(1, 2)")
    g = randn(rng, *y_ref.shape)
    y_ref.backward(t64(g))
    gx = nan(*d)
    lib.poet_transpose12_bwd(*d, fp(g), fp(gx))
    assert_exact(gx, x64.grad, "transpose(1, 2) backward")


# ---- optimizers -----------------------------------------------------------------------------------

STEPS = 6


def check_optimizer_step(w: np.ndarray, w0: np.ndarray, p: torch.Tensor, g: np.ndarray, step: int) -> None:
    assert_close(w, p, f"weights after step {step}")
    # the displacement too: on its own the weight would hide an update error behind |w|
    assert_close(w.astype(np.float64) - w0, npy(p) - w0, f"total update after step {step}")
    np.testing.assert_array_equal(g, 0, err_msg="the gradient must be zeroed for the next accumulation")


OPT_CODES = {"sgd": 0, "momentum": 1, "adam": 2}


def update_rule(lib: ctypes.CDLL, opt: str, lr: float, step: int,
                p: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> Update:
    """poet_update_init's rule for one step; p: momentum, or Adam's beta1, beta2, eps."""
    u = Update()
    lib.poet_update_init(ctypes.byref(u), OPT_CODES[opt], lr, *(f32(v) for v in p), step)
    return u


@pytest.mark.parametrize("seed", SEEDS)
def test_sgd(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([20, seed])
    n = ints(rng, 1, 200)
    lr = f32(rng.uniform(0.01, 0.2))
    w = randn(rng, n)
    w0 = w.astype(np.float64)
    p = leaf(w)
    opt = torch.optim.SGD([p], lr=lr)
    for step in range(1, STEPS + 1):
        g = randn(rng, n)
        p.grad = t64(g)
        opt.step()
        lib.poet_optimize(ctypes.byref(update_rule(lib, "sgd", lr, step)), n, fp(w), fp(g), None, None)
        check_optimizer_step(w, w0, p, g, step)


@pytest.mark.parametrize("seed", SEEDS)
def test_sgd_momentum(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([21, seed])
    n = ints(rng, 1, 200)
    lr, momentum = f32(rng.uniform(0.01, 0.2)), f32(rng.uniform(0.5, 0.95))
    w = randn(rng, n)
    w0 = w.astype(np.float64)
    buf = nan(n)  # step 1 must not read it: torch starts the buffer as a copy of the gradient
    p = leaf(w)
    opt = torch.optim.SGD([p], lr=lr, momentum=momentum)
    for step in range(1, STEPS + 1):
        g = randn(rng, n)
        p.grad = t64(g)
        opt.step()
        u = update_rule(lib, "momentum", lr, step, (momentum, 0.0, 0.0))
        lib.poet_optimize(ctypes.byref(u), n, fp(w), fp(g), fp(buf), None)
        assert_close(buf, opt.state[p]["momentum_buffer"], f"momentum buffer after step {step}")
        check_optimizer_step(w, w0, p, g, step)


@pytest.mark.parametrize("seed", SEEDS)
def test_adam(lib: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng([22, seed])
    n = ints(rng, 1, 200)
    lr = f32(rng.uniform(0.02, 0.1))
    betas = (f32(0.9), f32(0.999)) if seed == 0 else (f32(rng.uniform(0.7, 0.95)), f32(rng.uniform(0.99, 0.9999)))
    eps = f32(1e-8 if seed < 2 else 1e-3)
    w = randn(rng, n)
    w0 = w.astype(np.float64)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    p = leaf(w)
    opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps)
    for step in range(1, STEPS + 1):
        g = randn(rng, n, scale=[1.0, 1e-3][step % 2])  # changing gradient scale: v lags m
        p.grad = t64(g)
        opt.step()
        u = update_rule(lib, "adam", lr, step, (*betas, eps))
        lib.poet_optimize(ctypes.byref(u), n, fp(w), fp(g), fp(m), fp(v))
        assert_close(m, opt.state[p]["exp_avg"], f"first moment after step {step}")
        assert_close(v, opt.state[p]["exp_avg_sq"], f"second moment after step {step}")
        check_optimizer_step(w, w0, p, g, step)


def test_adam_comparison_detects_a_missing_bias_correction(lib: ctypes.CDLL) -> None:
    """Calling Adam with a wrong step count (no bias correction, as step -> infinity) is caught."""
    rng = np.random.default_rng(23)
    n = 50
    w, g = randn(rng, n), randn(rng, n)
    w0 = w.astype(np.float64)
    p = leaf(w)
    opt = torch.optim.Adam([p], lr=0.01)
    p.grad = t64(g)
    opt.step()
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    u = update_rule(lib, "adam", 0.01, 100000, (0.9, 0.999, 1e-8))
    lib.poet_optimize(ctypes.byref(u), n, fp(w), fp(g), fp(m), fp(v))
    assert rel_err(w.astype(np.float64) - w0, npy(p) - w0) > 1e-2


# ---- the update in backward -----------------------------------------------------------------------


def weighted_backward(lib: ctypes.CDLL, rng: np.random.Generator,
                      kind: str) -> tuple[dict[str, tuple[int, ...]], Callable[..., None]]:
    """A backward kernel with a weight and a bias: the shapes of its tensors (g, x, w, b, gx) and
    call(g, x, w, b, dw, db, gx)."""
    if kind == "linear":
        B, n_in, n_out = ints(rng, 1, 4), ints(rng, 1, 9), ints(rng, 1, 7)
        shapes = {"g": (B, n_out), "x": (B, n_in), "w": (n_out, n_in), "b": (n_out,), "gx": (B, n_in)}
        return shapes, lambda g, x, w, b, dw, db, gx: lib.poet_linear_bwd(B, n_in, n_out, g, x, w, dw, db, gx)
    if kind == "conv2d":
        B, C, H, Co, k = ints(rng, 1, 3), 2, ints(rng, 3, 7), 4, 3  # two groups, padding 1
        Ho = lib.poet_conv2d_out(H, k, 1, 1)
        shapes = {"g": (B, Co, Ho, Ho), "x": (B, C, H, H), "w": (Co, C // 2, k, k), "b": (Co,), "gx": (B, C, H, H)}
        cv = ctypes.byref(Conv(B, C, H, H, Co, k, k, 1, 1, 1, 2))
        return shapes, lambda g, x, w, b, dw, db, gx: lib.poet_conv2d_ex_bwd(cv, g, x, w, dw, db, gx)
    B, C, HW = ints(rng, 1, 3), ints(rng, 1, 5), ints(rng, 2, 9)
    shapes = {"g": (B, C, HW), "x": (B, C, HW), "w": (C,), "b": (C,), "gx": (B, C, HW)}
    eps = f32(1e-5)
    if kind == "batchnorm":
        return shapes, lambda g, x, w, b, dw, db, gx: lib.poet_batchnorm2d_bwd_train(B, C, HW, eps, g, x, w, None,
                                                                                   None, dw, db, gx)
    if kind == "batchnorm_eval":
        rm, rv = randn(rng, C), rng.uniform(0.5, 2, C).astype(np.float32)
        return shapes, lambda g, x, w, b, dw, db, gx: lib.poet_batchnorm2d_bwd_eval(B, C, HW, eps, g, x, w, fp(rm),
                                                                                  fp(rv), dw, db, gx)
    shapes["g"] = (B, C)
    return shapes, lambda g, x, w, b, dw, db, gx: lib.poet_bn_relu_mean_bwd(B, C, HW, eps, g, x, w, b, dw, db, gx)


@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("kind", ["linear", "conv2d", "batchnorm", "batchnorm_eval", "bn_relu_mean"])
def test_update_in_backward_is_the_optimizer_pass(lib: ctypes.CDLL, kind: str, opt: str) -> None:
    """A backward kernel applying each finished gradient element at once (no gradient kept) leaves the
    same bits in the weights, their optimizer state and the input gradient as a stored gradient and
    the optimizer pass after it, step after step: the input gradient is made from the weights before
    the update."""
    rng = np.random.default_rng([24, len(kind), OPT_CODES[opt]])
    shapes, call = weighted_backward(lib, rng, kind)
    p = {"sgd": (0.0, 0.0, 0.0), "momentum": (0.9, 0.0, 0.0), "adam": (0.8, 0.99, 1e-3)}[opt]
    words = {"sgd": 0, "momentum": 1, "adam": 2}[opt]
    stored = {k: randn(rng, *shapes[k]) for k in ("w", "b")}
    direct = {k: v.copy() for k, v in stored.items()}
    state = {(mode, k, i): np.zeros(shapes[k], np.float32) for mode in ("stored", "direct") for k in ("w", "b")
             for i in range(words)}

    def st(mode: str, k: str, i: int) -> Any:
        return fp(state[(mode, k, i)]) if i < words else None

    for step in (1, 2, 3):
        u = update_rule(lib, opt, f32(0.05), step, p)
        before = stored["w"].copy()
        g, x = randn(rng, *shapes["g"]), randn(rng, *shapes["x"])
        grads = {k: np.zeros(shapes[k], np.float32) for k in ("w", "b")}
        gx_stored, gx_direct = nan(*shapes["gx"]), nan(*shapes["gx"])
        call(fp(g), fp(x), fp(stored["w"]), fp(stored["b"]), gp(grads["w"]), gp(grads["b"]), fp(gx_stored))
        for k in ("w", "b"):
            lib.poet_optimize(ctypes.byref(u), stored[k].size, fp(stored[k]), fp(grads[k]), st("stored", k, 0),
                              st("stored", k, 1))
        sinks = {k: ctypes.pointer(Grad(g=None, w=fp(direct[k]), s0=st("direct", k, 0), s1=st("direct", k, 1),
                                        u=ctypes.pointer(u))) for k in ("w", "b")}
        call(fp(g), fp(x), fp(direct["w"]), fp(direct["b"]), sinks["w"], sinks["b"], fp(gx_direct))
        np.testing.assert_array_equal(gx_direct, gx_stored, err_msg=f"{kind} {opt} step {step}: input gradient")
        assert not np.array_equal(stored["w"], before), "the step must move the weight, or equality means nothing"
        for k in ("w", "b"):
            np.testing.assert_array_equal(direct[k], stored[k], err_msg=f"{kind} {opt} step {step}: {k}")
            for i in range(words):
                np.testing.assert_array_equal(state[("direct", k, i)], state[("stored", k, i)],
                                              err_msg=f"{kind} {opt} step {step}: {k} state {i}")
