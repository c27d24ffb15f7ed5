"""`poet profile`: measure every op of some graphs on a board, and its paging, into profiles/<board>.yaml.

Each graph runs under a keep-everything schedule, step after step, until every op's ticks
agree within `spread` (or `max_repeats` steps ran). Then a tiny synthetic model whose only
work is paging one tensor out and back in is run at sizes from 256 B up, and
`t = latency + bytes / throughput` is fitted per direction.

The file is rewritten after every finished graph and after the paging sweep, with what is
done marked, so an interrupted profile (Ctrl-C, a pulled cable, a stopped emulator) keeps
its finished part and the same command resumes it. Every write merges with the file on disk
under a lock (write_profile), so two `poet profile` runs into one file both keep their ops.
What the planner reads from the file (costs.costed) is `time_s` / `energy_j` per op and the
`paging` section; every number says where it comes from.
"""

from __future__ import annotations

import datetime
import fcntl
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from poet.boards import Board
from poet.device.link import MODEL, WEIGHTS, LinkClosed, LinkTimeout
from poet.errors import PoetError, UsageError, signal_of, stopped_by
from poet.files import write_atomic
from poet.graph.dtypes import DT_F32, DT_I8, ELEMENT_TYPES
from poet.graph.training_graph import TrainingGraph
from poet.paths import shown
from poet.plan.costs import op_key, read_profile, uncosted, work
from poet.plan.modelblob import (
    KIND_FORWARD,
    KIND_INPUT,
    KIND_OPTIMIZER,
    OP_ABSMAX,
    OP_CAST,
    OP_CONV2D,
    OP_CONV2D_I8,
    OP_INPUT,
    OP_LINEAR,
    OP_LINEAR_I8,
    OP_SGD,
    BlobNode,
    ModelBlob,
)
from poet.plan.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, RECOMPUTE, Instr, Schedule
from poet.progress import Say, bar

COMPUTE_KINDS = ("forward", "backward", "optimizer")
# the paging sweep: 256 B .. 64 KiB, doubling (capped by what the board's pool holds)
PAGE_SIZES = tuple(256 << k for k in range(9))
PAGE_ROUNDS = 6  # page-out + page-in round trips per size in one step; the first is dropped (cold file/cache)


@dataclass(frozen=True)
class Seed:
    """A real Linux board's compute speed from a document, for when only its qemu-user stand-in ran."""
    source: str          # poet-paper | datasheet
    flop_per_s: float
    cite: str
    paper_paging: tuple[tuple[str, float], ...] = ()  # the POET reference's own paging constants, for comparison

    def time_s(self, w: int) -> float:
        return w / self.flop_per_s

    def describe(self) -> str:
        return f"{self.source}: {self.flop_per_s / 1e9:g} GFLOP/s ({self.cite}); energy = time x the board file's " \
               f"cpu_active_w (datasheet)"


SEEDS: dict[str, Seed] = {
    # POET reference implementation (Patil et al., ICML 2022; github.com/ShishirPatil/poet,
    # poet/chipsets.py, RPi["FLOPS"] = 2e9). Its RPi FLOPS_PER_WATT (1.6283e9 / (13.53 x 3)) would
    # mean ~50 W at that rate, so energy comes from boards/rpi4.yaml's power instead.
    "rpi4": Seed("poet-paper", 2e9, "POET reference poet/chipsets.py RPi FLOPS",
                 (("read_latency_s", 0.00509561e-3), ("read_bytes_per_s", 45.5e6),      # chipsets.py RPi PAGEIN_*
                  ("write_latency_s", 0.0185314e-3), ("write_bytes_per_s", 24.5e6))),   # PAGEOUT_* (with caching)
    # The reference gives the Jetson TX2 no FLOP rate (JetsonTX2 has power and paging only), so:
    # the Jetson Nano's 1.43 GHz A57 (module data sheet) at one scalar FLOP per cycle, the
    # assumption chipsets.py states for the RPi; the runtime's kernels are scalar C on one core.
    "jetson": Seed("datasheet", 1.43e9, "Jetson Nano module data sheet 1.43 GHz x 1 FLOP/cycle, the POET "
                   "reference's per-cycle assumption",
                   (("read_latency_s", 0.00054), ("read_bytes_per_s", 108.5e6),  # chipsets.py JetsonTX2 (a TX2,
                    ("write_latency_s", 0.002396), ("write_bytes_per_s", 94.37e6))),  # not the Nano: eMMC alike)
}


class ProfileInterrupted(PoetError):
    """The board went away (or Ctrl-C) mid-profile; what finished is saved."""


@dataclass(frozen=True)
class Settings:
    min_repeats: int = 3
    max_repeats: int = 10
    spread: float = 0.02  # relative (max - min) / median of an op's ticks that counts as settled


# ---------------------------------------------------------------- the file

def lock_path(path: Path) -> Path:
    """The lock every writer of `path` holds while it reads, merges and replaces it: a sibling, as
    the profile itself is replaced (a lock on the replaced file would guard the old inode)."""
    return path.with_name(path.name + ".lock")


