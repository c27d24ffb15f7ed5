"""Hostile run folders and run inputs, as tests/test_hostile.py's table: every case ends in one line on
stderr and exit 2, before a board is opened (the `ws` fixture fails the test if one is), and leaves
nothing outside the run folder changed.

A run folder may come from someone else: a link among its files (to /dev/zero, or to a file elsewhere
that a resume would overwrite), a FIFO, a file too large to be one of poet's, a state that says the run
finished when its checkpoint says otherwise. A --schedule the board would refuse is refused on the host,
before the emulator boots. tests/test_run_folder_links.py resumes real runs with links planted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import refused
from poet.plan.lowering.schedule import Schedule
from poet.run.folder import IN_PLACE, RUN_ENTRIES
from test_hostile import MIDWAY, MLP_SHAPES, TRAIN, _ckpt, _config, _run

# a file outside every run folder, which no case may change
OUTSIDE = "outside.txt"
OUTSIDE_TEXT = "the user's own file\n"


def _outside(t: Path) -> Path:
    p = t / OUTSIDE
    if not p.exists():
        p.write_text(OUTSIDE_TEXT)
    return p


def _planted(name: str, target: Callable[[Path], Path | str]) -> Callable[[Path], list[str]]:
    """A resumable-looking run folder (config, a midway state and its checkpoint) with `name` a link to
    target(tmp)."""
    def make(t: Path) -> list[str]:
        run = Path(_run(t, state=MIDWAY, checkpoint=_ckpt(MLP_SHAPES)))
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(target(t))
        return ["train", "--resume", str(run)]
    return make


def _hard_linked(name: str) -> Callable[[Path], list[str]]:
    def make(t: Path) -> list[str]:
        run = Path(_run(t, state=MIDWAY, checkpoint=_ckpt(MLP_SHAPES)))
        os.link(_outside(t), run / name)
        return ["train", "--resume", str(run)]
    return make


def _fifo(name: str) -> Callable[[Path], list[str]]:
    def make(t: Path) -> list[str]:
        run = Path(_run(t))
        (run / name).unlink(missing_ok=True)
        os.mkfifo(run / name)
        return ["train", "--resume", str(run)]
    return make


def _huge(name: str) -> Callable[[Path], list[str]]:
    """`name` a sparse file of 100 GB: its size alone refuses it, nothing of it is read."""
    def make(t: Path) -> list[str]:
        run = Path(_run(t, state=MIDWAY, checkpoint=_ckpt(MLP_SHAPES)))
        with open(run / name, "ab") as f:
            f.truncate(100 << 30)
        return ["train", "--resume", str(run)]
    return make


def _run_dir_with(name: str) -> Callable[[Path], list[str]]:
    """A new run into an existing --run-dir where `name` is a link to a file outside it."""
    def make(t: Path) -> list[str]:
        d = t / "mine"
        d.mkdir()
        (d / name).symlink_to(_outside(t))
        return [*TRAIN, "--run-dir", str(d)]
    return make


EPOCH = {"epoch": 1, "loss": 2.0, "accuracy": 0.1, "energy_j": 1e-3, "time_s": 0.01}
# TRAIN: 1 epoch of 4 steps (64 samples, batch 16)
FINISHED_AT_2 = {"epoch": 1, "step": 0, "global_step": 2, "finished": True, "complete": False, "history": [EPOCH],
                 "losses": []}


def _finished_at_2(t: Path) -> list[str]:
    run = Path(_run(t, state=FINISHED_AT_2, checkpoint=_ckpt(MLP_SHAPES, step=2)))
    (run / "trace.json").write_text("{}")  # the state is judged first
    return ["train", "--resume", str(run)]


def _schedule(t: Path, data: bytes) -> str:
    (t / "given.poet").write_bytes(data)
    return str(t / "given.poet")


FOREIGN = Schedule(n_nodes=3, model_hash=0x1234, arena_bytes=64).encode()  # whole, CRC and all, of another model
DAMAGED = FOREIGN[:12] + bytes([FOREIGN[12] ^ 1]) + FOREIGN[13:]  # a bit of the model hash flipped


CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    # a link at any name poet reads or writes in a run folder: refused before anything is read or written
    *((f"link-{name}", _planted(name, _outside), (name, "symbolic link")) for name in RUN_ENTRIES),
    ("link-config-to-dev-zero", _planted("config.json", lambda t: "/dev/zero"), ("config.json", "symbolic link")),
    ("link-state-to-dev-urandom", _planted("state.json", lambda t: "/dev/urandom"), ("state.json", "symbolic link")),
    ("link-dangling", _planted("trace.json", lambda t: t / "nowhere"), ("trace.json", "symbolic link")),
    # a file written in place with another name elsewhere
    *((f"hard-link-{name}", _hard_linked(name), (name, "hard link")) for name in IN_PLACE),
    # not regular files, or too large to be one of poet's: nothing of them read
    ("config-fifo", _fifo("config.json"), ("config.json", "pipe")),
    ("state-fifo", _fifo("state.json"), ("state.json", "pipe")),
    ("state-huge", _huge("state.json"), ("state.json", "more than")),
    ("checkpoint-huge", _huge("checkpoint.npz"), ("checkpoint.npz", "more than")),
    ("plan-huge", _huge("plan.json"), ("plan.json", "more than")),
    ("config-nested", lambda t: ["train", "--resume", _run(t, "[" * 100_000)], ("config.json", "unreadable")),
    ("state-nested", lambda t: ["train", "--resume", _run(t, state="[" * 100_000)], ("state.json", "unreadable")),
    ("checkpoint-forged-shape", lambda t: ["train", "--resume", _run(t, state=MIDWAY, checkpoint=_forged)],
     ("checkpoint.npz is unreadable",)),
    # the profile a config names
    ("config-profile-dev-zero", lambda t: ["train", "--resume", _run(t, _config(profile="/dev/zero"))],
     ("/dev/zero", "character device")),
    ("config-profile-link-to-dev-zero", lambda t: ((t / "p.yaml").symlink_to("/dev/zero"), [
        "train", "--resume", _run(t, _config(profile=str(t / "p.yaml")))])[1], ("p.yaml", "character device")),
    # a state that says more than its checkpoint and config
    ("state-finished-at-step-2", _finished_at_2, ("state.json", "does not fit")),
    ("state-finished-short", lambda t: ["train", "--resume", _run(t, state={**FINISHED_AT_2, "history": []})],
     ("state.json", "finished", "cannot be completed")),
    ("state-complete-not-finished", lambda t: ["train", "--resume", _run(t, state={**MIDWAY, "complete": True})],
     ("state.json", "is complete", "cannot be completed")),
    # a new run into a folder with links planted
    ("run-dir-link-qemu-log", _run_dir_with("qemu.log"), ("qemu.log", "symbolic link")),
    ("run-dir-link-swap", _run_dir_with("poet-swap.bin"), ("poet-swap.bin", "symbolic link")),
    ("run-dir-link-lock", _run_dir_with("run.lock"), ("run.lock", "symbolic link")),
    # a schedule the board would refuse is refused on the host, before it boots
    ("schedule-garbage", lambda t: [*TRAIN, "--schedule", _schedule(t, b"not a schedule at all, at some length")],
     ("--schedule", "bad magic")),
    ("schedule-of-another-model", lambda t: [*TRAIN, "--schedule", _schedule(t, FOREIGN)],
     ("--schedule", "another model")),
    ("schedule-damaged", lambda t: [*TRAIN, "--schedule", _schedule(t, DAMAGED)], ("--schedule", "CRC")),
    ("schedule-dev-zero", lambda t: [*TRAIN, "--schedule", "/dev/zero"], ("--schedule", "character device")),
    # more layers than the model has: a bad command line (the tracer finds it)
    ("train-last-99999", lambda t: [*TRAIN, "--train", "last:99999"], ("--train last:99999", "layers")),
]


def _forged(p: Path) -> None:
    """A checkpoint whose first array's header claims 2^40 floats in a few bytes."""
    _ckpt(MLP_SHAPES)(p)
    import zipfile

    with zipfile.ZipFile(p) as z:
        members = {n: z.read(n) for n in z.namelist()}
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += b" " * (118 - len(header)) + b"\n"
    members["w0.npy"] = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 16
    with zipfile.ZipFile(p, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def _snapshot(folder: Path | None) -> dict[str, tuple[bool, bytes | None]]:
    """Each entry but the lock (a resume takes it before it reads the state): whether it is a link, and a
    small regular file's bytes."""
    if folder is None:
        return {}
    return {p.name: (p.is_symlink(), p.read_bytes() if not p.is_symlink() and p.is_file()
                     and p.stat().st_size < 1 << 20 else None) for p in folder.iterdir() if p.name != "run.lock"}


@pytest.mark.parametrize("make,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_run_is_refused_in_one_line_before_anything_runs(ws: Path, capsys: pytest.CaptureFixture[str],
                                                                 make: Callable[[Path], list[str]],
                                                                 words: tuple[str, ...]) -> None:
    tmp = ws.parent
    outside = _outside(tmp)
    argv = make(tmp)
    runs = ws / "runs"
    before = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    opt = "--resume" if "--resume" in argv else "--run-dir" if "--run-dir" in argv else None
    folder = Path(argv[argv.index(opt) + 1]) if opt else None
    files = _snapshot(folder)
    refused(capsys, argv, 2, *words)
    assert outside.read_text() == OUTSIDE_TEXT
    after = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    assert after == before, "a refused command left a run folder"
    assert _snapshot(folder) == files, "a refused command wrote in the run folder"


def test_every_name_a_run_writes_is_checked() -> None:
    """RUN_ENTRIES holds the names the code writes: the run's own, the emulator's and the account's."""
    from poet.device import connect, emulator

    assert {emulator.LOG_FILE, emulator.SWAP_FILE, connect.SWAP_FILE} <= set(RUN_ENTRIES)
    assert json.dumps(sorted(IN_PLACE))  # a subset, written in place
    assert set(IN_PLACE) <= set(RUN_ENTRIES)
