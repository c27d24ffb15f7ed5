"""Frozen weights and the model blob in flash (issue 18): on the emulated nRF52840 (the real image,
256 KB RAM, its flash region programmed as the board's), a model with more nodes than the old
72-node cap and most parameters frozen trains; the frozen ones stay in flash, byte for byte, and
cost no RAM; the trained ones match PyTorch's same steps; the board's peak is the planner's."""

from collections import OrderedDict

import numpy as np
import pytest
from conftest import data_batches, needs_qemu, run_steps
from poet.boards import load_board
from poet.device.connect import open_device
from poet.device.link import FROZEN, WEIGHTS, DeviceError
from poet.graph.reference import train_steps, weights_of
from poet.graph.tracer import trace
from poet.plan.costs import costed, load_profile
from poet.plan.lower import model_blob
from poet.plan.memory import pool_for
from poet.plan.pipeline import plan_step
from torch import nn

LR = 0.1
DEPTH = 36  # a linear and a relu per layer: about 80 nodes, past the old cap of 72


def _deep_mlp() -> nn.Module:
    layers: list[tuple[str, nn.Module]] = []
    for i in range(DEPTH):
        layers += [(f"fc{i}", nn.Linear(64 if i == 0 else 24, 24)), (f"relu{i}", nn.ReLU())]
    return nn.Sequential(OrderedDict([*layers, ("out", nn.Linear(24, 10))]))


@needs_qemu
def test_frozen_weights_live_in_flash_and_the_rest_trains_like_torch(tmp_path) -> None:
    board = load_board("nrf52840")
    model = _deep_mlp()
    g = trace(model, "deep-mlp", (64,), 10, 4, train="last:2")
    blob = model_blob(g)
    assert len(blob.nodes) > 72 and blob.frozen_bytes > 0
    pool = pool_for(g)
    assert pool.params == blob.param_bytes == g.param_bytes < g.frozen_bytes == pool.flash.frozen
    w0, data = weights_of(model), data_batches(g, 3)
    with open_device(board, None, workdir=tmp_path, quiet=True) as dev:
        assert dev.hello.nv_bytes == board.model_flash_bytes
        cg = costed(g, board, load_profile(board.name), estimate=True)
        p = plan_step(g, cg, board, board.ram_bytes, dev.runtime_static, 3 * cg.one_pass_s,
                      progress=lambda _m: None)
        # the planned pool holds no frozen byte: that is what the board's peak is checked against
        assert p.budget.pool == pool
        losses = run_steps(dev, g, w0, p.lowered.schedule.encode(), data, LR, None, lambda _m: None,
                           expect_peak=p.plan.peak_bytes)
        got = dev.read_weights(g)
        # the board refuses a weights blob with the frozen parameters in it: RAM has room for the trained only
        with pytest.raises(DeviceError) as e:
            dev.link.upload(WEIGHTS, bytes(blob.param_bytes + blob.frozen_bytes))
        assert e.value.detail == blob.param_bytes
        frozen_back = dev.link.read_blob(FROZEN, blob.frozen_bytes)
    frozen = set(g.frozen)
    assert frozen_back == blob.split_weights(w0)[1]  # flash holds what was uploaded, unchanged by training
    for (name, _), a, b in zip(g.params, got, w0, strict=True):
        assert np.array_equal(a, b) == (name in frozen), name
    ref_losses = train_steps(model, data, LR, g.optimizer, frozen=frozen)
    for (name, _), a, b in zip(g.params, got, weights_of(model), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)

