"""`poet report`: an energy account (poet.accounting) as terminal tables, a long-form CSV, a Chrome
trace and PNG plots (matplotlib, Agg, imported only when --plot asks).

Every report says its source in the header: modelled (trace ticks x the board's datasheet
power, paging bytes x its storage model) or measured (a meter's joules per record: `--meter`,
a recording aligned with the trace by the host times of its steps or, with `--markers CH`, by the op
marker's pulses on a logic input of the meter; see `measure`).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from poet.boards import Board
from poet.energy.accounting import KINDS, PAGING, Account, Box, DiffRow, Entry, account, edd, fold, walk
from poet.energy.meters import align as al
from poet.energy.meters import base as meter_base
from poet.energy.tracefile import Trace
from poet.errors import PoetError
from poet.paths import shown

VIEWS = ("module", "layer", "tensor", "kind")
Say = Callable[[str], None]


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


def source_line(acct: Account, trace: Trace, board: Board) -> str:
    if acct.source == "measured":
        return (f"measured: a power meter's joules per record; board time from the trace's {trace.provenance} "
                f"ticks ({trace.tick_hz / 1e6:g} MHz timer)")
    power = board.raw.get("power", {}).get("source", "datasheet")
    st = board.storage
    return (f"modelled: {trace.provenance} ticks ({trace.tick_hz / 1e6:g} MHz timer) -> board time at "
            f"{board.clock_hz / 1e6:g} MHz, CPI {board.cpi:g} x CPU active {board.cpu_active_w * 1e3:g} mW ({power}); "
            f"paging bytes x the {st.get('kind', 'storage')} model ({st.get('source', '?')})")


def header(acct: Account, trace: Trace, board: Board, measured: Measured | None = None) -> list[str]:
    n = max(acct.steps, 1)
    mean_w = acct.total_j / acct.total_s if acct.total_s else 0.0
    return [
        f"energy of {acct.steps} training step(s) of {acct.model} on {acct.board} ({acct.source})",
        *(measured.lines if measured is not None else [f"  source: {source_line(acct, trace, board)}"]),
        f"  total {fmt_j(acct.total_j).strip()} in {fmt_s(acct.total_s).strip()} of board time "
        f"(mean {fmt_w(mean_w).strip()}); per step {fmt_j(acct.total_j / n).strip()}, "
        f"{fmt_s(acct.total_s / n).strip()}",
        f"  recompute {pct(acct.by_kind['recompute'][0], acct.total_j).strip()}, paging "
        f"{pct(acct.by_kind['page_in'][0] + acct.by_kind['page_out'][0], acct.total_j).strip()} "
        f"(page-in {pct(acct.by_kind['page_in'][0], acct.total_j).strip()}, page-out "
        f"{pct(acct.by_kind['page_out'][0], acct.total_j).strip()}), runtime overhead "
        f"{pct(acct.by_kind['overhead'][0], acct.total_j).strip()} of the energy",
        *precision_lines(acct, trace),
    ]


NARROW_BYTES = {"fp16": 2, "bf16": 2}  # bytes an element of each storage type a cast makes


def precision_lines(acct: Account, trace: Trace) -> list[str]:
    """Which tensors the plan stored narrow (poet.precision's cast nodes, named `<tensor>/<type>` and
    `<tensor>/<type>/fp32` for the way back), which layers ran in int8, and what the casts and int8
    scales cost; nothing for an fp32 plan."""
    narrow = [n for n in trace.nodes if n.get("op") == "cast" and n["name"].rsplit("/", 1)[-1] in NARROW_BYTES]
    layers = [n for n in trace.nodes if n.get("op") in ("linear_i8", "conv2d_i8")]
    if not narrow and not layers:
        return []
    cost = sum(acct.tensors[n["name"]].energy_j for n in trace.nodes
               if n.get("op") in ("cast", "absmax") and n["name"] in acct.tensors)
    out = [f"  precision: {len(narrow)} tensor(s) stored narrow, {len(layers)} layer(s) in int8; casts and int8 "
           f"scales {fmt_j(cost).strip()} ({pct(cost, acct.total_j).strip()} of the energy)"]
    for n in narrow:
        src, dt = n["name"].rsplit("/", 1)
        fp32 = n["bytes"] // NARROW_BYTES[dt] * 4
        out.append(f"    {src}: fp32 -> {dt}, {fp32} B -> {n['bytes']} B")
    out += [f"    {n['name']}: int8 forward (int32 accumulate), fp32 backward" for n in layers]
    return out


def _row(name: str, e: Entry, total: float, width: int) -> str:
    paging = sum(e.kinds.get(k, 0.0) for k in PAGING)
    return (f"  {name:<{width}} {fmt_j(e.energy_j)} {pct(e.energy_j, total)} {fmt_s(e.time_s)} "
            f"{fmt_w(e.power_w)} {fmt_j(e.kinds.get('recompute', 0.0))} {fmt_j(paging)}").rstrip()


def _head(title: str, width: int, extra: bool = True) -> str:
    cols = f"  {title:<{width}} {'energy':>12} {'share':>6} {'time':>13} {'power':>11}"
    return cols + (f" {'recompute':>12} {'paging':>12}" if extra else "")


def kind_table(acct: Account) -> list[str]:
    w = 14
    lines = [_head("by kind", w, extra=False)]
    for k in KINDS:
        e, t = acct.by_kind[k]
        lines.append(f"  {k:<{w}} {fmt_j(e)} {pct(e, acct.total_j)} {fmt_s(t)} {fmt_w(e / t if t else 0.0)}")
    return lines


def module_table(acct: Account, depth: int, folded: bool = False) -> list[str]:
    root = edd(acct)
    if folded:
        root = fold(root)
    rows = walk(root, depth)
    names = [("  " * lvl) + b.name + (f" (x{b.count})" if b.count > 1 else "") for lvl, b in rows]
    w = max(24, *(len(n) for n in names))
    title = f"by module ({'summarized, ' if folded else ''}depth {depth})"
    return [_head(title, w)] + [_row(n, b, acct.total_j, w) for n, (_, b) in zip(names, rows, strict=True)]


def _ranked(entries: dict[str, Entry], top: int | None) -> list[tuple[str, Entry]]:
    ranked = sorted(entries.items(), key=lambda kv: (-kv[1].energy_j, kv[0]))
    return ranked[:top] if top else ranked


def flat_table(title: str, entries: dict[str, Entry], total: float, top: int | None) -> list[str]:
    ranked = _ranked(entries, top)
    w = max(24, *(len(n) for n, _ in ranked)) if ranked else 24
    label = f"{title} (top {len(ranked)} of {len(entries)})" if top and len(entries) > len(ranked) else title
    return [_head(label, w)] + [_row(n, e, total, w) for n, e in ranked]


def folded_tensors(acct: Account) -> dict[str, Entry]:
    """The tensor footprint with self-similar blocks folded: the leaves of the summarized EDD."""
    out: dict[str, Entry] = {}
    for _, b in walk(fold(edd(acct))):
        if not b.children:
            out[b.path + (f" (x{b.count})" if b.count > 1 else "")] = b
    return out


def render(acct: Account, trace: Trace, board: Board, by: str | None = None, depth: int | None = None,
           top: int | None = None, folded: bool = False, measured: Measured | None = None) -> str:
    """The terminal report: the header, then one view (`by`), or kinds, modules and top tensors.

    The module tree goes `depth` levels below the model (default 2: modules and their tensors
    on a flat model); the tensor list shows the `top` (default 5), the layer list all. A
    measured account also shows the modelled one beside it, kind by kind."""
    lines = header(acct, trace, board, measured)
    if measured is not None:
        lines += ["", *versus_table(acct, measured.modelled)]
    tensors = folded_tensors(acct) if folded else acct.tensors
    views = {
        "kind": lambda: kind_table(acct),
        "module": lambda: module_table(acct, 2 if depth is None else depth, folded),
        "layer": lambda: flat_table("by layer", acct.layers, acct.total_j, top),
        "tensor": lambda: flat_table("by tensor", tensors, acct.total_j, top or 5),
    }
    for v in ([by] if by else ["kind", "module", "tensor"]):
        lines += ["", *views[v]()]
    return "\n".join(lines)


# ---------------------------------------------------------------- measured (--meter)

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


def versus_table(acct: Account, modelled: Account) -> list[str]:
    """Measured next to modelled, in total and by kind."""
    lines = [f"  {'measured vs modelled':<20} {'measured':>12} {'modelled':>12} {'difference':>11}"]
    rows = [("total", acct.total_j, modelled.total_j)]
    rows += [(k, acct.by_kind[k][0], modelled.by_kind[k][0]) for k in KINDS]
    for name, m, e in rows:
        d = f"{100 * (m - e) / e:+10.1f}%" if e else f"{'-':>11}"
        lines.append(f"  {name:<20} {fmt_j(m)} {fmt_j(e)} {d}")
    return lines


# ---------------------------------------------------------------- files

def write_csv(acct: Account, path: Path) -> None:
    """Long form, one row per step x tensor x kind (Smaragdine's footprint CSV), joules and seconds."""
    rows: dict[tuple[int, str, str], list[Any]] = {}
    for c in acct.charges:
        key = (c.step, c.tensor, c.kind)
        if key not in rows:
            rows[key] = [c.step, c.module, c.tensor, c.kind, 0.0, 0.0, acct.source]
        rows[key][4] += c.energy_j
        rows[key][5] += c.time_s
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "module", "tensor", "kind", "energy_j", "time_s", "source"])
        for r in rows.values():
            w.writerow([*r[:4], repr(r[4]), repr(r[5]), r[6]])


