"""Zeus-style measurement windows for host code: begin_window(name) ... end_window(name) -> Measurement.

Over any base.Meter. Windows are named and independent: they may nest or overlap, each is
just two readings of the meter's clock and cumulative energy. Ending a window that was never
begun (or was already ended) is a one-line error.

    meter = RaplMeter(); meter.start()
    windows = Windows(meter)
    windows.begin_window("epoch")
    ...
    m = windows.end_window("epoch")   # Measurement(time_s=..., energy_j=..., meter="rapl:package-0")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from poet.energy.meters.base import Meter, Recording, load, save
from poet.errors import PoetError, UsageError
from poet.progress import Say


@dataclass(frozen=True)
class Measurement:
    time_s: float      # on the meter's clock
    energy_j: float
    meter: str


class Windows:
    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self._open: dict[str, tuple[float, float]] = {}

    def begin_window(self, name: str) -> None:
        if name in self._open:
            raise UsageError(f"measurement window {name!r} is already open; end it first or use another name")
        # Energy first, then the clock: read_energy_j takes the sample the clock then names.
        e = self.meter.read_energy_j()
        self._open[name] = (self.meter.clock_s(), e)

    def end_window(self, name: str) -> Measurement:
        if name not in self._open:
            known = ", ".join(sorted(self._open)) or "none"
            raise UsageError(f"end_window({name!r}) without begin_window({name!r}); open windows: {known}")
        t0, e0 = self._open.pop(name)
        e1 = self.meter.read_energy_j()
        t1 = self.meter.clock_s()
        return Measurement(t1 - t0, max(e1 - e0, 0.0), self.meter.name)


@contextlib.contextmanager
def recorded(meter: Meter, path: Path, say: Say, name: str = "train") -> Iterator[Windows]:
    """Run the body inside a window named `name` and save the meter's recording to `path` on every exit
    (a run stopped by Ctrl-C or a lost board keeps the samples of the steps it finished).

    A recording already at `path` from the same meter (a resumed run's earlier session) is kept and the
    new samples appended: the hole between the sessions lies outside every step, so it costs nothing
    (poet report judges gaps over the steps only).
    """
    meter.start()
    windows = Windows(meter)
    windows.begin_window(name)
    try:
        yield windows
    finally:
        m = windows.end_window(name)
        rec = _appended(path, meter.stop())
        save(rec, path)
        say(f"[meter] {m.meter}: {m.energy_j:.6g} J over {m.time_s:.3f} s (window {name!r}); recording "
            f"{path} ({len(rec.t_s)} samples at {rec.period_s:g} s): `poet report {path.parent / 'trace.json'} "
            f"--meter {path}`")


def _appended(path: Path, rec: Recording) -> Recording:
    if not path.exists():
        return rec
    try:
        old = load(path, allow_gaps=True)
    except PoetError:
        return rec  # unreadable or another format: the new session's samples replace it
    if (old.meter, old.kind, old.period_s, old.max_energy_range_uj) != (rec.meter, rec.kind, rec.period_s,
                                                                        rec.max_energy_range_uj):
        return rec
    keep = rec.t_s > old.t_s[-1]

    def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None or b is None else np.concatenate([a, b[keep]])

    return replace(rec, t_s=np.concatenate([old.t_s, rec.t_s[keep]]), power_w=cat(old.power_w, rec.power_w),
                   counter_uj=cat(old.counter_uj, rec.counter_uj), logic=cat(old.logic, rec.logic), gaps=(),
                   notes=())
