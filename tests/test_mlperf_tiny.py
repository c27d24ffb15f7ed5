"""MLPerf Tiny's reference networks fine-tune on the emulated small boards (issue 19): `poet train` runs
them on the real firmware image in QEMU and the board's weights after its steps agree with PyTorch's: as
close to float64 PyTorch's as float32 PyTorch's are (poet.graph.agreement)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_qemu
from poet.cli import main
from poet.graph.agreement import Reference, reference
from poet.graph.reference import state_tensors, weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.datasets import load_dataset
from poet.models.zoo import ModelChoice
from poet.plan.transform.rewrites import Rewrites
from poet.run.folder import read_back

Weights = dict[str, np.ndarray]


def _train_and_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, choice: ModelChoice, data: str, limit: int,
                      lr: float, *extra: str) -> tuple[TrainingGraph, Weights, Reference, Weights]:
    """`poet train` of `choice` on the emulated nRF52840 at 256k for one epoch of `limit` samples, then
    PyTorch's same steps on the graph the run's plan ran (its frozen dense weights as the board stores
    them): the graph, the weights before by name, PyTorch's steps (poet.graph.agreement) and the board's
    weights by name."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir = tmp_path / "run"
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", str(choice.batch),
                 "--train", choice.train, "--data", data, "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr),
                 "--run-dir", str(run_dir), *extra]) == 0
    model, g = traced(choice)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert not plan.get("int8_prefix")  # fed by no int8 prefix: test_train_int8's _board_and_host is for those
    g, _ = Rewrites.from_json(plan).apply(g)  # the graph the run's schedule ran on
    names = [n for n, _ in state_tensors(model)]
    before = dict(zip(names, weights_of(model), strict=True))
    batches = load_dataset(data, limit).fitted(tuple(g.input_shape), g.classes, g.model, g.loss)
    ref = reference(model, batches.epoch_batches(choice.batch, 0, 0), lr, frozen=g.frozen, graph=g)
    return g, before, ref, dict(zip(names, read_back(run_dir, g), strict=True))


def _like_pytorch(ref: Reference, board: Weights, judged: list[str]) -> None:
    """The board's tensors `judged` as close to float64 PyTorch's as float32 PyTorch's are."""
    names = list(board)
    agreed = ref.agree([board[n] for n in names], names=names, only=[names.index(n) for n in judged])
    assert agreed.ok, agreed.report()


def _trained_agree(g: TrainingGraph, before: Weights, ref: Reference, board: Weights, names: list[str]) -> None:
    """The trained tensors are `names`, the board's agree with PyTorch's, and the steps moved them."""
    host = dict(zip(board, ref.weights, strict=True))
    trained = [n for n in host if n not in g.frozen]
    assert trained == names, trained
    _like_pytorch(ref, board, trained)
    assert any(not np.array_equal(host[n], before[n]) for n in trained)  # the steps moved them


@needs_qemu
@pytest.mark.slow
def test_resnet8_fine_tunes_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-8 (mlperf-ic) on the nRF52840's QEMU image at 256k, its last three layers trained (all
    layers need 345 KiB of fixed RAM: 78K fp32 parameters), digits upsampled to 32x32x3. About 40 s."""
    choice = ModelChoice("mlperf-ic", batch=1, train="last:3")
    g, before, ref, board = _train_and_replay(tmp_path, monkeypatch, choice, "digits", 3, 0.05)
    _trained_agree(g, before, ref, board, ["stack3.bn2.weight", "stack3.bn2.bias", "stack3.shortcut.weight",
                                           "stack3.shortcut.bias", "fc.weight", "fc.bias"])


@needs_qemu
@pytest.mark.slow
def test_ds_cnn_fine_tunes_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DS-CNN (mlperf-kws: a 10x4 stride-2 conv, dropout, depthwise-separable blocks, a 24x5 average
    pool) on the nRF52840's QEMU image at 256k, its last three layers (the last pointwise conv and batch
    norm, dropout 0.4, the pool and the classifier) trained at batch 2 on the synthetic MFCC clips; the
    plan recomputes (keep-all needs 320,000 B of arena), and the board's dropout masks are the
    reference's. About a minute."""
    choice = ModelChoice("mlperf-kws", batch=2, train="last:3")
    g, before, ref, board = _train_and_replay(tmp_path, monkeypatch, choice, "mfcc", 6, 0.05, "--time-limit", "20")
    assert {"dropout", "dropout_bwd", "avgpool2d"} <= {n.op for n in g.nodes}
    assert any(n.attrs.get("kw") == 4 for n in g.nodes if n.op == "conv2d")
    _trained_agree(g, before, ref, board, ["features.25.weight", "features.25.bias", "features.26.weight",
                                           "features.26.bias", "fc.weight", "fc.bias"])