def chrome_trace(acct: Account, trace: Trace, board: Board) -> dict[str, Any]:
    """Chrome trace-event JSON (opens in Perfetto and chrome://tracing): one complete event per record on
    board time (µs), the power of each as a counter track, steps on a second track, the board named."""
    pid = 1
    ev: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"poet {acct.model} on {acct.board} ({trace.provenance} trace, {acct.source} energy)"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "ops"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "steps"}},
    ]
    step_span: dict[int, list[float]] = {}
    for c in acct.charges:
        ts, dur = c.start_s * 1e6, c.time_s * 1e6
        ev.append({"name": c.tensor, "cat": c.kind, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": 1,
                   "args": {"bytes": c.bytes, "energy_j": c.energy_j, "module": c.module, "step": c.step,
                            "record": c.record}})
        if c.time_s > 0:  # a zero-length record (a free of 0 ticks) has no power of its own
            ev.append({"name": "power", "ph": "C", "ts": ts, "pid": pid, "args": {"W": c.energy_j / c.time_s}})
        span = step_span.setdefault(c.step, [ts, ts])
        span[1] = ts + dur
    end = max((s[1] for s in step_span.values()), default=0.0)
    ev.append({"name": "power", "ph": "C", "ts": end, "pid": pid, "args": {"W": 0.0}})
    for k, (t0, t1) in step_span.items():
        ev.append({"name": f"step {k}", "cat": "step", "ph": "X", "ts": t0, "dur": t1 - t0, "pid": pid, "tid": 2,
                   "args": {"loss": trace.steps[k].get("loss"), "step_ticks": trace.steps[k]["step_ticks"]}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"board": acct.board, "model": acct.model, "energy_source": acct.source,
                          "trace_provenance": trace.provenance, "total_j": acct.total_j,
                          "note": "timestamps are board time: each step's records in order, the step's "
                                  "runtime overhead (time between records) as one event at its end"}}


