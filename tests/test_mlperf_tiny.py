"""MLPerf Tiny's reference networks fine-tune on the emulated small boards (issue 19): `poet train` runs
them on the real firmware image in QEMU and the board's weights after its steps equal PyTorch's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_qemu
from poet.cli import main
from poet.graph.reference import state_tensors, train_steps, weights_of
from poet.graph.tracer import traced
from poet.models.datasets import load_dataset
from poet.models.zoo import ModelChoice
from poet.train import read_back


@needs_qemu
@pytest.mark.slow
def test_resnet8_fine_tunes_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-8 (mlperf-ic) on the nRF52840's QEMU image at 256k, its last three layers trained (all
    layers need 345 KiB of fixed RAM: 78K fp32 parameters), digits upsampled to 32x32x3. About 40 s."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.05, 3
    choice = ModelChoice("mlperf-ic", batch=1, train="last:3")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", "1",
                 "--train", choice.train, "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr),
                 "--run-dir", str(run_dir)]) == 0
    model, g = traced(choice)
    names = [n for n, _ in state_tensors(model)]
    before = dict(zip(names, weights_of(model), strict=True))
    data = load_dataset("digits", limit).fitted(tuple(g.input_shape), g.classes, g.model)
    train_steps(model, data.epoch_batches(1, 0, 0), lr, frozen=g.frozen, graph=g)
    host = dict(zip(names, weights_of(model), strict=True))
    board = dict(zip(names, read_back(run_dir, g), strict=True))
    trained = [n for n in names if n not in g.frozen]
    assert trained == ["stack3.bn2.weight", "stack3.bn2.bias", "stack3.shortcut.weight", "stack3.shortcut.bias",
                       "fc.weight", "fc.bias"], trained
    for name in trained:
        assert np.linalg.norm(board[name] - host[name]) <= 1e-5 * np.linalg.norm(host[name]), name
    assert any(not np.array_equal(host[n], before[n]) for n in trained)  # the steps moved them


@needs_qemu
@pytest.mark.slow
def test_ds_cnn_fine_tunes_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DS-CNN (mlperf-kws: a 10x4 stride-2 conv, dropout, depthwise-separable blocks, a 24x5 average
    pool) on the nRF52840's QEMU image at 256k, its last three layers (the last pointwise conv and batch
    norm, dropout 0.4, the pool and the classifier) trained at batch 2 on the synthetic MFCC clips; the
    plan recomputes (keep-all needs 320,000 B of arena), and the board's dropout masks are the
    reference's. About a minute."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit, batch = tmp_path / "run", 0.05, 6, 2
    choice = ModelChoice("mlperf-kws", batch=batch, train="last:3")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", str(batch),
                 "--train", choice.train, "--data", "mfcc", "--epochs", "1", "--data-limit", str(limit),
                 "--lr", str(lr), "--time-limit", "20", "--run-dir", str(run_dir)]) == 0
    model, g = traced(choice)
    assert {"dropout", "dropout_bwd", "avgpool2d"} <= {n.op for n in g.nodes}
    assert any(n.attrs.get("kw") == 4 for n in g.nodes if n.op == "conv2d")
    names = [n for n, _ in state_tensors(model)]
    before = dict(zip(names, weights_of(model), strict=True))
    data = load_dataset("mfcc", limit).fitted(tuple(g.input_shape), g.classes, g.model)
    train_steps(model, data.epoch_batches(batch, 0, 0), lr, frozen=g.frozen, graph=g)
    host = dict(zip(names, weights_of(model), strict=True))
    board = dict(zip(names, read_back(run_dir, g), strict=True))
    trained = [n for n in names if n not in g.frozen]
    assert trained == ["features.25.weight", "features.25.bias", "features.26.weight", "features.26.bias",
                       "fc.weight", "fc.bias"], trained
    for name in trained:
        assert np.linalg.norm(board[name] - host[name]) <= 1e-5 * np.linalg.norm(host[name]), name
    assert any(not np.array_equal(host[n], before[n]) for n in trained)  # the steps moved them


@needs_qemu
@pytest.mark.slow
def test_ds_cnn_trains_all_its_layers_on_the_nrf52840_at_256k(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """DS-CNN with every layer trained at batch 1 on the nRF52840's QEMU image at 256k: keep-all needs
    658 KiB of arena, the plan recomputes to fit 131 KiB, and its ~280 instructions fit the 4 KiB
    schedule buffer (trace records rebuilt from ticks). Two steps; the board's dropout masks are the
    reference's. About two minutes."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.02, 2
    choice = ModelChoice("mlperf-kws", batch=1, train="all")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", "1",
                 "--data", "mfcc", "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr),
                 "--time-limit", "30", "--run-dir", str(run_dir)]) == 0
    model, g = traced(choice)
    names = [n for n, _ in state_tensors(model)]
    before = dict(zip(names, weights_of(model), strict=True))
    data = load_dataset("mfcc", limit).fitted(tuple(g.input_shape), g.classes, g.model)
    train_steps(model, data.epoch_batches(1, 0, 0), lr, graph=g)
    host = dict(zip(names, weights_of(model), strict=True))
    board = dict(zip(names, read_back(run_dir, g), strict=True))
    assert all(n.endswith(("running_mean", "running_var")) for n in g.frozen)  # every parameter trains
    whole = np.concatenate([host[n].ravel() for n in names])
    assert np.linalg.norm(np.concatenate([board[n].ravel() for n in names]) - whole) <= 1e-5 * np.linalg.norm(whole)
    for name in names:  # each tensor's update to 1e-3 of itself (batch norms' biases start at 0: all update)
        step = np.linalg.norm(host[name] - before[name])
        assert np.linalg.norm(board[name] - host[name]) <= max(1e-3 * step, 1e-5 * np.linalg.norm(host[name])), name
    assert not np.array_equal(host["features.0.weight"], before["features.0.weight"])  # the first conv trained


