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

from dataclasses import dataclass

from poet.errors import UsageError
from poet.meters.base import Meter


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