def write_chrome(acct: Account, trace: Trace, board: Board, path: Path) -> None:
    path.write_text(json.dumps(chrome_trace(acct, trace, board), separators=(",", ":")))


# ---------------------------------------------------------------- diff

def render_diff(rows: list[DiffRow], a: Account, b: Account, names: tuple[str, str], top: int | None) -> str:
    ta, tb = a.total_j / a.steps, b.total_j / b.steps
    w = max(24, *(len(r.tensor) for r in rows))
    lines = [f"energy per step of {a.model}: {names[0]} ({a.board}, {a.steps} steps) -> {names[1]} "
             f"({b.board}, {b.steps} steps), {a.source} / {b.source}",
             f"  total {fmt_j(ta).strip()} -> {fmt_j(tb).strip()}: {fmt_j(tb - ta).strip()} "
             f"({pct(tb - ta, ta).strip()})", "",
             f"  {'by kind':<14} {'A':>12} {'B':>12} {'B - A':>12}"]
    for k in KINDS:
        ea, eb = a.by_kind[k][0] / a.steps, b.by_kind[k][0] / b.steps
        lines.append(f"  {k:<14} {fmt_j(ea)} {fmt_j(eb)} {fmt_j(eb - ea)}")
    changed = sorted((r for r in rows if r.delta_j), key=lambda r: -abs(r.delta_j))
    shown = changed[:top or 10]
    lines += ["", f"  by tensor and kind, the largest changes ({len(shown)} of {len(changed)}):",
              f"  {'tensor':<{w}} {'kind':<11} {'A':>12} {'B':>12} {'B - A':>12}"]
    for r in shown:
        lines.append(f"  {r.tensor:<{w}} {r.kind:<11} {fmt_j(r.a_j)} {fmt_j(r.b_j)} {fmt_j(r.delta_j)}")
    return "\n".join(lines)


