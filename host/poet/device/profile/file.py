"""The profile file, profiles/<board>.yaml: its sections, resuming it, and writing it under a lock,
merged with what another `poet profile` into the same file wrote meanwhile."""

from __future__ import annotations

import datetime
import fcntl
from pathlib import Path
from typing import Any

import yaml

from poet.boards import Board
from poet.device.profile.provenance import compute_section, datasheet_paging
from poet.errors import PoetError, UsageError
from poet.files import write_atomic
from poet.paths import shown
from poet.plan.cost.costs import read_profile

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
        "compute": compute_section(board, device.emulated),
        "settings": {},
        "models": {},
        "paging": datasheet_paging(board, "not measured yet"),
        "ops": {},
    }


def resumable(existing: dict[str, Any] | None, device: Any) -> dict[str, Any] | None:
    """The existing profile if it was made by this board's current firmware the same way, else None."""
    if not existing or not _complete(existing):
        return None
    this = {"board": device.board.name, "firmware": device.hello.fw_version, "source": device.provenance}
    return existing if _same_making(existing, this) else None


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
