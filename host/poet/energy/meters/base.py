"""A power meter's recording: the one sample stream every backend produces, its checks and its file.

Two kinds of meter exist. Power meters (PPK2, Joulescope, INA219, INA3221) give watts at
sample instants; counter meters (RAPL) give a cumulative energy counter that wraps. Both
become a `Recording` on the meter's own clock (seconds), and both turn into the same
piecewise-constant power (`Segments`) that align.py integrates over op events.

What a sample means: sample i holds from its instant t_i until the next instant t_(i+1).
For an integrating meter (INA2xx conversions, Joulescope's averaged output, a RAPL counter
read) that is exactly what it measured: the average over the interval it opens.

File (`save`/`load`): CSV with one header comment naming the meter and its period,

    # poet-meter/1 meter=ppk2 period_s=1e-05
    t_s,power_w[,logic]

or, for counters, the raw counter exactly as read (wraps and all) with its range:

    # poet-meter/1 meter=rapl:package-0 period_s=0.01 max_energy_range_uj=262143328850
    t_s,energy_uj
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from poet.errors import PoetError, UsageError
from poet.files import MB, read_text, write_atomic

FORMAT = "poet-meter/1"
# A hole longer than this many periods is a lost stretch of data, not sampling jitter. Polled
# sysfs meters on a loaded host jitter by a period or two; 5 leaves room for that.
DEFAULT_MAX_GAP_PERIODS = 5.0

# What a meter can record, so that a damaged or hand-made recording is refused rather than turned into
# an account (every number of a recording reaches the joules `poet report --meter` prints):
# - a sample period from 1 ns (no meter poet knows samples faster than the Joulescope's 2 MHz) to an
#   hour (a bench multimeter logged by hand);
MIN_PERIOD_S, MAX_PERIOD_S = 1e-9, 3600.0
# - power up to 10 kW: the largest source poet reads is RAPL on a server's package, hundreds of watts,
#   and a board draws milliwatts to tens of watts; more is a unit slip (mW or uW written as W) or damage;
MAX_POWER_W = 1e4
COUNTER_SLACK_S = 1.0  # see check(): what a counter's quantum may add to one interval, in seconds at MAX_POWER_W
# - a clock in seconds, time.time() (1.7e9 now, 1e10 in 2286) or a meter's own from 0;
MAX_CLOCK_S = 1e10
# - an energy counter that numpy's int64 holds with room for its wrap arithmetic (RAPL's range is
#   ~2.6e11 uJ).
MAX_COUNTER_UJ = 2**62
# A recording holds ~30 bytes a sample: 1 GB is an hour of a PPK2 at 10 kHz, past any run of steps.
RECORDING_LIMIT = 1024 * MB


class MeterError(PoetError):
    """A meter or a recording cannot give trustworthy joules; the message says where and what to do."""


class RecordingError(MeterError):
    """The recording itself is wrong (an input file or a sample stream): status 2, like a bad input file."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=2)


@dataclass(frozen=True)
class Gap:
    after_sample: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Segments:
    """Piecewise-constant power: [start_s[i], end_s[i]) at power_w[i]; contiguous, sorted."""

    start_s: np.ndarray
    end_s: np.ndarray
    power_w: np.ndarray
    interpolated: np.ndarray  # bool: this stretch lies over a gap, its power is a guess

    @property
    def energy_j(self) -> float:
        return float(np.sum(self.power_w * (self.end_s - self.start_s)))

    def energy_between(self, a: float, b: float, *, measured_only: bool = False) -> float:
        """Joules of the held power inside [a, b) (the parts of segments that overlap it); with
        `measured_only`, leaving out the stretches over gaps."""
        overlap = np.clip(np.minimum(self.end_s, b) - np.maximum(self.start_s, a), 0.0, None)
        if measured_only:
            overlap = np.where(self.interpolated, 0.0, overlap)
        return float(np.sum(self.power_w * overlap))


