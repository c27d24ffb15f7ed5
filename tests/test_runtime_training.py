"""What a fine-tuning run needs from the runtime beyond plain SGD: momentum and Adam with their state
in the pool, frozen layers (no gradient, no state, weights untouched), optimizer state read back and
restored so a resumed run continues exactly, and one pool layout shared by host and firmware."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_tools
from fwhelpers import assert_models_refused, native_link
from poet.device.link import Link
from poet.device.protocol import BATCH, MODEL, OPT_STATE, SCHEDULE, DeviceError, status_name
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph, parse_optimizer, with_optimizer
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.cost.memory import pool_for
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import Schedule
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.types import Plan
from test_runtime_ops import _poet_plans

pytestmark = needs_tools("cc", "make")
LR = 0.05
Batch = tuple[np.ndarray, np.ndarray]


def _data(g: TrainingGraph, steps: int, seed: int = 1) -> list[Batch]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((g.batch, *g.input_shape)).astype(np.float32),
             rng.integers(0, g.classes, size=g.batch).astype(np.int32)) for _ in range(steps)]


def _load(link: Link, g: TrainingGraph, w: list[np.ndarray], plan: Plan) -> None:
    link.load_model(model_blob(g), w)
    link.upload(SCHEDULE, lower(plan, g).schedule.encode())


def _steps(link: Link, g: TrainingGraph, data: list[Batch], lr: float = LR) -> list[float]:
    out = []
    for x, y in data:
        link.upload(BATCH, encode_batch(x, y))
        out.append(link.step(lr).loss)
    return out


def _weights(link: Link, g: TrainingGraph) -> list[np.ndarray]:
    flat = link.read_params(model_blob(g))
    return [w.reshape(shape) for w, (_, shape) in zip(flat, g.params, strict=True)]


def _every_plan(tmp_path: Path, g: TrainingGraph, w0: list[np.ndarray], data: list[Batch],
                plans: list[Plan]) -> list[tuple[list[float], list[np.ndarray]]]:
    """Each plan's losses and final weights, the steps run from w0 on one native runtime."""
    runs = []
    with native_link(tmp_path) as link:
        for plan in plans:
            _load(link, g, w0, plan)
            runs.append((_steps(link, g, data), _weights(link, g)))
    return runs


def _graph(name: str, optimizer: str, train: str = "all", batch: int = 4) -> tuple[Any, TrainingGraph]:
    import torch
    torch.manual_seed(0)
    model, spec = get_model(name)
    g = trace(model, name, spec.input_shape, spec.classes, batch, train=train)
    return model, with_optimizer(g, optimizer)


def _assert_like_torch(g: TrainingGraph, model: Any, data: list[Batch], got: list[np.ndarray],
                       losses: list[float] | None, **train: Any) -> None:
    """The runtime's weights (and losses) after `data` against PyTorch's same steps on `model` (train_steps'
    keywords `train`): as close to float64 PyTorch as float32 PyTorch is (poet.graph.agreement); the
    tensors the steps do not write (g's frozen ones, but for the running statistics they move) equal
    PyTorch's bit for bit, as both left them."""
    ref = reference(model, data, LR, **train)
    names = [n for n, _ in g.params]
    judged = [i for i, n in enumerate(names) if n not in g.frozen or n in g.moved]
    agreed = ref.agree(got, losses, names=names, only=judged)
    assert agreed.ok, agreed.report()
    for i, (name, a, b) in enumerate(zip(names, got, ref.weights, strict=True)):
        assert i in judged or np.array_equal(a.ravel(), b.ravel()), name


@pytest.mark.parametrize("optimizer", ["momentum:0.9", "adam", "adam:0.8,0.99,1e-6"])
def test_stateful_optimizers_train_like_torch_under_every_plan(tmp_path: Path, optimizer: str) -> None:
    model, g = _graph("cnn-digits", optimizer)
    data = _data(g, 4)
    w0 = weights_of(model)
    plans = [keep_all(uncosted(g)), *_poet_plans(g)]
    assert len(plans) > 1
    runs = _every_plan(tmp_path, g, w0, data, plans)
    for losses, weights in runs[1:]:  # recompute and paging never change a value
        assert losses == runs[0][0]
        assert all(np.array_equal(a, b) for a, b in zip(weights, runs[0][1], strict=True))
    _assert_like_torch(g, model, data, runs[0][1], runs[0][0], optimizer=g.optimizer)


