"""`poet train` of MLPerf Tiny's anomaly-detection autoencoder on the synthetic machine sounds: the
board learns to reconstruct normal sound, and the run reports what anomaly detection reports (mean
reconstruction error, ROC AUC), not accuracy. On the emulated rpi4 (the Linux runtime under
qemu-user): the autoencoder's 268K parameters need more than the microcontrollers' RAM."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, needs_tools
from poet.cli import main
from poet.graph.reference import reconstruction_errors
from poet.models.datasets import load_dataset
from poet.models.metrics import roc_auc
from poet.models.zoo import get_model
from poet.run.folder import Run

pytestmark = needs_tools("make", "aarch64-linux-gnu-gcc", "qemu-aarch64")

# Adam at MLPerf's 1e-3 learns in a dozen steps (SGD barely moves the autoencoder in so few);
# checkpoint-all: no MILP to solve; a checkpoint per epoch: the link reads 3 MB of weights and
# Adam state for each one.
ARGS = ["train", "--board", "rpi4", "--model", "mlperf-ad", "--data", "machine-sound", "--data-limit", "16",
        "--batch", "4", "--epochs", "3", "--ram", "4m", "--optimizer", "adam", "--lr", "0.001",
        "--strategy", "checkpoint-all", "--checkpoint-every", "4"]


@pytest.fixture(scope="module")
def ad_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One short run (3 epochs of 4 steps), its folder and what it printed."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "profiles").mkdir()
    (ws / "profiles" / "rpi4.yaml").write_bytes((REPO / "profiles" / "rpi4.yaml").read_bytes())
    lines: list[str] = []
    import poet.cli as cli

    mp = pytest.MonkeyPatch()
    mp.setenv("POET_WORKSPACE", str(ws))
    mp.setattr(cli, "say", lines.append)
    try:
        assert main([*ARGS, "--run-dir", str(ws / "run")]) == 0
    finally:
        mp.undo()
    return ws / "run", "\n".join(lines)


def test_the_run_reports_reconstruction_error_and_auc_not_accuracy(ad_run: tuple[Path, str]) -> None:
    run_dir, out = ad_run
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 3, out
    for line in epochs:
        assert "test reconstruction error (mse) " in line and ", anomaly ROC AUC " in line, line
    done = next(line for line in out.splitlines() if line.startswith("[done]"))
    assert "final test reconstruction error (mse)" in done and "anomaly ROC AUC" in done
    assert "accuracy" not in "\n".join([*epochs, done])
    history = json.loads((run_dir / "state.json").read_text())["history"]
    for h in history:
        assert "accuracy" not in h and math.isfinite(h["reconstruction_error"]) and 0.0 <= h["roc_auc"] <= 1.0
    assert f"{history[-1]['reconstruction_error']:.4f}" in done and f"{history[-1]['roc_auc']:.3f}" in done


def test_the_error_falls_as_the_board_trains(ad_run: tuple[Path, str]) -> None:
    """The training loss and the test reconstruction error fall epoch after epoch. In PyTorch the same
    steps go 0.149, 0.130, 0.110 (margins of 13% and more): these hold for the board's rounding too."""
    history = json.loads((Run(ad_run[0]).dir / "state.json").read_text())["history"]
    losses = [h["loss"] for h in history]
    errors = [h["reconstruction_error"] for h in history]
    assert losses[0] > losses[1] > losses[2], losses
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.85 * errors[0], errors


def test_the_reported_metrics_are_those_of_the_returned_weights(ad_run: tuple[Path, str]) -> None:
    """weights.pt, evaluated on the host as a user would, gives the numbers the run reported."""
    run_dir = ad_run[0]
    model, _ = get_model("mlperf-ad")
    model.load_state_dict(torch.load(run_dir / "weights.pt", weights_only=True))
    model.eval()
    data = load_dataset("machine-sound")
    errors = reconstruction_errors(model, data.x_test, "mse")
    last = json.loads((run_dir / "state.json").read_text())["history"][-1]
    assert float(errors.mean()) == pytest.approx(last["reconstruction_error"], rel=1e-6)
    assert roc_auc(errors, data.y_test) == pytest.approx(last["roc_auc"], abs=1e-9)
    assert np.isfinite(errors).all()