def write_profile(profile: dict[str, Any], path: Path) -> dict[str, Any]:
    """Merge `profile` with the file at `path` and write the result there; `profile` becomes it.

    Under an exclusive lock (lock_path) the file on disk is read again, so what another
    `poet profile` into the same file wrote since is kept (merge_profiles), and `profile` is
    updated in place to what was written: what the caller then reports is what is on disk. The
    write is atomic (a temporary file, fsync, rename): a crash leaves the previous file, never
    half of one. The lock is held only for this, so concurrent profiles measure in parallel.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path(path), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or by the kernel if we die
            merged = merge_profiles(profile, _on_disk(path))
            # a fresh temporary renamed over the file (files.atomic: never through a planted link), in
            # YAML without aliases, which a reader must otherwise bound (costs.MAX_EXPANDED)
            write_atomic(path, "# poet op-cost profile; every number carries its provenance\n"
                         + yaml.dump(merged, Dumper=_PlainDumper, sort_keys=False))
    except OSError as exc:
        raise PoetError(f"cannot write the profile {shown(path)} ({exc.strerror or exc}): make its folder "
                        f"writable, or pass another -o") from exc
    profile.clear()
    profile.update(merged)
    return profile


class _PlainDumper(yaml.SafeDumper):
    """YAML with every shared value written out again: no anchors or aliases (a profile shares one list of
    paging sizes between two fits)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _on_disk(path: Path) -> dict[str, Any] | None:
    """The profile at `path` now, or None when there is none or it is not one we could merge with
    (then ours replaces it: `poet profile` refused such a file when it started, so it appeared
    while we measured and holds nothing of ours)."""
    if not path.exists():
        return None
    try:
        return read_profile(path, "", need_ops=False)
    except UsageError:
        return None


def _same_making(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Made by the same board, firmware and way (measured / emulated): the test resumable() uses."""
    return (a.get("board") == b.get("board") and str(a.get("firmware")) == str(b.get("firmware"))
            and a.get("source") == b.get("source"))


def _complete(p: dict[str, Any]) -> bool:
    """Has every section new_profile writes: one an older poet wrote is not resumed or merged."""
    return all(k in p for k in PROFILE_KEYS)


def _better_op(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    # Both are measurements of one kernel at one shape by the same firmware the same way, so neither
    # is wrong; the one with more samples has the better-settled median. Deciding by evidence, not
    # by who took the lock last, also makes two racing writers agree on the file whatever their
    # order. A tie keeps ours, the later measurement.
    return theirs if _samples(theirs) > _samples(ours) else ours


def _samples(op: dict[str, Any]) -> int:
    n = op.get("samples")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else 0  # none recorded: the least evidence


def _section_done(name: str, section: Any) -> bool:
    if not isinstance(section, dict):
        return False
    return bool(section.get("fit", {}).get("done") if name == "paging" else section.get("done"))


def merge_profiles(ours: dict[str, Any], disk: dict[str, Any] | None) -> dict[str, Any]:
    """What to write when `ours` is saved over `disk` (the file as it is now), ops sorted.

    A file made another way (another board, firmware or source, or by an older poet) is replaced,
    as `poet profile` does when it starts afresh: its costs are not this firmware's, and mixing
    them would make one profile of two firmwares. A file made the same way keeps everything ours
    lacks: its ops and finished models, and its paging or casts section when ours has not measured
    them. Where both have an op, _better_op decides; a finished paging or casts section beats an
    unfinished one; for every other key, ours (this run's settings and date).
    """
    mine = ours.get("ops") or {}
    if disk is None or not _complete(disk) or not _same_making(ours, disk):
        return {**ours, "ops": dict(sorted(mine.items()))}
    merged = {**ours, **{k: v for k, v in disk.items() if k not in ours}}
    merged["models"] = {**disk["models"], **(ours.get("models") or {})}
    ops = dict(disk["ops"])
    for key, op in mine.items():
        ops[key] = _better_op(op, ops[key]) if key in ops else op
    merged["ops"] = dict(sorted(ops.items()))
    for name in ("paging", "casts"):
        if name in disk and not _section_done(name, ours.get(name)) and _section_done(name, disk[name]):
            merged[name] = disk[name]
    return merged


def existing_profile(path: Path, board: str | None = None) -> dict[str, Any] | None:
    """The profile `poet profile -o path` will resume or replace; None when there is none yet.

    Refused in one line (UsageError): a file there that is not a profile, as -o may be a typo for
    someone's file that must not be overwritten; another board's profile than `board`'s (its
    measurements are of another core and clock: profiling this board would replace them with
    nothing of theirs kept); and a place the profile cannot be written, found now rather than after
    the measuring. Another firmware's profile of the same board is returned (the caller says it
    profiles afresh and the first write replaces it).
    """
    prof = None
    if path.exists():  # judged before anything is made beside it (the lock)
        prof = read_profile(path, "pass another -o, or delete it to profile afresh", need_ops=False)
        if board is not None and "board" in prof and str(prof["board"]) != board:
            raise UsageError(f"{shown(path)} holds the {prof['board']}'s profile ({len(prof.get('ops') or {})} op "
                             f"shapes, {prof.get('source', 'of unknown source')}); profiling the {board} would "
                             f"replace it: pass -o another file (or --board {prof['board']})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path(path), "a"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write the profile {shown(path)} ({exc.strerror or exc}): pass another -o") from exc
    return prof


def _is_linux(board: Board) -> bool:
    return board.emulator.get("kind") == "process"


def _compute_section(board: Board, emulated: bool) -> dict[str, Any]:
    """Which numbers the planner uses for compute, and why."""
    if not emulated:
        return {"used": "measured", "why": "ticks of the board's own timer, time = ticks / tick_hz"}
    if _is_linux(board):
        return {"used": SEEDS[board.name].source,
                "why": "the stand-in runs under qemu-user, whose ticks are this computer's wall clock, not the "
                       "board's: the planner uses time_s from " + SEEDS[board.name].describe() + "; the stand-in's "
                       "ticks are kept as stand_in_time_s"}
    return {"used": "emulated",
            "why": f"ticks -> instructions (-icount shift=0: 1 per virtual ns) x CPI {board.cpi} / "
                   f"{board.clock_hz / 1e6:g} MHz (emulated); energy = time x {board.cpu_active_w} W (datasheet)"}


# every section a profile has, in the order the file shows them (new_profile)
PROFILE_KEYS = ("board", "firmware", "date", "source", "tick_hz", "runtime_static_bytes", "compute", "settings",
                "models", "paging", "ops")


def new_profile(device: Any) -> dict[str, Any]:
    board: Board = device.board
    return {
        "board": board.name,
        "firmware": device.hello.fw_version,
        "date": datetime.date.today().isoformat(),
        "source": device.provenance,
        "tick_hz": device.hello.tick_hz,
        "runtime_static_bytes": device.runtime_static,
        "compute": _compute_section(board, device.emulated),
        "settings": {},
        "models": {},
        "paging": _datasheet_paging(board, "not measured yet"),
        "ops": {},
    }


def _datasheet_paging(board: Board, reason: str) -> dict[str, Any]:
    s = board.storage
    return {"used": "datasheet", "reason": reason,
            **{k: s[k] for k in ("kind", "read_bytes_per_s", "write_bytes_per_s", "latency_s", "read_w", "write_w",
                                 "source")}}


def resumable(existing: dict[str, Any] | None, device: Any) -> dict[str, Any] | None:
    """The existing profile if it was made by this board's current firmware the same way, else None."""
    if not existing or not _complete(existing):
        return None
    this = {"board": device.board.name, "firmware": device.hello.fw_version, "source": device.provenance}
    return existing if _same_making(existing, this) else None


