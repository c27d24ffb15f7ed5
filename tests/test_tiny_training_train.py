"""tiny-training's own networks (models/zoo/tiny_training.py) at their own 128x128 fine-tune on the emulated
nRF52840 at `--ram 256k`: the classifier (`last:1`) on a frozen prefix in static int8, whose 49 to 73 layers'
weights sit in the board's flash, the board's trained weights after a step as close to float64 PyTorch's
same step (fed the same int8 prefix) as float32 PyTorch's are. MobileNetV2-w0.35's first stage runs patch by
patch (poet.plan.transform.patches: its 48x64x64 expansion alone is 192 KiB), its strips' rows copied and joined by
slice_q and cat_q. Of tiny-training's sparse schemes, mcunet-5fps's 49kb one trains too (docs/benchmarks.md says
what the others still need). Tens of seconds to three minutes each in QEMU: slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs_qemu
from poet.models.zoo.tiny_training import train_mode
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


@needs_qemu
@pytest.mark.slow
def test_mcunet_trains_its_49kb_sparse_update_on_the_nrf52840(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny-training's 49kb scheme of mcunet-5fps (its `mcu_ir_gen.py`): the classifier, the biases of the last 21
    layers and shares of three pointwise convs' weights, at --ram 256k. Its partly trained weights keep only their
    shares in RAM (stored split), its ReLU6 backwards read bit masks, and the frozen convs the backward passes
    through keep their weights int8 in flash: every trained tensor as close to float64 PyTorch's same step as
    float32 PyTorch's."""
    mode = train_mode("mcunet-5fps", "49kb")
    trained = classifier_fine_tunes_on_the_nrf52840(
        tmp_path, monkeypatch, "mcunet-5fps", {"conv2d_q", "add_q", "conv2d_bwd", "act_mask", "mask_bwd"}, mode)
    assert {"blocks.8.pointwise1.weight", "blocks.9.pointwise1.weight", "blocks.10.pointwise1.weight",
            "classifier.weight"} <= set(trained) and len(trained) == 1 + 21 + 3, trained  # bias:21 counts the head's
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["w8"], plan.keys()
