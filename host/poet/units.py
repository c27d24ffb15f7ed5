"""Sizes and deadlines as users type them: `256k`, `1m`, `1.3x`, `45ms`."""

from __future__ import annotations

import re

from poet.errors import UsageError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?b)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
# far above any board (and any host poet plans for), low enough that sizes stay exact in a float64
MAX_SIZE = 2**48


def parse_size(text: str) -> int:
    """`256k` = 256 KiB, `1m` = 1 MiB, plain numbers are bytes (DESIGN.md conventions)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"cannot read size {text!r}: use bytes or a k/m/g suffix, e.g. 96k or 1m")
    n = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if n >= MAX_SIZE:
        shown = text if len(str(text)) <= 30 else str(text)[:27] + "..."
        raise UsageError(f"size {shown!r} is 256 TiB or more: no board has that much; give bytes or k/m/g, e.g. 256k")
    return int(n)


def format_size(n: int) -> str:
    if n >= 1024**3:  # a Linux board's RAM and nv storage
        return f"{n / 1024**3:.2f} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.2f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def parse_deadline(text: str, one_pass_s: float) -> float:
    """A deadline in seconds: `1.3x` is 1.3 times one plain forward+backward pass; `45ms`, `2s`, `800us`."""
    t = str(text).strip().lower()
    m = re.match(r"^(\d+(?:\.\d+)?)\s*(x|s|ms|us)$", t)
    if not m:
        raise UsageError(f"cannot read deadline {text!r}: use a multiple like 1.5x or a time like 45ms")
    value = float(m.group(1))
    unit = m.group(2)
    seconds = {"x": value * one_pass_s, "s": value, "ms": value / 1e3, "us": value / 1e6}[unit]
    if seconds <= 0:
        raise UsageError(f"deadline {text!r} must be positive")
    return seconds