def write_diff_csv(rows: list[DiffRow], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tensor", "kind", "a_j_per_step", "b_j_per_step", "delta_j_per_step"])
        for r in rows:
            w.writerow([r.tensor, r.kind, repr(r.a_j), repr(r.b_j), repr(r.delta_j)])


def box_label(b: Box) -> str:
    return b.name + (f" (x{b.count})" if b.count > 1 else "")


# ---------------------------------------------------------------- plots (--plot)

KIND_COLORS = {"forward": "#4c72b0", "backward": "#55a868", "recompute": "#c44e52", "page_in": "#8172b2",
               "page_out": "#ccb974", "optimizer": "#64b5cd", "overhead": "#999999"}


def _icicle(ax: Any, root: Box, total: float, depth: int | None) -> None:
    """The EDD as an icicle (partition) chart: each box as wide as its energy, children below it."""
    from matplotlib import colormaps

    cmap = colormaps["YlOrRd"]

    def draw(b: Box, x0: float, level: int) -> None:
        w = b.energy_j / total if total else 0.0
        ax.add_patch(_rect(x0, -level - 1, w, 1, cmap(0.15 + 0.85 * w)))
        if w > 0.03:
            ax.text(x0 + w / 2, -level - 0.5, f"{box_label(b)}\n{100 * w:.1f}%", ha="center", va="center",
                    fontsize=7, clip_on=True)
        if depth is not None and level >= depth:
            return
        x = x0
        for c in sorted(b.children.values(), key=lambda c: (-c.energy_j, c.name)):
            draw(c, x, level + 1)
            x += c.energy_j / total if total else 0.0

    draw(root, 0.0, 0)
    levels = max(lvl for lvl, _ in walk(root, depth)) + 1
    ax.set_xlim(0, 1)
    ax.set_ylim(-levels, 0)
    ax.set_yticks([-i - 0.5 for i in range(levels)], ["model"] + [f"level {i}" for i in range(1, levels)])
    ax.set_xlabel("share of the energy")


def _rect(x: float, y: float, w: float, h: float, color: Any) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, edgecolor="white", linewidth=0.8)


