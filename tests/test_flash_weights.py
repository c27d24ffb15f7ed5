"""Frozen weights and the model blob in flash (issue 18): on the emulated nRF52840 (the real image,
256 KB RAM, its flash region programmed as the board's), a model with more nodes than the old
72-node cap and most parameters frozen trains; the frozen ones stay in flash, byte for byte, and
cost no RAM; the trained ones agree with PyTorch's same steps (as close to float64 PyTorch as float32
PyTorch is: poet.graph.agreement); the board's peak is the planner's."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from conftest import data_batches, needs_qemu, run_steps
from poet.boards import load_board
from poet.device.connect import open_device
from poet.device.protocol import FROZEN, WEIGHTS, DeviceError
from poet.graph.agreement import reference
from poet.graph.quantise import absmax_scale, dequantise, quantise
from poet.graph.reference import running_stat_norms, weights_of
from poet.graph.tracer import trace
from poet.plan.cost.costs import costed, load_profile
from poet.plan.cost.memory import pool_for
from poet.plan.lowering.lower import model_blob
from poet.plan.pipeline import plan_step
from poet.plan.transform.precision import apply_storage, costed_storage, int8_allowed, load_rules
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
    names = [n for n, _ in g.params]
    agreed = reference(model, data, LR, optimizer=g.optimizer, frozen=frozen).agree(
        got, losses, names=names, only=[i for i, n in enumerate(names) if n not in frozen])
    assert agreed.ok, agreed.report()


def _bn_cnn() -> nn.Module:
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("bn1", nn.BatchNorm2d(8)), ("relu1", nn.ReLU()),
        ("conv2", nn.Conv2d(8, 16, 3, padding=1)), ("bn2", nn.BatchNorm2d(16)), ("relu2", nn.ReLU()),
        ("pool", nn.MaxPool2d(2)), ("flatten", nn.Flatten()), ("fc", nn.Linear(16 * 4 * 4, 10))]))


@needs_qemu
def test_int8_frozen_layers_and_frozen_batch_norms_on_the_board_like_torch(tmp_path) -> None:
    """A conv net with batch norms fine-tuned last:2 (fc and bn2) with every conv and linear in int8 on
    the emulated nRF52840: the frozen convs' weights are stored int8 in flash (quantised once, on the
    host) and read there, the frozen bn1 normalises with its running statistics from flash, bn2's move
    in RAM; after 3 steps the frozen tensors are as uploaded and the trained ones (and bn2's statistics)
agree with PyTorch's same steps with the same int8 arithmetic (poet.graph.agreement)."""
    board = load_board("nrf52840")
    torch.manual_seed(3)
    model = _bn_cnn()
    with torch.no_grad():  # statistics unlike a fresh layer's, so using them is visible
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    g = trace(model, "bn-cnn", (1, 8, 8), 10, 4, train="last:2")
    assert running_stat_norms(g) == {"bn1"} and g.moved == {"bn2.running_mean", "bn2.running_var"}
    g8 = apply_storage(g, {}, set(int8_allowed(g, load_rules())))
    assert g8.int8_params == {"conv1.weight", "conv2.weight"}  # fc trains: it is quantised every step
    blob = model_blob(g8)
    pool = pool_for(g8)
    assert pool.flash.frozen == blob.frozen_bytes == (4 + 72) + (4 + 1152) + 4 * (8 + 8 + 8 + 8 + 8 + 16)
    assert pool.params == 4 * (16 + 16 + 2560 + 10 + 16 + 16)  # bn2, fc, then bn2's running statistics
    w0, data = weights_of(model), data_batches(g8, 3)
    with open_device(board, None, workdir=tmp_path, quiet=True) as dev:
        cg = costed_storage(g8, board, load_profile(board.name))
        p = plan_step(g8, cg, board, board.ram_bytes, dev.runtime_static, 3 * cg.one_pass_s,
                      progress=lambda _m: None)
        losses = run_steps(dev, g8, w0, p.lowered.schedule.encode(), data, LR, None, lambda _m: None,
                           expect_peak=p.plan.peak_bytes)
        got = dev.read_weights(g8)
    ref = reference(model, data, LR, optimizer=g8.optimizer, frozen=set(g8.frozen), graph=g8)
    i8 = g8.int8_params
    names = [n for n, _ in g8.params]
    trained = [i for i, n in enumerate(names) if n not in g8.frozen or n in g8.moved]
    for i, (name, a, w) in enumerate(zip(names, got, w0, strict=True)):
        if name in i8:  # what the board computes with: the weight quantised once
            assert np.array_equal(a.ravel(), dequantise(quantise(w, absmax_scale(w)), absmax_scale(w)).ravel()), name
        elif i not in trained:  # frozen: as uploaded
            assert np.array_equal(a.ravel(), w.ravel()), name
    agreed = ref.agree(got, losses, names=names, only=trained)
    assert agreed.ok, agreed.report()
    fc = g8.params.index(("fc.weight", [10, 256]))
    assert not np.allclose(got[fc], w0[fc])  # fc trained