# ---------------------------------------------------------------- compute

def _times(board: Board, device: Any, ticks: float, w: int) -> dict[str, Any]:
    """An op's time and energy as the planner reads them, with where they come from."""
    if not device.emulated:
        t = ticks / device.hello.tick_hz
        return {"time_s": t, "energy_j": board.compute_energy_j(t), "time_provenance": "measured"}
    if _is_linux(board):
        t = SEEDS[board.name].time_s(w)
        return {"stand_in_time_s": ticks / device.hello.tick_hz, "time_s": t, "energy_j": board.compute_energy_j(t),
                "time_provenance": SEEDS[board.name].source}
    t = board.compute_time_s(int(ticks), device.hello.tick_hz)
    return {"time_s": t, "energy_j": board.compute_energy_j(t), "time_provenance": "emulated"}


def _provenance(board: Board, device: Any) -> str:
    if device.emulated and _is_linux(board):
        return "emulated (qemu-user wall clock: not the board's speed)"
    return str(device.provenance)


def measured_nodes(g: TrainingGraph, emulated: bool = True) -> list:
    """The nodes whose costs a profile of g records: all, but the optimizer of a graph that updates in
    backward, which only counts the step (its cost per trained element is not measured by it), and on
    a real board a conv that streams its weight from the SD card, whose ticks hold the reads too (the
    planner adds those from the paging model: poet.plan.costs.stream_cost). Emulated, the reads take
    no virtual time (semihosting), so its ticks are its compute alone."""
    skip = g.updates_in_backward
    return [n for n in g.nodes if not (skip and n.kind == "optimizer")
            and (emulated or not n.attrs.get("stream"))]


def _done_key(g: TrainingGraph) -> str:
    return f"{g.model} batch {g.batch}"


def profile_graphs(device: Any, graphs: list[tuple[TrainingGraph, list[np.ndarray]]], repeats: int = 3,
                   progress: Say = print, existing: dict[str, Any] | None = None, max_repeats: int = 10,
                   spread: float = 0.02, save: Path | None = None, bars: bool = False) -> dict[str, Any]:
    """Measure every op of every graph; returns the profile (also written to `save` after each graph).

    `repeats` is the least number of steps per graph; a graph the resumable `existing` profile
    already has is skipped. On LinkClosed/LinkTimeout/Ctrl-C raises ProfileInterrupted with the
    one line to print, the finished graphs saved. bars: a bar per graph over its ops, counting those
    whose ticks have settled, on stderr when it is a terminal (poet.progress), in place of a line per run.
    """
    settings = Settings(max(1, repeats), max(repeats, max_repeats), spread)
    prof = resumable(existing, device) or new_profile(device)
    prof["date"] = datetime.date.today().isoformat()
    prof["settings"] = {"min_repeats": settings.min_repeats, "max_repeats": settings.max_repeats,
                        "spread": settings.spread}
    every = {op_key(n) for g, _ in graphs for n in measured_nodes(g, device.emulated)}
    for g, weights in graphs:
        key = _done_key(g)
        if prof["models"].get(key, {}).get("done"):
            progress(f"profile {g.model}: already in the profile (firmware {prof['firmware']}), skipped")
            continue
        try:
            summary = _profile_graph(device, g, weights, settings, prof, progress, bars)
        except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
            saved = False
            # with no op measured yet, writing would only replace another firmware's profile with an empty one
            if save is not None and prof["ops"]:
                write_profile(prof, save)
                saved = True
            done = sum(1 for k in every if k in prof["ops"])
            where = f"saved to {shown(save)}" if saved else "nothing saved"
            raise ProfileInterrupted(f"{_went(exc)} while profiling {g.model} ({done} of {len(every)} ops done, "
                                     f"{where}); run the same command again to resume", _status(exc)) from exc
        if save is not None:
            write_profile(prof, save)  # also takes in what another profile into the same file finished
        progress(summary)  # only once saved: what it says is done is on disk
    prof["ops"] = dict(sorted(prof["ops"].items()))
    return prof


