"""`poet train` killed with SIGKILL, as the OOM killer, a closed laptop lid or `kill -9` would: its board
stand-in dies with it, and a run killed any number of times, anywhere, and resumed each time ends
bit-identical to the run nobody killed, with every file it should have."""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, needs_tools
from poet.run.folder import Run

needs_qemu = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="a child dies with its parent on Linux only (poet.children)")

# as tests/test_train.py's BASE: 2 epochs x 4 steps, a plan that pages the input
BASE = ["train", "--model", "cnn-digits", "--ram", "200k", "--epochs", "2", "--data-limit", "64",
        "--optimizer", "momentum:0.9", "--lr", "0.05"]
STEPS, PER_EPOCH = 8, 4
STEP_LINE = re.compile(r"^\s+epoch (\d+)/\d+ step\s+(\d+)/\d+\s")
LONG_S = 300.0  # bounds for hangs only: nothing here passes or fails by how fast it goes
GONE_S = 60.0  # SIGKILL from the kernel takes microseconds; this is for a loaded machine


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "runs").mkdir()  # --run-dir's parent must exist
    (tmp_path / "profiles" / "nrf52840.yaml").write_bytes((REPO / "profiles" / "nrf52840.yaml").read_bytes())
    return tmp_path


class Poet:
    """`python -m poet ARGS` in a process of its own, its output read line by line as it comes."""

    def __init__(self, workspace: Path, *args: str) -> None:
        env = {**os.environ, "POET_WORKSPACE": str(workspace), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "poet", *args], cwd=workspace, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.out: list[str] = []
        self.ended = False  # its output closed: lines() has nothing more to wait for
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def lines(self) -> Iterator[str]:
        """Its lines until it exits (each waited for at most LONG_S)."""
        while not self.ended:
            try:
                line = self._lines.get(timeout=LONG_S)
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"poet printed nothing for {LONG_S:g} s:\n{''.join(self.out)}") from None
            if line is None:
                self.ended = True
                return
            self.out.append(line)
            yield line

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.wait()

    def wait(self) -> int:
        for _ in self.lines():  # to its end: the reader thread is done and the pipe closed
            pass
        return self.proc.wait(timeout=LONG_S)


def _children_in(folder: Path) -> list[int]:
    """Processes working in `folder`: a run's QEMU (or Linux runtime) works in the run's folder, poet in
    the workspace. A zombie has no cwd to read, so only live ones count."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/cwd").resolve() == folder.resolve():
                pids.append(int(pid))
        except OSError:
            continue
    return pids


def _gone(folder: Path) -> list[int]:
    """[] once no process works in `folder` any more; what is left after GONE_S otherwise (then killed,
    so a failing test leaves nothing behind either)."""
    deadline = time.monotonic() + GONE_S
    while (left := _children_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def _global_step(line: str) -> int | None:
    m = STEP_LINE.match(line)
    return (int(m[1]) - 1) * PER_EPOCH + int(m[2]) if m else None


@linux_only
def test_a_child_dies_with_the_poet_that_started_it(tmp_path: Path) -> None:
    """The shared mechanism, on a child anyone can run: poet's process SIGKILLed, its child goes too."""
    code = ("import subprocess, sys\n"
            "from poet.device.children import die_with_poet\n"
            "child = subprocess.Popen(['sleep', '1000'], cwd=sys.argv[1], preexec_fn=die_with_poet())\n"
            "print(child.pid, flush=True)\n"
            "sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _children_in(tmp_path) == [child]
    parent.kill()
    parent.wait()
    assert _gone(tmp_path) == []


@linux_only
def test_a_child_whose_poet_is_already_gone_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """poet dying between fork and the child's prctl: no signal would ever come, so the child must not
    exec at all. Seen from the child, a poet that died is a parent pid that is not poet's."""
    from poet.device.children import die_with_poet

    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: -1)  # the pid poet had: not the child's parent now
        preexec = die_with_poet()
    child = subprocess.Popen(["sleep", "1000"], preexec_fn=preexec)
    try:
        assert child.wait(timeout=LONG_S) == 1  # it left before exec: sleep never ran
    finally:
        child.kill()
        child.wait()


@needs_qemu
def test_a_killed_poet_takes_its_emulator_with_it(workspace: Path) -> None:
    run_dir = workspace / "runs" / "killed"
    poet = Poet(workspace, *BASE, "--run-dir", str(run_dir))
    for line in poet.lines():
        if _global_step(line) is not None:
            break
    else:
        raise AssertionError(f"poet ended before its first step:\n{''.join(poet.out)}")
    assert [p for p in _children_in(run_dir) if "qemu-system" in _cmdline(p)], "no QEMU serves the run"
    assert poet.kill() == -signal.SIGKILL
    left = _gone(run_dir)
    assert left == [], f"still running after poet was killed: {left}"


def _files(run_dir: Path) -> set[str]:
    return {p.name for p in run_dir.iterdir()}


