"""Symmetric per-tensor int8, as the firmware quantises (firmware/core/kernels/lowp.c), bit for bit.

The host quantises a frozen weight once, when it writes the frozen weights blob, where the board
would otherwise quantise it every step; the PyTorch reference quantises with the same functions, so
a board run and its reference see the same int8 values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

F32_MIN_NORMAL = np.float32(1.17549435e-38)


def absmax_scale(x: np.ndarray) -> np.float32:
    """max |x| / 127 over the finite elements (1 for an all-zero or all-tiny tensor): poet_absmax_scale."""
    a = np.abs(np.asarray(x, dtype=np.float32).ravel())
    a = a[np.isfinite(a)]
    s = np.float32(a.max() if a.size else 0.0) / np.float32(127.0)
    return np.float32(s if s >= F32_MIN_NORMAL else 1.0)


def quantise(x: np.ndarray, scale: np.float32) -> np.ndarray:
    """x * (1 / scale) rounded half to even and saturated to [-127, 127], NaN to 0: poet_quantize_i8."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN saturate and zero, as on the board
        v = np.asarray(x, dtype=np.float32) * (np.float32(1.0) / np.float32(scale))
        q = np.clip(np.rint(v), -127, 127)
    return np.where(np.isnan(v), 0, q).astype(np.int8)


def dequantise(q: np.ndarray, scale: np.float32) -> np.ndarray:
    return q.astype(np.float32) * np.float32(scale)


def encode_i8(x: np.ndarray) -> bytes:
    """An int8 tensor as the frozen weights blob stores it: the fp32 scale, the elements, zero padding to a word."""
    s = absmax_scale(x)
    q = quantise(x, s).ravel().tobytes()
    return np.float32(s).astype("<f4").tobytes() + q + bytes(-len(q) % 4)


def i8_bytes(elems: int) -> int:
    """Bytes of an int8 tensor in the frozen weights blob (encode_i8)."""
    return 4 + (elems + 3) // 4 * 4


def decode_i8(data: bytes, elems: int) -> np.ndarray:
    """encode_i8's bytes back as fp32: the values the board computes with."""
    s = np.frombuffer(data[:4], dtype="<f4")[0]
    return dequantise(np.frombuffer(data[4:4 + elems], dtype=np.int8), s)


# ---------------------------------------------------------------- static int8 (firmware/core/ops/quant.c)

ACTIVATIONS = {"relu": 1, "relu6": 2, "hardswish": 3, "hardsigmoid": 4}  # a static-int8 epilogue's (docs/spec.md)


def _epilogue(v: np.ndarray, relu: int, y_scale: np.float32 | None) -> np.ndarray:
    """The activation (relu: ACTIVATIONS), then fp32 (y_scale None) or int8 at y_scale: put() in lowp.c."""
    if relu >= 3:  # hardswish, hardsigmoid as poet_hardswish_fwd computes them, in fp32 step by step
        r = (v + np.float32(3.0)).astype(np.float32)
        r = np.where(r < 0, np.float32(0.0), np.where(r > 6, np.float32(6.0), r)).astype(np.float32)
        v = ((v * r).astype(np.float32) / np.float32(6.0) if relu == 3 else r / np.float32(6.0)).astype(np.float32)
        relu = 0
    if relu:
        v = np.where(v < 0, np.float32(0.0), v).astype(np.float32)
    if relu == 2:
        v = np.where(v > 6, np.float32(6.0), v).astype(np.float32)
    return v if y_scale is None else quantise(v, y_scale)


Pad = int | tuple[int, int] | tuple[int, int, int]


def conv2d_padded(x: Any, w: Any, b: Any, stride: int, pad: Pad, groups: int) -> Any:
    """torch's conv2d of tensors x and w (bias b or None) with padding `pad`: all sides, (rows, columns), or
    (rows above, columns, rows below) for a row strip of a stage run patch by patch (poet.plan.transform.patches)."""
    import torch.nn.functional as F

    if isinstance(pad, tuple) and len(pad) == 3:
        x, pad = F.pad(x, (0, 0, pad[0], pad[2])), (0, pad[1])
    return F.conv2d(x, w, b, stride=stride, padding=pad, groups=groups)


