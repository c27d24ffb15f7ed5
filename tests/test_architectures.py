"""Issue 49's acceptance: torchvision's small networks, as poet's zoo writes them (models/zoo/vision.py,
torchvision's names and forward), fine-tune `--train last:1` on the emulated nRF52840 at `--ram 256k`, their
frozen prefixes in static int8 (ImageNet stems' max pools, ReLU6, hardswish, squeeze-and-excitation), and
the board's trained weights after a step agree with PyTorch's same step fed the same int8 prefix: as close
to float64 PyTorch's as float32 PyTorch's are (poet.graph.agreement). A minute or more each in QEMU: slow.
EfficientNet-B0, which fits no microcontroller yet, on the smallest board that takes it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_qemu
from poet.cli import main
from poet.graph.reference import state_tensors, weights_of
from poet.graph.tracer import traced
from poet.models.zoo import ModelChoice
from test_train_int8 import _board_and_host, _like_pytorch


@needs_qemu
@pytest.mark.slow
@pytest.mark.parametrize("model,ops", [
    # ceil_mode pools on odd maps; its prefix ends at the first fire's cat, and flash holds the fp32 fires'
    # weights only int8 (weight-only, conv2d_i8), which the reference runs as the board does
    ("squeezenet1.1", {"maxpool2d_q", "conv2d_i8"}),
    ("mnasnet-0.5", {"add_q"}),
    ("resnet18", {"maxpool2d_q", "add_q"}),  # the 7x7/2 stem and its padded 3x3/2 pool; weights from the SD card
    ("mobilenetv3-small", {"mean_q", "mul_q"}),  # hardswish and squeeze-and-excitation in int8
    # chunk's pieces, the 5-d channel shuffle as a 4-d permute, cat; the prefix ends at the first chunk and the
    # frozen fp32 units' weights are stored int8 (weight-only)
    ("shufflenetv2-0.5", {"maxpool2d_q", "slice", "permute", "cat", "conv2d_i8"}),
])
def test_a_torchvision_network_fine_tunes_on_the_nrf52840_like_pytorch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, ops: set[str]) -> None:
    trained = classifier_fine_tunes_on_the_nrf52840(tmp_path, monkeypatch, model, ops)
    assert len(trained) == 2 and trained[0].endswith("weight"), trained  # the classifier's last linear or conv


def classifier_fine_tunes_on_the_nrf52840(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str,
                                          ops: set[str], train: str = "last:1") -> list[str]:
    """`poet train --train last:1` (or `train`) of `model` at batch 1 on the emulated nRF52840 at --ram 256k, one
    step, its frozen prefix in static int8 running `ops`, and the board's trained tensors as close to float64
    PyTorch's same step (fed the same prefix) as float32 PyTorch's are; the names of the trained tensors."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.05, 1
    assert main(["train", "--board", "nrf52840", "--ram", "256k", "--model", model, "--batch", "1", "--train",
                 train, "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr), "--run-dir",
                 str(run_dir)]) == 0
    assert json.loads((run_dir / "plan.json").read_text())["int8_prefix"] is True
    ran = {n["op"] for n in json.loads((run_dir / "trace.json").read_text())["nodes"]}
    assert ops <= ran, sorted(ran)

    choice = ModelChoice(model, batch=1, train=train)
    net, g, board, ref = _board_and_host(run_dir, choice, limit, lr)
    names = [n for n, _ in state_tensors(net)]
    trained = [n for n in names if n not in g.frozen]
    _like_pytorch(net, ref, board, trained)
    before = dict(zip(names, weights_of(traced(choice)[0]), strict=True))
    host = dict(zip(names, ref.weights, strict=True))
    assert any(not np.array_equal(host[n], before[n]) for n in trained), "the step moved nothing: no check"
    return trained


@needs_qemu
def test_efficientnet_fine_tunes_on_the_smallest_board_that_takes_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """EfficientNet-B0 (32x32) fits no microcontroller yet (docs/benchmarks.md says why): the smallest board that
    takes it is the Raspberry Pi 4, at --ram 256k (its stand-in: the same runtime under qemu-user, seconds a step).
    Its stem runs in static int8 (at 256k the fp32 graph does not fit: its input staged int8 leaves room), the
    rest in fp32 with its weights in the board's storage: SiLU, squeeze-and-excitation, stochastic depth with the
    board's draws; the trained classifier is PyTorch's same step's."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    run_dir, lr, limit = tmp_path / "run", 0.05, 1
    assert main(["train", "--board", "rpi4", "--ram", "256k", "--model", "efficientnet-b0", "--batch", "1", "--train",
                 "last:1", "--epochs", "1", "--data-limit", str(limit), "--lr", str(lr), "--run-dir",
                 str(run_dir)]) == 0
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["int8_prefix"] is True
    ran = {n["op"] for n in json.loads((run_dir / "trace.json").read_text())["nodes"]}
    assert {"conv2d_q", "conv2d", "silu", "sigmoid", "dropout", "mul"} <= ran, sorted(ran)

    choice = ModelChoice("efficientnet-b0", batch=1, train="last:1")
    net, g, board, ref = _board_and_host(run_dir, choice, limit, lr)
    names = [n for n, _ in state_tensors(net)]
    trained = [n for n in names if n not in g.frozen]
    assert trained == ["classifier.1.weight", "classifier.1.bias"], trained
    _like_pytorch(net, ref, board, trained)
    before = dict(zip(names, weights_of(traced(choice)[0]), strict=True))
    host = dict(zip(names, ref.weights, strict=True))
    assert any(not np.array_equal(host[n], before[n]) for n in trained), "the step moved nothing: no check"
