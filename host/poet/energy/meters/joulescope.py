"""Joulescope through the `joulescope` package (`pip install joulescope`, imported lazily).

The driver hands out samples as the dict its stream buffer's samples_get() returns
(pyjoulescope stream_buffer.py):

    {"time": {"range": {"value": [t1, t2], "units": "s"},
              "sampling_frequency": {"value": fs, "units": "Hz"}, ...},
     "signals": {"current": {"value": ndarray, "units": "A"},
                 "voltage": {"value": ndarray, "units": "V"},
                 "power":   {"value": ndarray, "units": "W"}, ...}}

Its samples are averages over each output period (the instrument decimates its 2 MS/s with
a filter), the integrating-meter meaning base.py gives a sample. Missing samples come as
NaN; they are dropped, so the gap check sees them. The general-purpose inputs (JS110:
the `current_lsb` / `voltage_lsb` fields when configured as GPI) can carry the op marker.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from poet.energy.meters.base import MeterError, Recording, check


def recording_from_samples(d: dict[str, Any], *, marker_field: str | None = None,
                           allow_gaps: bool = False) -> Recording:
    try:
        t1 = float(d["time"]["range"]["value"][0])
        fs = float(d["time"]["sampling_frequency"]["value"])
        sig = d["signals"]
    except (KeyError, IndexError, TypeError) as exc:
        raise MeterError(f"not a Joulescope samples_get() dict (missing {exc})") from None
    if "power" in sig:
        p = np.asarray(sig["power"]["value"], dtype=np.float64)
    elif "current" in sig and "voltage" in sig:
        p = np.asarray(sig["current"]["value"], dtype=np.float64) * np.asarray(sig["voltage"]["value"])
    else:
        raise MeterError("the Joulescope samples have neither power nor current and voltage")
    t = t1 + np.arange(p.size) / fs
    logic = None
    if marker_field is not None:
        if marker_field not in sig:
            raise MeterError(f"no {marker_field!r} signal in the Joulescope samples (have: {', '.join(sig)})")
        logic = np.asarray(sig[marker_field]["value"]).astype(np.uint8) & 1
    keep = np.isfinite(p)
    rec = Recording.of_power("joulescope", 1.0 / fs, t[keep], p[keep], None if logic is None else logic[keep])
    return check(rec, allow_gaps=allow_gaps)


def _joulescope() -> ModuleType:
    try:
        import joulescope  # type: ignore[import-not-found]
    except ImportError:
        raise MeterError("the Joulescope backend needs the joulescope package: pip install joulescope "
                         "(or pip install 'poet[joulescope]')") from None
    return joulescope  # type: ignore[no-any-return]


class JoulescopeMeter:
    """A live Joulescope (base.Meter): streams into the driver's buffer, read back at stop().

    Not exercised here without a device; recording_from_samples, which it ends in, is tested.
    """

    name = "joulescope"

    def __init__(self, sampling_frequency: float = 100_000.0, marker_field: str | None = None) -> None:
        self.period_s = 1.0 / sampling_frequency
        self.sampling_frequency = sampling_frequency
        self.marker_field = marker_field
        self._js: Any = None
        self._first: int | None = None

    def start(self) -> None:
        js = _joulescope().scan_require_one(config="auto")
        js.open()
        js.parameter_set("sampling_frequency", int(self.sampling_frequency))
        js.start()
        self._js = js
        self._first = None

    def _range(self) -> tuple[int, int]:
        if self._js is None:
            raise MeterError("the Joulescope meter was not started")
        s1, s2 = self._js.stream_buffer.sample_id_range
        if self._first is None:
            self._first = int(s1)
        return self._first, int(s2)

    def clock_s(self) -> float:
        s1, s2 = self._range()
        return (s2 - s1) * self.period_s

    def _samples(self) -> Recording:
        s1, s2 = self._range()
        fields = ["power"] + ([self.marker_field] if self.marker_field else [])
        return recording_from_samples(self._js.stream_buffer.samples_get(s1, s2, fields=fields),
                                      marker_field=self.marker_field, allow_gaps=True)

    def read_energy_j(self) -> float:
        return float(self._samples().energy_j()[-1])

    def stop(self) -> Recording:
        rec = self._samples()
        self._js.stop()
        self._js.close()
        self._js = None
        return rec
