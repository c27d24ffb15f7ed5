"""A run's folder (runs/<id>/): its files, read only as regular files and written whole (poet.files.atomic),
the checks that its files agree with each other before a resume, and the lock that keeps one poet in it.

No run is lost to another: a new run gets a folder of its own (made with os.mkdir, `-2`, `-3`...
when two start in the same second), a --run-dir that holds a run is refused (resume it instead),
and whoever writes a run's folder, a run or a resume, holds run.lock in it (flock) until it ends.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import io
import itertools
import json
import math
import os
import shutil
import stat
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from poet.device.connect import SWAP_FILE
from poet.energy.tracefile import Trace
from poet.errors import PoetError, UsageError
from poet.files import MB, SMALL, atomic, open_in_folder, read_bytes, write_atomic
from poet.files import kind as file_kind
from poet.graph.training_graph import TrainingGraph
from poet.paths import runs_dir, shown
from poet.plan.cost.memory import pool_for
from poet.progress import Say
from poet.settings import FIRST_KEYS, RunConfig


@dataclass
class RunState:
    epoch: int = 0  # the epoch in progress
    step: int = 0  # the next step within it
    global_step: int = 0
    finished: bool = False  # every step done
    complete: bool = False  # and every file a finished run has written (report, weights, plots, emissions)
    # per finished epoch: loss, energy_j, time_s and the test metrics (_evaluate)
    history: list[dict[str, float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # the steps of the epoch in progress: its mean survives a resume


def is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_real(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _well_typed(s: RunState) -> bool:
    """What json.loads gave fits RunState's fields (a hand-edited state.json may hold anything)."""
    return (all(is_count(v) for v in (s.epoch, s.step, s.global_step))
            and isinstance(s.finished, bool) and isinstance(s.complete, bool)
            and isinstance(s.losses, list) and all(is_real(v) for v in s.losses)
            and isinstance(s.history, list)
            and all(isinstance(h, dict) and all(is_real(h.get(k)) for k in ("loss", "energy_j", "time_s"))
                    and any(is_real(h.get(k)) for k in ("accuracy", "reconstruction_error"))
                    and all(is_real(h[k]) for k in ("roc_auc",) if k in h)
                    for h in s.history))


# a folder with one of these holds a run: a new run there would overwrite it
RUN_FILES = ("config.json", "state.json", "checkpoint.npz", "trace.json")


LOCK_FILE = "run.lock"


QEMU_LOG = "qemu.log"  # poet.device.emulator: QEMU's output, in the run's folder


# Every name poet reads or writes in a run's folder: its own files, what the emulator keeps there (QEMU's
# log, the emulated SD card, which QEMU's firmware opens by name), what the account writes (plots,
# emissions, a meter's recording). A run folder may come from someone else: a link among these would make
# a resume read /dev/zero or write outside the folder, so such a folder is refused before anything is read.
PLOTS = ("energy.edd.png", "energy.tensors.png", "energy.power.png")  # energy.report.plot(run.dir, "energy")


RUN_ENTRIES = (*RUN_FILES, "plan.json", "schedule.poet", "suffix.poet", "report.txt", "weights.pt", "emissions.csv",
               "meter.csv", *PLOTS, LOCK_FILE, QEMU_LOG, SWAP_FILE)


# written where they are, not replaced by a rename: a hard link among them would change its other name too
IN_PLACE = (LOCK_FILE, QEMU_LOG, SWAP_FILE, "emissions.csv", "meter.csv")


# a checkpoint read where the model is not known (read_back, a diverged run's message): what a Jetson's RAM holds
CHECKPOINT_LIMIT = 8 << 30


def check_entries(folder: Path) -> None:
    """Refuse, in one line naming it, a run folder where one of the names poet reads or writes is a link,
    not a regular file, or (for a file written in place) a file with other names."""
    for name in RUN_ENTRIES:
        p = folder / name
        where = f"{shown(folder)}/{name}"  # shown(p) would resolve the link, naming its target
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"{where}: cannot look at it ({exc.strerror or exc})") from None
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{where} is a symbolic link (to {os.readlink(p)}): poet neither reads nor writes "
                             "through links in a run's folder, which could point anywhere: remove it, or copy the "
                             "file it points to in its place")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where} is {file_kind(st.st_mode)}, not a file: a run's folder holds only poet's "
                             "own files under that name (remove it)")
        if name in IN_PLACE and st.st_nlink > 1:
            raise UsageError(f"{where} has {st.st_nlink} names (a hard link): poet writes it in place, which "
                             "would change the file under its other names too (remove it)")


