"""A connected board running the poet runtime: open it (emulated or real), load a model, train steps.

With no `--port`, the emulated stand-in from the board's YAML is used (QEMU with the
real firmware image) and every number it yields is labelled `emulated`.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import serial

from poet.boards import Board
from poet.device import emulator, firmware
from poet.device.children import spawn
from poet.device.link import Link, LinkError, NotPoet, ProcessPort, ProtocolMismatch
from poet.device.protocol import BATCH, SCHEDULE, Hello, StepResult
from poet.device.serialports import open_serial
from poet.errors import PoetError
from poet.files import open_in_folder
from poet.graph.training_graph import TrainingGraph
from poet.plan.lowering.lower import model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.units import format_size

SWAP_FILE = "poet-swap.bin"  # the stand-ins' pager file in their working directory: the emulated SD card
# The aarch64 runtime under qemu-user runs a step several times slower than the Cortex-A72 the plan's
# times model (5-10x on a 2-core x86-64 host: docs/benchmarks.md), so its first step, before the link has timed
# one, is waited for this many times the plan's time (a hung stand-in is still given up)
STAND_IN_SLOWDOWN = 30.0


@dataclass
class TimedStep(StepResult):
    """A step's result with when it ran on the host clock: `host_t0` just before STEP was sent,
    `host_t1` just after DONE arrived (time.time(), Unix seconds: the clock the host-side meters
    stamp their samples with, poet.meters.sampler). The board's step lies inside [host_t0, host_t1];
    that window is how a meter's recording is put next to the trace (docs/energy.md)."""

    host_t0: float = math.nan
    host_t1: float = math.nan


@dataclass
class Device:
    link: Link
    hello: Hello
    board: Board
    emulated: bool
    card: Path | None = None  # an emulated board's SD card image (its pager's file), None on a board
    # the arena peak the plan of the loaded schedule predicts: every step's must equal it, byte for
    # byte (DESIGN.md "Memory"); None for a schedule with no plan behind it (given as a file)
    planned_peak: int | None = None
    planned_time_s: float | None = None  # the plan's time per step: a step is waited for that long and more
    steps_done: int = 0
    x_scale: float | None = None  # the loaded model's input staged int8 with this scale (memory.staged_input_scale)
    # how many times slower than the board the plan models a step may run here: a Linux board's stand-in
    # (qemu-user) runs at the emulator's speed, not the board's (STAND_IN_SLOWDOWN)
    slowdown: float = 1.0

    @property
    def provenance(self) -> str:
        return "emulated" if self.emulated else "measured"

    @property
    def runtime_static(self) -> int:
        return self.hello.static_bytes

    def load_model(self, g: TrainingGraph, weights: list[np.ndarray], bars: bool = False) -> None:
        """The model and its weights onto the board. Weights streamed from the SD card (poet.plan.transform.placement)
        go onto an emulated board's card image directly, as a card reader would put them on a real card
        (megabytes over the emulator's serial take minutes), and the board checks them (VERIFY); on a
        board they cross the link unless its card holds them already. bars: a bar over the bytes sent."""
        blob = model_blob(g)
        self.link.load_model(blob, weights, self.card, bars=bars)
        self.x_scale = blob.x_scale(weights)  # an input staged int8: each batch is quantised with it

    def load_schedule(self, data: bytes, planned_peak: int | None = None, planned_time_s: float | None = None) -> None:
        """Upload a schedule; with planned_peak, every step after is checked against the plan's peak; with
        planned_time_s the host waits at least that long (twice, and more) for a step to finish."""
        self.link.upload(SCHEDULE, data)
        self.planned_peak = planned_peak
        self.planned_time_s = planned_time_s

    def step(self, x: np.ndarray, y: np.ndarray, lr: float) -> TimedStep:
        self.link.upload(BATCH, encode_batch(x, y, self.x_scale))
        return self._timed_step(lr)

    def step_staged(self, offsets: list[int], labels: list[int], lr: float) -> TimedStep:
        """A step on a batch the board reads from its feature cache (Link.stage_features), not sent."""
        self.link.stage_features(offsets, labels)
        return self._timed_step(lr)

    def _timed_step(self, lr: float) -> TimedStep:
        # The batch's upload (or STAGE) stays outside the window: the window should hold the step and as
        # little link time as the protocol allows (STEP, its ACK, the trace frames and DONE).
        t0 = time.time()
        res = self.link.step(lr, self.planned_time_s and self.planned_time_s * self.slowdown)
        t1 = time.time()
        self.steps_done += 1
        if self.planned_peak is not None and res.peak_live_bytes != self.planned_peak:
            raise PoetError(f"step {self.steps_done}: the board's peak arena use {res.peak_live_bytes} B differs from "
                            f"the planner's {self.planned_peak} B (memory model mismatch: please report)")
        return TimedStep(**{f.name: getattr(res, f.name) for f in fields(StepResult)}, host_t0=t0, host_t1=t1)

    def read_weights(self, g: TrainingGraph) -> list[np.ndarray]:
        flat = self.link.read_params(model_blob(g))
        return [w.reshape(shape) for w, (_, shape) in zip(flat, g.params, strict=True)]


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process stand-in: closing its stdin ends it; kill it if it does not go."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log(msg: str) -> None:
    print(msg, flush=True)