def test_adam_state_differs_from_sgd(tmp_path: Path) -> None:
    """The optimizer setting reaches the board: the same steps under SGD and Adam end elsewhere."""
    model, g_sgd = _graph("mlp-digits", "sgd")
    g_adam = with_optimizer(g_sgd, "adam")
    data, w0 = _data(g_sgd, 2), weights_of(model)
    out = []
    with native_link(tmp_path) as link:
        for g in (g_sgd, g_adam):
            _load(link, g, w0, keep_all(uncosted(g)))
            _steps(link, g, data)
            out.append(_weights(link, g))
    assert not np.array_equal(out[0][0], out[1][0])


@pytest.mark.parametrize("train", ["last:1", "bias+last:1", "last:1+bias:2", "bias:2+layers:conv1"])
def test_frozen_layers_stay_put_and_the_rest_trains_like_torch(tmp_path: Path, train: str) -> None:
    model, g = _graph("cnn-digits", "momentum:0.9", train=train)
    assert g.frozen and len(g.frozen) < len(g.params)
    blob = model_blob(g)
    # the frozen tensors live in flash (the frozen weights blob), with no gradient: RAM holds the rest
    # the trained layer is updated in backward: no gradients in the pool
    assert blob.in_backward and blob.grad_bytes == 0 and blob.param_bytes == g.param_bytes
    assert blob.frozen_bytes == g.frozen_bytes > 0
    data, w0 = _data(g, 3), weights_of(model)
    with native_link(tmp_path) as link:
        _load(link, g, w0, keep_all(uncosted(g)))
        losses = _steps(link, g, data)
        got = _weights(link, g)
    frozen = set(g.frozen)
    for (pname, _), a, b in zip(g.params, got, w0, strict=True):
        assert np.array_equal(a, b) == (pname in frozen), pname
    _assert_like_torch(g, model, data, got, losses, optimizer=g.optimizer, frozen=frozen)


def test_resumed_run_continues_exactly(tmp_path: Path) -> None:
    """Weights and optimizer state read after step 2 and uploaded into a fresh runtime give the same
    steps 3-4 as an uninterrupted run: what `poet train --resume` relies on."""
    model, g = _graph("mlp-digits", "adam")
    data, w0 = _data(g, 4), weights_of(model)
    plan = keep_all(uncosted(g))
    state_bytes = model_blob(g).opt_state_bytes
    assert state_bytes == pool_for(g).optimizer_state == 4 + 2 * g.param_bytes
    with native_link(tmp_path) as link:
        _load(link, g, w0, plan)
        straight = _steps(link, g, data)
        w_straight = _weights(link, g)
        _load(link, g, w0, plan)
        _steps(link, g, data[:2])
        w_mid, state = _weights(link, g), link.read_blob(OPT_STATE, state_bytes)
    assert struct.unpack_from("<I", state)[0] == 2  # the step counter Adam's bias correction uses
    with native_link(tmp_path) as link:
        _load(link, g, w_mid, plan)
        link.upload(OPT_STATE, state)
        resumed = _steps(link, g, data[2:])
        w_resumed = _weights(link, g)
    assert resumed == straight[2:]
    assert all(np.array_equal(a, b) for a, b in zip(w_resumed, w_straight, strict=True))


def test_pool_layout_is_one_model(tmp_path: Path) -> None:
    """The host's arena (pool minus params, grads, optimizer state and batch, each 8-aligned) is exactly
    what the firmware grants: a schedule asking for it is accepted, 8 bytes more is refused."""
    _, g = _graph("cnn-digits", "adam", train="last:2")
    blob = model_blob(g)
    plan = keep_all(uncosted(g))
    with native_link(tmp_path) as link:
        pool = link.hello().pool_bytes
        free = blob.pool_free(pool)
        assert free == pool - pool_for(g).fixed
        link.upload(MODEL, blob.encode())
        sched = lower(plan, g).schedule
        for arena, ok in ((free, True), (free + 8, False)):
            data = Schedule(sched.n_nodes, sched.model_hash, arena, sched.instrs).encode()
            if ok:
                link.upload(SCHEDULE, data)
            else:
                with pytest.raises(DeviceError, match="ARENA|arena"):
                    link.upload(SCHEDULE, data)


def test_optimizer_flag_errors() -> None:
    from poet.errors import UsageError
    for bad in ("rmsprop", "momentum:1.5", "adam:0.9,0.9,0", "adam:x", "sgd:0.1"):
        with pytest.raises(UsageError):
            parse_optimizer(bad)
    assert parse_optimizer("momentum:0.5") == {"name": "momentum", "momentum": 0.5}