def _run_json(p: Path) -> Any:
    """One of a run's JSON files: a regular file, not through a link, of a size such a file can have. NaN is
    taken: a run writes it for an epoch with no test data (and config.json's values are checked as options)."""
    data = read_bytes(p, follow=False, limit=SMALL)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise UsageError(f"{shown(p)} is unreadable ({' '.join(str(exc).split())[:200]}): the run cannot be "
                         "resumed") from None


def _npz(data: bytes, limit: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz file held in `data`. Each array's header is read first: numpy allocates the
    shape a header says before it reads a byte, so a forged kilobyte would ask for terabytes."""
    arrays = {}
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"{info.filename} is an array of format {version}, which poet does not write")
            if dtype.hasobject or math.prod(shape) * dtype.itemsize > limit:
                raise ValueError(f"{info.filename} holds {'objects' if dtype.hasobject else f'{shape} {dtype}'}, "
                                 "not what a checkpoint holds")
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        for name in z.files:
            arrays[name] = z[name]
    return arrays


class Run:
    """A run's folder: what it was asked, where it is, and its files. Every file is written whole by a fresh
    temporary renamed over it (poet.files.atomic: a link planted at its name is replaced, never followed)
    and read only as a regular file, never through a link."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder

    @property
    def config_path(self) -> Path:
        return self.dir / "config.json"

    def save_state(self, state: RunState) -> None:
        write_atomic(self.dir / "state.json", json.dumps(asdict(state), indent=1).encode())

    def load_state(self) -> RunState:
        p = self.dir / "state.json"
        if not os.path.lexists(p):
            return RunState()
        raw = _run_json(p)
        try:
            state = RunState(**raw)
        except TypeError as exc:  # not an object, or other keys
            raise UsageError(f"{shown(p)} is unreadable ({exc}): the run cannot be resumed") from None
        if not _well_typed(state):
            raise UsageError(f"{shown(p)} holds values of the wrong kind (changed or damaged): the run cannot be "
                             "resumed")
        return state

    def save_checkpoint(self, weights: list[np.ndarray], opt_state: bytes, state: RunState) -> None:
        """The weights and optimizer state after `state`'s steps, with the state itself: a run killed after
        the checkpoint and before state.json resumes from the checkpoint's (caught_up)."""
        arrays = {f"w{i}": w for i, w in enumerate(weights)}
        with atomic(self.dir / "checkpoint.npz") as f:
            np.savez(f, opt_state=np.frombuffer(opt_state, dtype=np.uint8), global_step=state.global_step,
                     state=np.frombuffer(json.dumps(asdict(state)).encode(), dtype=np.uint8), **arrays)

    def caught_up(self, state: RunState, limit: int = CHECKPOINT_LIMIT) -> RunState:
        """`state`, or the state the checkpoint was saved with when it is further on: the run was stopped
        between writing its checkpoint and its state.json (the trace is written before both)."""
        p = self.dir / "checkpoint.npz"
        if not os.path.lexists(p):
            return state
        try:
            z = _npz(read_bytes(p, follow=False, limit=limit), limit)
            if "state" not in z or int(z["global_step"]) <= state.global_step:
                return state
            ahead = RunState(**json.loads(z["state"].tobytes()))
        except Exception:  # noqa: BLE001 - an unreadable checkpoint is resume_checkpoint's to refuse, in its words
            return state
        return ahead if _well_typed(ahead) and ahead.global_step == int(z["global_step"]) else state

    def load_checkpoint(self, limit: int = CHECKPOINT_LIMIT) -> tuple[list[np.ndarray], bytes, int] | None:
        """The weights, optimizer state and step of the run's checkpoint (None: it has none). `limit`: the
        most bytes it may hold (a model's weights and optimizer state; see checkpoint_limit)."""
        p = self.dir / "checkpoint.npz"
        if not os.path.lexists(p):
            return None
        z = _npz(read_bytes(p, follow=False, limit=limit), limit)
        n = sum(1 for k in z if k.startswith("w"))
        return [z[f"w{i}"] for i in range(n)], z["opt_state"].tobytes(), int(z["global_step"])


def checkpoint_limit(g: TrainingGraph) -> int:
    """The most bytes a checkpoint of g holds: every weight at 8 bytes an element (more than any dtype the
    board gives back), the optimizer state, and room for the zip's and the arrays' headers."""
    return sum(math.prod(shape) for _, shape in g.params) * 8 + pool_for(g).optimizer_state + MB


def _holds_run(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


def refuse_if_run(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--run-dir {folder}: not a folder")
    if folder.is_dir() and _holds_run(folder):
        raise UsageError(f"--run-dir {folder} already holds a run: continue it with `poet train --resume {folder}`, "
                         "or give another --run-dir")
    if folder.is_dir():
        check_entries(folder)


def lock(path: Path, what: str, say: Say | None = None, waiting: str = "") -> int:
    """Hold the lock file `path` (`what`, for a message) for this process until the returned descriptor is
    closed or the process ends, its pid written in it. Held by another poet: with `say`, say `waiting` and
    wait for it (the plan cache); else refuse in one line naming the holder (a run's folder).

    flock, not a pid file: a lock held by a process that was killed goes with it, so a reset or kill -9
    never leaves a run that cannot be resumed, nor a plan cache no one can enter."""
    fd = open_in_folder(path, what)  # never through a link planted there
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is None:
                pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                raise PoetError(f"run {shown(path.parent)} is in use by another poet (pid {pid})") from None
            say(waiting)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def new_folder(cfg: RunConfig) -> tuple[Path, bool]:
    """The new run's folder and whether this call made it: --run-dir (made if missing), else
    runs/<date>-<time>-<model>[-N], one of its own."""
    if cfg.run_dir:
        folder = cfg.run_dir
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            return folder, False
        except OSError as exc:
            raise UsageError(f"--run-dir {folder}: cannot make the folder: {exc.strerror or exc}") from None
        return folder, True
    base = runs_dir()
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PoetError(f"cannot make the runs folder {shown(base)}: {exc.strerror or exc} (set $POET_WORKSPACE "
                        "to a folder you can write)") from None
    stem = f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{cfg.model.name.replace('/', '_').replace(':', '_')}"
    for n in itertools.count(1):
        folder = base / (stem if n == 1 else f"{stem}-{n}")
        try:
            os.mkdir(folder)  # atomic: of two runs started in the same second, one gets -2
        except FileExistsError:
            continue
        except OSError as exc:
            raise PoetError(f"cannot make a run folder in {shown(base)}: {exc.strerror or exc} (set "
                            "$POET_WORKSPACE to a folder you can write)") from None
        return folder, True
    raise AssertionError("unreachable")


def resume_checkpoint(run: Run, state: RunState, limit: int) -> tuple[list[np.ndarray], bytes, int] | None:
    """The checkpoint of the steps the state says are done; refused when it is missing or unreadable,
    as training on from the initial weights would silently lose those steps. limit: checkpoint_limit."""
    if not state.global_step:
        return None
    p = run.dir / "checkpoint.npz"
    if not os.path.lexists(p):
        raise UsageError(f"{shown(run.dir)}: state.json says {state.global_step} steps are done but checkpoint.npz "
                        "is missing, so their weights are lost: start a new run")
    try:
        ckpt = run.load_checkpoint(limit)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{shown(run.dir)}: checkpoint.npz is unreadable ({' '.join(str(exc).split())[:200]}), "
                         f"so the weights of its {state.global_step} steps are lost: start a new run") from None
    assert ckpt is not None
    if ckpt[2] != state.global_step:
        raise UsageError(f"{shown(run.dir)}: checkpoint after step {ckpt[2]}, state says {state.global_step}")
    return ckpt


def saved_config(folder: Path) -> dict[str, Any]:
    """A run's config.json, refused in one line when the folder is no run or the file is damaged."""
    path = Run(folder).config_path
    if not folder.is_dir():
        raise UsageError(f"--resume {folder}: no such run folder")
    if not os.path.lexists(path):
        raise UsageError(f"--resume {folder}: not a run folder (no config.json)")
    check_entries(folder)  # before anything in it is read
    cfg = _run_json(path)
    missing = [k for k in FIRST_KEYS if not isinstance(cfg, dict) or k not in cfg]
    if missing:
        raise UsageError(f"{shown(path)} lacks {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''}: it was "
                        "changed or damaged, so the run cannot be resumed")
    return cfg


def check_finished(run: Run, state: RunState, epochs: int) -> None:
    """A state that says the run finished (or is complete) is at the end of all its epochs; the rest is
    checked against the checkpoint and the data when the run's files are written (_complete_finished)."""
    if (state.complete and not state.finished) or state.epoch != epochs or state.step or len(state.history) != epochs:
        raise UsageError(f"{shown(run.dir)}: state.json says the run {'is complete' if state.complete else 'finished'}"
                         f" but is at epoch {state.epoch}, step {state.step} with {len(state.history)} of its {epochs} "
                         "epochs summarised: it was changed or damaged, so the run cannot be completed")


def unmake(folder: Path, made: bool, left: set[str]) -> None:
    """Remove a new run's folder, or from a --run-dir that was there what this run put in it."""
    for entry in folder.iterdir():
        if entry.name not in left:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    if made:
        with contextlib.suppress(OSError):
            folder.rmdir()


def check_resumable(run: Run, state: RunState, g: TrainingGraph, ckpt: tuple[list[np.ndarray], bytes, int] | None,
                    per_epoch: int, epochs: int) -> None:
    """A resumed run's files agree with each other and with its model: else refused, naming the file,
    rather than trained on from the wrong place or with weights the board would reject."""
    where = shown(run.dir)
    # step == per_epoch: killed after an epoch's last checkpoint, before its summary; epoch == epochs:
    # after the last summary, before `finished` was saved. Both are states a run writes, so both resume.
    in_epoch = 0 <= state.step <= per_epoch if state.epoch < epochs else state.step == 0
    if not (0 <= state.epoch <= epochs and in_epoch and len(state.history) == state.epoch
            and state.global_step == state.epoch * per_epoch + state.step):
        raise UsageError(f"{where}: state.json (epoch {state.epoch}, step {state.step}, {state.global_step} steps "
                         f"done) does not fit the run's {epochs} epochs of {per_epoch} steps: it was changed or "
                         "damaged, so the run cannot be resumed")
    if ckpt is not None:
        weights, opt_state, _ = ckpt
        want = [tuple(shape) for _, shape in g.params]
        got = [tuple(w.shape) for w in weights]
        if got != want:
            raise UsageError(f"{where}: checkpoint.npz holds weights of shapes {got[:4]}{'...' if len(got) > 4 else ''}"
                            f", the model {g.model} has {want[:4]}{'...' if len(want) > 4 else ''}: it is not this "
                            "run's checkpoint")
        if any(w.dtype.kind != "f" or not np.isfinite(w).all() for w in weights):
            raise UsageError(f"{where}: checkpoint.npz has weights that are NaN, infinite or not floats: it cannot be "
                            "resumed from")
        if len(opt_state) != pool_for(g).optimizer_state:
            raise UsageError(f"{where}: checkpoint.npz holds {len(opt_state)} bytes of optimizer state, "
                            f"{g.optimizer['name']} on this model keeps {pool_for(g).optimizer_state}: it is not this "
                            "run's checkpoint")
    if state.global_step:
        p = run.dir / "trace.json"
        steps = len(Trace.load(p).steps) if p.exists() else 0
        if steps < state.global_step:
            raise UsageError(f"{where}: trace.json has {steps} of the {state.global_step} steps done, so the run's "
                            "energy account would be wrong: it cannot be resumed")


def read_back(run_dir: Path, g: TrainingGraph) -> list[np.ndarray]:
    """The weights of a run's last checkpoint, in the graph's state-tensor order (tests, tools)."""
    ckpt = Run(run_dir).load_checkpoint()
    if ckpt is None:
        raise PoetError(f"{run_dir}: no checkpoint")
    return ckpt[0]