def _went(exc: BaseException) -> str:
    return f"stopped by {stopped_by(exc)}" if isinstance(exc, KeyboardInterrupt) else "the board went away"


def _status(exc: BaseException) -> int:
    return 128 + signal_of(exc) if isinstance(exc, KeyboardInterrupt) else 1  # 130: the shell's code for Ctrl-C


def _profile_graph(device: Any, g: TrainingGraph, weights: list[np.ndarray], s: Settings, prof: dict[str, Any],
                   progress: Say, bars: bool = False) -> str:
    """Measure one graph into prof; returns the line that says it is done."""
    from poet.plan.lower import lower
    from poet.plan.strategies.checkpoint_all import keep_all

    board: Board = device.board
    progress(f"profile {g.model}: {len(g.nodes)} ops, {s.min_repeats}..{s.max_repeats} runs until every op's "
             f"spread < {s.spread:.0%}")
    device.load_model(g, weights)
    device.load_schedule(lower(keep_all(uncosted(g)), g).schedule.encode(), planned_time_s=_expected_s(g, board, prof))
    rng = np.random.default_rng(0)  # the same inputs on every board and every resume
    samples: dict[int, list[int]] = {}
    measured = {n.id for n in measured_nodes(g, device.emulated)}
    # cleared when the graph is done (or stops): its done line takes the bar's place. A count of settled ops,
    # not a rate: an op settles when its spread does, not at a pace
    fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} ops settled [{elapsed}{postfix}]"
    with bar(len(measured), f"profile {g.model}", shown=bars, unit="op", bar_format=fmt) as ops:
        for r in range(s.max_repeats):
            x = rng.random((g.batch, *g.input_shape), dtype=np.float32)
            y = rng.integers(0, g.classes, g.batch)
            res = device.step(x, y, lr=0.0)  # lr 0: the weights, hence the inputs of every op, stay put
            for rec in res.records:
                if rec.kind in COMPUTE_KINDS and rec.node in measured:
                    samples.setdefault(rec.node, []).append(rec.ticks)
            worst = max((_spread(t) for t in samples.values()), default=0.0)
            if ops.disable:  # no bar (not a terminal): a line per run, as before
                progress(f"  run {r + 1}: {res.step_ticks} ticks, worst op spread {worst:.2%}")
            else:
                # settled by the rule that ends the loop: the least runs done and the op's spread below the bound
                ops.total = len(samples)  # the ops that report ticks (an input node has none)
                ops.n = sum(_spread(t) < s.spread for t in samples.values()) if r + 1 >= s.min_repeats else 0
                ops.set_postfix_str(f"run {r + 1}/{s.max_repeats}, worst spread {worst:.2%}")
            if r + 1 >= s.min_repeats and worst < s.spread:
                break
    runs = r + 1
    by_key: dict[str, list[int]] = {}  # nodes of one shape (two ReLUs of one width) pool their samples
    for nid, ticks in samples.items():
        by_key.setdefault(op_key(g.nodes[nid]), []).extend(ticks)
    w = {op_key(g.nodes[nid]): work(g.nodes[nid]) for nid in samples}
    for key, ticks in by_key.items():
        med = statistics.median(ticks)
        prof["ops"][key] = {
            "work": w[key],
            "ticks": int(med),
            "spread": round(_spread(ticks), 6),
            "repeats": runs,
            "samples": len(ticks),  # repeats x the nodes of this shape
            "provenance": _provenance(board, device),
            **_times(board, device, med, w[key]),
        }
    unsettled = sum(1 for t in by_key.values() if _spread(t) >= s.spread)
    prof["models"][_done_key(g)] = {"done": True, "ops": len(by_key), "runs": runs,
                                    "unsettled_ops": unsettled}
    return (f"  {g.model} done: {len(samples)} nodes, {len(by_key)} op shapes"
            + (f", {unsettled} still spread >= {s.spread:.0%} after {s.max_repeats} runs" if unsettled else ""))


def _expected_s(g: TrainingGraph, board: Board, prof: dict[str, Any]) -> float | None:
    """One step of g as the profile so far estimates it (its ops measured or estimated from others): how
    long the host waits for a step before it gives the board up. None when nothing is measured yet."""
    from poet.plan.costs import costed

    try:
        return costed(g, board, prof, estimate=True).one_pass_s
    except PoetError:
        return None


def _spread(ticks: list[int]) -> float:
    med = statistics.median(ticks)
    return (max(ticks) - min(ticks)) / med if med else 0.0


# ---------------------------------------------------------------- paging

