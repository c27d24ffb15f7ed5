"""Dropout as the board computes it: a mask no buffer holds, made again from the layer and the step
wherever it is needed (the forward, its recomputation, the backward), so every plan drops the same
elements. firmware/core/kernels/elementwise.c poet_dropout is the C twin; the PyTorch reference
(graph/reference.py) drops with this mask, so the board's steps can be checked against PyTorch's.

Element i of the layer with salt s in optimizer step t (1 for the first step after weights are
loaded) is kept when the top 24 bits of mix32(i ^ key(s, t)) are at least round(p 2^24); a kept
element is multiplied by 1 / (1 - p), rounded to fp32 once."""

from __future__ import annotations

import numpy as np

MASK_BITS = 24


def mix32(h: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finaliser, elementwise on uint32 (wrapping multiplies, as C's uint32_t)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def key(salt: int, step: int) -> int:
    """poet_dropout_key: one layer's key in one step."""
    one = lambda v: np.array([v & 0xFFFFFFFF], np.uint32)  # noqa: E731
    return int(mix32(mix32(one(salt)) ^ one(step))[0])


def threshold(p: float) -> int:
    """The dropout node's a1: the mask's comparison bound, p 2^24."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability {p}: must be at least 0 and below 1")
    return min(round(p * (1 << MASK_BITS)), (1 << MASK_BITS) - 1)


def scale(p: float) -> np.float32:
    """What a kept element is multiplied by: 1 / (1 - p) in fp32 (the node's a2)."""
    return np.float32(1.0 / (1.0 - p))


def keep(n: int, salt: int, step: int, p: float) -> np.ndarray:
    """The layer's mask in this step: True where element i (of n, in memory order) is kept."""
    h = mix32(np.arange(n, dtype=np.uint32) ^ np.uint32(key(salt, step)))
    return (h >> np.uint32(32 - MASK_BITS)) >= threshold(p)
