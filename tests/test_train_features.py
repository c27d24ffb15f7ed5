"""`poet train` with features once (issue 48; poet.run.features): where the plan keeps a frozen prefix's output,
epoch 1 writes each batch's features to the board's storage and the later epochs train only the rest from
them, to the weights a run without the cache trains, bit for bit; a run killed while it writes the cache, or
resumed on a card that lost it, ends with those same weights.

The case: mlp-digits `last:1`, batch 4, on the emulated ESP32-C3 (its card a file of the run's folder), where
the planner keeps relu3's output (128 B a sample) after epoch 1; 32 samples, 3 epochs of 8 steps."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tools
from poet.run.folder import Run
from test_faults import Poet, _gone

pytestmark = needs_tools("qemu-system-riscv32", "riscv64-unknown-elf-gcc")

BASE = ["train", "--board", "esp32c3", "--model", "mlp-digits", "--train", "last:1", "--batch", "4", "--ram", "256k",
        "--epochs", "3", "--data-limit", "32", "--lr", "0.1", "--optimizer", "momentum:0.9"]
PER_EPOCH, EPOCHS = 8, 3


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "runs").mkdir()
    return tmp_path


def _run(workspace: Path, name: str, *extra: str) -> Path:
    run = workspace / "runs" / name
    poet = Poet(workspace, *BASE, *extra, "--run-dir", str(run))
    assert poet.wait() == 0, "".join(poet.out)
    (workspace / f"{name}.out").write_text("".join(poet.out))
    return run


def _same_weights(a: Path, b: Path) -> None:
    got, want = Run(a).load_checkpoint(), Run(b).load_checkpoint()
    assert got is not None and want is not None
    for x, y in zip(got[0], want[0], strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert got[1] == want[1]  # the optimizer's state (momentum and its step count) too


def _records(run: Path) -> list[list[list]]:
    return [s["records"] for s in json.loads((run / "trace.json").read_text())["steps"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """One run with the cache, one without (--no-feature-cache), in one workspace (the plan solved once)."""
    ws = tmp_path_factory.mktemp("features")
    (ws / "runs").mkdir()
    return ws, _run(ws, "cached"), _run(ws, "plain", "--no-feature-cache")


def test_three_epochs_with_the_cache_train_the_weights_of_three_without(runs: tuple[Path, Path, Path]) -> None:
    _, cached, plain = runs
    feats = json.loads((cached / "plan.json").read_text())["features"]
    assert "features" not in json.loads((plain / "plan.json").read_text())
    assert (cached / "suffix.poet").is_file() and not (plain / "suffix.poet").exists()
    _same_weights(cached, plain)
    history = [json.loads((r / "state.json").read_text())["history"] for r in (cached, plain)]
    assert [h["loss"] for h in history[0]] == [h["loss"] for h in history[1]]
    assert [h["accuracy"] for h in history[0]] == [h["accuracy"] for h in history[1]]
    # the steps are the trace's: epoch 1 writes once a step, the later ones read once and run nothing before it
    node = feats["node"]
    steps = _records(cached)
    assert len(steps) == PER_EPOCH * EPOCHS
    for k, records in enumerate(steps):
        kinds = [r[2] for r in records]
        if k < PER_EPOCH:
            assert kinds.count("cache_write") == 1 and "cache_read" not in kinds
            assert next(r for r in records if r[2] == "cache_write")[1] == node
        else:
            assert kinds.count("cache_read") == 1 and "cache_write" not in kinds
            assert records[0][2] == "cache_read" and records[0][1] == node
            assert all(r[1] >= node for r in records if r[2] in ("forward", "recompute"))
    # and later epochs cost less, as the plan said, by what the prefix cost
    energy = [h["energy_j"] for h in history[0]]
    plain_energy = [h["energy_j"] for h in history[1]]
    assert energy[0] > plain_energy[0] and energy[1] < plain_energy[1] and energy[2] < plain_energy[2]
    report = (cached / "report.txt").read_text()
    assert "feature cache" in report and "\n  cache " in report


def test_the_run_prediction_waits_for_an_epoch_like_the_rest(runs: tuple[Path, Path, Path]) -> None:
    """The plan predicts epoch 1 and the later epochs apart; the run's own prediction is made from epoch 2."""
    ws, _, _ = runs
    out = (ws / "cached.out").read_text()
    assert "prediction error (2 of 3 epochs measured)" in out
    assert "the plan predicts for 3 epoch(s)" in out and "features once: keeping relu3" in out


@pytest.mark.slow
def test_a_run_killed_while_it_writes_the_cache_and_resumed_trains_the_same_weights(
        runs: tuple[Path, Path, Path], workspace: Path) -> None:
    """Killed (SIGKILL) twice in epoch 1, as it writes the cache, then once in epoch 2 and its card deleted
    (a board given a fresh card): each resume ends with the uninterrupted run's weights."""
    _, straight, _ = runs
    run = workspace / "runs" / "killed"
    rng = random.Random(48)
    resume = ["train", "--resume", str(run)]
    for n, (epoch, step) in enumerate([(1, 2), (1, 5), (2, 3)]):
        poet = Poet(workspace, *(resume if n else [*BASE, "--run-dir", str(run)]))
        for line in poet.lines():
            if line.strip().startswith(f"epoch {epoch}/{EPOCHS} step {step:3d}/"):
                break
        time.sleep(rng.uniform(0, 0.2))
        assert poet.kill() in (-signal.SIGKILL, 0), "".join(poet.out)
        assert _gone(run) == []
    (run / "poet-swap.bin").unlink()
    poet = Poet(workspace, *resume)
    assert poet.wait() == 0, "".join(poet.out)
    assert any("lacks epoch 1's features: writing them again" in line for line in poet.out), "".join(poet.out)
    _same_weights(run, straight)
    assert len(_records(run)) == PER_EPOCH * EPOCHS


@pytest.mark.slow
def test_a_run_that_started_without_the_cache_is_resumed_without_it(runs: tuple[Path, Path, Path],
                                                                    workspace: Path) -> None:
    """A run whose plan.json keeps nothing (one started by a poet before features once) resumed in epoch 2:
    it reads no cache it never wrote, and goes on with the whole model to the same weights."""
    _, straight, _ = runs
    run = workspace / "runs" / "older"
    poet = Poet(workspace, *BASE, "--run-dir", str(run))
    for line in poet.lines():
        if line.strip().startswith(f"epoch 2/{EPOCHS} step   2/"):
            break
    assert poet.kill() in (-signal.SIGKILL, 0), "".join(poet.out)
    assert _gone(run) == []
    plan = json.loads((run / "plan.json").read_text())
    del plan["features"]
    (run / "plan.json").write_text(json.dumps(plan))
    poet = Poet(workspace, "train", "--resume", str(run))
    assert poet.wait() == 0, "".join(poet.out)
    assert "features" not in json.loads((run / "plan.json").read_text()) and not (run / "suffix.poet").exists()
    _same_weights(run, straight)
    assert not any(r[2] == "cache_read" for records in _records(run)[-PER_EPOCH:] for r in records)  # epoch 3