def paging_model(nbytes: int) -> ModelBlob:
    """A model whose only tensor is its input (nbytes) and whose step is an SGD over no parameters:
    the schedule around it does nothing but page that tensor (docs/spec.md section 5: node 0 pages at
    swap offset 0)."""
    n = nbytes // 4
    nodes = [BlobNode(OP_INPUT, KIND_INPUT, (), nbytes, (n,)), BlobNode(OP_SGD, KIND_OPTIMIZER, (), 0, ())]
    return ModelBlob(batch=1, x_elems=n, param_elems=[], nodes=nodes)


def paging_schedule(blob: ModelBlob, rounds: int = PAGE_ROUNDS) -> Schedule:
    nbytes = blob.nodes[0].bytes
    instrs = [Instr(COMPUTE, 0, 0)]
    for _ in range(rounds):
        instrs += [Instr(PAGE_OUT, 0), Instr(FREE, 0), Instr(PAGE_IN, 0, 0)]
    instrs += [Instr(COMPUTE, 1), Instr(FREE, 0)]
    return Schedule(len(blob.nodes), blob.hash(), nbytes, instrs)


def page_sizes(pool_bytes: int) -> list[int]:
    # the pool holds the staged batch (nbytes + a label) and the arena (nbytes), each 8-byte aligned
    return [s for s in PAGE_SIZES if 2 * s + 64 <= pool_bytes]