@needs_qemu
@pytest.mark.slow
def test_a_run_killed_anywhere_and_resumed_ends_as_the_run_nobody_killed(workspace: Path) -> None:
    """Issue acceptance (nothing lost): 3 SIGKILLs after a random number of steps, one more while the
    finished run writes its files, a resume after each; the weights are bit-identical to an
    uninterrupted run's, the trace has every step once, every file is there, nothing is left running."""
    straight, faulted = workspace / "runs" / "straight", workspace / "runs" / "faulted"
    poet = Poet(workspace, *BASE, "--run-dir", str(straight))
    assert poet.wait() == 0, "".join(poet.out)

    rng = random.Random(16)
    resume = ["train", "--resume", str(faulted)]
    done = 0  # the last step a killed process printed
    outcomes: list[tuple[int, int, int]] = []
    for n in range(3):
        poet = Poet(workspace, *(resume if n else [*BASE, "--run-dir", str(faulted)]))
        printed = 0
        # leave steps for the next kills (at least one, so the kill at the end has a last step to follow)
        want = rng.randint(1, max(1, min(3, STEPS - 1 - done)))
        for line in poet.lines():
            step = _global_step(line)
            if step is not None:
                done, printed = step, printed + 1
                if printed == want:
                    break
        time.sleep(rng.uniform(0, 0.2))  # into the next step, its checkpoint, or its read-back: anywhere
        outcomes.append((want, done, poet.kill()))
        # killed, or (on a machine slow to deliver the kill) finished: never failed
        assert outcomes[-1][2] in (-signal.SIGKILL, 0), "".join(poet.out)
        assert _gone(faulted) == [], outcomes

    # the last epoch's summary is printed after the last step and before the run's files are written
    poet = Poet(workspace, *resume)
    for line in poet.lines():
        if line.startswith(f"epoch {STEPS // PER_EPOCH}/{STEPS // PER_EPOCH}:"):
            time.sleep(rng.uniform(0, 1.0))  # the weights, the report, the plots, emissions.csv: somewhere in there
            break
    assert poet.kill() in (-signal.SIGKILL, 0), "".join(poet.out)
    assert _gone(faulted) == []

    poet = Poet(workspace, *resume)
    assert poet.wait() == 0, "".join(poet.out)
    assert _gone(faulted) == []

    state = json.loads((faulted / "state.json").read_text())
    assert state["complete"] is True and state["global_step"] == STEPS
    want_state = json.loads((straight / "state.json").read_text())
    assert [h["accuracy"] for h in state["history"]] == [h["accuracy"] for h in want_state["history"]]

    for a, b in zip(Run(faulted).load_checkpoint()[0], Run(straight).load_checkpoint()[0],  # type: ignore[index]
                    strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    got_sd, want_sd = torch.load(faulted / "weights.pt"), torch.load(straight / "weights.pt")
    assert got_sd.keys() == want_sd.keys() and all(torch.equal(got_sd[k], want_sd[k]) for k in want_sd)

    steps = json.loads((faulted / "trace.json").read_text())["steps"]
    want_steps = json.loads((straight / "trace.json").read_text())["steps"]
    assert [s["step"] for s in steps] == [s["step"] for s in want_steps] and len(steps) == STEPS
    assert [s["loss"] for s in steps] == [s["loss"] for s in want_steps]
    assert [len(s["records"]) for s in steps] == [len(s["records"]) for s in want_steps]

    assert _files(faulted) == _files(straight)  # no file missing, no half-written one left beside it
    assert {"report.txt", "weights.pt", "emissions.csv", "state.json", "trace.json"} <= _files(faulted)
    assert len(list(faulted.glob("*.png"))) == 3
    rows = (faulted / "emissions.csv").read_text().splitlines()
    assert len(rows) == 2 and faulted.name in rows[1]  # the run's row, once


def test_a_run_stopped_between_its_checkpoint_and_its_state_resumes_from_the_checkpoint(tmp_path: Path) -> None:
    """The trace and the checkpoint are written, state.json not yet: the checkpoint's own state is the run's
    (its steps are in the trace), never refused as a checkpoint ahead of its state."""
    from poet.run.folder import RunState

    run = Run(tmp_path)
    behind = RunState(epoch=0, step=2, global_step=2, losses=[1.0, 0.5])
    run.save_checkpoint([np.ones(3, np.float32)], b"", behind)
    run.save_state(behind)
    ahead = RunState(epoch=0, step=3, global_step=3, losses=[1.0, 0.5, 0.25])
    run.save_checkpoint([np.full(3, 2.0, np.float32)], b"", ahead)  # killed here, before save_state
    assert run.caught_up(run.load_state()) == ahead
    run.save_state(ahead)
    assert run.caught_up(run.load_state()) == ahead
    # a checkpoint behind its state (written by an older poet, or damaged) is not this function's to take
    assert run.caught_up(RunState(epoch=0, step=4, global_step=4)).global_step == 4
