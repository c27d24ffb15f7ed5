"""`poet train`: fine-tune a model on the board within its RAM, its deadline and its energy budget.

A run lives in its own folder (runs/<id>/): config.json (what was asked), plan.json and
schedule.poet (what was planned), trace.json (every step's per-op trace), checkpoint.npz (weights
and optimizer state after the last finished step), state.json (where the run is), report.txt and
weights.pt (a state_dict) at the end. Everything is written after every step, atomically, so a run
stopped by a reset, a pulled cable or Ctrl-C resumes with `--resume runs/<id>` from its last
finished step, with the same data order: the final weights are those of an uninterrupted run.

No run is lost to another: a new run gets a folder of its own (made with os.mkdir, `-2`, `-3`...
when two start in the same second), a --run-dir that holds a run is refused (resume it instead),
and whoever writes a run's folder, a run or a resume, holds run.lock in it (flock) until it ends.
A run stopped after its last step but before its files (report, weights, plots, emissions) were
all written gets them on --resume.

Plans are cached (runs/plans/<key>/) by graph, board, profile, budget, deadline and strategy: a
second run of the same configuration skips the solver. Test accuracy is measured after every
epoch on the host, with the weights read back from the board; for an autoencoder (a loss of its
output against its input) the mean reconstruction error instead, and with 0/1 anomaly labels the
ROC AUC of that error as the anomaly score.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import fcntl
import hashlib
import io
import itertools
import json
import math
import os
import shutil
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poet.boards import Board, load_board
from poet.device import firmware, flash
from poet.device.connect import SWAP_FILE, Device, open_device
from poet.device.link import OPT_STATE, PROTO, LinkError, ProtocolMismatch
from poet.energy.accounting import account, charges
from poet.energy.battery import battery_energy_j, check_battery, refusal
from poet.energy.carbon import intensity
from poet.energy.emissions import RunRecord, append
from poet.energy.meters.replay import open_meter
from poet.energy.meters.window import recorded
from poet.energy.predict import Comparison, Epoch, Prediction, RunPredictor, plan_prediction
from poet.energy.tracefile import Trace
from poet.errors import PoetError, UsageError, signal_of, stopped_by
from poet.files import MB, SMALL, atomic, load_json, open_in_folder, read_bytes, write_atomic
from poet.files import kind as file_kind
from poet.graph.reference import Fed, accuracy, reconstruction_errors, state_tensors, weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph, parse_optimizer, with_optimizer
from poet.models.datasets import Dataset, load_dataset
from poet.models.metrics import anomaly_labels, roc_auc
from poet.paths import runs_dir, shown
from poet.plan.lower import model_blob
from poet.plan.memory import check_ram, pool_for
from poet.plan.rewrites import Rewrites
from poet.plan.schedule import MEANINGS, NO_DETAIL, OK, peak_live_bytes, validate
from poet.plan.static_int8 import Int8Prefix
from poet.progress import Say, bar
from poet.settings import FIRST_KEYS, PlanRequest, RunConfig, config_json
from poet.units import parse_deadline


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


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_real(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _well_typed(s: RunState) -> bool:
    """What json.loads gave fits RunState's fields (a hand-edited state.json may hold anything)."""
    return (all(_is_count(v) for v in (s.epoch, s.step, s.global_step))
            and isinstance(s.finished, bool) and isinstance(s.complete, bool)
            and isinstance(s.losses, list) and all(_is_real(v) for v in s.losses)
            and isinstance(s.history, list)
            and all(isinstance(h, dict) and all(_is_real(h.get(k)) for k in ("loss", "energy_j", "time_s"))
                    and any(_is_real(h.get(k)) for k in ("accuracy", "reconstruction_error"))
                    and all(_is_real(h[k]) for k in ("roc_auc",) if k in h)
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
RUN_ENTRIES = (*RUN_FILES, "plan.json", "schedule.poet", "report.txt", "weights.pt", "emissions.csv", "meter.csv",
               *PLOTS, LOCK_FILE, QEMU_LOG, SWAP_FILE)
# written where they are, not replaced by a rename: a hard link among them would change its other name too
IN_PLACE = (LOCK_FILE, QEMU_LOG, SWAP_FILE, "emissions.csv", "meter.csv")
# a schedule is 8 bytes an instruction and at most 65,535 of them (a u16 count), with its header and CRC
SCHEDULE_LIMIT = 24 + 8 * 0xFFFF + 4
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
        arrays = {f"w{i}": w for i, w in enumerate(weights)}
        with atomic(self.dir / "checkpoint.npz") as f:
            np.savez(f, opt_state=np.frombuffer(opt_state, dtype=np.uint8), global_step=state.global_step, **arrays)

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


def _refuse_if_run(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--run-dir {folder}: not a folder")
    if folder.is_dir() and _holds_run(folder):
        raise UsageError(f"--run-dir {folder} already holds a run: continue it with `poet train --resume {folder}`, "
                         "or give another --run-dir")
    if folder.is_dir():
        check_entries(folder)


def _lock(folder: Path) -> int:
    """Hold the run's folder for this process (until the returned descriptor is closed, or the process ends).

    flock, not a pid file: a lock held by a process that was killed goes with it, so a reset or kill -9
    never leaves a run that cannot be resumed."""
    fd = open_in_folder(folder / LOCK_FILE, "the run's lock")  # never through a link planted there
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise PoetError(f"run {shown(folder)} is in use by another poet (pid {pid})") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _new_folder(cfg: RunConfig) -> tuple[Path, bool]:
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


def _resume_checkpoint(run: Run, state: RunState, limit: int) -> tuple[list[np.ndarray], bytes, int] | None:
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


def _plan_key(g: TrainingGraph, board: Board, profile_bytes: bytes, request: PlanRequest) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(asdict(g), sort_keys=True).encode())
    h.update(profile_bytes)
    h.update(json.dumps([board.name, request.ram, request.deadline, request.strategy, request.solver,
                         request.gap]).encode())
    if request.precision != "fp32":  # fp32 runs keep the keys (and the cached plans) they had before --precision
        rules = request.precision_rules
        # a missing file: refused later
        text = read_bytes(rules, "--precision-rules").decode(errors="replace") if rules and rules.is_file() else ""
        h.update(json.dumps([request.precision, str(rules or ""), text]).encode())
    return h.hexdigest()[:16]


def _graph(cfg: RunConfig) -> tuple[torch.nn.Module, TrainingGraph]:
    model, g = traced(cfg.model)
    return model, with_optimizer(g, parse_optimizer(cfg.optimizer))


def _graph_for(g: TrainingGraph, plan: dict) -> tuple[TrainingGraph, Int8Prefix | None]:
    """The graph the plan's schedule runs on, made again from g by the rewrites its plan.json records
    (poet.plan.rewrites), and its static-int8 prefix if it has one."""
    return Rewrites.from_json(plan).apply(g)


STEP_COUNTER_MAX = 0xFFFF_FFFF  # the board counts optimizer steps in a uint32 (core/interp.h, opt_step)

CALIBRATION_SAMPLES = 64  # training samples a static-int8 prefix's scales are calibrated on


def _initial_weights(model: torch.nn.Module, prefix: Int8Prefix | None, data: Dataset,
                     say: Say) -> tuple[list[np.ndarray], Fed | None]:
    """The weights uploaded to the board, in the run graph's order, and for a static-int8 prefix what the
    host's PyTorch is fed to compute as the board does (evaluation)."""
    w = weights_of(model)
    if prefix is None:
        return w, None
    calib = data.x_train[:CALIBRATION_SAMPLES]
    w = prefix.weights(dict(zip((n for n, _ in state_tensors(model)), w, strict=True)), calib)
    say(f"[plan] {len(prefix.layers)} frozen ops run in static int8 ({len(prefix.folds) // 2} batch norms folded); "
        f"their {len(prefix.scales)} scales calibrated on the first {len(calib)} training samples")
    return w, prefix.fed(model, w)


def _to_model(model: torch.nn.Module, g: TrainingGraph, weights: list[np.ndarray]) -> None:
    """Copy the board's weights (the run graph's order) into the model, by name: a static-int8 run's folded
    weights and scales are the board's own and leave the model's fp32 tensors as they are."""
    held = dict(state_tensors(model))
    with torch.no_grad():
        for (name, _), w in zip(g.params, weights, strict=True):
            if name in held:
                held[name].copy_(torch.from_numpy(w.reshape(held[name].shape)))


def _run_plan(run: Run) -> dict:
    """A run's plan.json ({} when it has none, or a damaged one: then the graph is the traced one). A link or
    a device there is refused (check_entries), never read."""
    p = run.dir / "plan.json"
    if not os.path.lexists(p):
        return {}
    try:
        plan = json.loads(read_bytes(p, follow=False, limit=SMALL))
    except (ValueError, RecursionError):
        return {}
    return plan if _plan_problem(plan) is None else {}


# a plan.json's counts, and its numbers the run computes with (predictions, the step's timeout)
PLAN_COUNTS = ("recomputes", "page_ins", "page_outs", "peak_bytes", "arena_budget")
PLAN_AMOUNTS = ("energy_j", "time_s")


def _plan_problem(info: object) -> str | None:
    """What is wrong with a plan.json's values (None: nothing): each of the kind the run uses it as, and
    the energy and time finite, so a damaged file is never computed with."""
    if not isinstance(info, dict):
        return "not an object"
    if "given" in info:  # a run of a given schedule: no plan
        return None if isinstance(info["given"], str) else "given is not a path"
    for k in PLAN_COUNTS:
        if not _is_count(info.get(k)):
            return f"{k} is {json.dumps(info.get(k))[:20]}, not a count"
    for k in PLAN_AMOUNTS:
        v = info.get(k)
        if not (_is_real(v) and math.isfinite(v) and v >= 0):
            return f"{k} is {json.dumps(v)[:20]}, not a finite amount"
    for k in ("streamed", "w8"):
        if k in info and not (isinstance(info[k], list) and all(isinstance(n, str) for n in info[k])):
            return f"{k} is not a list of names"
    if not isinstance(info.get("int8_prefix", False), bool) or not isinstance(info.get("precision", {}), dict):
        return "int8_prefix or precision is of the wrong kind"
    return None


def _read_given_schedule(path: Path, g: TrainingGraph) -> bytes:
    """--schedule's bytes, checked by the host's twin of the firmware's validator (plan/schedule.py)
    against the model before a board is touched: a schedule the board would refuse is a bad input (exit
    2), not found after the emulator boots. Its arena against the board's pool is left to the board,
    whose pool it is."""
    data = read_bytes(path, "--schedule", limit=SCHEDULE_LIMIT)
    status, detail = validate(data, model_blob(_graph_for(g, {})[0]), 0xFFFFFFFF)
    if status != OK:
        at = f" (instruction {detail})" if detail != NO_DETAIL else ""
        raise UsageError(f"--schedule {path}: {MEANINGS[status]}{at}")
    return data


def _given_schedule(path: Path, data: bytes, run: Run, say: Say) -> dict:
    """--schedule: run this file (read and checked by _read_given_schedule) instead of planning. No plan, so
    no prediction."""
    write_atomic(run.dir / "schedule.poet", data)
    say(f"\n[plan] running the schedule {shown(path)} as given ({len(data)} bytes)")
    info = {"given": str(path)}
    write_atomic(run.dir / "plan.json", json.dumps(info, indent=1).encode())
    return info


def _plan(cfg: RunConfig, g: TrainingGraph, board: Board, dev: Device, run: Run, say: Say,
          bars: bool = False, given: bytes | None = None) -> tuple[dict, bytes]:
    """The plan and schedule for this run (given: --schedule's bytes): from the cache when the same
    configuration was solved before and the cached entry verifies."""
    if cfg.schedule:
        assert given is not None
        return _given_schedule(cfg.schedule, given, run, say), given
    from poet.paths import profile_to_read
    from poet.plan.costs import costed, load_profile
    from poet.plan.request import solve_request

    request = cfg.plan
    prof_path = request.profile or profile_to_read(board.name)
    prof = load_profile(board.name, request.profile)
    key = _plan_key(g, board, read_bytes(prof_path, "profile") if prof_path.exists() else b"", request)
    cache = runs_dir() / "plans" / key
    cache.mkdir(parents=True, exist_ok=True)
    with _held(cache / LOCK_FILE, say, "another poet is solving the same plan: waiting for it to reuse its plan"):
        cached = _cached_plan(cache, g, key, say)
        if cached is not None:
            info, sched = cached
            say(f"\n[plan] reusing the plan solved for the same graph, board, profile and budget ({shown(cache)}): "
                f"{info['recomputes']} recomputes, {info['page_ins']} page-ins, peak arena {info['peak_bytes']} B")
        else:
            # what did not verify goes: solve_request writes the schedule where it is, through whatever is there
            (cache / "schedule.poet").unlink(missing_ok=True)
            cg = costed(g, board, prof, estimate=True)
            deadline_s = parse_deadline(request.deadline, cg.one_pass_s)
            # plan.json, written last, marks the entry whole: a schedule without it is solved again
            p = solve_request(request, g, cg, board, dev.runtime_static, deadline_s, say, out=cache / "schedule.poet",
                              bars=bars)
            if p.lowered is None:
                raise PoetError(f"model {g.model} cannot run on the board yet")
            sched = p.lowered.schedule.encode()
            info = {"strategy": p.plan.strategy, "status": p.plan.status, "energy_j": p.plan.energy_j,
                    "time_s": p.plan.time_s, "peak_bytes": p.plan.peak_bytes, "arena_budget": p.budget.arena,
                    "keep_all_peak": p.keep_all_peak, "recomputes": p.plan.recomputes, "page_ins": p.plan.page_ins,
                    "page_outs": p.plan.page_outs, "ram_bytes": request.ram, "key": key,
                    # what the rewrites made of the traced graph: replayed on it by every run of this plan
                    **p.rewrites.to_json()}
            write_atomic(cache / "plan.json", json.dumps(info, indent=1).encode())  # last: it marks the entry whole
        write_atomic(run.dir / "plan.json", json.dumps(info, indent=1).encode())
        write_atomic(run.dir / "schedule.poet", sched)
    return info, sched


def _cached_plan(cache: Path, g: TrainingGraph, key: str, say: Say) -> tuple[dict, bytes] | None:
    """A cache entry's plan and schedule when they verify: plan.json's values are of their kinds, it is
    this key's, and its schedule passes the host's twin of the firmware's validator (CRC, graph hash,
    every instruction, the plan's arena) against the graph the plan runs, peaking where the plan says.
    Else None, and the plan is solved again: a damaged or foreign schedule would be refused by the board
    in every later run, and a wrong peak would fail the first step."""
    if not os.path.lexists(cache / "plan.json"):  # never solved, or stopped before its plan was whole
        return None
    try:
        info = load_json(read_bytes(cache / "plan.json", follow=False), "plan.json")
        sched = read_bytes(cache / "schedule.poet", follow=False, limit=SCHEDULE_LIMIT)
    except UsageError as exc:
        why: str | None = str(exc)
    else:
        why = _plan_problem(info) or (None if info.get("key") == key else "it is of another configuration") \
            or _schedule_problem(sched, g, info)
    if why:
        say(f"note: the cached plan in {shown(cache)} does not verify ({why}): solving it again")
        return None
    return info, sched


def _schedule_problem(sched: bytes, g: TrainingGraph, info: dict) -> str | None:
    """What is wrong with a cached schedule for the graph its plan runs (None: nothing)."""
    try:
        blob = model_blob(_graph_for(g, info)[0])
    except (PoetError, ValueError, KeyError, TypeError, AttributeError, IndexError):  # a precision record of
        return "its plan places or casts tensors this model does not have"  # another graph, or a damaged one
    status, detail = validate(sched, blob, info["arena_budget"])
    if status != OK:
        return f"its schedule: {MEANINGS[status]}" + (f" (instruction {detail})" if detail != NO_DETAIL else "")
    peak = peak_live_bytes(sched, blob)
    if peak != info["peak_bytes"]:
        return f"its schedule peaks at {peak} B, its plan.json says {info['peak_bytes']} B"
    return None


@contextlib.contextmanager
def _held(path: Path, say: Say, waiting: str) -> Iterator[None]:
    """An exclusive flock on `path` for the block; says so once if another process holds it."""
    fd = open_in_folder(path, "the plan cache's lock")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(waiting)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _ensure_firmware(board: Board, port: str, run_dir: Path, say: Say) -> None:
    """Flash the board when it runs poet's firmware of another version than this poet builds, or of an
    older protocol. A device with no valid HELLO reply in any protocol (NotPoet) is not known to be
    poet's board and is never flashed unasked: its one line says how to flash it on purpose. A board
    of a newer protocol is not downgraded: its ProtocolMismatch says to update poet."""
    want = firmware.source_version()
    try:
        with open_device(board, port, workdir=run_dir, quiet=True) as dev:
            have = dev.hello.fw_version
    except ProtocolMismatch as exc:
        if exc.proto > PROTO:
            raise
        have = f"another protocol ({exc})"
    if have == want:
        return
    say(f"\n[flash] the board runs firmware {have}, this poet builds {want}: flashing it")
    flash.flash(board, port, say)


def _check_energy(cfg: RunConfig, plan: dict, steps: int, epochs: int, say: Say) -> Prediction:
    """The plan's prediction of the run; refuse, before anything runs, a run the energy budget or the
    battery cannot carry (unless --force)."""
    grid = intensity(cfg.country, cfg.carbon_intensity)
    if "energy_j" not in plan:  # a given schedule: nothing predicts it before it runs
        return plan_prediction(0.0, 0.0, steps, epochs, grid)
    pred = plan_prediction(plan["energy_j"], plan["time_s"], steps, epochs, grid)
    say(f"\n[energy] {pred.line('the plan predicts')}")
    msg = None
    if cfg.budget_j is not None and pred.energy_j > cfg.budget_j:
        msg = (f"the run needs {pred.energy_j:.4g} J (predicted from the plan), more than --budget-j "
               f"{cfg.budget_j:g} J: train fewer epochs, or pass --force to run anyway")
    elif cfg.battery_mah is not None:
        check = check_battery(pred.energy_j, cfg.battery_mah, cfg.volts)
        say(f"  {check.line()}")
        msg = refusal(check)
    if msg:
        if not cfg.force:
            raise UsageError(msg)
        say(f"  warning: {msg.split(':')[0]} (--force given: running anyway)")
    return pred


def _step_energy(tr: Trace, board: Board) -> tuple[float, float]:
    """Modelled joules and board seconds of the trace's last step (the account of that step alone)."""
    last = Trace(tr.board, tr.model, tr.provenance, tr.tick_hz, tr.nodes, steps=tr.steps[-1:])
    e = t = 0.0
    for c in charges(last, board):
        e += c.energy_j
        t += c.time_s
    return e, t


def _epoch_energy(tr: Trace, board: Board, first_step: int) -> tuple[float, float]:
    """Modelled joules and board seconds of the trace's steps from `first_step` on."""
    e = t = 0.0
    for c in charges(tr, board):
        if c.step >= first_step:
            e += c.energy_j
            t += c.time_s
    return e, t


def _evaluate(model: torch.nn.Module, g: TrainingGraph, weights: list[np.ndarray], data: Dataset,
              fed: Fed | None) -> dict[str, float]:
    """The test metrics with the board's weights: a classifier's accuracy; an autoencoder's mean
    reconstruction error (its loss, per sample), and its ROC AUC as an anomaly score when the test
    labels say normal (0) or anomaly (1)."""
    _to_model(model, g, weights)
    was = model.training
    model.eval()
    try:
        if g.loss == "cross_entropy":
            return {"accuracy": accuracy(model, data.x_test, data.y_test, fed) if len(data.y_test) else float("nan")}
        if not len(data.y_test):
            return {"reconstruction_error": float("nan")}
        errors = reconstruction_errors(model, data.x_test, g.loss, fed)
        metrics = {"reconstruction_error": float(errors.mean())}
        if anomaly_labels(data.y_test):
            metrics["roc_auc"] = roc_auc(errors, data.y_test)
        return metrics
    finally:
        model.train(was)


def _metrics_line(h: dict[str, float], loss: str) -> str:
    """An epoch's test metrics as the epoch and final lines say them."""
    if "accuracy" in h:
        return f"test accuracy {h['accuracy']:.1%}"
    line = f"test reconstruction error ({loss}) {h['reconstruction_error']:.4f}"
    return line + (f", anomaly ROC AUC {h['roc_auc']:.3f}" if "roc_auc" in h else "")


def train(cfg: RunConfig, say: Say = print, port: str | None = None, resume: Path | None = None,
          bars: bool = False) -> Path:
    """Run a fine-tuning run on the board at `port` (None: its emulated stand-in), or resume the one in
    the folder `resume` (whose config cfg must be, as cli reads it); returns the run's folder. bars:
    progress bars (solve, uploads, each epoch's steps) on stderr when it is a terminal (poet.progress)."""
    with contextlib.ExitStack() as held:  # the run's lock, released however the run ends
        return _train(cfg, say, port, resume, held, bars)


def _check_request(cfg: RunConfig, say: Say) -> None:
    """What a run can be refused for without a board: checked before one is touched or the workspace
    written, so a refusal leaves nothing behind (no emulator booted, no run folder)."""
    if (cfg.battery_mah is None) != (cfg.volts is None):
        raise UsageError("--battery-mah and --volts go together (the battery's capacity and its nominal voltage)")
    if cfg.battery_mah is not None and cfg.volts is not None:
        battery_energy_j(cfg.battery_mah, cfg.volts)  # a capacity or voltage no battery has
    if cfg.schedule and (cfg.budget_j is not None or cfg.battery_mah is not None):
        raise UsageError("--budget-j and --battery-mah need a plan to predict the run from; drop --schedule")
    intensity(cfg.country, cfg.carbon_intensity)  # an unknown --country
    parse_deadline(cfg.plan.deadline, 1.0)  # its form; against the model's pass once the plan is costed
    if cfg.plan.ram is None:
        raise UsageError("--ram is required (what the training step may use in all, e.g. 128k)")
    if not cfg.schedule:
        from poet.paths import profile_to_read
        from poet.plan.costs import load_profile
        prof_path = cfg.plan.profile or profile_to_read(cfg.board)
        if prof_path.exists() or prof_path.is_symlink():  # a missing one: load_profile says what to do
            read_bytes(prof_path, "profile")  # a regular file of a profile's size: never /dev/zero read to the end
        load_profile(cfg.board, cfg.plan.profile, note=lambda m: say(f"note: {m}"))
        if cfg.plan.precision != "fp32":
            from poet.plan.precision import load_rules
            load_rules(cfg.plan.precision_rules)


def _train(cfg: RunConfig, say: Say, port: str | None, resume: Path | None, held: contextlib.ExitStack,
           bars: bool = False) -> Path:
    _check_request(cfg, say)
    ckpt = None
    if resume:
        run = Run(resume)
        check_entries(run.dir)  # before anything in it is opened (run_config did too, for the CLI)
        held.callback(os.close, _lock(run.dir))
        state = run.load_state()
        if state.finished or state.complete:
            _check_finished(run, state, cfg.epochs)
            if state.complete:
                say(f"run {shown(run.dir)} already finished: nothing to resume")
            else:
                _complete_finished(cfg, run, state, say)
            return run.dir
    elif cfg.run_dir:
        _refuse_if_run(cfg.run_dir)
    # everything a new run could be refused for is checked before its folder exists
    board = load_board(cfg.board)
    assert cfg.plan.ram is not None
    check_ram(cfg.plan.ram, board.ram_bytes, board.name)
    model, g = _graph(cfg)
    data, per_epoch = _data(cfg, g)
    if per_epoch * cfg.epochs > STEP_COUNTER_MAX:
        raise UsageError(f"--epochs {cfg.epochs} x {per_epoch} steps is {per_epoch * cfg.epochs:,} steps: more than "
                         f"the board's step counter holds ({STEP_COUNTER_MAX:,}; Adam's bias correction would "
                         "divide by 0 when it wraps); train fewer epochs")
    if resume:
        g_run, _ = _graph_for(g, _run_plan(run))
        ckpt = _resume_checkpoint(run, state, checkpoint_limit(g_run))
        _check_resumable(run, state, g_run, ckpt, per_epoch, cfg.epochs)
        at = "after its last step" if state.global_step == per_epoch * cfg.epochs else \
            f"at epoch {state.epoch + 1}, step {state.step + 1}"
        say(f"resuming {shown(run.dir)} {at} ({state.global_step} steps done)")
    given = _read_given_schedule(cfg.schedule, g) if cfg.schedule else None  # one the board would refuse: here
    meter = open_meter(cfg.meter) if cfg.meter else None  # a missing sensor: refused here
    if not resume:
        folder, made = _new_folder(cfg)
        run = Run(folder)
        left = set(os.listdir(run.dir))  # what was there (an empty --run-dir may hold the user's other files)
        held.callback(os.close, _lock(run.dir))
        if cfg.run_dir:
            _refuse_if_run(run.dir)  # again, under the lock: another poet may have run there since the check above
        state = RunState()
    total_steps = per_epoch * cfg.epochs
    try:
        if port:
            _ensure_firmware(board, port, run.dir, say)
        with open_device(board, port, workdir=run.dir, ram=cfg.plan.ram) as dev:
            plan, sched = _plan(cfg, g, board, dev, run, say, bars, given)
            g, prefix = _graph_for(g, plan)
            w0, fed = _initial_weights(model, prefix, data, say)
            pred = _check_energy(cfg, plan, total_steps, cfg.epochs, say)
            if not resume:
                # only now: a run refused for its energy or schedule leaves no config, so no run to be refused for
                write_atomic(run.config_path, json.dumps(config_json(cfg), indent=1).encode())
            trace_path = run.dir / "trace.json"
            tr = Trace.load(trace_path) if state.global_step else \
                Trace.for_graph(g, board.name, dev.provenance, dev.hello.tick_hz)
            tr.plan = plan
            tr.steps = tr.steps[:state.global_step]  # a step traced but not checkpointed runs again
            dev.load_model(g, w0, bars=bars)
            if ckpt is not None:
                weights, opt_state, _ = ckpt
                dev.load_model(g, weights, bars=bars)
                dev.link.upload(OPT_STATE, opt_state)
            dev.load_schedule(sched, planned_peak=plan.get("peak_bytes"),
                              planned_time_s=plan.get("time_s"))
            say(f"\n[train] {g.model} ({g.train}) on the {dev.provenance} {board.name}: {cfg.epochs} epochs x "
                f"{per_epoch} steps of {g.batch}, {g.optimizer['name']} lr {cfg.lr}, data {data.name} "
                f"({len(data.y_train)} train / {len(data.y_test)} test)")
            try:
                # the meter records the steps on the host clock; `poet report trace.json --meter meter.csv` aligns
                with recorded(meter, run.dir / "meter.csv", say) if meter else contextlib.nullcontext():
                    _epochs(cfg, g, board, dev, run, state, tr, data, model, fed, per_epoch, pred, say, bars)
            except (LinkError, KeyboardInterrupt) as exc:
                ctrl_c = isinstance(exc, KeyboardInterrupt)
                why = f"stopped by {stopped_by(exc)}" if ctrl_c else f"lost the board: {exc}"
                raise PoetError(f"{why}; {state.global_step} of {total_steps} steps are done and saved in "
                                f"{shown(run.dir)}: resume with `poet train --resume {shown(run.dir)}`",
                                status=128 + signal_of(exc) if ctrl_c else 1) from None
    except BaseException:
        if not resume and not run.config_path.exists():
            _unmake(run.dir, made, left)  # refused before it began (energy, schedule, flashing): no run to leave
        raise
    return run.dir


def _data(cfg: RunConfig, g: TrainingGraph) -> tuple[Dataset, int]:
    """The run's data, fitted to the model, and its steps per epoch."""
    data = load_dataset(cfg.data, cfg.data_limit).fitted(tuple(g.input_shape), g.classes, g.model, g.loss, g.vocab)
    per_epoch = len(data.epoch_batches(g.batch, 0, cfg.model.seed))
    if per_epoch == 0:
        raise UsageError(f"--data {cfg.data}: {len(data.y_train)} samples make no full batch of {g.batch}")
    return data, per_epoch


def _check_finished(run: Run, state: RunState, epochs: int) -> None:
    """A state that says the run finished (or is complete) is at the end of all its epochs; the rest is
    checked against the checkpoint and the data when the run's files are written (_complete_finished)."""
    if (state.complete and not state.finished) or state.epoch != epochs or state.step or len(state.history) != epochs:
        raise UsageError(f"{shown(run.dir)}: state.json says the run {'is complete' if state.complete else 'finished'}"
                         f" but is at epoch {state.epoch}, step {state.step} with {len(state.history)} of its {epochs} "
                         "epochs summarised: it was changed or damaged, so the run cannot be completed")


def _unmake(folder: Path, made: bool, left: set[str]) -> None:
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


def _check_resumable(run: Run, state: RunState, g: TrainingGraph, ckpt: tuple[list[np.ndarray], bytes, int] | None,
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


def _epochs(cfg: RunConfig, g: TrainingGraph, board: Board, dev: Device, run: Run, state: RunState,
            tr: Trace, data: Dataset, model: torch.nn.Module, fed: Fed | None, per_epoch: int,
            plan_pred: Prediction, say: Say, bars: bool = False) -> None:
    opt_bytes = pool_for(g).optimizer_state
    every = max(1, cfg.checkpoint_every or 1)
    predictor = RunPredictor(cfg.epochs, per_epoch * cfg.epochs, plan_pred.grid)
    for h in state.history:  # a resumed run's finished epochs
        predictor.add(Epoch(per_epoch, h["energy_j"], h["time_s"]))
    weights = dev.read_weights(g)
    while state.epoch < cfg.epochs:
        batches = data.epoch_batches(g.batch, state.epoch, cfg.model.seed)
        epoch_start = state.global_step - state.step
        del state.losses[state.step:]  # the saved state has exactly the steps its checkpoint has
        # cleared when the epoch ends (or stops): its one summary line below takes the bar's place
        with bar(per_epoch, f"epoch {state.epoch + 1}/{cfg.epochs}", shown=bars, unit="step",
                 initial=state.step) as steps:
            while state.step < per_epoch:
                x, y = batches[state.step]
                if g.loss != "cross_entropy":  # the target is the input: the board ignores labels, send valid ones
                    y = np.zeros_like(y)
                res = dev.step(x, y, cfg.lr)
                if not math.isfinite(res.loss):
                    _diverged(run, state, f"the loss is {res.loss}", cfg.lr)
                tr.add_step(res, cfg.lr)
                state.losses.append(float(res.loss))
                state.step += 1
                state.global_step += 1
                if state.global_step % every == 0 or state.step == per_epoch:
                    # checkpoint, trace, then state: a crash between them leaves state behind, never ahead
                    weights = dev.read_weights(g)
                    if not all(np.isfinite(w).all() for w in weights):
                        state.global_step -= 1  # the step that broke them, for the message
                        state.step -= 1
                        _diverged(run, state, "the weights are NaN or infinite", cfg.lr)
                    opt_state = dev.link.read_blob(OPT_STATE, opt_bytes) if opt_bytes else b""
                    run.save_checkpoint(weights, opt_state, state)
                    tr.save(run.dir / "trace.json")
                    run.save_state(state)
                step_j, step_s = _step_energy(tr, board)
                if steps.disable:  # no bar (not a terminal): the step's line, as before
                    say(f"  epoch {state.epoch + 1}/{cfg.epochs} step {state.step:3d}/{per_epoch}  loss "
                        f"{res.loss:.4f}  {step_j * 1e3:.3f} mJ  {step_s * 1e3:.2f} ms (modelled)")
                else:
                    steps.set_postfix_str(f"loss {res.loss:.4f}, {step_j * 1e3:.3f} mJ/step", refresh=False)
                    steps.update()
        e_j, t_s = _epoch_energy(tr, board, epoch_start)
        metrics = _evaluate(model, g, weights, data, fed)
        losses = state.losses
        state.history.append({"epoch": state.epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
                              **metrics, "energy_j": e_j, "time_s": t_s})
        state.epoch += 1
        state.step = 0
        state.losses = []
        run.save_state(state)
        say(f"epoch {state.epoch}/{cfg.epochs}: mean loss {state.history[-1]['loss']:.4f}, "
            f"{_metrics_line(metrics, g.loss)}, {e_j * 1e3:.3f} mJ, {t_s:.3f} s of board time (modelled)")
        made = predictor.add(Epoch(per_epoch, e_j, t_s))
        if made is not None and cfg.epochs > 1:
            say(f"  {made.line()}")
    state.finished = True
    run.save_state(state)
    _complete(cfg, g, board, run, state, tr, model, weights, predictor, plan_pred, say)


def _diverged(run: Run, state: RunState, what: str, lr: float) -> None:
    """Stop a run whose training diverged; its last checkpoint (before the step) stays as it was."""
    ckpt = Run(run.dir).load_checkpoint()
    kept = f"the checkpoint after step {ckpt[2]} is kept" if ckpt else "no step before it was checkpointed"
    raise PoetError(f"training diverged: after epoch {state.epoch + 1} step {state.step + 1} (step "
                    f"{state.global_step + 1} of the run) {what}; the run is stopped and {kept} in {shown(run.dir)}: "
                    f"start a new run with a lower --lr than {lr:g}, or check the data")


def _complete(cfg: RunConfig, g: TrainingGraph, board: Board, run: Run, state: RunState, tr: Trace,
              model: torch.nn.Module, weights: list[np.ndarray], predictor: RunPredictor, plan_pred: Prediction,
              say: Say) -> None:
    """A finished run's files, then `complete` in its state. Each file is written whole or not at all, and
    emissions.csv gets the run's row once, so a run stopped in here is completed by --resume."""
    _finish(g, board, run, state, tr, model, weights, say)
    actual = predictor.actual()
    for line in Comparison(predictor.prediction or plan_pred, actual).lines():
        say(f"  {line}")
    if plan_pred.energy_j > 0:  # a given schedule has no plan to compare with
        say(f"  {Comparison(plan_pred, actual).lines()[1].replace('prediction error', 'plan prediction error')}")
    emissions = run.dir / "emissions.csv"
    if not _has_row(emissions, run.dir.name):
        kept = append(emissions, RunRecord(actual.energy_j, actual.time_s, actual.co2_g, actual.grid, board.name,
                                           tr.provenance, cfg.plan.ram,
                                           experiment=f"{g.model} on {board.name}", run_id=run.dir.name))
        say(f"  emissions: {shown(emissions)} (codecarbon's columns)"
            + (f"; an older file with other columns was kept as {shown(kept)}" if kept else ""))
    state.complete = True
    run.save_state(state)


def _has_row(emissions: Path, run_id: str) -> bool:
    """Whether emissions.csv already has this run's row (written before the run was stopped)."""
    if not os.path.lexists(emissions):
        return False
    text = read_bytes(emissions, follow=False, limit=SMALL)  # a link or a device: refused by check_entries first
    try:
        return any(row.get("run_id") == run_id for row in csv.DictReader(io.StringIO(text.decode(), newline="")))
    except (UnicodeDecodeError, csv.Error):
        return False  # append() keeps an unreadable file aside and starts a new one


def _complete_finished(cfg: RunConfig, run: Run, state: RunState, say: Say) -> None:
    """--resume of a run stopped after its last step, before its files: write them from the run's folder
    (checkpoint, trace, state, plan); no board is needed."""
    say(f"run {shown(run.dir)} finished its {state.global_step} steps but not its files: writing them")
    trace_path = run.dir / "trace.json"
    if not os.path.lexists(trace_path):
        raise UsageError(f"{shown(run.dir)}: trace.json is missing: the run's report cannot be written")
    board = load_board(cfg.board)
    model, g = _graph(cfg)
    _, per_epoch = _data(cfg, g)
    plan = _run_plan(run)
    g_run, _ = _graph_for(g, plan)
    # the weights and report are written from the checkpoint: it must be the run's last step, as the state
    # must be (a state saying `finished` after 2 of 8 steps would make a 2-step run look complete)
    ckpt = _resume_checkpoint(run, state, checkpoint_limit(g_run))
    _check_resumable(run, state, g_run, ckpt, per_epoch, cfg.epochs)
    assert ckpt is not None  # _check_resumable: a finished run's state has all its steps, so a checkpoint
    tr = Trace.load(trace_path)
    tr.plan = plan
    grid = intensity(cfg.country, cfg.carbon_intensity)
    total = state.global_step
    plan_pred = plan_prediction(plan.get("energy_j", 0.0), plan.get("time_s", 0.0), total, cfg.epochs, grid)
    predictor = RunPredictor(cfg.epochs, total, grid)
    for h in state.history:
        predictor.add(Epoch(per_epoch, h["energy_j"], h["time_s"]))
    _complete(cfg, g_run, board, run, state, tr, model, ckpt[0], predictor, plan_pred, say)
    say(f"run {shown(run.dir)} is complete")


def _finish(g: TrainingGraph, board: Board, run: Run, state: RunState, tr: Trace, model: torch.nn.Module,
            weights: list[np.ndarray], say: Say) -> None:
    _to_model(model, g, weights)
    with atomic(run.dir / "weights.pt") as f:  # a run stopped mid-write keeps no half file that looks whole
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, f)
    from poet.energy.report import render

    plan = tr.plan or {}
    if "peak_bytes" in plan and tr.steps:  # every step was checked against it (Device.step); said once here
        say(f"  board peak arena {max(s['peak_live_bytes'] for s in tr.steps)} B = planner's {plan['peak_bytes']} B; "
            f"extent {max(s['peak_extent_bytes'] for s in tr.steps)} B <= arena budget {plan['arena_budget']} B")
    trace_path = run.dir / "trace.json"
    say(f"\n[account] trace of {len(tr.steps)} steps saved to {shown(trace_path)} "
        f"(`poet report {shown(trace_path)}` prints this again)")
    report = render(account(tr, board), tr, board, top=5)
    write_atomic(run.dir / "report.txt", (report + "\n").encode())
    from poet.energy.report import plot

    pngs = plot(account(tr, board), tr, board, run.dir, "energy")
    h = state.history
    say(report)
    say(f"\n[done] {state.global_step} steps; final {_metrics_line(h[-1], g.loss)}; "
        f"{sum(e['energy_j'] for e in h):.3f} J and {sum(e['time_s'] for e in h):.2f} s of board time (modelled)")
    say(f"  weights: {shown(run.dir / 'weights.pt')} (a state_dict: model.load_state_dict(torch.load(...)))")
    say(f"  plots: {', '.join(shown(p) for p in pngs)} (module tree, top tensors, power timeline)")


def read_back(run_dir: Path, g: TrainingGraph) -> list[np.ndarray]:
    """The weights of a run's last checkpoint, in the graph's state-tensor order (tests, tools)."""
    ckpt = Run(run_dir).load_checkpoint()
    if ckpt is None:
        raise PoetError(f"{run_dir}: no checkpoint")
    return ckpt[0]


