"""Nordic Power Profiler Kit II through the `ppk2-api` package (`pip install ppk2-api`, imported lazily).

The PPK2 streams 4-byte little-endian words at 100 kHz (ppk2-api's PPK_Fetch: "100k 4-byte
samples per second"), so the meter's clock is sample index x 10 us. The bit layout and the
conversion below follow ppk2-api's `ppk2_api.py` (its MEAS_ADC, MEAS_RANGE, MEAS_LOGIC masks
and get_adc_result): bits 0-13 the ADC code (times 4), bits 14-16 the measurement range
(0-4, the shunt in use), bits 24-31 the eight logic inputs D0-D7. Current in amperes:

    x = (adc - O[r]) * (1.8 / 163840) / R[r]
    i = UG[r] * (x * (GS[r] * x + GI[r]) + S[r] * vdd_v + I[r])

with the calibration O, R, GS, GI, S, I, UG read from the device's metadata (defaults as in
ppk2-api when none). ppk2-api's spike filter (a rolling average right after a range switch)
is not applied: it smooths the 2-3 samples after a switch, a few tens of microseconds.
Power is current x the supply voltage (the PPK2's own output in source-meter mode, the
external supply in ampere-meter mode).

Op boundaries: the firmware drives a GPIO high while an op runs; wired to a logic input,
its pulses are align.events_from_markers' events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from poet.energy.meters.base import MeterError, Recording, check

PERIOD_S = 1e-5                  # 100 kHz (ppk2-api PPK_Fetch)
ADC_MULT = 1.8 / 163840          # ppk2-api adc_mult: volts per ADC code over the shunt
RANGES = 5


def _default(v: float) -> list[float]:
    return [v] * RANGES


@dataclass
class Calibration:
    """Per-range calibration, the defaults ppk2-api starts from before reading the device's metadata."""

    R: list[float] = field(default_factory=lambda: [1031.64, 101.65, 10.15, 0.94, 0.043])  # shunt, ohms
    O: list[float] = field(default_factory=lambda: _default(0.0))  # noqa: E741 (the device's own name)
    GS: list[float] = field(default_factory=lambda: _default(1.0))
    GI: list[float] = field(default_factory=lambda: _default(1.0))
    S: list[float] = field(default_factory=lambda: _default(0.0))
    I: list[float] = field(default_factory=lambda: _default(0.0))  # noqa: E741 (the device's own name)
    UG: list[float] = field(default_factory=lambda: _default(1.0))

    @classmethod
    def from_modifiers(cls, modifiers: dict[str, Any]) -> Calibration:
        """From ppk2-api's `PPK2_API.modifiers` (dicts keyed "0".."4") after get_modifiers()."""
        cal = cls()
        for key in ("R", "O", "GS", "GI", "S", "I", "UG"):
            m = modifiers.get(key)
            if isinstance(m, dict):
                setattr(cal, key, [float(m.get(str(r), getattr(cal, key)[r])) for r in range(RANGES)])
        return cal


def decode_words(words: np.ndarray, cal: Calibration, vdd_v: float) -> tuple[np.ndarray, np.ndarray]:
    """Raw uint32 words -> (current in A, logic bits as uint8)."""
    w = words.astype(np.uint32)
    adc = (w & 0x3FFF).astype(np.float64) * 4
    rng = np.minimum((w >> 14) & 0x7, RANGES - 1).astype(np.intp)
    logic = ((w >> 24) & 0xFF).astype(np.uint8)

    def per(name: str) -> np.ndarray:
        return np.asarray(getattr(cal, name), dtype=np.float64)[rng]

    x = (adc - per("O")) * (ADC_MULT / per("R"))
    current = per("UG") * (x * (per("GS") * x + per("GI")) + (per("S") * vdd_v + per("I")))
    return current, logic


class StreamDecoder:
    """Bytes as the serial port delivers them (any chunking) -> whole samples."""

    def __init__(self, cal: Calibration, vdd_v: float) -> None:
        self.cal, self.vdd_v = cal, vdd_v
        self._rest = b""

    def feed(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        buf = self._rest + data
        n = len(buf) // 4
        self._rest = buf[4 * n:]
        return decode_words(np.frombuffer(buf[: 4 * n], dtype="<u4"), self.cal, self.vdd_v)


def recording_from_bytes(data: bytes, cal: Calibration, vdd_v: float, *, t0_s: float = 0.0) -> Recording:
    """A whole captured byte stream as a checked recording (power = current x supply voltage)."""
    current, logic = StreamDecoder(cal, vdd_v).feed(data)
    # A range switch can give a slightly negative reading at near-zero current (offset
    # calibration); a load cannot return energy, so below-zero noise is clipped, not refused.
    power = np.maximum(current, 0.0) * vdd_v
    t = t0_s + np.arange(current.size) * PERIOD_S
    return check(Recording.of_power("ppk2", PERIOD_S, t, power, logic))


def _ppk2_api() -> ModuleType:
    try:
        from ppk2_api import ppk2_api  # type: ignore[import-not-found]
    except ImportError:
        raise MeterError("the PPK2 backend needs the ppk2-api package: pip install ppk2-api "
                         "(or pip install 'poet[ppk2]')") from None
    return ppk2_api


class Ppk2Meter:
    """A live PPK2 (base.Meter). Not exercised here without a device; the decoding it uses is tested."""

    name = "ppk2"
    period_s = PERIOD_S

    def __init__(self, port: str | None = None, vdd_mv: int = 3000, *, source_meter: bool = True) -> None:
        self.port, self.vdd_mv, self.source_meter = port, vdd_mv, source_meter
        self._api: Any = None
        self._decoder: StreamDecoder | None = None
        self._current: list[np.ndarray] = []
        self._logic: list[np.ndarray] = []
        self._n = 0

    def start(self) -> None:
        mod = _ppk2_api()
        port = self.port or next(iter(mod.PPK2_API.list_devices()), None)
        if port is None:
            raise MeterError("no PPK2 found on USB; plug it in or name its port")
        api = mod.PPK2_API(port)
        api.get_modifiers()
        (api.use_source_meter if self.source_meter else api.use_ampere_meter)()
        api.set_source_voltage(self.vdd_mv)
        if self.source_meter:
            api.toggle_DUT_power("ON")
        api.start_measuring()
        self._api = api
        self._decoder = StreamDecoder(Calibration.from_modifiers(api.modifiers), self.vdd_mv / 1000)
        self._current, self._logic, self._n = [], [], 0

    def _poll(self) -> None:
        if self._api is None or self._decoder is None:
            raise MeterError("the PPK2 meter was not started")
        data = self._api.get_data()
        if data:
            c, lg = self._decoder.feed(data)
            self._current.append(c)
            self._logic.append(lg)
            self._n += c.size

    def clock_s(self) -> float:
        self._poll()
        return self._n * PERIOD_S

    def read_energy_j(self) -> float:
        self._poll()
        c = np.concatenate(self._current) if self._current else np.zeros(0)
        return float(np.sum(np.maximum(c, 0.0)) * (self.vdd_mv / 1000) * PERIOD_S)

    def stop(self) -> Recording:
        self._poll()
        self._api.stop_measuring()
        if self.source_meter:
            self._api.toggle_DUT_power("OFF")
        c = np.concatenate(self._current) if self._current else np.zeros(0)
        lg = np.concatenate(self._logic) if self._logic else np.zeros(0, dtype=np.uint8)
        t = np.arange(c.size) * PERIOD_S
        return check(Recording.of_power("ppk2", PERIOD_S, t, np.maximum(c, 0.0) * self.vdd_mv / 1000, lg))
