"""Measured energy per op: a meter recording laid over the op event timeline.

The rule (`align`). The recording is piecewise-constant power: each sample holds from its
instant until the next, i.e. at every instant the power is the most recent sample at or
before it (Smaragdine's recency rule). That power is integrated over every event's interval.
A sample interval that spans several consecutive events is split between them by overlap
time; events that overlap each other in time share the power equally while they overlap:
at every instant the power is divided by the number of events active then. This is the
issue's "events that overlap split it equally", applied instant by instant; for events that
do not overlap each other it reduces to splitting each sample by overlap time. Energy at
instants no event covers (interpreter work between ops, idle) is `unattributed_j`.

Refinement (`refine` > 0). Splitting a straddling sample by overlap time assumes the power
was flat inside it, which is off by up to a quarter of a period times the power step at
every op boundary: several percent for an op only 10 samples long. With `refine` rounds the
split is instead by overlap time x each timeline piece's estimated power (Richardson-Lucy
deconvolution with the timeline as the model): round 0 is exactly the rule above, every
round keeps each sample's energy whole and never makes a share negative. Equal sharing
among concurrent events is kept: the deconvolution estimates the power of each stretch of
constant activity, then that stretch is split equally among the events active in it.

Resolvable: an event spanning fewer than `min_samples` meter periods cannot have its own
power recovered; its energy is still given (its share of the samples around it) but flagged.

Sync: a board's op times reach the meter clock through `Sync` (offset and drift), fitted
from marker edges (the firmware raises a GPIO while an op runs; the PPK2's logic inputs
record it) or, for meters on the host clock, from the host's step start times.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from poet.energy.meters.base import MeterError, Recording
from poet.energy.tracefile import Trace

DEFAULT_MIN_SAMPLES = 10
# Rounds of deconvolution by default; measured in benchmarks/meter_accuracy.py (docs/benchmarks.md).
DEFAULT_REFINE = 50


class Event(NamedTuple):
    start_s: float
    end_s: float
    key: Hashable


@dataclass(frozen=True)
class EventEnergy:
    key: Hashable
    start_s: float
    end_s: float
    energy_j: float
    samples: float       # meter periods the event spans
    resolvable: bool     # samples >= min_samples
    interpolated: bool   # part of it lies over a gap in the recording


@dataclass(frozen=True)
class Alignment:
    events: list[EventEnergy]
    unattributed_j: float   # energy no event covers, over the events' span rounded out to whole samples
    period_s: float
    min_samples: int
    notes: tuple[str, ...]
    idle: np.ndarray        # (n, 3): start_s, end_s, energy_j of every stretch no event covers

    def idle_j(self, start_s: float, end_s: float) -> float:
        """Unattributed energy inside [start_s, end_s); pass those instants as `cuts` to align()."""
        s, e = self.idle[:, 0], self.idle[:, 1]
        inside = (s >= start_s) & (e <= end_s)
        return float(np.sum(self.idle[inside, 2]))

    @property
    def total_j(self) -> float:
        return sum(e.energy_j for e in self.events) + self.unattributed_j

    def unresolvable(self) -> list[EventEnergy]:
        return [e for e in self.events if not e.resolvable]


def align(rec: Recording, events: Sequence[Event], *, min_samples: int = DEFAULT_MIN_SAMPLES,
          refine: int = DEFAULT_REFINE, cuts: Sequence[float] = ()) -> Alignment:
    """Per-event energy from a checked recording and events on the meter's clock (see module doc).

    `cuts` are extra instants where the unattributed stretches are split (a step's end), so
    Alignment.idle_j can answer for an interval ending there.
    """
    if not events:
        return Alignment([], 0.0, rec.period_s, min_samples, rec.notes, np.zeros((0, 3)))
    seg = rec.segments()
    ev_s = np.array([e.start_s for e in events], dtype=np.float64)
    ev_e = np.array([e.end_s for e in events], dtype=np.float64)
    if np.any(ev_e < ev_s):
        i = int(np.flatnonzero(ev_e < ev_s)[0])
        raise MeterError(f"op event {events[i].key} ends before it starts ({ev_s[i]:.6f} > {ev_e[i]:.6f} s)")
    extra = np.asarray(cuts, dtype=np.float64)
    lo, hi = float(np.min(np.concatenate([ev_s, extra]))), float(np.max(np.concatenate([ev_e, extra])))
    tol = 1e-9 * max(1.0, abs(hi))
    if lo < seg.start_s[0] - tol or hi > seg.end_s[-1] + tol:
        raise MeterError(f"the op events (and step windows) run from {lo:.6f} to {hi:.6f} s but {rec.where} "
                         f"covers only {seg.start_s[0]:.6f} to {seg.end_s[-1]:.6f} s on the meter clock; check the "
                         "sync (marker channel, step start times) or record longer")
    # The span rounded out to whole samples: a sample cut at the first or last event would hide
    # the part of its energy outside, and the deconvolution needs every sample whole.
    first = max(int(np.searchsorted(seg.start_s, lo, side="right")) - 1, 0)
    last = max(int(np.searchsorted(seg.start_s, hi, side="right")) - 1, 0)
    lo, hi = min(lo, float(seg.start_s[first])), max(hi, float(seg.end_s[last]))
    # Elementary pieces: between every sample boundary and every event boundary inside [lo, hi].
    b = np.unique(np.clip(np.concatenate([seg.start_s, seg.end_s, ev_s, ev_e, extra]), lo, hi))
    b0, b1 = b[:-1], b[1:]
    length = b1 - b0
    k = np.clip(np.searchsorted(seg.start_s, b0, side="right") - 1, 0, len(seg.start_s) - 1)
    # Events active on each piece: started at or before its start, not yet ended.
    active = (np.searchsorted(np.sort(ev_s), b0, side="right")
              - np.searchsorted(np.sort(ev_e), b0, side="right"))
    # Timeline pieces: runs of constant activity; an event boundary opens a new one.
    ev_bounds = np.unique(np.concatenate([[lo], ev_s, ev_e, np.clip(extra, lo, hi)]))
    j = np.searchsorted(ev_bounds, b0, side="right") - 1
    piece_e = _deconvolve(seg.power_w[k] * length, k, j, length, int(j.max()) + 1, refine)
    share = np.where(active > 0, piece_e / np.maximum(active, 1), 0.0)
    none = active == 0
    unattributed = float(np.sum(piece_e[none]))
    idle = np.stack([b0[none], b1[none], piece_e[none]], axis=1)
    cum = np.concatenate([[0.0], np.cumsum(share)])
    flag = np.concatenate([[0], np.cumsum(seg.interpolated[k].astype(np.int64))])
    i0, i1 = np.searchsorted(b, ev_s), np.searchsorted(b, ev_e)
    out = []
    for n, e in enumerate(events):
        spans = (e.end_s - e.start_s) / rec.period_s
        out.append(EventEnergy(e.key, e.start_s, e.end_s, float(cum[i1[n]] - cum[i0[n]]), spans,
                               spans >= min_samples, bool(flag[i1[n]] - flag[i0[n]])))
    return Alignment(out, unattributed, rec.period_s, min_samples, rec.notes, idle)


def _deconvolve(piece_j: np.ndarray, k: np.ndarray, j: np.ndarray, length: np.ndarray, pieces: int,
                rounds: int) -> np.ndarray:
    """Energy of each elementary piece: each sample's energy split over its pieces.

    Round 0 splits by length (flat power inside a sample). Each further round splits by length
    x the power estimate of the timeline piece (j) each elementary piece belongs to, then
    re-estimates those powers from the shares: Richardson-Lucy, so sample energies stay whole
    and shares stay >= 0.
    """
    sample_e = np.bincount(k, weights=piece_j)          # energy of each sample (within [lo, hi])
    piece_len = np.bincount(j, weights=length, minlength=pieces)
    power = np.ones(pieces)
    for _ in range(rounds + 1):
        w = length * power[j]
        denom = np.bincount(k, weights=w, minlength=len(sample_e))[k]
        elem_e = np.where(denom > 0, sample_e[k] * w / np.where(denom > 0, denom, 1.0), 0.0)
        power = np.bincount(j, weights=elem_e, minlength=pieces) / np.where(piece_len > 0, piece_len, 1.0)
    return elem_e


@dataclass(frozen=True)
class Sync:
    """Board (or host) seconds to meter seconds: t_meter = offset_s + scale * t."""

    offset_s: float
    scale: float = 1.0
    residual_s: float = 0.0   # worst misfit of the markers used, for the report

    def to_meter(self, t_s: float) -> float:
        return self.offset_s + self.scale * t_s


def fit_sync(board_s: Sequence[float], meter_s: Sequence[float], period_s: float) -> Sync:
    """Offset and drift from matched instants (marker edges vs the op boundaries the trace implies).

    The board's crystal and the meter's differ by tens of ppm, which over a long run is many
    periods, hence a line, not just an offset. A fit worse than two periods means the markers
    were paired with the wrong ops.
    """
    a, m = np.asarray(board_s, dtype=np.float64), np.asarray(meter_s, dtype=np.float64)
    if len(a) != len(m) or len(a) == 0:
        raise MeterError(f"sync needs matching instants: {len(a)} from the trace, {len(m)} from the meter markers")
    if len(a) == 1:
        return Sync(float(m[0] - a[0]))
    scale, offset = np.polyfit(a, m, 1)
    resid = float(np.max(np.abs(offset + scale * a - m)))
    if resid > 2 * period_s:
        raise MeterError(f"the meter's markers do not line up with the trace's op boundaries (worst misfit "
                         f"{resid * 1e6:.1f} us, more than 2 meter periods): wrong marker channel, or ops "
                         "missing from the trace or the recording")
    return Sync(float(offset), float(scale), resid)


def marker_pulses(rec: Recording, channel: int) -> list[tuple[float, float]]:
    """(rise, fall) instants of the high pulses on one digital channel.

    An edge happened somewhere between the sample that still shows the old level and the first
    that shows the new one; the midpoint is off by at most half a period.
    """
    if rec.logic is None:
        raise MeterError(f"{rec.where} has no digital channels; record with the marker wired to the "
                         "meter's logic inputs, or sync from step times")
    level = ((rec.logic.astype(np.int64) >> channel) & 1).astype(np.int8)
    d = np.diff(level)
    mid = 0.5 * (rec.t_s[:-1] + rec.t_s[1:])
    rises, falls = mid[d == 1], mid[d == -1]
    if level[0]:
        falls = falls[1:]       # a pulse already high at the start is not a whole op
    if level[-1]:
        rises = rises[:-1]
    return list(zip(rises.tolist(), falls.tolist()))


def record_keys(trace: Trace) -> list[tuple[int, int]]:
    """(step index into trace.steps, record index): what accounting's energy_of(step, i) is asked."""
    return [(n, i) for n, st in enumerate(trace.steps) for i in range(len(st["records"]))]


def events_from_markers(trace: Trace, rec: Recording, channel: int) -> list[Event]:
    """One pulse per trace record, in order (the firmware holds the marker high while an op runs)."""
    pulses = marker_pulses(rec, channel)
    keys = record_keys(trace)
    if len(pulses) != len(keys):
        raise MeterError(f"marker channel D{channel} shows {len(pulses)} op pulses but the trace has "
                         f"{len(keys)} records: check the channel, that the recording spans the whole run, "
                         "and that the firmware was built with the op marker")
    return [Event(s, e, key) for (s, e), key in zip(pulses, keys)]


def step_windows(trace: Trace, step_start_s: Sequence[float], sync: Sync | None = None) -> list[tuple[float, float]]:
    """Each step's [start, start + step_ticks / tick_hz) on the meter clock, for its overhead energy."""
    sync = sync or Sync(0.0)
    return [(sync.to_meter(t0), sync.to_meter(t0 + float(st["step_ticks"]) / trace.tick_hz))
            for st, t0 in zip(trace.steps, step_start_s)]


def events_from_steps(trace: Trace, step_start_s: Sequence[float], sync: Sync | None = None) -> list[Event]:
    """Records laid end to end from each step's start, ticks / tick_hz seconds each.

    For meters on the host's clock: `step_start_s` are the host's timestamps of each step's
    start (time.time() just before STEP was sent, as the polling meters' samples are stamped).
    What the step spends beyond its records (decoding, tracing) falls after the last record
    and is left unattributed.
    """
    if len(step_start_s) != len(trace.steps):
        raise MeterError(f"{len(step_start_s)} step start times for {len(trace.steps)} trace steps")
    sync = sync or Sync(0.0)
    out = []
    for n, (st, t0) in enumerate(zip(trace.steps, step_start_s)):
        t = 0.0
        for i, rec in enumerate(st["records"]):
            d = float(rec[4]) / trace.tick_hz
            out.append(Event(sync.to_meter(t0 + t), sync.to_meter(t0 + t + d), (n, i)))
            t += d
    return out


@dataclass(frozen=True)
class HostSteps:
    """The trace's records on the meter clock, placed from each step's host window (device.TimedStep)."""

    events: list[Event]                     # keyed (step index, record index)
    steps: list[tuple[float, float]]        # each step's extent on the meter clock: what the account covers
    windows: list[tuple[float, float]]      # [host_t0, host_t1] of each step on the meter clock
    stretched: bool                         # board time spread over the window (virtual time), not real time

    @property
    def slack_s(self) -> list[float]:
        """Window minus step, per step: the link's part of the window, the bound on the sync error."""
        return [(w1 - w0) - (s1 - s0) for (w0, w1), (s0, s1) in zip(self.windows, self.steps, strict=True)]


def events_from_host_windows(trace: Trace, durations_s: Sequence[Sequence[float]], rest_s: Sequence[float], *,
                             offset_s: float = 0.0, stretch: bool = False,
                             tolerance: float = 0.01) -> HostSteps:
    """Place every record of every step on the meter clock from the step's host window.

    `durations_s[k][i]` is record i of step k in board seconds, `rest_s[k]` the step's time outside
    its records (laid after them, as accounting charges it); `offset_s` is the meter's clock minus
    the host's. A real board's timer runs in real time: the step starts when STEP is sent (the board
    starts on a frame of a few bytes; the trace frames and DONE follow the step) and takes its board
    time, which must fit the window. An emulated board's time is virtual (instructions) and has no
    fixed relation to the host's: `stretch` spreads the step over the whole window in proportion.
    """
    times = trace.host_times()
    if times is None:
        raise MeterError("this trace predates host timestamps (no host_t0/host_t1 per step): rerun it "
                         "with this poet to measure it with a meter")
    if not (len(durations_s) == len(rest_s) == len(times)):
        raise MeterError(f"{len(durations_s)} steps of record times for {len(times)} trace steps")
    events: list[Event] = []
    steps, windows = [], []
    for k, ((h0, h1), durs, rest) in enumerate(zip(times, durations_s, rest_s, strict=True)):
        w0, w1 = h0 + offset_s, h1 + offset_s
        board = float(sum(durs)) + float(rest)
        if stretch:
            scale = (w1 - w0) / board if board > 0 else 0.0
        else:
            if board > (w1 - w0) * (1 + tolerance):
                raise MeterError(f"step {k} took {board * 1e3:.3f} ms of board time but the host saw only "
                                 f"{(w1 - w0) * 1e3:.3f} ms from STEP to DONE: the trace's tick_hz is not the "
                                 "board timer's rate, or its host times belong to another run")
            scale = 1.0
        t = w0
        for i, d in enumerate(durs):
            events.append(Event(t, t + d * scale, (k, i)))
            t += d * scale
        steps.append((w0, w1 if stretch else w0 + board))
        windows.append((w0, w1))
    return HostSteps(events, steps, windows, stretch)


OVERHEAD_RECORD = -1   # accounting's record index for the part of a step no record covers


@dataclass(frozen=True)
class MeasuredEnergy:
    """Joules per trace record, callable as accounting's energy_of(step, record_index).

    step is the index into trace.steps; record_index OVERHEAD_RECORD (-1) asks for the step's
    remainder: the unattributed energy inside the step's window (between and after its records).
    """

    alignment: Alignment
    by_record: dict[tuple[int, int], EventEnergy]
    overhead_j: list[float]

    def __call__(self, step: int, record_index: int) -> float:
        if record_index == OVERHEAD_RECORD and 0 <= step < len(self.overhead_j):
            return self.overhead_j[step]
        try:
            return self.by_record[(step, record_index)].energy_j
        except KeyError:
            raise MeterError(f"no measured energy for step {step} record {record_index}: the "
                             "recording was aligned with another trace") from None

    def resolvable(self, step: int, record_index: int) -> bool:
        return self.by_record[(step, record_index)].resolvable


def measured_energy(trace: Trace, rec: Recording, events: Sequence[Event], *,
                    windows: Sequence[tuple[float, float]] | None = None,
                    min_samples: int = DEFAULT_MIN_SAMPLES, refine: int = DEFAULT_REFINE) -> MeasuredEnergy:
    """The trace's records (events keyed (step index, record index)) charged from a recording.

    `windows` are the steps' extents on the meter clock (step_windows() for host-timed steps);
    without them a step spans its first record's start to its last record's end.
    """
    keys = record_keys(trace)
    by_step: dict[int, list[Event]] = {}
    for e in events:
        by_step.setdefault(e.key[0], []).append(e)  # type: ignore[index]
    if windows is None:
        windows = [(min(e.start_s for e in by_step[n]), max(e.end_s for e in by_step[n])) if n in by_step
                   else (0.0, 0.0) for n in range(len(trace.steps))]
    if len(windows) != len(trace.steps):
        raise MeterError(f"{len(windows)} step windows for {len(trace.steps)} trace steps")
    al = align(rec, events, min_samples=min_samples, refine=refine, cuts=[t for w in windows for t in w])
    by = {e.key: e for e in al.events}
    missing = [k for k in keys if k not in by]
    if missing:
        raise MeterError(f"{len(missing)} trace records have no event (first: step {missing[0][0]} record "
                         f"{missing[0][1]}); build events with events_from_markers or events_from_steps")
    return MeasuredEnergy(al, by, [al.idle_j(a, b) for a, b in windows])  # type: ignore[arg-type]
