"""The optimised fp32 kernels (firmware/core/kernels/*.c) against their specification, the reference
loops of firmware/core/kernels/reference/, bit for bit, through ctypes on the native kernel library.

Bits, not a tolerance: every plan must give the same weights (recompute, paging and tiling must not
change a sum's order), so an optimised kernel must sum each element exactly as the reference does.
The shapes cover full 4x4 register tiles, their edges (sizes not a multiple of 4) and sizes below
one tile (batch 1, the common fine-tuning case). Agreement with PyTorch is test_kernels_nn.py's.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable

import numpy as np
import pytest
from test_kernels_lp import CONVP, I8P, Conv
from test_kernels_nn import F32P, INT, SIGNATURES, Grad, Update, fp, gp, lib  # noqa: F401

SHAPES = [(1, 1, 1), (1, 64, 32), (3, 5, 7), (4, 4, 4), (5, 9, 6), (16, 64, 32), (16, 32, 10), (8, 3, 12),
          (7, 13, 4), (4, 30, 7), (2, 8, 8)]
REFERENCE = {f"poet_ref_{k.removeprefix('poet_')}": v for k, v in SIGNATURES.items()
             if k.startswith(("poet_linear_", "poet_matmul_", "poet_conv2d_ex_"))}
REFERENCE["poet_ref_linear_fwd"] = [INT] * 3 + [F32P] * 4
for _p in ("poet_", "poet_ref_"):
    REFERENCE[_p + "linear_i8_fwd"] = [INT] * 3 + [I8P, ctypes.c_float, I8P, ctypes.c_float, F32P, F32P]
    REFERENCE[_p + "linear_w8_fwd"] = [INT] * 5 + [F32P, I8P, ctypes.c_float, F32P, F32P]
    REFERENCE[_p + "linear_w8_bwd_gx"] = [INT] * 3 + [F32P, I8P, ctypes.c_float, F32P]
for _name in ("poet_conv2d_q_fwd_rows", "poet_ref_conv2d_q_fwd_rows"):
    REFERENCE[_name] = [CONVP, INT, INT, I8P, ctypes.c_float, I8P, ctypes.c_float, F32P, INT, F32P, ctypes.c_void_p]
for _name in ("poet_conv2d_gx_rows", "poet_ref_conv2d_gx_rows"):
    REFERENCE[_name] = [CONVP, INT, INT, F32P, F32P, F32P]
REFERENCE["poet_linear_fwd"] = [INT] * 3 + [F32P] * 4
for _p in ("poet_", "poet_ref_"):
    REFERENCE[_p + "maxpool2d_fwd"] = [INT] * 4 + [F32P] * 2
    REFERENCE[_p + "maxpool2d_bwd"] = [INT] * 4 + [F32P] * 3


@pytest.fixture(scope="module")
def both(lib: ctypes.CDLL) -> ctypes.CDLL:  # noqa: F811
    for name, args in REFERENCE.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, None
    return lib


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a


def run_both(kernel: Callable[[str, dict[str, np.ndarray]], None], outs: dict[str, np.ndarray]) -> None:
    """kernel(prefix, buffers) on a copy of `outs` each for poet_ and poet_ref_; the same bits out."""
    got = {k: v.copy() for k, v in outs.items()}
    want = {k: v.copy() for k, v in outs.items()}
    kernel("poet_", got)
    kernel("poet_ref_", want)
    for k in outs:
        assert np.array_equal(bits(got[k]), bits(want[k])), f"{k}: {np.abs(got[k] - want[k]).max()} off"


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_linear_forward_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int]) -> None:
    B, n_in, n_out = shape
    rng = np.random.default_rng(sum(shape))
    x, w, b = rand(rng, B, n_in), rand(rng, n_out, n_in), rand(rng, n_out)
    for bias in (b, None):
        run_both(lambda p, o, bias=bias: getattr(both, p + "linear_fwd")(B, n_in, n_out, fp(x), fp(w), fp(bias),
                                                                       fp(o["y"])),
                 {"y": np.full((B, n_out), np.nan, np.float32)})


@pytest.mark.parametrize("shape", SHAPES)
def test_linear_backward_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int]) -> None:
    B, n_in, n_out = shape
    rng = np.random.default_rng(100 + sum(shape))
    g, x, w = rand(rng, B, n_out), rand(rng, B, n_in), rand(rng, n_out, n_in)
    for want_gx, want_dw, want_db in itertools.product((True, False), repeat=3):
        def kernel(p: str, o: dict[str, np.ndarray], want_gx: bool = want_gx, want_dw: bool = want_dw,
                   want_db: bool = want_db) -> None:
            getattr(both, p + "linear_bwd")(B, n_in, n_out, fp(g), fp(x), fp(w), gp(o["dw"] if want_dw else None),
                                            gp(o["db"] if want_db else None), fp(o["gx"] if want_gx else None))
        # gradients accumulate into what is there already
        run_both(kernel, {"gx": np.full((B, n_in), np.nan, np.float32), "dw": rand(rng, n_out, n_in),
                          "db": rand(rng, n_out)})


@pytest.mark.parametrize("shape", [(16, 64, 32), (3, 5, 7), (1, 64, 32)])
def test_linear_update_in_backward_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int]) -> None:
    """The update in backward (no gradient kept: each finished element updates its weight with Adam)
    reads each weight before it updates it, in the optimised kernel as in the reference."""
    B, n_in, n_out = shape
    rng = np.random.default_rng(7 + sum(shape))
    g, x = rand(rng, B, n_out), rand(rng, B, n_in)
    w0, b0 = rand(rng, n_out, n_in), rand(rng, n_out)
    u = Update()
    both.poet_update_init(ctypes.byref(u), 2, 1e-2, 0.9, 0.999, 1e-8, 3)

    def kernel(p: str, o: dict[str, np.ndarray]) -> None:
        sinks = [Grad(g=None, w=fp(o[k]), s0=fp(o[k + "m"]), s1=fp(o[k + "v"]), u=ctypes.pointer(u))
                 for k in ("w", "b")]
        getattr(both, p + "linear_bwd")(B, n_in, n_out, fp(g), fp(x), fp(o["w"]), ctypes.pointer(sinks[0]),
                                        ctypes.pointer(sinks[1]), fp(o["gx"]))
    run_both(kernel, {"w": w0, "wm": rand(rng, n_out, n_in) * 0.1, "wv": np.abs(rand(rng, n_out, n_in)) * 0.01,
                      "b": b0, "bm": rand(rng, n_out) * 0.1, "bv": np.abs(rand(rng, n_out)) * 0.01,
                      "gx": np.full((B, n_in), np.nan, np.float32)})


@pytest.mark.parametrize("shape", SHAPES)
def test_int8_linear_kernels_are_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int]) -> None:
    """The int8 linear and the int8-weight (w8) forward and input gradient: four outputs per input load,
    each summed (and each weight dequantised) as reference/linear_q.c does."""
    B, n_in, n_out = shape
    rng = np.random.default_rng(200 + sum(shape))
    xq = rng.integers(-127, 128, (B, n_in), dtype=np.int8)
    wq = rng.integers(-127, 128, (n_out, n_in), dtype=np.int8)
    x, g, b = rand(rng, B, n_in), rand(rng, B, n_out), rand(rng, n_out)
    i8p = ctypes.POINTER(ctypes.c_int8)
    for bias in (b, None):
        run_both(lambda p, o, bias=bias: getattr(both, p + "linear_i8_fwd")(
            B, n_in, n_out, xq.ctypes.data_as(i8p), 0.02, wq.ctypes.data_as(i8p), 0.013, fp(bias), fp(o["y"])),
            {"y": np.full((B, n_out), np.nan, np.float32)})
        # the whole layer, and the rows a read of a streamed weight holds (wq from its first row)
        for first, end in ((0, n_out), (n_out // 3, n_out - n_out // 4)):
            rows = np.ascontiguousarray(wq[first:end])
            run_both(lambda p, o, bias=bias, first=first, end=end, rows=rows: getattr(both, p + "linear_w8_fwd")(
                B, n_in, n_out, first, end, fp(x), rows.ctypes.data_as(i8p), 0.013, fp(bias), fp(o["y"])),
                {"y": np.full((B, n_out), np.nan, np.float32)})
    run_both(lambda p, o: getattr(both, p + "linear_w8_bwd_gx")(B, n_in, n_out, fp(g), wq.ctypes.data_as(i8p), 0.013,
                                                               fp(o["gx"])),
             {"gx": np.full((B, n_in), np.nan, np.float32)})


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 4, 8, 4), (1, 5, 9, 6), (3, 7, 13, 4), (1, 16, 64, 32),
                                   (2, 1, 7, 9)])
def test_matmul_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int, int]) -> None:
    batch, M, K, N = shape
    rng = np.random.default_rng(sum(shape))
    a, bm, g = rand(rng, batch, M, K), rand(rng, batch, K, N), rand(rng, batch, M, N)
    run_both(lambda p, o: getattr(both, p + "matmul_fwd")(batch, M, K, N, fp(a), fp(bm), fp(o["y"])),
             {"y": np.full((batch, M, N), np.nan, np.float32)})
    run_both(lambda p, o: getattr(both, p + "matmul_bwd_a")(batch, M, K, N, fp(g), fp(bm), fp(o["ga"])),
             {"ga": np.full((batch, M, K), np.nan, np.float32)})
    run_both(lambda p, o: getattr(both, p + "matmul_bwd_b")(batch, M, K, N, fp(g), fp(a), fp(o["gb"])),
             {"gb": np.full((batch, K, N), np.nan, np.float32)})


# (B, C, H, W, O, kh, kw, stride, ph, pw, groups): cnn-digits' conv, channel counts that leave a block of
# fewer than 4, strides with padding, 1x1, depthwise (with and without padding, 5x5, stride 2, a map too small
# for a whole window) and grouped, a kernel wider than the input's padding
CONVS = [(2, 1, 8, 8, 8, 3, 3, 1, 1, 1, 1), (1, 3, 7, 6, 6, 3, 3, 1, 1, 1, 1), (2, 5, 9, 9, 7, 3, 3, 2, 1, 1, 1),
         (1, 8, 5, 5, 12, 1, 1, 1, 0, 0, 1), (2, 8, 6, 6, 8, 3, 3, 1, 1, 1, 8), (1, 8, 7, 7, 8, 3, 3, 2, 1, 1, 8),
         (1, 8, 6, 5, 16, 3, 2, 1, 0, 1, 2), (1, 4, 5, 5, 4, 5, 5, 1, 2, 2, 1), (1, 2, 6, 6, 4, 3, 3, 3, 0, 2, 1),
         (3, 6, 4, 4, 9, 2, 2, 2, 1, 0, 3), (1, 4, 9, 11, 4, 3, 3, 1, 0, 0, 4), (1, 3, 8, 8, 3, 5, 5, 1, 2, 2, 3),
         (2, 2, 10, 9, 2, 3, 3, 2, 1, 1, 2), (1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 2)]


@pytest.mark.parametrize("shape", CONVS)
def test_conv2d_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, ...]) -> None:
    B, C, H, W, n_out, kh, kw, s, ph, pw, groups = shape
    cv = Conv(*shape)
    Ho, Wo = (H + 2 * ph - kh) // s + 1, (W + 2 * pw - kw) // s + 1
    rng = np.random.default_rng(sum(shape))
    x, w, b = rand(rng, B, C, H, W), rand(rng, n_out, C // groups, kh, kw), rand(rng, n_out)
    g = rand(rng, B, n_out, Ho, Wo)
    for bias in (b, None):
        run_both(lambda p, o, bias=bias: getattr(both, p + "conv2d_ex_fwd")(ctypes.byref(cv), fp(x), fp(w), fp(bias),
                                                                          fp(o["y"])),
                 {"y": np.full((B, n_out, Ho, Wo), np.nan, np.float32)})
    # ck: a sparse update's weight gradient over the first input channels of each group only
    for want_gx, want_dw, ck in itertools.product((True, False), (True, False), {0, (C // groups + 1) // 2}):
        cv.ck = ck

        def kernel(p: str, o: dict[str, np.ndarray], want_gx: bool = want_gx, want_dw: bool = want_dw) -> None:
            getattr(both, p + "conv2d_ex_bwd")(ctypes.byref(cv), fp(g), fp(x), fp(w), gp(o["dw"] if want_dw else None),
                                               gp(o["db"]), fp(o["gx"] if want_gx else None))
        run_both(kernel, {"gx": np.full((B, C, H, W), np.nan, np.float32), "dw": rand(rng, *w.shape),
                          "db": rand(rng, n_out)})


@pytest.mark.parametrize("shape", CONVS)
def test_conv2d_input_gradient_by_blocks_of_output_channels(both: ctypes.CDLL, shape: tuple[int, ...]) -> None:
    """poet_conv2d_gx_rows, the input gradient a block of output channels at a time (a weight stored int8 made
    fp32 a block at a time, ops/conv.c): blocks of one, two and three channels, ascending, give the whole
    kernel's bits, optimised and reference alike; a channel whose group has no output in a block is untouched."""
    B, C, H, W, n_out, kh, kw, s, ph, pw, groups = shape
    cv = Conv(*shape)
    Ho, Wo = (H + 2 * ph - kh) // s + 1, (W + 2 * pw - kw) // s + 1
    rng = np.random.default_rng(sum(shape) + 1)
    w, g = rand(rng, n_out, C // groups, kh, kw), rand(rng, B, n_out, Ho, Wo)
    whole = np.full((B, C, H, W), np.nan, np.float32)
    both.poet_conv2d_ex_bwd(ctypes.byref(cv), fp(g), None, fp(w), None, None, fp(whole))
    for per in (1, 2, 3):
        for p in ("poet_", "poet_ref_"):
            gx = np.full((B, C, H, W), np.nan, np.float32)
            for o0 in range(0, n_out, per):
                o1 = min(o0 + per, n_out)
                touched = {c for c in range(C) if any(o // (n_out // groups) == c // (C // groups)
                                                      for o in range(o0, o1))}
                before = gx.copy()
                getattr(both, p + "conv2d_gx_rows")(ctypes.byref(cv), o0, o1, fp(g), fp(np.ascontiguousarray(w[o0:o1])),
                                                    fp(gx))
                untouched = [c for c in range(C) if c not in touched]
                assert np.array_equal(bits(gx[:, untouched]), bits(before[:, untouched])), (p, per, o0)
            assert np.array_equal(bits(gx), bits(whole)), (p, per, np.abs(gx - whole).max())


@pytest.mark.parametrize("shape", CONVS + [(1, 16, 4, 4, 12, 1, 1, 1, 0, 0, 1), (2, 12, 5, 3, 8, 1, 1, 2, 0, 0, 2)])
def test_int8_conv2d_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, ...]) -> None:
    """The static-int8 convolution (lowp.c) against reference/conv_q.c: fp32 and int8 outputs, ReLU,
    and rows of output channels from inside a group (a streamed layer's slices); 1x1 shapes run its
    pointwise loop."""
    B, C, H, W, n_out, kh, kw, s, ph, pw, groups = shape
    cv = Conv(*shape)
    Ho, Wo = (H + 2 * ph - kh) // s + 1, (W + 2 * pw - kw) // s + 1
    rng = np.random.default_rng(sum(shape))
    xq = rng.integers(-127, 128, (B, C, H, W), dtype=np.int8)
    wq = rng.integers(-127, 128, (n_out, C // groups, kh, kw), dtype=np.int8)
    b = rand(rng, n_out)
    ys = np.array([0.37], np.float32)
    for (o0, o1), relu, y_scale in itertools.product([(0, n_out), (1, n_out - 1)], (0, 1), (ys, None)):
        dtype = np.int8 if y_scale is not None else np.float32
        wrows = np.ascontiguousarray(wq[o0:o1])

        def kernel(p: str, o: dict[str, np.ndarray], o0: int = o0, o1: int = o1, relu: int = relu,
                   y_scale: np.ndarray | None = y_scale, wrows: np.ndarray = wrows) -> None:
            getattr(both, p + "conv2d_q_fwd_rows")(ctypes.byref(cv), o0, o1, xq.ctypes.data_as(I8P), 0.02,
                                                   wrows.ctypes.data_as(I8P), 0.01, fp(b), relu,
                                                   fp(y_scale), o["y"].ctypes.data_as(ctypes.c_void_p))
        out = np.zeros((B, n_out, Ho, Wo), dtype)
        run_both(kernel, {"y": out if dtype == np.float32 else out.view(np.int8)})


@pytest.mark.parametrize("shape", [(1, 3, 7, 6, 6, 3, 3, 1, 1, 1, 1), (2, 5, 9, 9, 7, 3, 3, 2, 1, 1, 1),
                                   (2, 8, 6, 6, 8, 3, 3, 1, 1, 1, 8), (1, 8, 7, 7, 8, 3, 3, 2, 1, 1, 8),
                                   (1, 16, 6, 5, 12, 3, 3, 1, 1, 1, 1)])
def test_int8_conv2d_of_a_row_strip_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, ...]) -> None:
    """A row strip's int8 conv (pb rows of padding below, 0 or 1, ph above, 0 or 1: patches.py) against the
    reference, dense, depthwise and wide enough for the SIMD build's patch loop."""
    B, C, H, W, n_out, kh, kw, s, _, pw, groups = shape
    rng = np.random.default_rng(sum(shape) + 7)
    xq = rng.integers(-127, 128, (B, C, H, W), dtype=np.int8)
    wq = rng.integers(-127, 128, (n_out, C // groups, kh, kw), dtype=np.int8)
    b = rand(rng, n_out)
    for ph, pb in itertools.product((0, 1), (0, 1)):
        cv = Conv(B, C, H, W, n_out, kh, kw, s, ph, pw, groups, 0, pb)
        Ho, Wo = (H + ph + pb - kh) // s + 1, (W + 2 * pw - kw) // s + 1

        def kernel(p: str, o: dict[str, np.ndarray], cv: Conv = cv) -> None:
            getattr(both, p + "conv2d_q_fwd_rows")(ctypes.byref(cv), 0, n_out, xq.ctypes.data_as(I8P), 0.02,
                                                   wq.ctypes.data_as(I8P), 0.01, fp(b), 1, None,
                                                   o["y"].ctypes.data_as(ctypes.c_void_p))
        run_both(kernel, {"y": np.full((B, n_out, Ho, Wo), np.nan, np.float32)})


def test_the_bit_comparison_sees_a_different_summation_order(both: ctypes.CDLL) -> None:
    """What the comparison guards against: the same products summed in another order (here k
    descending) differ in the last bits, on these very inputs."""
    rng = np.random.default_rng(0)
    B, n_in, n_out = 16, 64, 32
    x, w = rand(rng, B, n_in), rand(rng, n_out, n_in)
    y = np.empty((B, n_out), np.float32)
    both.poet_linear_fwd(B, n_in, n_out, fp(x), fp(w), None, fp(y))
    backwards = np.zeros((B, n_out), np.float32)
    for k in reversed(range(n_in)):
        backwards += x[:, k:k + 1] * w[:, k][None, :]
    forwards = np.zeros((B, n_out), np.float32)
    for k in range(n_in):
        forwards += x[:, k:k + 1] * w[:, k][None, :]
    assert np.array_equal(bits(y), bits(forwards))
    assert not np.array_equal(bits(y), bits(backwards))


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 2, 7, 9), (3, 1, 2, 2), (1, 1, 5, 4)])
def test_maxpool2d_is_the_references_bits(both: ctypes.CDLL, shape: tuple[int, int, int, int]) -> None:
    """2x2 max pooling, even and odd maps (an odd row or column is in no window): ties, NaNs in a window
    (a NaN wins over a number, as PyTorch's), and -0.0 gradients, whose bits the reference's 0 + g keeps."""
    B, C, H, W = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-2, 3, shape).astype(np.float32)  # ties
    x.flat[rng.choice(x.size, max(1, x.size // 7), replace=False)] = np.nan
    g = rand(rng, B, C, H // 2, W // 2)
    g.flat[:: 3] = -0.0
    run_both(lambda p, o: getattr(both, p + "maxpool2d_fwd")(B, C, H, W, fp(x), fp(o["y"])),
             {"y": np.full((B, C, H // 2, W // 2), 7.0, np.float32)})
    run_both(lambda p, o: getattr(both, p + "maxpool2d_bwd")(B, C, H, W, fp(g), fp(x), fp(o["gx"])),
             {"gx": np.full(shape, 7.0, np.float32)})
