"""Symmetric per-tensor int8, as the firmware quantises (firmware/core/kernels/lowp.c), bit for bit.

The host quantises a frozen weight once, when it writes the frozen weights blob, where the board
would otherwise quantise it every step; the PyTorch reference quantises with the same functions, so
a board run and its reference see the same int8 values.
"""

from __future__ import annotations

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