def fit_line(nbytes: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares t = latency + bytes / throughput, with R² (None when every time is the same)."""
    x = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    a = np.stack([np.ones_like(x), x], axis=1)
    (latency, per_byte), *_ = np.linalg.lstsq(a, t, rcond=None)
    ss_tot = float(((t - t.mean()) ** 2).sum())
    ss_res = float(((t - a @ np.array([latency, per_byte])) ** 2).sum())
    grows = per_byte * (x.max() - x.min()) > 1e-9  # more than a nanosecond over the sizes: finer than any timer
    return {"latency_s": float(latency),
            "bytes_per_s": float(1.0 / per_byte) if grows else None,  # None: no time grows with size
            "r2": round(1.0 - ss_res / ss_tot, 6) if ss_tot > 0 else None,
            "samples": len(nbytes)}


def profile_paging(device: Any, prof: dict[str, Any], progress: Say = print, save: Path | None = None) -> None:
    """Page out and in at every size, fit each direction, and say which model the planner uses."""
    board: Board = device.board
    if prof.get("paging", {}).get("fit", {}).get("done"):
        progress("paging: already in the profile, skipped")
        return
    sizes = page_sizes(device.hello.pool_bytes)
    progress(f"paging: {len(sizes)} sizes {sizes[0]} B .. {sizes[-1]} B, {PAGE_ROUNDS - 1} round trips each")
    seen: dict[str, tuple[list[int], list[float]]] = {"out": ([], []), "in": ([], [])}
    try:
        for nbytes in sizes:
            blob = paging_model(nbytes)
            device.link.upload(MODEL, blob.encode())
            device.link.upload(WEIGHTS, b"")
            device.x_scale = None  # this model's input is fp32, whatever the model before it staged
            # load_schedule, not a bare upload: a plan's peak and time held for an earlier schedule on this device
            # would otherwise be checked against these steps
            device.load_schedule(paging_schedule(blob).encode())
            res = device.step(np.zeros((1, nbytes // 4), np.float32), np.zeros(1, np.int32), lr=0.0)
            for direction, kind in (("out", "page_out"), ("in", "page_in")):
                recs = [r for r in res.records if r.kind == kind][1:]  # the first: cold file and caches
                seen[direction][0].extend(r.bytes for r in recs)
                seen[direction][1].extend(r.ticks / device.hello.tick_hz for r in recs)
            progress(f"  {nbytes:6d} B: out {_median_us(res, 'page_out', device):9.1f} us, "
                     f"in {_median_us(res, 'page_in', device):9.1f} us (board timer)")
    except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
        raise ProfileInterrupted(f"{_went(exc)} while measuring paging (the ops are saved"
                                 + (f" to {shown(save)}" if save else "") + "); run the same command again to "
                                 "resume", _status(exc)) from exc
    fit = {d: {**fit_line(*seen[d]), "sizes": sizes} for d in ("out", "in")}
    prof["paging"] = _paging_section(board, device, fit)
    if save is not None:
        write_profile(prof, save)
    for d in ("out", "in"):
        f = fit[d]
        rate = f"{f['bytes_per_s'] / 1e6:.3g} MB/s" if f["bytes_per_s"] else "no growth with size"
        progress(f"  page-{d}: latency {f['latency_s'] * 1e6:.1f} us, {rate}, R² {f['r2']}")
    progress(f"  the planner uses the {prof['paging']['used']} paging model: {prof['paging']['reason']}")


def _median_us(res: Any, kind: str, device: Any) -> float:
    ticks = [r.ticks for r in res.records if r.kind == kind][1:]
    return statistics.median(ticks) / device.hello.tick_hz * 1e6 if ticks else 0.0


def _paging_section(board: Board, device: Any, fit: dict[str, dict[str, Any]]) -> dict[str, Any]:
    prov = _provenance(board, device)
    fit_out = {"done": True, "provenance": prov, **fit}
    if device.emulated:
        why = ("the stand-in pages to a file on this computer through qemu-user: its times are this computer's"
               if _is_linux(board) else
               "the emulator pages through semihosting, outside QEMU's virtual clock (near-zero ticks): "
               "it says nothing about an SD card")
        section = {**_datasheet_paging(board, why + f"; the board file's storage model ({board.storage['kind']}, "
                                       f"{board.storage.get('source', '?')}) is used"), "fit": fit_out}
        seed = SEEDS.get(board.name)
        if seed and seed.paper_paging:
            section["poet_paper"] = {**dict(seed.paper_paging), "used": False,
                                     "source": "poet-paper (POET reference poet/chipsets.py)"}
        return section
    usable = all(fit[d]["bytes_per_s"] for d in ("out", "in"))
    if not usable:
        return {**_datasheet_paging(board, "the measured times did not grow with size (no throughput to fit)"),
                "fit": fit_out}
    s = board.storage
    return {"used": "measured", "reason": "fitted on this board (time = latency + bytes / throughput, board timer)",
            "kind": s["kind"], "read_bytes_per_s": fit["in"]["bytes_per_s"],
            "write_bytes_per_s": fit["out"]["bytes_per_s"], "read_latency_s": max(0.0, fit["in"]["latency_s"]),
            "write_latency_s": max(0.0, fit["out"]["latency_s"]), "read_w": s["read_w"], "write_w": s["write_w"],
            "source": "measured (powers: datasheet)", "fit": fit_out}


# ---------------------------------------------------------------- casts and int8 kernels (--casts)

# the cast sweep: 64 .. 16384 elements, doubling (capped by what the board's pool holds)
CAST_SIZES = tuple(64 << k for k in range(9))
CAST_ROUNDS = 3  # each cast runs once as a compute and CAST_ROUNDS - 1 times as a recompute per step
NARROW = ("fp16", "bf16", "int8")
ABSMAX = "absmax"  # the int8 scale (max |x| / 127), which every fp32 -> int8 cast of an activation needs


def cast_directions() -> list[str]:
    """Every measured conversion, as `from->to`, and the absmax that makes an int8 scale."""
    return [ABSMAX] + [d for t in NARROW for d in (f"fp32->{t}", f"{t}->fp32")]


def cast_model(n: int) -> tuple[ModelBlob, dict[str, int]]:
    """input x (n fp32), its absmax scale, then for each narrow type a cast there and one back; the
    node of each direction. Nothing is trained: the step's SGD has no parameters."""
    nodes = [BlobNode(OP_INPUT, KIND_INPUT, (), 4 * n, (n,)), BlobNode(OP_ABSMAX, KIND_FORWARD, (0,), 4, (n, -1))]
    where = {ABSMAX: 1}
    for t in NARROW:
        code, q = ELEMENT_TYPES[t].code, t == "int8"
        nodes.append(BlobNode(OP_CAST, KIND_FORWARD, (0, 1) if q else (0,), ELEMENT_TYPES[t].bytes * n,
                              (n, DT_F32, code, -1)))
        where[f"fp32->{t}"] = len(nodes) - 1
        nodes.append(BlobNode(OP_CAST, KIND_FORWARD, (len(nodes) - 1, 1) if q else (len(nodes) - 1,), 4 * n,
                              (n, code, DT_F32, -1)))
        where[f"{t}->fp32"] = len(nodes) - 1
    nodes.append(BlobNode(OP_SGD, KIND_OPTIMIZER, (), 0, ()))
    return ModelBlob(batch=1, x_elems=n, param_elems=[], nodes=nodes), where


def _placed(blob: ModelBlob, ops: list[tuple[int, int]]) -> Schedule:
    from poet.plan.lower import place

    sizes = [nd.bytes for nd in blob.nodes]
    offsets, extent, _ = place(ops, sizes)
    return Schedule(len(blob.nodes), blob.hash(), extent,
                    [Instr(op, node, offsets[k]) for k, (op, node) in enumerate(ops)])


def cast_schedule(blob: ModelBlob, rounds: int = CAST_ROUNDS) -> Schedule:
    """The scale is made `rounds` times, then each pair (there and back) `rounds` times, the pair
    freed before the next: RAM holds x, the scale and one pair at a time."""
    ops: list[tuple[int, int]] = [(COMPUTE, 0), (COMPUTE, 1)]
    for _ in range(rounds - 1):
        ops += [(FREE, 1), (RECOMPUTE, 1)]
    last = len(blob.nodes) - 1
    for a in range(2, last, 2):
        b = a + 1
        ops += [(COMPUTE, a), (COMPUTE, b), (FREE, b)]
        for _ in range(rounds - 1):
            ops += [(FREE, a), (RECOMPUTE, a), (RECOMPUTE, b), (FREE, b)]
        ops.append((FREE, a))
    ops += [(COMPUTE, last), (FREE, 1), (FREE, 0)]
    return _placed(blob, ops)


def _fits(blob: ModelBlob, sched: Schedule, pool_bytes: int) -> bool:
    return sched.arena_bytes + 64 <= blob.pool_free(pool_bytes)


def _cast_fits(n: int, pool_bytes: int) -> bool:
    blob = cast_model(n)[0]
    return _fits(blob, cast_schedule(blob), pool_bytes)


def _board_seconds(board: Board, device: Any, ticks: float) -> float:
    """Ticks as board seconds: instructions at the board's CPI and clock on an emulator, the board's
    timer otherwise (the Linux stand-in's are this computer's wall clock, and labelled so)."""
    if device.emulated and not _is_linux(board):
        return board.compute_time_s(int(round(ticks)), device.hello.tick_hz)
    return ticks / device.hello.tick_hz


def fit_cycles(n: list[int], cycles: list[float]) -> dict[str, Any]:
    """Least squares cycles = r n + c, with R² (None when every sample is the same)."""
    x = np.asarray(n, dtype=float)
    y = np.asarray(cycles, dtype=float)
    a = np.stack([x, np.ones_like(x)], axis=1)
    (r, c), *_ = np.linalg.lstsq(a, y, rcond=None)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - a @ np.array([r, c])) ** 2).sum())
    return {"cycles_per_elem": round(float(r), 4), "cycles_fixed": round(float(c), 1),
            "r2": round(1.0 - ss_res / ss_tot, 6) if ss_tot > 0 else None, "samples": len(n)}