def _bn_net() -> Any:
    import torch
    from torch import nn
    torch.manual_seed(3)
    return nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6, momentum=0.3), nn.ReLU(),
                         nn.Flatten(), nn.Linear(6 * 64, 10))


@pytest.mark.parametrize("frozen_stats", [False, True])
def test_batch_norm_statistics_on_the_board(tmp_path: Path, frozen_stats: bool) -> None:
    """Training mode: the running statistics move once per step exactly as PyTorch's do, also under
    plans that recompute the batch norms (a recompute must not move them again). Frozen statistics
    (a batch norm the user put in eval()): normalised with the running ones, which stay put."""
    model = _bn_net()
    with_stats = model.state_dict()
    with_stats["1.running_mean"].uniform_(-0.5, 0.5)
    with_stats["1.running_var"].uniform_(0.5, 2.0)
    if frozen_stats:
        model[1].eval()
        model[4].eval()
    g = trace(model, "bn-net", (1, 8, 8), 10, 4)
    assert {n.op for n in g.nodes} >= ({"batchnorm_eval", "batchnorm_eval_bwd"} if frozen_stats
                                       else {"batchnorm", "batchnorm_bwd"})
    assert [n for n, _ in g.params][-4:] == ["1.running_mean", "1.running_var", "4.running_mean", "4.running_var"]
    assert set(g.frozen) == {"1.running_mean", "1.running_var", "4.running_mean", "4.running_var"}
    data, w0 = _data(g, 3), weights_of(model)
    plans = [keep_all(uncosted(g)), *_poet_plans(g)]
    bn_nodes = {n.id for n in g.nodes if n.op.startswith("batchnorm") and n.kind == "forward"}
    if not frozen_stats:
        assert any(bn_nodes & set(c for st in p.stages for c in st.compute[:-1]) for p in plans[1:]), \
            "no plan recomputes a batch norm: the test would not see a double update"
    runs = _every_plan(tmp_path, g, w0, data, plans)
    for losses, weights in runs[1:]:
        assert losses == runs[0][0]
        assert all(np.array_equal(a, b) for a, b in zip(weights, runs[0][1], strict=True))
    _assert_like_torch(g, model, data, runs[0][1], runs[0][0])
    moved = [not np.array_equal(a, b) for a, b in zip(runs[0][1][-4:], w0[-4:], strict=True)]
    assert moved == [not frozen_stats] * 4


def test_moved_statistics_must_be_in_ram(tmp_path: Path) -> None:
    """A training-mode batch norm writes its running statistics every step: the board keeps them in RAM
    (param word bit 30) and refuses a model that puts them in flash, where a step must not write."""
    g = trace(_bn_net(), "bn-net", (1, 8, 8), 10, 4)
    blob = model_blob(g)
    assert g.moved == {"1.running_mean", "1.running_var", "4.running_mean", "4.running_var"}
    assert blob.frozen_bytes == 0 and blob.param_bytes == g.param_bytes + 4 * 4 * 6
    blob.param_moved = []  # the statistics as frozen ones: nv storage
    with native_link(tmp_path) as link, pytest.raises(DeviceError) as e:
        link.upload(MODEL, blob.encode())
    assert status_name(e.value.code) == "MODEL"


class _Pointwise(__import__("torch").nn.Module):
    """A 3x3 stem, an expanding 1x1 conv (tiny-training's pointwise1), a depthwise 3x3, a 1x1 projection and a
    classifier."""

    def __init__(self) -> None:
        from torch import nn
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.pointwise1 = nn.Conv2d(8, 24, 1)
        self.depthwise = nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.pointwise2 = nn.Conv2d(24, 8, 1)
        self.classifier = nn.Linear(8, 10)

    def forward(self, x: Any) -> Any:
        import torch
        x = torch.relu(self.stem(x))
        x = self.pointwise2(torch.relu(self.depthwise(torch.relu(self.pointwise1(x)))))
        return self.classifier(x.mean((2, 3)))


