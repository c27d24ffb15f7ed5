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
@pytest.mark.parametrize(("model", "shares", "n_trained", "made"), [
    ("mcunet-5fps", {"blocks.8.pointwise1", "blocks.9.pointwise1", "blocks.10.pointwise1"}, 1 + 21 + 3, {"w8"}),
    ("mbv2-w0.35", {"blocks.12.pointwise1", "blocks.13.pointwise2", "blocks.16.depthwise"}, 1 + 17 + 7,
     {"in_place", "patches"}),
    ("proxyless-w0.3", {"blocks.13.pointwise1", "blocks.14.pointwise1", "blocks.19.pointwise1"}, 1 + 22 + 6,
     {"in_place", "streamed"})])
def test_a_tiny_training_network_trains_its_49kb_sparse_update_on_the_nrf52840(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, shares: set[str], n_trained: int,
        made: set[str]) -> None:
    """tiny-training's 49kb scheme of each network (its `mcu_ir_gen.py`): the classifier, the biases of the last
    layers and shares of a few convs' weights, at --ram 256k. Partly trained weights keep only their shares in RAM
    (stored split), ReLU6 backwards read bit masks, the frozen convs the backward passes through keep their weights
    int8 in flash (mcunet), and depthwise convs run a channel at a time, in place (mbv2, proxyless): every trained
    tensor as close to float64 PyTorch's same step as float32 PyTorch's. Minutes each: their plans re-solve for
    fragmentation."""
    mode = train_mode(model, "49kb")
    trained = classifier_fine_tunes_on_the_nrf52840(
        tmp_path, monkeypatch, model, {"conv2d_q", "add_q", "conv2d_bwd", "act_mask", "mask_bwd"}, mode)
    assert {f"{s}.weight" for s in shares} | {"classifier.weight"} <= set(trained), trained
    assert len(trained) == n_trained, trained  # bias:N counts the head's
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert {k for k in made if plan.get(k)} == made, plan.keys()  # what each needed to fit 256 KiB
    steps = json.loads((tmp_path / "run" / "trace.json").read_text())["steps"]
    assert {s["peak_live_bytes"] for s in steps} == {plan["peak_bytes"]}  # the board's peak is the plan's
    assert max(s["peak_extent_bytes"] for s in steps) <= plan["arena_budget"]