@contextlib.contextmanager
def open_device(board: Board, port: str | None = None, workdir: Path | None = None,
                quiet: bool = False, ram: int | None = None) -> Iterator[Device]:
    """Yield a Device; an emulator started here is stopped on every exit path, Ctrl-C included. ram: the
    request's --ram; a Linux board's runtime started here gets it as its pool (firmware.runtime_args), and
    a board whose pool cannot hold it (a Linux runtime started by hand) is refused in one line."""
    say = (lambda _m: None) if quiet else log
    slowdown = 1.0
    with contextlib.ExitStack() as stack:
        if port and port.startswith("ssh://"):
            # a Linux board over ssh: the runtime `poet flash` installed there, on ssh's stdin/stdout
            from poet.device.ssh import runtime_over_ssh

            # ssh dies with poet too: its remote runtime then sees the link close, as on a pulled cable
            proc = spawn(runtime_over_ssh(port, board.name, firmware.runtime_args(board, ram)),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            stack.callback(_reap, proc)
            ser = ProcessPort(proc)
            emulated, card = False, None
        elif port:
            ser = open_serial(port)  # one line for a missing, busy or refused port
            emulated, card = False, None
        elif board.emulator.get("kind") == "process":
            # a Linux board's stand-in: the runtime as a child process (a cross build under qemu-user)
            cmd = [*firmware.command(board.emulator_target), board.name, *firmware.runtime_args(board, ram)]
            say(f"no --port given: using the emulated {board.name} ({' '.join(cmd)}, numbers are 'emulated')")
            wd = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="poet-run-")))
            # the runtime opens its card image by name in wd, a run's folder: a link planted there is refused
            # here, not written through (as emulator.start_qemu does for QEMU's)
            os.close(open_in_folder(wd / SWAP_FILE, "the emulated SD card"))
            proc = spawn(cmd, cwd=wd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # dies with poet: may be mid-step
            stack.callback(_reap, proc)
            ser = ProcessPort(proc)
            emulated, card, slowdown = True, wd / SWAP_FILE, STAND_IN_SLOWDOWN
        else:
            say(f"no --port given: using the emulated {board.name} "
                f"(QEMU {board.emulator.get('machine')}, numbers are 'emulated')")
            elf = firmware.build(board.emulator_target, quiet=quiet)
            qemu = stack.enter_context(emulator.start_qemu(
                elf, workdir, spec=emulator.QemuSpec.from_board(board.emulator)))
            ser = serial.serial_for_url(qemu.url, timeout=1.0)
            emulated, card = True, qemu.workdir / SWAP_FILE
        stack.callback(ser.close)
        link = Link(ser)
        try:
            hello = link.hello()
        except ProtocolMismatch as exc:  # the link's words, with the board and port filled in
            where = f" on {port}" if port else ""
            raise ProtocolMismatch(str(exc).replace("the board", f"the {board.name}{where}", 1)
                                   .replace("--board BOARD", f"--board {board.name}"), exc.proto) from None
        except NotPoet as exc:
            if emulated:  # poet's own firmware on poet's own stand-in: a broken build, not a wrong port
                raise LinkError(f"the emulated {board.name} gave no valid HELLO reply in {exc.waited_s:.0f} s: poet's "
                                f"firmware ({board.emulator_target}) did not come up on it: a bug in poet, "
                                "not in anything you gave it") from None
            raise NotPoet(exc.waited_s, exc.got_bytes, port, board.name) from None
        if hello.board != board.name and not (emulated and hello.board == board.name):
            raise PoetError(f"the board on {port or 'the emulator'} says it is {hello.board!r}, "
                            f"not {board.name!r}; pass the right --board")
        say(f"connected: {hello.board} firmware {hello.fw_version}, RAM {hello.ram_bytes} B "
            f"(pool {hello.pool_bytes} B), timer {hello.tick_hz / 1e6:g} MHz")
        if ram is not None and ram - hello.static_bytes > hello.pool_bytes:
            raise PoetError(_small_pool(board, port, hello, ram), status=2)
        yield Device(link, hello, board, emulated, card, slowdown=slowdown)


def _small_pool(board: Board, port: str | None, hello: Hello, ram: int) -> str:
    """Why a board's pool cannot hold --ram (what the firmware keeps for itself aside), and what to do:
    on a Linux board, whose runtime was started by hand, start it with a pool that can."""
    msg = (f"the {board.name} on {port or 'the emulator'} has a {format_size(hello.pool_bytes)} pool, less than "
           f"--ram {format_size(ram)} needs")
    if board.linux:
        return msg + (f": restart the runtime there with --pool (`.poet/poet {board.name} --pty --pool {ram}`), "
                      "or lower --ram")
    return msg + ": lower --ram"
