"""A meter chosen by name on the command line (`poet train --meter BACKEND[:ARG]`), and a replay meter.

    rapl[:ZONE]          RAPL powercap zone (default package-0), 10 ms
    ina219[:INDEX]       the INDEX-th INA219 hwmon device (default 0), 1 ms
    ina3221[:R1+R2]      Jetson INA3221 rails summed (default VDD_IN), 10 ms
    file:PATH            replay a saved recording (poet-meter/1 CSV) as if it were being recorded now

All of them stamp samples with time.time(), the clock the host stamps each step's STEP and DONE
with (poet.device), so what they record lines up with the trace without an offset. Meters with
a clock of their own (PPK2, Joulescope) are not offered here: their recordings need
`poet report --meter-offset`.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from poet.energy.meters.base import Meter, Recording, load
from poet.errors import UsageError

BACKENDS = ("rapl", "ina219", "ina3221", "file")


class ReplayMeter:
    """A saved recording played back from start(): its first sample lands at the moment start() is called.

    For trying the measured path without a meter (and for tests): the recording's power, on the
    host's clock now. What stop() returns is what had been "recorded" by then.
    """

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.name = f"replay:{rec.meter}"
        self.period_s = rec.period_s
        self._shift = 0.0

    def clock_s(self) -> float:
        return time.time()

    def start(self) -> None:
        self._shift = time.time() - float(self.rec.t_s[0])

    def _upto(self, now: float) -> Recording:
        t = self.rec.t_s + self._shift
        n = max(2, int(np.searchsorted(t, now, side="right")))
        sl = slice(0, n)
        return replace(self.rec, meter=self.name, t_s=t[sl],
                       power_w=None if self.rec.power_w is None else self.rec.power_w[sl],
                       counter_uj=None if self.rec.counter_uj is None else self.rec.counter_uj[sl],
                       logic=None if self.rec.logic is None else self.rec.logic[sl], gaps=(), notes=(), source="")

    def read_energy_j(self) -> float:
        return float(self._upto(time.time()).energy_j()[-1])

    def stop(self) -> Recording:
        return self._upto(time.time())


def open_meter(spec: str) -> Meter:
    """The meter `spec` names (see the module docstring); a wrong name is a one-line usage error."""
    name, _, arg = spec.partition(":")
    if name == "file":
        if not arg:
            raise UsageError("--meter file:PATH needs the recording's path")
        return ReplayMeter(load(arg))
    if name == "rapl":
        from poet.energy.meters.rapl import RaplMeter

        return RaplMeter(arg or "package-0")
    if name == "ina219":
        from poet.energy.meters.ina219 import Ina219Meter

        if arg and not arg.isdigit():
            raise UsageError(f"--meter ina219:{arg}: the argument is the device's index (0, 1, ...)")
        return Ina219Meter(index=int(arg or 0))
    if name == "ina3221":
        from poet.energy.meters.ina3221 import Ina3221Meter

        return Ina3221Meter(arg.split("+") if arg else None)
    raise UsageError(f"--meter {spec}: unknown backend {name!r}; use one of {', '.join(BACKENDS)} "
                     "(e.g. rapl, ina219:0, ina3221:VDD_IN, file:recording.csv)")
