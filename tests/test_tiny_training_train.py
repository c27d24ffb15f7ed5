"""tiny-training's own networks (models/zoo/tiny_training.py) at their own 128x128 fine-tune on the emulated
nRF52840 at `--ram 256k`: the classifier (`last:1`) on a frozen prefix in static int8, whose 49 to 73 layers'
weights sit in the board's flash, the board's trained weights after a step as close to float64 PyTorch's
same step (fed the same int8 prefix) as float32 PyTorch's are. MobileNetV2-w0.35's first stage runs patch by
patch (poet.plan.transform.patches: its 48x64x64 expansion alone is 192 KiB), its strips' rows copied and joined by
slice_q and cat_q. Issue 50's sparse schemes do not fit yet (docs/benchmarks.md says what blocks them). Tens of
seconds each in QEMU: slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import needs_qemu
from test_architectures import classifier_fine_tunes_on_the_nrf52840


@needs_qemu
@pytest.mark.slow
@pytest.mark.parametrize(("model", "ops"), [("proxyless-w0.3", {"conv2d_q", "add_q"}),
                                            ("mcunet-5fps", {"conv2d_q", "add_q"}),
                                            ("mbv2-w0.35", {"conv2d_q", "add_q", "slice_q", "cat_q"})])
def test_a_tiny_training_network_fine_tunes_its_classifier_on_the_nrf52840(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, ops: set[str]) -> None:
    trained = classifier_fine_tunes_on_the_nrf52840(tmp_path, monkeypatch, model, ops)
    assert trained == ["classifier.weight", "classifier.bias"], trained
