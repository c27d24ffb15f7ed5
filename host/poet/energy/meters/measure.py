"""`poet report TRACE --meter RECORDING`: a power meter's recording measured against a saved trace.

The recording is placed on the trace's steps by their host times (`--meter-offset` moves the meter's
clock onto the host's) or by the op marker's pulses on one of its logic inputs (`--markers CH`), its
gaps judged over the steps only, then split among the records by poet.energy.meters.align; `measure`
returns accounting's energy_of and the lines the report's header says of it. Every refusal is one line.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from poet.boards import Board
from poet.energy.accounting import Account, account
from poet.energy.fmt import fmt_j, fmt_s
from poet.energy.meters import align as al
from poet.energy.meters import base as meter_base
from poet.energy.tracefile import Trace
from poet.errors import PoetError
from poet.paths import shown


@dataclass(frozen=True)
class Measured:
    """A meter's recording aligned with a trace: accounting's energy_of, and what the report says of it."""

    energy_of: al.MeasuredEnergy
    recording: meter_base.Recording
    placed: al.HostSteps | None  # the host-window placement; None when aligned by marker pulses
    modelled: Account  # the same trace's modelled account, shown beside the measured one
    unresolvable: list[tuple[int, int]]  # (step, record) spanning fewer than min_samples meter periods
    over_gaps: list[tuple[int, int]]  # (step, record) lying partly over a gap (interpolated)
    lines: list[str]  # the header's source lines
    steps: list[tuple[float, float]] = field(default_factory=list)  # each step's extent on the meter clock
    markers: int | None = None  # the logic input (Dn) the records were aligned by, or None: host windows


def _period(s: float) -> str:
    return f"{s * 1e3:g} ms" if s >= 1e-3 else f"{s * 1e6:g} us"


def _placement(trace: Trace, board: Board, modelled: Account) -> tuple[list[list[float]], list[float], bool]:
    """Board seconds of each record and each step's remainder, and whether they are virtual time.

    A real board's records take their ticks at the timer's rate, in real time. An emulated board's
    ticks are instructions (virtual time) and its paging took none (semihosting), so its records
    take their modelled board time (paging at the storage model, as the planner and the modelled
    account cost it), and only their proportions within a step mean anything on the host's clock.
    """
    durs: list[list[float]] = [[] for _ in trace.steps]
    rest = [0.0] * len(trace.steps)
    if trace.provenance == "emulated":
        for c in modelled.charges:
            if c.record == al.OVERHEAD_RECORD:
                rest[c.step] = c.time_s
            else:
                durs[c.step].append(c.time_s)
        return durs, rest, True
    for k, st in enumerate(trace.steps):
        durs[k] = [r[4] / trace.tick_hz for r in st["records"]]
        rest[k] = (st["step_ticks"] - sum(r[4] for r in st["records"])) / trace.tick_hz
    return durs, rest, False


def measure(trace: Trace, board: Board, recording: Path, *, allow_gaps: bool = False, offset_s: float = 0.0,
            min_samples: int = al.DEFAULT_MIN_SAMPLES, where: str = "trace", markers: int | None = None) -> Measured:
    """Align a meter's recording (meters/base.py's CSV) with the trace's steps; every refusal one line.

    Sync, without `markers`: each step's host window, [host_t0, host_t1] = STEP sent .. DONE arrived in
    time.time() seconds (device.TimedStep), moved to the meter's clock by `offset_s` (meter minus host;
    0 for the polling meters, which stamp time.time() too). Inside a step the records sit at their board
    times (`_placement`).

    Sync with `markers` = n: the op marker's pulses on the recording's logic input Dn (the firmware holds
    the pin high while each schedule instruction runs), one per trace record, in order
    (align.events_from_markers), all on the meter's own clock; each step spans its first pulse's rise to
    its last pulse's fall (the loop the firmware's step_ticks counts). Refused when the recording has no
    logic column or the pulses are not one per record (`marker_events`).

    The account then charges each record the meter's joules over its span (align.py: recency hold,
    overlap split, equal share), each step's remainder what no record covers inside the step.
    """
    if markers is None and trace.host_times() is None:
        raise PoetError(f"{where}: this trace predates host timestamps (its steps have no host_t0/host_t1, "
                        f"so nothing ties it to a meter's clock): rerun it with this poet, or align by the op "
                        f"marker (--markers D0)", status=2)
    # Gaps are judged over the steps only (below): one between two sessions of a resumed run is harmless.
    rec = meter_base.load(recording, allow_gaps=True)
    modelled = account(trace, board)
    placed: al.HostSteps | None = None
    if markers is None:
        durs, rest, stretch = _placement(trace, board, modelled)
        placed = al.events_from_host_windows(trace, durs, rest, offset_s=offset_s, stretch=stretch)
        events, steps = placed.events, placed.steps
        _covers(rec, steps, offset_s)
    else:
        events, steps = marker_events(trace, rec, markers, _placement(trace, board, modelled)[0])
    gaps = meter_base.only_gaps_over(rec, steps).gaps
    if gaps and not allow_gaps:
        raise meter_base.gap_error(rec, gaps)
    # every gap stays interpolated (segments); only those over a step are the account's business
    rec = replace(rec, notes=meter_base.only_gaps_over(rec, steps).notes)
    me = al.measured_energy(trace, rec, events, windows=steps, min_samples=min_samples)
    # A free is bookkeeping of a few ticks, never resolvable and never worth a flag: ops only.
    keys = [(k, i) for k, i in al.record_keys(trace) if trace.steps[k]["records"][i][2] != "free"]
    unres = [k for k in keys if not me.by_record[k].resolvable]
    gapped = [k for k in keys if me.by_record[k].interpolated]
    if placed is not None:
        lines = _measured_lines(trace, rec, recording, placed, me, unres, gapped, offset_s, min_samples)
    else:
        assert markers is not None
        lines = _marker_lines(trace, rec, recording, markers, events, steps, me, unres, gapped, min_samples)
    return Measured(me, rec, placed, modelled, unres, gapped, lines, steps, markers)


def _covers(rec: meter_base.Recording, steps: list[tuple[float, float]], offset_s: float) -> None:
    """Refuse a recording that does not cover the host-placed steps (a meter on another clock, or stopped early)."""
    lo, hi = steps[0][0], steps[-1][1]
    seg = rec.segments()
    a, b = float(seg.start_s[0]), float(seg.end_s[-1])
    if a > lo or b < hi:
        what = "starts after the first step" if a > lo else "ends before the last step"
        clock = f"host clock + --meter-offset {offset_s:g} s" if offset_s else "host clock, time.time()"
        raise meter_base.RecordingError(
            f"{rec.where} covers t={a:.3f}..{b:.3f} s but the trace's steps ran t={lo:.3f}..{hi:.3f} s "
            f"({clock}): it {what}; record over the whole run, or give --meter-offset S (the meter's clock "
            "minus the host's) for a meter with a clock of its own, or align by the op marker (--markers D0)")


def marker_events(trace: Trace, rec: meter_base.Recording, channel: int,
                  durs: list[list[float]] | None = None) -> tuple[list[al.Event], list[tuple[float, float]]]:
    """The trace's records from the op marker's pulses on logic input D`channel`, and each step's extent
    (its first pulse's rise to its last pulse's fall); refused in one line (status 2) when the recording
    has no logic column or its pulses are not one per record."""
    if rec.logic is None:
        cols = "t_s,energy_uj" if rec.kind == "energy" else "t_s,power_w"
        raise meter_base.RecordingError(
            f"{rec.where} has no logic column (its columns are {cols}, not t_s,power_w,logic), so no marker "
            f"pulses to align by: record with the board's marker pin wired to the PPK2's logic input D{channel} "
            "(docs/energy.md, Op marker), or drop --markers to align by the steps' host times")
    keys = al.record_keys(trace)
    if not keys:
        raise PoetError("the trace has no records, so no marker pulses to match: nothing to measure", status=2)
    pulses = al.marker_pulses(rec, channel)
    if len(pulses) != len(keys):
        bursts = _step_bursts(trace, pulses)
        if bursts is None:
            raise meter_base.RecordingError(
                f"{rec.where}: marker D{channel} shows {len(pulses)} pulses but the trace has {len(keys)} records "
                f"(one pulse per record expected): {_pulse_cause(trace, rec, channel, len(pulses), len(keys))}")
        return _events_in_bursts(trace, bursts, durs), bursts
    events = al.events_from_markers(trace, rec, channel)
    steps: list[tuple[float, float]] = []
    at = 0
    for st in trace.steps:
        n = len(st["records"])
        if n:
            steps.append((events[at].start_s, events[at + n - 1].end_s))
        else:  # a step with no records (none in a real trace): an empty window where the last one ended
            t = steps[-1][1] if steps else events[0].start_s if events else 0.0
            steps.append((t, t))
        at += n
    return events, steps


BURST_SEPARATION = 10.0  # a gap between steps is this many times longer than any gap inside one


def _step_bursts(trace: Trace, pulses: list[tuple[float, float]]) -> list[tuple[float, float]] | None:
    """Each step's [first rise, last fall] when the pulses are fewer than the records but fall in one
    burst per step: on a real board ops a few microseconds apart merge at the meter's sample period
    (10 us on a PPK2), and a short op (a free) can fall between two samples, but the link's round trip
    between steps leaves a gap far longer than any inside a step. None when they do not split so."""
    counts = [len(st["records"]) for st in trace.steps]
    k = len(counts)
    if not pulses or len(pulses) > sum(counts) or len(pulses) < k or 0 in counts:
        return None
    gaps = np.array([pulses[j + 1][0] - pulses[j][1] for j in range(len(pulses) - 1)])
    cut = np.sort(np.argsort(gaps)[::-1][:k - 1]) if k > 1 else np.array([], dtype=int)
    inside = np.delete(gaps, cut)
    if k > 1 and inside.size and gaps[cut].min() < BURST_SEPARATION * inside.max():
        return None
    starts = [0, *(int(c) + 1 for c in cut)]
    ends = [*(int(c) for c in cut), len(pulses) - 1]
    if any(e - a + 1 > n for a, e, n in zip(starts, ends, counts, strict=True)):
        return None  # more pulses in a step than it has records: not this trace's run
    return [(pulses[a][0], pulses[e][1]) for a, e in zip(starts, ends, strict=True)]


def _events_in_bursts(trace: Trace, bursts: list[tuple[float, float]],
                      durs: list[list[float]] | None = None) -> list[al.Event]:
    """The records of each step laid end to end over its burst in proportion to their board time (`durs`,
    _placement's: a real board's ticks, an emulated board's modelled time; default the ticks), what the
    step's interpreter adds spread over them."""
    out = []
    for n, (st, (a, b)) in enumerate(zip(trace.steps, bursts, strict=True)):
        w = list(durs[n]) if durs is not None else [max(float(r[4]), 0.0) for r in st["records"]]
        w = w if sum(w) > 0 else [1.0] * len(w)
        t = a
        for i, d in enumerate(w):
            span = (b - a) * d / sum(w)
            out.append(al.Event(t, t + span, (n, i)))
            t += span
    return out


def _pulse_cause(trace: Trace, rec: meter_base.Recording, channel: int, got: int, want: int) -> str:
    """The likely reason the pulses on D`channel` are not one per record, for the refusal."""
    assert rec.logic is not None
    other = [c for c in range(8) if c != channel and np.any((rec.logic >> c) & 1)
             and len(al.marker_pulses(rec, c)) == want]
    if other:
        return f"D{other[0]} shows {want} pulses, one per record: the marker is wired there, give --markers {other[0]}"
    if got == 0:
        return (f"no pulse at all: the marker pin is not wired to D{channel} (docs/energy.md, Op marker), or the "
                "board runs a notrace firmware image, which does not drive the marker")
    if got > want:
        return ("more pulses than records: the recording spans more than this run's steps (another run's "
                "recording, or a resumed run's), or the marker is shared with something else")
    return ("fewer pulses than records: another run's recording, a recording that starts after the first step "
            "or stops before the last, or ops closer together than one "
            f"meter sample ({_period(rec.period_s)}) merging their pulses")


def _names(trace: Trace, keys: list[tuple[int, int]], most: int = 4) -> str:
    """The distinct ops among these records, `tensor (kind)`, the first few."""
    seen: list[str] = []
    for k, i in keys:
        r = trace.steps[k]["records"][i]
        name = f"{trace.nodes[r[1]]['name']} ({r[2]})"
        if name not in seen:
            seen.append(name)
    return ", ".join(seen[:most]) + (f", ... ({len(seen)} ops)" if len(seen) > most else "")


def _measured_lines(trace: Trace, rec: meter_base.Recording, path: Path, placed: al.HostSteps,
                    me: al.MeasuredEnergy, unres: list[tuple[int, int]], gapped: list[tuple[int, int]],
                    offset_s: float, min_samples: int) -> list[str]:
    seg = rec.segments()
    in_steps = sum(seg.energy_between(s0, s1, measured_only=True) for s0, s1 in placed.steps)
    span = seg.energy_between(placed.windows[0][0], placed.windows[-1][1], measured_only=True)
    clock = "time.time()" + (f", meter clock = host + {offset_s:g} s" if offset_s else "")
    med_w = statistics.median(w1 - w0 for w0, w1 in placed.windows)
    if placed.stretched:
        how = (f"an emulated trace's board time is virtual (instructions), not wall time: each step's records "
               f"are spread over its host window (median {med_w * 1e3:.3f} ms) in proportion to their modelled "
               f"board time")
    else:
        slack = statistics.median(placed.slack_s)
        how = (f"each step starts at its STEP, records at their ticks; the windows exceed the steps by "
               f"{slack * 1e3:.3f} ms (median; link transfers), the bound on the sync error")
    head = [f"  source: measured by {rec.meter} at {_period(rec.period_s)} ({shown(path)}), aligned with the "
            f"trace by its steps' host times",
            f"  sync: host window per step = STEP sent .. DONE arrived ({clock}); {how}"]
    return _sync_lines(trace, rec, me, head, unres, gapped, min_samples, span, in_steps,
                       "from the first STEP to the last DONE")


def _sync_lines(trace: Trace, rec: meter_base.Recording, me: al.MeasuredEnergy, head: list[str],
                unres: list[tuple[int, int]], gapped: list[tuple[int, int]], min_samples: int, span: float,
                in_steps: float, over: str) -> list[str]:
    """The measured header after its source and sync lines (`head`), whatever aligned the recording:
    the unresolvable ops, the gaps, the recording's notes, and the energy inside and between the steps."""
    n = sum(1 for k, i in me.by_record if trace.steps[k]["records"][i][2] != "free")  # type: ignore[misc]
    out = [*head,
           f"  resolution: {len(unres)} of {n} ops (records other than frees) span fewer than {min_samples} "
           f"meter samples "
           f"({min_samples * rec.period_s * 1e3:g} ms): their energy is their share of the samples around them, "
           f"flagged" + (f" ({_names(trace, unres)})" if unres else "")]
    if gapped:
        out.append(f"  gaps: {len(gapped)} records lie over a gap in the recording (--allow-gaps: their energy is "
                   f"interpolated, flagged: {_names(trace, gapped)})")
    out += [f"  note: {x}" for x in rec.notes]
    gapped_note = " (leaving out gaps)" if rec.gaps else ""
    out.append(f"  the meter saw {fmt_j(span).strip()} {over}{gapped_note}: "
               f"{fmt_j(in_steps).strip()} inside the steps (the account), {fmt_j(span - in_steps).strip()} "
               f"between them (link transfers, batch uploads, host)")
    return out


def _marker_lines(trace: Trace, rec: meter_base.Recording, path: Path, channel: int, events: list[al.Event],
                  steps: list[tuple[float, float]], me: al.MeasuredEnergy, unres: list[tuple[int, int]],
                  gapped: list[tuple[int, int]], min_samples: int) -> list[str]:
    seg = rec.segments()
    in_steps = sum(seg.energy_between(s0, s1, measured_only=True) for s0, s1 in steps)
    first, last = events[0].start_s, events[-1].end_s
    span = seg.energy_between(first, last, measured_only=True)
    pulse_s = sum(e.end_s - e.start_s for e in events)
    ticks_s = sum(r[4] for st in trace.steps for r in st["records"]) / trace.tick_hz
    if trace.provenance == "emulated":
        clocks = (f"the pulses last {fmt_s(pulse_s).strip()} in all; the trace's ticks are virtual time, not "
                  "comparable")
    else:
        ratio = f" (x{pulse_s / ticks_s:.4f})" if ticks_s > 0 else ""
        clocks = (f"the pulses last {fmt_s(pulse_s).strip()} in all for {fmt_s(ticks_s).strip()} of record ticks"
                  f"{ratio}")
    pulses = len(al.marker_pulses(rec, channel))
    if pulses == len(events):
        head = [f"  source: measured by {rec.meter} at {_period(rec.period_s)} ({shown(path)}), aligned by "
                f"{len(events)} marker pulses on D{channel}",
                f"  sync: the op marker (high while each record runs) on logic input D{channel}, one pulse per "
                f"trace record in order, on the meter's own clock; each edge to half a sample "
                f"({_period(rec.period_s / 2)}); a step spans its first pulse's rise to its last pulse's fall, its "
                f"overhead the time between its pulses; {clocks}"]
    else:
        head = [f"  source: measured by {rec.meter} at {_period(rec.period_s)} ({shown(path)}), aligned by the "
                f"marker's {len(steps)} step bursts on D{channel}",
                f"  sync: {pulses} marker pulses for {len(events)} records (ops closer than a sample merge, a "
                f"short one can fall between two): each step's burst, its first rise to its last fall, on the "
                f"meter's own clock, its records laid over it in proportion to their board time"]
    return _sync_lines(trace, rec, me, head, unres, gapped, min_samples, span, in_steps,
                       "from the first pulse to the last")
