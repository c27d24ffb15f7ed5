"""Dropout as the board computes it: a mask no buffer holds, made again from the layer and the step
wherever it is needed (the forward, its recomputation, the backward), so every plan drops the same
elements. firmware/core/kernels/elementwise.c poet_dropout is the C twin; the PyTorch reference
(graph/reference.py) drops with this mask, so the board's steps can be checked against PyTorch's.

Element i of the layer with salt s in optimizer step t (1 for the first step after weights are
loaded) is kept when the top 24 bits of mix32(i ^ key(s, t)) are at least round(p 2^24); a kept
element is multiplied by 1 / (1 - p), rounded to fp32 once.

Stochastic depth (torchvision.ops.stochastic_depth) is the same op with one draw per row: with `row`
elements a row (0 or 1: one draw per element, plain dropout), element i takes draw i // row. A model
writes it as a mask of x's leading dims then 1s ([N, 1, ..., 1]: one draw per sample; [1, ..., 1]: one
for the batch) filled by `bernoulli_(1 - p)`, divided by 1 - p and multiplied into x; draw j is the
mask's element j, so the PyTorch reference fills the mask with keep(mask elements) and computes on."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

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


def keep(n: int, salt: int, step: int, p: float, row: int = 1) -> np.ndarray:
    """The layer's mask in this step: True where element i (of n, in memory order) is kept; element i
    takes draw i // row (row 0 or 1: a draw per element)."""
    draw = np.arange(n, dtype=np.uint32) // np.uint32(max(row, 1))
    h = mix32(draw ^ np.uint32(key(salt, step)))
    return (h >> np.uint32(32 - MASK_BITS)) >= threshold(p)


@dataclass(frozen=True)
class Mask:
    """A tensor a model filled with `bernoulli_`: which draw of the forward it was (its salt, counted
    with the dropout calls) and the share it keeps; `scaled` once divided by that share."""

    salt: int
    kept: float
    scaled: bool = False


def drawn_share(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
    """The keep share of a call that fills a mask, `t.bernoulli_(q)` with q a number (torchvision's
    stochastic_depth draws so); None for any other call. The tracer and the PyTorch reference number
    the same calls with it, so a mask's salt is the same in both."""
    if name != "bernoulli_" or not args:
        return None
    q = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return float(q) if isinstance(q, Real) and not isinstance(q, bool) else None