def _stage(device: Any, blob: ModelBlob, sched: Schedule, weights: Sequence[np.ndarray] = ()) -> None:
    device.link.load_model(blob, list(weights))
    device.x_scale = blob.x_scale(list(weights))  # how device.step stages this model's inputs
    device.load_schedule(sched.encode())  # no plan behind it: no earlier plan's peak or time applies


def _node_ticks(res: Any, node: int) -> list[int]:
    return [r.ticks for r in res.records if r.node == node and r.kind in ("forward", "recompute")]


def profile_casts(device: Any, prof: dict[str, Any], graphs: list[tuple[TrainingGraph, list[np.ndarray]]],
                  progress: Say = print, save: Path | None = None) -> None:
    """Measure every cast direction over sizes and fit cycles = r n + c; then the int8 linear and conv
    forward against fp32 at the given graphs' layer shapes (prof['ops'], op keys)."""
    board: Board = device.board
    if prof.get("casts", {}).get("done"):
        progress("casts: already in the profile, skipped")
        return
    sizes = [n for n in CAST_SIZES if _cast_fits(n, device.hello.pool_bytes)]
    if not sizes:
        raise PoetError(f"casts: not even {CAST_SIZES[0]} elements fit the board's pool "
                        f"({device.hello.pool_bytes} B)")
    progress(f"casts: {len(sizes)} sizes {sizes[0]} .. {sizes[-1]} elements, {CAST_ROUNDS} runs of each direction")
    seen: dict[str, tuple[list[int], list[float]]] = {d: ([], []) for d in cast_directions()}
    rng = np.random.default_rng(0)
    try:
        for n in sizes:
            blob, where = cast_model(n)
            _stage(device, blob, cast_schedule(blob))
            x = (rng.standard_normal((1, n)) * 10).astype(np.float32)  # ordinary values: no special-case paths
            res = device.step(x, np.zeros(1, np.int32), lr=0.0)
            line = []
            for d, node in where.items():
                ticks = _node_ticks(res, node)
                cyc = [_board_seconds(board, device, t) * board.clock_hz for t in ticks]
                seen[d][0].extend([n] * len(cyc))
                seen[d][1].extend(cyc)
                line.append(f"{d} {statistics.median(cyc) / n:.1f}")
            progress(f"  {n:6d} elements, cycles per element: " + ", ".join(line))
        ops = _profile_int8_layers(device, graphs, progress) if graphs else {}
    except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
        raise ProfileInterrupted(f"{_went(exc)} while measuring casts (the rest is saved"
                                 + (f" to {shown(save)}" if save else "") + "); run the same command again to "
                                 "resume", _status(exc)) from exc
    section: dict[str, Any] = {
        "done": True, "provenance": _provenance(board, device), "clock_hz": board.clock_hz,
        "model": "cycles = cycles_per_elem x n + cycles_fixed (board cycles; time_s = cycles / clock_hz, "
                 "energy_j = time_s x cpu_active_w); absmax is the int8 scale an fp32 -> int8 cast of an "
                 "activation needs first",
        "sizes": sizes, "rounds": CAST_ROUNDS}
    for d, (ns, cyc) in seen.items():
        section[d] = fit_cycles(ns, cyc)
    prof["casts"] = section
    prof["ops"].update(ops)
    if save is not None:
        write_profile(prof, save)
    progress("  direction      cycles/elem   fixed cycles   R²")
    for d in cast_directions():
        f = section[d]
        progress(f"  {d:14s} {f['cycles_per_elem']:11.2f} {f['cycles_fixed']:14.0f}   {f['r2']}")