@needs_qemu
@pytest.mark.slow
def test_visual_wake_words_fine_tunes_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """MobileNetV1-0.25 at 96x96 (mlperf-vww) `last:1` on the nRF52840's QEMU image at 256k: the frozen
    backbone out of RAM (27 static-int8 layers, their weights in flash), the input staged int8 (27 KiB
    where fp32 took 108 KiB), digits upsampled to 96x96x3. Two steps against PyTorch fed the same int8
    prefix."""
    from test_train_int8 import _board_and_host

    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.05, 2
    choice = ModelChoice("mlperf-vww", batch=1, train="last:1")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", "1",
                 "--train", choice.train, "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr),
                 "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "staged batch                                    27.0 KiB" in out, out
    model, g, board, host = _board_and_host(run_dir, choice, limit, lr)
    names = [n for n, _ in state_tensors(model)]
    trained = [n for n in names if n not in g.frozen]
    assert trained == ["fc.weight", "fc.bias"], trained
    before = dict(zip(names, weights_of(traced(choice)[0]), strict=True))
    for name in trained:
        assert np.linalg.norm(board[name] - host[name]) <= 1e-5 * np.linalg.norm(host[name]), name
        assert not np.array_equal(host[name], before[name]), name


@needs_qemu
@pytest.mark.slow
def test_autoencoder_fine_tunes_its_biases_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The anomaly-detection autoencoder (mlperf-ad, MSE against its input) on the nRF52840's QEMU image at
    256k: `--train bias` (tiny-training's sparse update; all layers need 1.05 MiB of fp32 weights in RAM,
    last:1 alone 322 KiB), its two largest frozen dense weights stored int8 in flash so the rest fits
    (weight-only: fp32 arithmetic on q x scale), at batch 8 on the synthetic machine sounds. The biases
    equal PyTorch's given the same stored weights."""
    import json

    from poet.train import _graph_for

    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit, batch = tmp_path / "run", 0.01, 16, 8
    choice = ModelChoice("mlperf-ad", batch=batch, train="bias")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", str(batch),
                 "--train", choice.train, "--data", "machine-sound", "--epochs", "1", "--data-limit", str(limit),
                 "--lr", str(lr), "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "frozen dense weights stored int8 in flash" in out and "anomaly ROC AUC" in out, out
    model, g0 = traced(choice)
    g = _graph_for(g0, json.loads((run_dir / "plan.json").read_text()))
    assert g.int8_params == {"net.0.weight", "net.27.weight"}, g.int8_params
    names = [n for n, _ in state_tensors(model)]
    before = dict(zip(names, weights_of(model), strict=True))
    data = load_dataset("machine-sound", limit).fitted(tuple(g.input_shape), g.classes, g.model, g.loss)
    train_steps(model, data.epoch_batches(batch, 0, 0), lr, frozen=g.frozen, graph=g)
    host = dict(zip(names, weights_of(model), strict=True))
    board = dict(zip(names, read_back(run_dir, g), strict=True))
    trained = [n for n in names if n not in g.frozen]
    assert len(trained) == 19 and all(n.endswith(".bias") for n in trained), trained  # 10 dense, 9 batch norms
    # the trained weights together to 1e-5; each tensor's update to 1e-3 of itself. The batch norms' biases
    # start at 0, so they are all update: fp32 sums over 640 features and a batch-norm backward (a difference
    # of means) differ from PyTorch's by ~1e-4 of such a small update. The biases ahead of a batch norm get
    # no gradient (rounding noise on both sides): they are left to the whole-set check.
    whole = np.concatenate([host[n].ravel() for n in trained])
    assert np.linalg.norm(np.concatenate([board[n].ravel() for n in trained]) - whole) <= 1e-5 * np.linalg.norm(whole)
    feeds_norm = {f"net.{i}.bias" for i in range(0, 27, 3)}
    for name in trained:
        step = np.linalg.norm(host[name] - before[name])
        if name not in feeds_norm:
            assert step > 0 and np.linalg.norm(board[name] - host[name]) <= 1e-3 * step, name
