"""Joules, watts, seconds and shares as the energy reports print them: fixed widths, so columns line up
(poet.energy.report's tables and the measured header of poet.energy.meters.measure)."""

from __future__ import annotations


def fmt_j(j: float) -> str:
    """12 characters: 9.3f in J, mJ or uJ (so columns line up)."""
    if j == 0:
        return f"{'0':>9}   "
    for unit, scale in (("J", 1.0), ("mJ", 1e-3)):
        if abs(j) >= scale:
            return f"{j / scale:9.3f} {unit:<2}"
    return f"{j / 1e-6:9.3f} uJ"


def fmt_w(w: float) -> str:
    return f"{w:8.4f} W " if abs(w) >= 1 else f"{w * 1e3:8.3f} mW"


def fmt_s(s: float) -> str:
    return f"{s * 1e3:10.3f} ms"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"