def int8_layer_model(node: Any, g: TrainingGraph) -> tuple[ModelBlob, dict[str, int], list[np.ndarray]]:
    """One linear or conv2d forward of graph g run both ways: fp32, and int8 with what it needs (the
    input's absmax and quantisation, the weight's absmax and quantisation, as a training step does
    every step since the weight changes). The parameters are frozen: nothing here trains."""
    from poet.plan.lower import blob_attrs

    conv = node.op == "conv2d"
    attrs = dict(node.attrs)
    wshape = g.params[attrs["w"]][1]
    has_b = attrs.get("b", -1) >= 0
    attrs["w"], attrs["b"] = 0, 1 if has_b else -1
    shapes = [wshape] + ([g.params[node.attrs["b"]][1]] if has_b else [])
    xe, we = int(np.prod(g.nodes[node.deps[0]].shape)), int(np.prod(wshape))
    a = blob_attrs(node.op, attrs)
    fp_op, q_op = (OP_CONV2D, OP_CONV2D_I8) if conv else (OP_LINEAR, OP_LINEAR_I8)
    nodes = [BlobNode(OP_INPUT, KIND_INPUT, (), 4 * xe, (xe,)),
             BlobNode(OP_ABSMAX, KIND_FORWARD, (0,), 4, (xe, -1)),
             BlobNode(OP_CAST, KIND_FORWARD, (0, 1), xe, (xe, DT_F32, DT_I8, -1)),
             BlobNode(OP_ABSMAX, KIND_FORWARD, (), 4, (we, 0)),
             BlobNode(OP_CAST, KIND_FORWARD, (3,), we, (we, DT_F32, DT_I8, 0)),
             BlobNode(q_op, KIND_FORWARD, (2, 1, 4, 3), node.bytes, a),
             BlobNode(fp_op, KIND_FORWARD, (0,), node.bytes, a),
             BlobNode(OP_SGD, KIND_OPTIMIZER, (), 0, ())]
    blob = ModelBlob(batch=g.batch, x_elems=xe, param_elems=[int(np.prod(s)) for s in shapes], nodes=nodes,
                     param_frozen=[True] * len(shapes))
    rng = np.random.default_rng(1)
    weights = [(rng.standard_normal(s) / np.sqrt(max(1, int(np.prod(s[1:]))))).astype(np.float32) for s in shapes]
    roles = {"x_absmax": 1, "x_quantise": 2, "w_absmax": 3, "w_quantise": 4, "int8": 5, "fp32": 6}
    return blob, roles, weights


def _key(node: Any, op: str | None = None, **attrs: Any) -> str:
    from poet.graph.training_graph import GraphNode
    from poet.plan.costs import op_key

    return op_key(GraphNode(node.id, node.name, node.module, node.kind, op or node.op, node.deps, node.bytes,
                            node.shape, attrs or node.attrs, node.flops))


def _profile_int8_layers(device: Any, graphs: list[tuple[TrainingGraph, list[np.ndarray]]], progress: Say
                         ) -> dict[str, Any]:
    """Every distinct linear / conv2d forward shape of the graphs, int8 against fp32; op entries by key."""
    board: Board = device.board
    out: dict[str, Any] = {}
    done: set[str] = set()
    progress("  int8 layers (cycles): layer | fp32 | int8 kernel | + quantise x (absmax, cast) "
             "| + quantise w | int8 total / fp32")
    for g, _ in graphs:
        for node in g.nodes:
            if node.kind != "forward" or node.op not in ("linear", "conv2d") or _key(node) in done:
                continue
            done.add(_key(node))
            blob, roles, weights = int8_layer_model(node, g)
            sched = _placed(blob, [(COMPUTE, i) for i in range(len(blob.nodes))]
                            + [(FREE, i) for i, nd in enumerate(blob.nodes) if nd.bytes])
            if not _fits(blob, sched, device.hello.pool_bytes):
                progress(f"  {_key(node)}: does not fit the pool ({device.hello.pool_bytes} B), skipped")
                continue
            _stage(device, blob, sched, weights)
            rng = np.random.default_rng(2)
            ticks: dict[str, list[int]] = {r: [] for r in roles}
            for _ in range(3):
                x = rng.standard_normal((g.batch, blob.x_elems // g.batch)).astype(np.float32)
                res = device.step(x, np.zeros(g.batch, np.int32), lr=0.0)
                for role, nid in roles.items():
                    ticks[role] += _node_ticks(res, nid)
            med = {r: statistics.median(t) for r, t in ticks.items()}
            cyc = {r: _board_seconds(board, device, t) * board.clock_hz for r, t in med.items()}
            xe, we = blob.x_elems, blob.param_elems[0]
            entries = {
                _key(node, node.op + "_i8"): ("int8", node.flops),
                _key(node, "absmax", n=xe): ("x_absmax", xe),
                _key(node, "cast", n=xe, **{"from": "fp32", "to": "int8"}): ("x_quantise", xe),
                _key(node, "absmax", n=we): ("w_absmax", we),
                _key(node, "cast", n=we, **{"from": "fp32", "to": "int8"}): ("w_quantise", we),
            }
            if _key(node) not in out:  # the fp32 twin, measured in the same image beside it
                entries[_key(node)] = ("fp32", node.flops)
            for key, (role, w) in entries.items():
                t = ticks[role]
                out[key] = {"work": max(int(w), 1), "ticks": int(med[role]), "spread": round(_spread(t), 6),
                            "repeats": 3, "samples": len(t), "provenance": _provenance(board, device),
                            **_times(board, device, med[role], max(int(w), 1))}
            total = cyc["int8"] + cyc["x_absmax"] + cyc["x_quantise"] + cyc["w_absmax"] + cyc["w_quantise"]
            progress(f"  {_key(node)} | {cyc['fp32']:.0f} | {cyc['int8']:.0f} | "
                     f"{cyc['x_absmax'] + cyc['x_quantise']:.0f} | {cyc['w_absmax'] + cyc['w_quantise']:.0f} | "
                     f"{total / cyc['fp32']:.2f}")
    return out
