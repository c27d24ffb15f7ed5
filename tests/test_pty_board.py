"""The native runtime behind a pseudo-terminal: a board on a serial port as far as the host can tell
(pyserial opens it by path, exclusively). It exercises the real-port path here: the cable pulled and
plugged back mid-run with the board's state intact, `poet train --port`, flashing on a version mismatch."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, data_batches, needs_tools
from poet.boards import load_board
from poet.cli import main
from poet.device import firmware
from poet.device.connect import open_device
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import lower
from poet.plan.strategies.checkpoint_all import keep_all

pytestmark = needs_tools("cc", "make")


@contextlib.contextmanager
def pty_board(workdir: Path, board: str = "rpi4") -> Iterator[str]:
    """The Linux runtime serving on a new pty; yields the path to open, kills it afterwards."""
    proc = subprocess.Popen([str(firmware.build("linux")), board, "--pty"], cwd=workdir, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/pts/"), path
        yield path
    finally:
        proc.kill()
        proc.wait()


def test_unplug_and_replug_keeps_the_board_state(tmp_path: Path) -> None:
    board = load_board("rpi4")
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 16)
    (x, y), (x2, y2) = data_batches(g, 2)
    with pty_board(tmp_path) as path:
        with open_device(board, path, workdir=tmp_path, quiet=True) as dev:
            assert dev.hello.board == "rpi4" and not dev.emulated and dev.hello.loaded == frozenset()
            dev.load_model(g, weights_of(model))
            dev.load_schedule(lower(keep_all(uncosted(g)), g).schedule.encode())
            first = dev.step(x, y, 0.1)
        # the cable is out and back in: the board kept model, weights, batch and schedule
        with open_device(board, path, workdir=tmp_path, quiet=True) as dev:
            assert dev.hello.loaded == {"model", "weights", "batch", "schedule"}
            assert dev.hello.steps_done == 1
            second = dev.step(x2, y2, 0.1)
    assert np.isfinite(first.loss) and np.isfinite(second.loss) and len(second.records) == len(first.records)


def test_a_port_held_by_another_program_is_busy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pty_board(tmp_path) as path, open_device(load_board("rpi4"), path, workdir=tmp_path, quiet=True):
        assert main(["train", "--board", "rpi4", "--port", path, "--ram", "1m", "--epochs", "1",
                     "--data-limit", "16", "--run-dir", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is busy" in err[0], err


def test_train_on_a_port_and_flash_on_a_version_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "rpi4.yaml").write_bytes((REPO / "profiles" / "rpi4.yaml").read_bytes())
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    import poet.device.flash

    flashed: list[tuple[str, str]] = []
    monkeypatch.setattr(poet.device.flash, "flash", lambda b, port, say, **_kw: flashed.append((b.name, port)))
    args = ["train", "--board", "rpi4", "--ram", "1m", "--epochs", "1", "--data-limit", "32", "--lr", "0.1"]
    with pty_board(tmp_path) as path:
        assert main([*args, "--port", path, "--run-dir", str(tmp_path / "a")]) == 0
        assert flashed == []  # the board runs this poet's firmware
        monkeypatch.setattr(firmware, "source_version", lambda: "9.9")
        assert main([*args, "--port", path, "--run-dir", str(tmp_path / "b")]) == 0
        assert flashed == [("rpi4", path)]