def plot(acct: Account, trace: Trace, board: Board, out: Path, stem: str, top: int = 10,
         depth: int | None = None, folded: bool = False, timeline_steps: int = 3) -> list[Path]:
    """edd.png (icicle of the module tree), tensors.png (top-N energy by kind and power), power.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src = f"{acct.source} ({trace.provenance} trace) on {acct.board}"
    paths = []
    root = fold(edd(acct)) if folded else edd(acct)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.9 * (max(lvl for lvl, _ in walk(root, depth)) + 1)))
    _icicle(ax, root, acct.total_j, depth)
    ax.set_title(f"energy distribution of {acct.model}: {fmt_j(acct.total_j).strip()} over {acct.steps} steps, "
                 f"{src}", fontsize=9)
    paths.append(_save(fig, out / f"{stem}.edd.png"))

    ranked = _ranked(folded_tensors(acct) if folded else acct.tensors, top)[::-1]
    fig, (ax_e, ax_p) = plt.subplots(1, 2, figsize=(12, 1 + 0.35 * len(ranked)), sharey=True)
    names = [n for n, _ in ranked]
    left = [0.0] * len(ranked)
    for k in KINDS:
        vals = [e.kinds.get(k, 0.0) * 1e3 for _, e in ranked]
        if any(vals):
            ax_e.barh(names, vals, left=left, color=KIND_COLORS[k], label=k)
            left = [a + b for a, b in zip(left, vals, strict=True)]
    ax_e.set_xlabel("energy (mJ)")
    ax_e.legend(fontsize=7)
    ax_p.barh(names, [e.power_w * 1e3 for _, e in ranked], color="#dd8452")
    ax_p.set_xlabel("mean power while it runs (mW)")
    fig.suptitle(f"top {len(ranked)} tensors of {acct.model}, {src}", fontsize=9)
    paths.append(_save(fig, out / f"{stem}.tensors.png"))

    shown = [c for c in acct.charges if c.step < timeline_steps]
    fig, ax = plt.subplots(figsize=(12, 3.5))
    for k in KINDS:
        spans = [(c.start_s * 1e3, c.time_s * 1e3) for c in shown if c.kind == k and c.time_s > 0]
        if spans:
            ax.broken_barh(spans, (0, 1), facecolors=KIND_COLORS[k], alpha=0.35, label=k,
                           transform=ax.get_xaxis_transform())
    timed = [c for c in shown if c.time_s > 0]
    xs = [t for c in timed for t in (c.start_s * 1e3, (c.start_s + c.time_s) * 1e3)]
    ys = [p for c in timed for p in 2 * [c.energy_j / c.time_s * 1e3]]
    ax.plot(xs, ys, color="black", linewidth=0.8, label="power")
    ax.set_xlabel("board time (ms)")
    ax.set_ylabel("power (mW)")
    ax.set_ylim(0, max(ys, default=1.0) * 1.1)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"power of the first {min(timeline_steps, acct.steps)} of {acct.steps} steps, {src}", fontsize=9)
    paths.append(_save(fig, out / f"{stem}.power.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the command

def run(args: Any, say: Say) -> int:
    """`poet report TRACE [--by ...] [--depth N] [--top N] [--fold] [--csv [F]] [--chrome [F]] [--plot]
    [--out DIR] [--diff B] [--meter REC [--allow-gaps] [--meter-offset S | --markers CH]]`; every refusal is a
    PoetError (one line)."""
    from poet.boards import load_board
    from poet.energy.accounting import diff
    from poet.errors import UsageError

    if args.depth is not None and args.depth < 0:
        raise UsageError(f"--depth {args.depth}: give 0 (the model only) or more")
    if args.top is not None and args.top < 1:
        raise UsageError(f"--top {args.top}: give 1 or more")
    meter = getattr(args, "meter", None)
    markers = getattr(args, "markers", None)
    if meter is None and (getattr(args, "allow_gaps", False) or getattr(args, "meter_offset", None) is not None
                          or markers is not None):
        raise UsageError("--allow-gaps, --meter-offset and --markers apply to a recording: add --meter RECORDING.csv")
    if markers is not None and args.meter_offset is not None:
        raise UsageError("--markers aligns on the meter's own clock (its marker pulses), so --meter-offset has "
                         "nothing to move: give one of them")
    if meter is not None and args.diff:
        raise UsageError("--meter measures one trace; drop --diff (or report each trace on its own)")
    path = Path(args.trace)
    tr = Trace.load(path)
    board = load_board(tr.board)
    measured = None
    if meter is not None:
        measured = measure(tr, board, Path(meter), allow_gaps=args.allow_gaps, offset_s=args.meter_offset or 0.0,
                           where=str(path), markers=markers)
        acct = account(tr, board, measured.energy_of)
    else:
        acct = account(tr, board)
    out = Path(args.out) if args.out else path.parent
    if args.out and (args.csv is not None or args.chrome is not None or args.plot):
        out.mkdir(parents=True, exist_ok=True)
    stem = path.stem
    if args.diff:
        other_path = Path(args.diff)
        other = Trace.load(other_path)
        other_acct = account(other, load_board(other.board))
        rows = diff(tr, acct, other, other_acct)
        say(render_diff(rows, acct, other_acct, (str(path), str(other_path)), args.top))
        if args.csv is not None:
            f = Path(args.csv) if args.csv else out / f"{stem}.diff.csv"
            write_diff_csv(rows, f)
            say(f"wrote {f}")
        return 0
    say(render(acct, tr, board, by=args.by, depth=args.depth, top=args.top, folded=args.fold, measured=measured))
    written = []
    if args.csv is not None:
        written.append(Path(args.csv) if args.csv else out / f"{stem}.energy.csv")
        write_csv(acct, written[-1])
    if args.chrome is not None:
        written.append(Path(args.chrome) if args.chrome else out / f"{stem}.chrome.json")
        write_chrome(acct, tr, board, written[-1])
    if args.plot:
        written += plot(acct, tr, board, out, stem, top=args.top or 10, depth=args.depth, folded=args.fold)
    for f in written:
        say(f"wrote {f}")
    return 0