@needs_qemu
@pytest.mark.slow
def test_ds_cnn_trains_all_its_layers_on_the_nrf52840_at_256k(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """DS-CNN with every layer trained at batch 1 on the nRF52840's QEMU image at 256k: keep-all needs
    658 KiB of arena, the plan recomputes to fit 131 KiB, and its ~280 instructions fit the 4 KiB
    schedule buffer (trace records rebuilt from ticks). Two steps; the board's dropout masks are the
    reference's. About two minutes."""
    choice = ModelChoice("mlperf-kws", batch=1, train="all")
    g, before, ref, board = _train_and_replay(tmp_path, monkeypatch, choice, "mfcc", 2, 0.02, "--time-limit", "30")
    assert all(n.endswith(("running_mean", "running_var")) for n in g.frozen)  # every parameter trains
    _like_pytorch(ref, board, list(board))
    host = dict(zip(board, ref.weights, strict=True))
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
    from test_train_int8 import _like_pytorch as _like_pytorch_fed

    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.05, 2
    choice = ModelChoice("mlperf-vww", batch=1, train="last:1")
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", choice.name, "--batch", "1",
                 "--train", choice.train, "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr),
                 "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "staged batch                                    27.0 KiB" in out, out
    model, g, board, ref = _board_and_host(run_dir, choice, limit, lr)
    names = [n for n, _ in state_tensors(model)]
    host = dict(zip(names, ref.weights, strict=True))
    trained = [n for n in names if n not in g.frozen]
    assert trained == ["fc.weight", "fc.bias"], trained
    before = dict(zip(names, weights_of(traced(choice)[0]), strict=True))
    _like_pytorch_fed(model, ref, board, trained)
    for name in trained:
        assert not np.array_equal(host[name], before[name]), name


@needs_qemu
@pytest.mark.slow
def test_autoencoder_fine_tunes_its_biases_on_the_nrf52840_at_256k(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The anomaly-detection autoencoder (mlperf-ad, MSE against its input) on the nRF52840's QEMU image at
    256k: `--train bias` (tiny-training's sparse update; all layers need 1.05 MiB of fp32 weights in RAM,
    last:1 alone 322 KiB), its two largest frozen dense weights stored int8 in flash so the rest fits
    (weight-only: fp32 arithmetic on q x scale), at batch 8 on the synthetic machine sounds. The biases
    agree with PyTorch's given the same stored weights."""
    choice = ModelChoice("mlperf-ad", batch=8, train="bias")
    g, before, ref, board = _train_and_replay(tmp_path, monkeypatch, choice, "machine-sound", 16, 0.01)
    out = capsys.readouterr().out
    assert "frozen weights stored int8 in flash" in out and "anomaly ROC AUC" in out, out
    assert g.int8_params == {"net.0.weight", "net.27.weight"}, g.int8_params
    host = dict(zip(board, ref.weights, strict=True))
    trained = [n for n in host if n not in g.frozen]
    assert len(trained) == 19 and all(n.endswith(".bias") for n in trained), trained  # 10 dense, 9 batch norms
    # the biases ahead of a batch norm get no gradient (rounding noise on both sides), so they need not move;
    # they are judged too: rounding noise is what the rule measures
    feeds_norm = {f"net.{i}.bias" for i in range(0, 27, 3)}
    _like_pytorch(ref, board, trained)
    assert all(not np.array_equal(host[n], before[n]) for n in trained if n not in feeds_norm)