def test_a_weight_trained_in_part_keeps_only_its_share_in_ram(tmp_path: Path) -> None:
    """A weight trained in part is stored split (TrainingGraph.stored, docs/spec.md 2): its share trained in RAM,
    with the share's gradient and optimizer state, its rest frozen in flash. The memory model counts that, the
    blobs split and join the host's whole tensors, and the board refuses a split that does not add up."""
    from dataclasses import replace as dc_replace

    from poet.graph.training_graph import numel
    from poet.ops import CODE

    model = _Pointwise()
    train = "layers:pointwise1@0.5,depthwise@0.25,pointwise2@0.125"
    g = with_optimizer(trace(model, "pointwise", (1, 8, 8), 10, 4, train=train), "adam")
    whole = with_optimizer(trace(model, "pointwise", (1, 8, 8), 10, 4, train=train.replace("@0.5", "")
                                 .replace("@0.25", "").replace("@0.125", "")), "adam")
    shapes, shares = dict(g.params), g.partial_weights
    share = {name: numel(shapes[name]) // shapes[name][axis] * ck for name, (axis, ck) in shares.items()}
    saved = 4 * sum(numel(shapes[name]) - share[name] for name in shares)
    pool, pool_whole = pool_for(g), pool_for(whole)
    assert saved > 0 and pool.params == pool_whole.params - saved
    assert pool.optimizer_state == pool_whole.optimizer_state - 2 * saved  # Adam: two floats an element
    assert pool.flash.frozen == pool_whole.flash.frozen + saved
    blob = model_blob(g)
    assert blob.pool == pool and len(blob.param_elems) == len(g.params) + len(shares)
    w0 = weights_of(model)
    ram, frozen, _ = blob.split_weights(w0)
    assert len(ram) == pool.params and len(frozen) == pool.flash.frozen
    assert all(np.array_equal(a.reshape(-1), b) for a, b in zip(w0, blob.join_weights(ram, frozen), strict=True))

    def with_attr(i: int, value: int) -> Any:
        a = list(blob.nodes[i].attrs)
        a[9] = value
        return dc_replace(blob, nodes=[*blob.nodes[:i], dc_replace(blob.nodes[i], attrs=tuple(a)), *blob.nodes[i + 1:]])

    index = {name: i for i, (name, _) in enumerate(g.params)}
    p1, p2 = index["pointwise1.weight"], index["pointwise2.weight"]
    fwd = next(i for i, n in enumerate(blob.nodes) if n.op == CODE["conv2d"] and n.attrs[7] == p1)
    bwd = next(i for i, n in enumerate(blob.nodes) if n.op == CODE["conv2d_bwd"] and n.attrs[7] == p1)
    a9 = blob.nodes[bwd].attrs[9]
    bad = [(with_attr(fwd, g.rests[p2] + 1), fwd),  # another weight's rest: the parts do not make the whole
           (with_attr(bwd, a9 + 2), bwd),  # a gradient over one channel more than the share holds
           (with_attr(bwd, a9 & 0xFFFF), bwd)]  # a share's gradient into a weight it takes as stored whole
    assert_models_refused(tmp_path, [blob], bad)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("train", ["last:1+bias:3+layers:pointwise1@0.25",
                                   "layers:pointwise1@0.5,depthwise@0.25,pointwise2@0.125"])
def test_a_share_of_a_convs_input_channels_trains_like_torch(tmp_path: Path, optimizer: str, train: str) -> None:
    """NAME@R (tiny-training's weight_update_ratio): the conv's weight moves for its first int(R x C) input
    channels only (a depthwise one's for its first channels), under every plan, as PyTorch's same steps with
    the rest of the gradient zeroed; the channels past the share keep their initial bits."""
    import torch
    torch.manual_seed(0)
    model = _Pointwise()
    g = with_optimizer(trace(model, "pointwise", (1, 8, 8), 10, 4, train=train), optimizer)
    shares = g.partial_weights
    assert shares == ({"pointwise1.weight": (1, 2)} if train.startswith("last") else
                      {"pointwise1.weight": (1, 4), "pointwise2.weight": (1, 3), "depthwise.weight": (0, 6)})
    data, w0 = _data(g, 3), weights_of(model)
    plans = [keep_all(uncosted(g)), *_poet_plans(g)]
    runs = _every_plan(tmp_path, g, w0, data, plans)
    for losses, weights in runs[1:]:
        assert losses == runs[0][0] and all(np.array_equal(a, b) for a, b in zip(weights, runs[0][1], strict=True))
    got = runs[0][1]
    for (name, _), a, b in zip(g.params, got, w0, strict=True):
        if name in shares:
            axis, ck = shares[name]
            past, share = np.split(a, [ck], axis)[::-1], np.split(b, [ck], axis)[::-1]
            assert np.array_equal(past[0], share[0]) and not np.array_equal(past[1], share[1]), name
    _assert_like_torch(g, model, data, got, runs[0][0], optimizer=g.optimizer, frozen=set(g.frozen), graph=g)