def conv2d_int_sum(xq: np.ndarray, wq: np.ndarray, stride: int, pad: Pad, groups: int) -> np.ndarray:
    """The exact integer sums of an int8 conv2d (NCHW, weight [O, C/groups, kh, kw], padding as
    conv2d_padded's) as int64."""
    import torch

    x = torch.from_numpy(np.asarray(xq, dtype=np.float64))
    w = torch.from_numpy(np.asarray(wq, dtype=np.float64))
    # integer-valued float64: every partial sum is below 2^53, so the float arithmetic is exact
    return conv2d_padded(x, w, None, stride, pad, groups).numpy().astype(np.int64)


def conv2d_q(xq: np.ndarray, x_scale: np.float32, wq: np.ndarray, w_scale: np.float32, b: np.ndarray | None,
             stride: int, pad: Pad, groups: int, relu: int, y_scale: np.float32 | None) -> np.ndarray:
    """poet_conv2d_q_fwd bit for bit: v = acc * (x_scale * w_scale) (+ b) in fp32, the epilogue."""
    acc = conv2d_int_sum(xq, wq, stride, pad, groups).astype(np.float32)
    v = acc * (np.float32(x_scale) * np.float32(w_scale))
    if b is not None:
        v = v + np.asarray(b, np.float32).reshape(1, -1, 1, 1)
    return _epilogue(v.astype(np.float32), relu, y_scale)


def add_q(a: np.ndarray, a_scale: np.float32, b: np.ndarray, b_scale: np.float32, relu: int,
          y_scale: np.float32 | None) -> np.ndarray:
    """poet_add_q_fwd bit for bit: v = a a_scale + b b_scale (each product rounded), the epilogue."""
    v = a.astype(np.float32) * np.float32(a_scale) + b.astype(np.float32) * np.float32(b_scale)
    return _epilogue(v.astype(np.float32), relu, y_scale)


def maxpool2d_q(q: np.ndarray, k: tuple[int, int], s: tuple[int, int], p: tuple[int, int], ceil: bool) -> np.ndarray:
    """poet_maxpool2d_q_fwd: max pooling of int8 values (at the input's scale; padding never wins)."""
    import torch
    import torch.nn.functional as F

    y = F.max_pool2d(torch.from_numpy(np.asarray(q, np.float32)), k, s, p, ceil_mode=ceil)
    return y.numpy().astype(np.int8)


def mean_q(q: np.ndarray, scale: np.float32, r: int, inner: int, relu: int, y_scale: np.float32 | None) -> np.ndarray:
    """poet_mean_q_fwd bit for bit: v = (exact integer sum / r) * scale in fp32 over x[outer, r, inner] (any
    outer: the batch is in it), the epilogue."""
    s = np.asarray(q, np.int64).reshape(-1, r, inner).sum(axis=1).astype(np.float32)
    v = (s / np.float32(r)).astype(np.float32) * np.float32(scale)
    return _epilogue(v.astype(np.float32), relu, y_scale)


def mul_q(a: np.ndarray, a_scale: np.float32, b: np.ndarray, b_scale: np.float32, relu: int,
          y_scale: np.float32 | None) -> np.ndarray:
    """poet_mul_q_fwd bit for bit: v = (a a_scale) (b b_scale), each product rounded, b broadcast over a (as
    shaped: [outer, 1, inner] over [outer, r, inner], [N, C, 1, 1] over [N, C, H, W]); the epilogue."""
    av = np.asarray(a).astype(np.float32) * np.float32(a_scale)
    bv = np.asarray(b).astype(np.float32) * np.float32(b_scale)
    return _epilogue(np.broadcast_to((av * bv).astype(np.float32), av.shape), relu, y_scale)