@dataclass(frozen=True)
class Recording:
    meter: str
    period_s: float
    t_s: np.ndarray
    power_w: np.ndarray | None = None
    counter_uj: np.ndarray | None = None       # raw counter readings (int64), may wrap
    max_energy_range_uj: int | None = None     # counter range; it wraps to 0 after this value
    logic: np.ndarray | None = None            # uint8 per sample, digital marker channels
    gaps: tuple[Gap, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""                            # a file path or the meter, for messages

    @property
    def kind(self) -> str:
        return "energy" if self.counter_uj is not None else "power"

    @property
    def where(self) -> str:
        return f"meter recording {self.source or self.meter}"

    @classmethod
    def of_power(cls, meter: str, period_s: float, t_s: object, power_w: object,
                 logic: object | None = None, source: str = "") -> Recording:
        lg = None if logic is None else np.asarray(logic, dtype=np.uint8)
        return cls(meter, float(period_s), np.asarray(t_s, dtype=np.float64),
                   power_w=np.asarray(power_w, dtype=np.float64), logic=lg, source=source)

    @classmethod
    def of_counter(cls, meter: str, period_s: float, t_s: object, counter_uj: object,
                   max_energy_range_uj: int | None, source: str = "") -> Recording:
        return cls(meter, float(period_s), np.asarray(t_s, dtype=np.float64),
                   counter_uj=np.asarray(counter_uj, dtype=np.int64),
                   max_energy_range_uj=max_energy_range_uj, source=source)

    def energy_j(self) -> np.ndarray:
        """Cumulative joules since the first sample, at every sample instant (counters unwrapped)."""
        if self.counter_uj is not None:
            return np.concatenate([[0.0], np.cumsum(counter_deltas_uj(self))]) * 1e-6
        seg = self.segments()
        inner = (seg.power_w * (seg.end_s - seg.start_s))[: len(self.t_s) - 1]
        return np.concatenate([[0.0], np.cumsum(inner)])

    def segments(self) -> Segments:
        """The held power the recording stands for (see the module docstring)."""
        t = self.t_s
        gap_at = np.zeros(max(len(t) - 1, 0), dtype=bool)
        for g in self.gaps:
            gap_at[g.after_sample] = True
        if self.counter_uj is not None:
            # A counter knows the energy of every interval exactly, gap or not; over a gap only
            # the spread of that energy in time is a guess (flat), hence flagged.
            dt = np.diff(t)
            return Segments(t[:-1], t[1:], counter_deltas_uj(self) * 1e-6 / dt, gap_at)
        assert self.power_w is not None
        p = self.power_w.copy()
        # Over a gap nobody measured anything: the trapezoid of its two ends is the least bad guess.
        idx = np.flatnonzero(gap_at)
        p[idx] = 0.5 * (p[idx] + p[idx + 1])
        end = np.concatenate([t[1:], [t[-1] + self.period_s]])  # the last sample holds one period
        return Segments(t, end, p, np.concatenate([gap_at, [False]]))

    def sparsened(self, every: int) -> Recording:
        """Every `every`-th sample, as a meter that many times slower would have kept (Smaragdine's test)."""
        sl = slice(None, None, every)
        return replace(self, period_s=self.period_s * every, t_s=self.t_s[sl],
                       power_w=None if self.power_w is None else self.power_w[sl],
                       counter_uj=None if self.counter_uj is None else self.counter_uj[sl],
                       logic=None if self.logic is None else self.logic[sl], gaps=(), notes=())


def counter_deltas_uj(rec: Recording) -> np.ndarray:
    """Energy between consecutive counter readings, wraps undone: (b - a) mod (max + 1), never negative.

    Linux powercap: energy_uj counts up to max_energy_range_uj and starts again from 0
    (Documentation/power/powercap/powercap.rst, "energy_uj", "max_energy_range_uj"). One wrap
    per interval at most can be undone, so a counter must be read faster than it wraps.
    """
    assert rec.counter_uj is not None
    d = np.diff(rec.counter_uj)
    if np.any(d < 0):
        if rec.max_energy_range_uj is None:
            i = int(np.flatnonzero(d < 0)[0]) + 1
            raise RecordingError(
                f"{rec.where}: the energy counter goes down at sample {i} (t={rec.t_s[i]:.6f} s, "
                f"{rec.counter_uj[i - 1]} -> {rec.counter_uj[i]} uJ) and the recording gives no "
                "max_energy_range_uj, so a wrap cannot be told from a reset; record the zone's "
                "max_energy_range_uj in the header")
        d = np.mod(d, rec.max_energy_range_uj + 1)
    return d.astype(np.float64)


def check(rec: Recording, *, allow_gaps: bool = False,
          max_gap_periods: float = DEFAULT_MAX_GAP_PERIODS) -> Recording:
    """Refuse what would give wrong joules, one line naming where; returns the recording with gaps/notes.

    Refused: fewer than 2 samples, a non-positive period, NaN, timestamps that do not increase,
    negative power, a counter that goes down with no known range, and a gap longer than
    `max_gap_periods` periods unless `allow_gaps` (then it is kept, interpolated and flagged).
    """
    w = rec.where
    if not MIN_PERIOD_S <= rec.period_s <= MAX_PERIOD_S:  # also refuses NaN
        raise RecordingError(f"{w}: period_s {rec.period_s!r} is not a meter's sample period (from "
                             f"{MIN_PERIOD_S:g} s to {MAX_PERIOD_S:g} s)")
    rng = rec.max_energy_range_uj
    if rng is not None and not (isinstance(rng, int | np.integer) and 0 < rng <= MAX_COUNTER_UJ):
        raise RecordingError(f"{w}: max_energy_range_uj {rng!r} is not a counter's range (a whole number of uJ "
                             f"from 1 to {MAX_COUNTER_UJ})")
    t = rec.t_s
    values = rec.power_w if rec.counter_uj is None else rec.counter_uj
    if values is None or len(t) != len(values):
        raise RecordingError(f"{w}: {len(t)} timestamps but {0 if values is None else len(values)} values")
    if len(t) < 2:
        raise RecordingError(f"{w}: {len(t)} sample(s); at least 2 are needed to measure energy")
    bad = np.flatnonzero(~np.isfinite(t) | ~np.isfinite(np.asarray(values, dtype=np.float64)))
    if bad.size:
        i = int(bad[0])
        raise RecordingError(f"{w}: sample {i} is not a number (t={t[i]}, value={values[i]}); "
                             "drop or re-record it")
    far = np.flatnonzero(np.abs(t) > MAX_CLOCK_S)
    if far.size:
        i = int(far[0])
        raise RecordingError(f"{w}: sample {i} is at t={t[i]:g} s, not a time a meter's clock gives (within "
                             f"{MAX_CLOCK_S:g} s of 0: time.time() or the meter's own clock)")
    dt = np.diff(t)
    back = np.flatnonzero(dt <= 0)
    if back.size:
        i = int(back[0]) + 1
        raise RecordingError(f"{w}: timestamps do not increase at sample {i} (t={t[i]:.6f} s after "
                             f"{t[i - 1]:.6f} s); a recording must be one forward-running clock, "
                             "sort it or split it where the clock restarted")
    if rec.power_w is not None:
        neg = np.flatnonzero(rec.power_w < 0)
        if neg.size:
            i = int(neg[0])
            raise RecordingError(f"{w}: negative power {rec.power_w[i]:.6g} W at sample {i} "
                                 f"(t={t[i]:.6f} s); a meter on a load reads >= 0 W: check the shunt "
                                 "wiring, the meter's zero offset or the sign of the current")
        _refuse_power(rec, rec.power_w, "power")
    notes = list(rec.notes)
    if rec.counter_uj is not None:
        c = rec.counter_uj
        out = np.flatnonzero((c < 0) | (c > (rng if rng is not None else MAX_COUNTER_UJ)))
        if out.size:
            i = int(out[0])
            top = f"its max_energy_range_uj {rng}" if rng is not None else f"{MAX_COUNTER_UJ}"
            raise RecordingError(f"{w}: energy counter {c[i]} uJ at sample {i} (t={t[i]:.6f} s) is outside "
                                 f"0..{top}: not a reading of this counter")
        # raises when a decrease cannot be a wrap
        jump_j = counter_deltas_uj(rec) * 1e-6
        # Not the power between two readings: a counter steps in quanta (RAPL's every ~1 ms), and two reads
        # microseconds apart that straddle a step show a millisecond's energy over a microsecond. So an
        # interval may hold MAX_POWER_W for itself plus a second: a counter that jumps by more is damaged.
        high = np.flatnonzero(jump_j > MAX_POWER_W * (dt + COUNTER_SLACK_S))
        if high.size:
            i = int(high[0])
            raise RecordingError(f"{w}: the energy counter jumps by {jump_j[i]:.6g} J in {dt[i]:.6g} s after "
                                 f"sample {i} (t={t[i]:.6f} s): more than any meter poet reads can see "
                                 f"({MAX_POWER_W:g} W); a damaged recording")
        wraps = np.flatnonzero(np.diff(rec.counter_uj) < 0) + 1
        if wraps.size:
            notes.append(f"energy counter wrapped {wraps.size} time(s), first at t={t[wraps[0]]:.6f} s "
                         f"(sample {wraps[0]}); unwrapped modulo max_energy_range_uj+1="
                         f"{rec.max_energy_range_uj + 1}")
    limit = max_gap_periods * rec.period_s
    holes = np.flatnonzero(dt > limit)
    gaps = tuple(Gap(int(i), float(t[i]), float(t[i + 1])) for i in holes)
    if gaps and not allow_gaps:
        raise gap_error(rec, gaps, max_gap_periods)
    notes += [gap_note(rec, g) for g in gaps]
    return replace(rec, gaps=gaps, notes=tuple(notes))


def _refuse_power(rec: Recording, power_w: np.ndarray, what: str) -> None:
    high = np.flatnonzero(power_w > MAX_POWER_W)
    if high.size:
        i = int(high[0])
        raise RecordingError(f"{rec.where}: {what} {power_w[i]:.6g} W at sample {i} (t={rec.t_s[i]:.6f} s) is "
                             f"more than any meter poet reads can see ({MAX_POWER_W:g} W): a unit slip (mW or uW "
                             "written as W) or a damaged recording")


def gap_error(rec: Recording, gaps: Sequence[Gap], max_gap_periods: float = DEFAULT_MAX_GAP_PERIODS) -> RecordingError:
    """The one-line refusal of a recording with these gaps (the first named, the rest counted)."""
    g = gaps[0]
    more = f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""
    return RecordingError(
        f"{rec.where}: gap of {g.duration_s * 1e3:.3f} ms after sample {g.after_sample} "
        f"(t={g.start_s:.6f}..{g.end_s:.6f} s), {g.duration_s / rec.period_s:.0f}x the "
        f"{rec.period_s * 1e6:.6g} us period (limit {max_gap_periods:g}x){more}; re-record, or "
        "pass --allow-gaps to interpolate its energy (flagged)")


def gap_note(rec: Recording, g: Gap) -> str:
    how = "spread flat (the counter has its energy)" if rec.kind == "energy" else "interpolated"
    return f"gap of {g.duration_s * 1e3:.3f} ms at t={g.start_s:.6f} s {how}; ops over it are flagged"


def only_gaps_over(rec: Recording, spans: Sequence[tuple[float, float]]) -> Recording:
    """The recording keeping only the gaps that touch one of `spans` (and their notes): a hole outside
    the stretches being measured (between two sessions of a resumed run) costs them nothing."""
    inner = tuple(g for g in rec.gaps if any(g.end_s > a and g.start_s < b for a, b in spans))
    notes = [n for n in rec.notes if not n.startswith("gap of ")] + [gap_note(rec, g) for g in inner]
    return replace(rec, gaps=inner, notes=tuple(notes))


class Meter(Protocol):
    """What every backend offers (Zeus-style: one interface, the backend chosen at start-up).

    clock_s() and the t_s of every sample are the meter's own clock; read_energy_j() is the
    energy since start() up to the latest sample, so a window is two reads apart.
    """

    name: str
    period_s: float

    def start(self) -> None: ...

    def stop(self) -> Recording: ...

    def clock_s(self) -> float: ...

    def read_energy_j(self) -> float: ...


def save(rec: Recording, path: str | Path) -> None:
    head = f"# {FORMAT} meter={rec.meter} period_s={rec.period_s!r}"
    if rec.counter_uj is not None:
        if rec.max_energy_range_uj is not None:
            head += f" max_energy_range_uj={rec.max_energy_range_uj}"
        rows = [head, "t_s,energy_uj"] + [f"{t!r},{e}" for t, e in zip(rec.t_s.tolist(), rec.counter_uj.tolist())]
    elif rec.logic is not None:
        assert rec.power_w is not None
        rows = [head, "t_s,power_w,logic"] + [f"{t!r},{p!r},{int(lg)}"
                                              for t, p, lg in zip(rec.t_s.tolist(), rec.power_w.tolist(),
                                                                  rec.logic.tolist())]
    else:
        assert rec.power_w is not None
        rows = [head, "t_s,power_w"] + [f"{t!r},{p!r}" for t, p in zip(rec.t_s.tolist(), rec.power_w.tolist())]
    write_atomic(path, "\n".join(rows) + "\n")  # never through a planted link, never half-written


def _header_number(p: Path, meta: dict[str, str], key: str, whole: bool) -> float | int | None:
    """A number of the header line (period_s=, max_energy_range_uj=), or None when absent; one line if it
    is not one (its range is judged by `check`)."""
    text = meta.get(key)
    if text is None:
        return None
    try:
        return int(text) if whole else float(text)
    except ValueError:
        kind = "whole number" if whole else "number"
        raise RecordingError(f"{p}: the header's {key}={text[:40]!r} is not a {kind}") from None


def _counter(text: str) -> int:
    """A counter reading as written (an integer; an integral float as some loggers write it)."""
    try:
        return int(text)
    except ValueError:
        v = float(text)
        if not (math.isfinite(v) and v.is_integer() and abs(v) <= 2**53):  # beyond 2^53 a float is not exact
            raise ValueError(f"{text[:40]!r} is not a whole number of uJ") from None
        return int(v)


def load(path: str | Path, *, allow_gaps: bool = False,
         max_gap_periods: float = DEFAULT_MAX_GAP_PERIODS) -> Recording:
    """Read a recording file (a regular file, files.read_text: a link to /dev/zero is refused, not read
    forever); every refusal is a RecordingError (one line, status 2)."""
    p = Path(path)
    try:
        lines = read_text(p, "meter recording", limit=RECORDING_LIMIT).splitlines()
    except UsageError as exc:
        raise RecordingError(str(exc)) from None
    if not lines or not lines[0].startswith(f"# {FORMAT}"):
        raise RecordingError(f"{p} is not a poet meter recording (its first line must be '# {FORMAT} meter=... "
                             "period_s=...')")
    meta = dict(kv.split("=", 1) for kv in lines[0].split()[2:] if "=" in kv)
    if "meter" not in meta or "period_s" not in meta:
        raise RecordingError(f"{p}: the header must name meter= and period_s=")
    period = _header_number(p, meta, "period_s", whole=False)
    rng = _header_number(p, meta, "max_energy_range_uj", whole=True)
    cols = lines[1].strip().split(",") if len(lines) > 1 else []
    if cols not in (["t_s", "power_w"], ["t_s", "power_w", "logic"], ["t_s", "energy_uj"]):
        raise RecordingError(f"{p}: columns must be t_s,power_w[,logic] or t_s,energy_uj, got {','.join(cols)[:80]}")
    counter = cols[1] == "energy_uj"
    rows, counts = [], []
    for n, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        parts = line.split(",")
        try:
            if len(parts) != len(cols):
                raise ValueError(f"{len(parts)} fields")
            if counter:
                c = _counter(parts[1])
                if not 0 <= c <= MAX_COUNTER_UJ:  # before numpy's int64 takes it (it would wrap or overflow)
                    raise ValueError(f"an energy counter of {c} uJ is outside 0..{MAX_COUNTER_UJ}")
                counts.append(c)
                rows.append([float(parts[0])])
            else:
                rows.append([float(x) for x in parts])
        except ValueError as exc:
            raise RecordingError(f"{p} line {n}: cannot read {line[:80]!r} ({exc})") from None
    meter = meta["meter"]
    assert period is not None
    if counter:
        a = np.asarray(rows, dtype=np.float64).reshape(-1, 1)
        rec = Recording.of_counter(meter, float(period), a[:, 0], np.asarray(counts, dtype=np.int64),
                                   None if rng is None else int(rng), source=str(p))
    else:
        a = np.asarray(rows, dtype=np.float64).reshape(-1, len(cols))
        logic = None
        if len(cols) == 3:
            bad = np.flatnonzero((a[:, 2] != np.round(a[:, 2])) | (a[:, 2] < 0) | (a[:, 2] > 255))
            if bad.size:
                i = int(bad[0])
                raise RecordingError(f"{p} sample {i}: logic {a[i, 2]!r} is not the bits of inputs D0-D7 "
                                     "(an integer 0-255, bit n = input Dn)")
            logic = a[:, 2]
        rec = Recording.of_power(meter, float(period), a[:, 0], a[:, 1], logic, source=str(p))
    return check(rec, allow_gaps=allow_gaps, max_gap_periods=max_gap_periods)


@dataclass
class SampleBuffer:
    """Samples as they arrive from a live meter, turned into a checked Recording at the end."""

    meter: str
    period_s: float
    max_energy_range_uj: int | None = None
    t_s: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    logic: list[int] = field(default_factory=list)

    def recording(self, *, counter: bool, allow_gaps: bool = True) -> Recording:
        # Live meters allow gaps: a stalled poll is reported in notes, not fatal mid-run.
        if counter:
            rec = Recording.of_counter(self.meter, self.period_s, self.t_s, self.values, self.max_energy_range_uj)
        else:
            rec = Recording.of_power(self.meter, self.period_s, self.t_s, self.values,
                                     self.logic if self.logic else None)
        return check(rec, allow_gaps=allow_gaps)
