"""tiny-training's own networks (models/zoo/tiny_training.py) at their own 128x128 fine-tune on the emulated
nRF52840 at `--ram 256k`: the classifier (`last:1`) on a frozen prefix in static int8, whose 49 to 73 layers'
weights sit in the board's flash, the board's trained weights after a step as close to float64 PyTorch's
same step (fed the same int8 prefix) as float32 PyTorch's are. Issue 50's sparse schemes do not fit yet
(docs/benchmarks.md says what blocks them). Minutes each in QEMU: slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import needs_qemu
from test_architectures import classifier_fine_tunes_on_the_nrf52840


@needs_qemu
@pytest.mark.slow
@pytest.mark.parametrize("model", ["proxyless-w0.3", "mcunet-5fps"])
def test_a_tiny_training_network_fine_tunes_its_classifier_on_the_nrf52840(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    trained = classifier_fine_tunes_on_the_nrf52840(tmp_path, monkeypatch, model, {"conv2d_q", "add_q"})
    assert trained == ["classifier.weight", "classifier.bias"], trained
