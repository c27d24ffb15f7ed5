"""Zoo models train on the native runtime: the whole op set, traced, lowered and run on the linux port.

Each model takes a few SGD steps on the C runtime under a keep-all schedule; the final weights and
losses must be as close to PyTorch's float64 steps as its float32 steps are (poet.graph.agreement),
and the runtime's peak arena use must equal the planner's. POET plans at 50% and (where anything fits
there) 25% of the keep-all peak must give bit-identical weights and losses (where no plan needs less
than keep-all, as for a small CNN whose input takes no arena bytes, a plan that pages and recomputes
anyway at keep-all's peak). Each runs on the linux
image started with the pool and nv storage its graph needs (`--pool`, `--nv`:
firmware/ports/linux/main.c), as poet starts a Linux board's runtime. Every zoo model whose
parameters, gradients and activations fit a few hundred MiB is here (the large ones marked slow);
bert-base with every layer trained is not (110M parameters: 880 MB with gradients; its fine-tuning is
tests/test_linux_boards.py's).
"""

from __future__ import annotations

import contextlib
import copy
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import without_limits
from fwhelpers import assert_models_refused, native_link
from poet.boards import load_board
from poet.device.link import Link
from poet.device.protocol import BATCH, SCHEDULE
from poet.errors import PoetError
from poet.graph import dropout
from poet.graph.agreement import reference
from poet.graph.reference import train_steps, weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import get_model
from poet.ops import CODE
from poet.plan.cost.costs import costed, load_profile, uncosted
from poet.plan.cost.memory import pool_for
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import RECOMPUTE
from poet.plan.solver.race import RACE_ABOVE
from poet.plan.strategies import best_heuristic, found, plan_with
from poet.plan.strategies.builder import Builder, Policy, build
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import milp_size, min_arena_budget
from poet.plan.types import CostedGraph, Plan

pytestmark = [pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                 reason="cc / make missing"),
              # a plan, proven or not, is all value preservation needs: large solves keep a 5 s limit
              # (_poet_plan), and the verdict does not depend on what it lets them find
              pytest.mark.time_limited]
STEPS = 3
LR = 0.05
Batch = tuple[np.ndarray, np.ndarray]



def _setup(name: str, batch: int, input_shape: tuple[int, ...] | None = None, steps: int = STEPS
           ) -> tuple[torch.nn.Module, TrainingGraph, list[Batch]]:
    torch.manual_seed(0)
    model, spec = get_model(name)
    shape = input_shape or spec.input_shape
    g = trace(model, name, shape, spec.classes, batch, input_dtype=spec.input_dtype, loss=spec.loss)
    rng = np.random.default_rng(1)
    data: list[Batch] = []
    for _ in range(steps):
        if spec.input_dtype == "int64":
            vocab = min(n.attrs["V"] for n in g.nodes if n.op == "embedding" and n.attrs["ids"] == 0)
            x = rng.integers(0, vocab, size=(batch, *shape)).astype(np.int64)
        else:
            x = rng.standard_normal((batch, *shape)).astype(np.float32)
        data.append((x, rng.integers(0, spec.classes, size=batch).astype(np.int32)))
    return model, g, data


def _sizes(g: TrainingGraph, plans: list[Plan]) -> tuple[str, ...]:
    """The runtime's --pool and --nv for g under these plans: exactly the fixed part and the widest placed
    arena, and the model blob and frozen weights (page-aligned), so the board's own fit checks are the
    host's to the byte."""
    pool = pool_for(g)
    arena = max(lower(p, g).extent_bytes for p in plans)
    return ("--pool", str(pool.fixed + arena), "--nv", str(pool.flash.total))


def _run(link: Link, g: TrainingGraph, w0: list[np.ndarray], plan: Plan, data: list[Batch]
         ) -> tuple[list[float], list[np.ndarray]]:
    lowered = lower(plan, g)
    link.load_model(model_blob(g), w0)
    link.upload(SCHEDULE, lowered.schedule.encode())
    losses = []
    for x, y in data:
        link.upload(BATCH, encode_batch(x, y))
        res = link.step(LR)
        assert res.peak_live_bytes == plan.peak_bytes, "runtime peak differs from the planner's"
        assert res.peak_extent_bytes == lowered.extent_bytes
        losses.append(res.loss)
    flat = link.read_params(model_blob(g))
    return losses, [w.reshape(shape) for w, (_, shape) in zip(flat, g.params, strict=True)]


def _poet_plans(g: TrainingGraph) -> list[Plan]:
    """POET plans at 50% and 25% of the keep-all peak where a plan fits there; a small model's first
    layer alone may need more than half, then one halfway between the smallest feasible arena and the
    peak. Where no plan needs less than keeping everything (a small CNN's peak is one backward op's
    inputs and output, now that its input takes no arena bytes), a plan that pages and recomputes
    anyway (_Frugal), so the board still runs both on it."""
    board = load_board("nrf52840")
    cg = costed(g, board, load_profile(board.name), estimate=True)
    full, deadline = keep_all(cg).peak_bytes, 50 * cg.one_pass_s
    budgets = [full // 2, full // 4]
    plans = [p for p in (_poet_plan(cg, b, deadline) for b in budgets) if p is not None]
    if not plans:
        with _limits_for(cg):
            try:
                smallest = min_arena_budget(cg, deadline, time_limit_s=5.0)
            except PoetError:  # none found in the limit: proves nothing, and the frugal plan below serves
                smallest = None
        if smallest is not None and smallest < full:
            plans = [p for p in [_poet_plan(cg, (smallest + full) // 2, deadline)] if p is not None]
    if not plans:
        frugal = _frugal_plan(cg)
        plans = [frugal] if found(frugal) and frugal.page_ins and frugal.recomputes else []
    return plans


def _frugal_plan(cg: CostedGraph) -> Plan:
    """_Frugal's plan of cg, whatever the budget and deadline: one that pages and recomputes where no optimal
    plan does (a small CNN, whose smallest arena is keep-all's; the digits models on the nRF52840, where
    recomputing from the input read in place is cheaper than paging). The caller checks that it does."""
    return build(cg, 1 << 40, math.inf, _Frugal())


class _Frugal(Policy):
    """Whatever the budget: a forward tensor is kept only for the next node when that reads it, so every
    later use (the backward pass's) brings it back: every third one paged out as it is made and paged
    in, the others recomputed."""

    name = "frugal"

    def retain(self, b: Builder, i: int, t: int) -> bool:
        return b.nodes[i].kind != "forward" or b.next_read(i, t) == t + 1

    def page_out(self, b: Builder, t: int, present: set[int]) -> set[int]:
        return {t} if b.nodes[t].kind == "forward" and b.nodes[t].bytes and t % 3 == 1 else set()


def _poet_plan(cg: CostedGraph, budget: int, deadline: float) -> Plan | None:
    """POET's plan at this budget, or, when the 5 s limit of a large MILP ends it before it holds one
    (a slow or busy machine), the heuristic plan it starts from: a plan of any strategy is a POET plan.
    Where the heuristics have none, the MILP must find it, and a small one runs to its end."""
    with _limits_for(cg):
        plan = plan_with("poet", cg, budget, deadline, time_limit_s=5.0)
    return plan if found(plan) else best_heuristic(cg, budget, deadline)


def _limits_for(cg: CostedGraph) -> contextlib.AbstractContextManager[None]:
    """No time limits for a MILP small enough to solve in seconds (below the race's size); the 5 s
    limit for larger ones, whose verdicts the heuristics' plans decide (they have one at half the peak)."""
    return without_limits() if milp_size(cg) < RACE_ABOVE else contextlib.nullcontext()


def _check(tmp_path: Path, name: str, batch: int, input_shape: tuple[int, ...] | None = None,
           poet: bool = True, steps: int = STEPS, target: str | None = None) -> None:
    """target: the firmware target to run (a cross build under its runner); default the linux image."""
    model, g, data = _setup(name, batch, input_shape, steps)
    _check_model(tmp_path, name, model, g, data, poet, target)


def _check_model(tmp_path: Path, name: str, model: torch.nn.Module, g: TrainingGraph, data: list[Batch],
                 poet: bool = True, target: str | None = None) -> None:
    """The runtime's steps of g (keep-all, and POET's tighter plans bit for bit) against PyTorch's, under
    poet.graph.agreement's rule: as close to float64 PyTorch as float32 PyTorch is."""
    w0 = weights_of(model)
    full_plan = keep_all(uncosted(g))
    tight = _poet_plans(g) if poet else []
    if poet:
        assert tight, f"{name}: no POET plan below the keep-all peak, nor a frugal one that pages and recomputes"
    with native_link(tmp_path, target or "linux", timeout_s=60.0, args=_sizes(g, [full_plan, *tight])) as link:
        losses, weights = _run(link, g, w0, full_plan, data)
        for plan in tight:  # recompute and paging change where values live, never the values
            if plan.strategy == _Frugal.name:  # no plan needs less than keep-all: one that pages and recomputes
                assert plan.peak_bytes <= full_plan.peak_bytes and plan.page_ins and plan.recomputes
            else:
                assert plan.peak_bytes < full_plan.peak_bytes
            t_losses, t_weights = _run(link, g, w0, plan, data)
            assert t_losses == losses
            for a, b in zip(t_weights, weights, strict=True):
                assert np.array_equal(a, b)
    ref = reference(model, data, LR, graph=g, frozen=g.frozen)  # the graph says the loss and what trains
    agreed = ref.agree(weights, losses, [n for n, _ in g.params])
    print(f"{name}: {agreed.summary()}")
    assert agreed.ok, f"{name}: {agreed.report()}"
    assert all(math.isfinite(v) for v in losses)
    assert any(not np.array_equal(a, b) for a, b in zip(w0, weights, strict=True))


# linux-asan: the same runtime under ASan + UBSan, on the models cheap enough to run twice
@pytest.mark.parametrize("name,batch,target", [("mlp-digits", 4, None), ("cnn-digits", 4, None), ("lenet", 2, None),
                                               ("cnn-digits", 4, "linux-asan"), ("lenet", 2, "linux-asan")])
def test_small_cnns_train_like_pytorch(tmp_path: Path, name: str, batch: int, target: str | None) -> None:
    _check(tmp_path, name, batch, target=target)


@pytest.mark.parametrize("target", [None, "linux-asan"])
def test_transformer_block_trains_like_pytorch(tmp_path: Path, target: str | None) -> None:
    # Under the sanitizers keep-all only: the plain build already shows that POET's plans keep the
    # values; the sanitized run is for every kernel's memory accesses, and skips the planning time.
    _check(tmp_path, "transformer-block", 2, poet=target is None, target=target)


def test_bert_tiny_trains_like_pytorch(tmp_path: Path) -> None:
    _check(tmp_path, "bert-tiny", 1)


def test_mobilenetv2_trains_like_pytorch(tmp_path: Path) -> None:
    # Batch norm over 2 samples of 2x2 maps is ill-conditioned: after one step PyTorch's own fp32
    # weights are 1e-5 (relative) from its float64 ones, and the steps after amplify any rounding
    # difference chaotically until trajectories part. So one step.
    _check(tmp_path, "mobilenetv2-cifar-0.35", 2, (3, 16, 16), poet=False, steps=1)


@pytest.mark.slow
def test_mobilenetv2_poet_plans_keep_every_value(tmp_path: Path) -> None:
    # the same, under POET plans at 50% and 25% of the keep-all peak too (planning takes ~1 min)
    _check(tmp_path, "mobilenetv2-cifar-0.35", 2, (3, 16, 16), poet=True, steps=1)


@pytest.mark.slow
def test_resnet18_trains_like_pytorch(tmp_path: Path) -> None:
    # as mobilenet: batch norm over few values, so one step; keep-all and POET plans
    _check(tmp_path, "resnet18-cifar", 2, (3, 16, 16), poet=True, steps=1)


@pytest.mark.slow
def test_vgg16_trains_like_pytorch(tmp_path: Path) -> None:
    # 14.7M parameters: a 120 MiB pool; batch norm over 2 samples of 1x1 maps after the fifth
    # pool, so one step as for the other batch-norm nets; keep-all and POET plans
    _check(tmp_path, "vgg16-cifar", 2, (3, 32, 32), poet=True, steps=1)


class _AvgPools(torch.nn.Module):
    """avg_pool2d as small models use it: overlapping 3x3/2 windows with padding (both divisors), a
    non-square window and stride, and MLPerf Tiny's DS-CNN's last pool, a window the whole map."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.conv2 = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.pool1 = nn.AvgPool2d(3, 2, 1)  # 10x8 -> 5x4, padding counted
        self.pool2 = nn.AvgPool2d((2, 3), (1, 2), (1, 1), count_include_pad=False)  # 5x4 -> 6x2
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool2(torch.relu(self.conv2(self.pool1(torch.relu(self.conv1(x))))))
        h = torch.nn.functional.avg_pool2d(h, kernel_size=h.shape[2:])  # the whole map
        return self.fc(torch.flatten(h, 1))


def _check_pools(tmp_path: Path, name: str, make: Callable[[], torch.nn.Module], chw: tuple[int, int, int], op: str,
                 keys: tuple[str, ...], attrs: list[tuple[int, ...]], shapes: list[list[int]], seed: int) -> None:
    """Trace a pooling model (2 samples, 3 classes), check that each pool traced with the attributes and output
    shape meant (so the run below covers those windows), then train it against PyTorch."""
    torch.manual_seed(0)
    model = make()
    g = trace(model, name, chw, 3, 2)
    pools = [n for n in g.nodes if n.op == op]
    assert [tuple(n.attrs[k] for k in keys) for n in pools] == attrs
    assert [n.shape for n in pools] == shapes
    rng = np.random.default_rng(seed)
    data = [(rng.standard_normal((2, *chw)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, name, model, g, data)


def test_avgpool2d_trains_like_pytorch(tmp_path: Path) -> None:
    _check_pools(tmp_path, "avgpools", _AvgPools, (2, 10, 8), "avgpool2d", ("kh", "kw", "sh", "sw", "include_pad"),
                 [(3, 3, 2, 2, 1), (2, 3, 1, 2, 0), (6, 2, 6, 2, 1)], [[2, 4, 5, 4], [2, 4, 6, 2], [2, 4, 1, 1]], 3)


class _MaxPools(torch.nn.Module):
    """max_pool2d as ImageNet-style stems use it: ResNet's 3x3/2 with padding 1 on an odd map, SqueezeNet's
    3x3/2 with ceil_mode, and an overlapping non-square window of stride 1 (a maximum's gradient lands twice)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.conv2 = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.pool1 = nn.MaxPool2d(3, 2, 1)  # 9x7 -> 5x4
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)  # 5x4 -> 2x2
        self.fc = nn.Linear(4 * 2 * 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool2(torch.relu(self.conv2(self.pool1(torch.relu(self.conv1(x))))))
        h = torch.nn.functional.max_pool2d(h, (1, 2), 1)  # 2x2 -> 2x1
        return self.fc(torch.flatten(h, 1))


def test_maxpool2d_general_trains_like_pytorch(tmp_path: Path) -> None:
    _check_pools(tmp_path, "maxpools", _MaxPools, (2, 9, 7), "maxpool2d_general",
                 ("kh", "kw", "sh", "sw", "ph", "ceil"), [(3, 3, 2, 2, 1, 0), (3, 3, 2, 2, 0, 1), (1, 2, 1, 1, 0, 0)],
                 [[2, 4, 5, 4], [2, 4, 2, 2], [2, 4, 2, 1]], 4)


class _AutoEncoder(torch.nn.Module):
    """MLPerf Tiny's anomaly-detection autoencoder in miniature: dense + batch norm + ReLU down to a
    bottleneck and back, the output the input's shape."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(20, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 4),
                                 nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 12), nn.BatchNorm1d(12), nn.ReLU(),
                                 nn.Linear(12, 20))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("loss", ["mse", "l1"])
def test_an_autoencoder_trains_like_pytorch(tmp_path: Path, loss: str) -> None:
    """A regression loss of the output against the input: the loss node reads the input node, its
    backward gives the output's gradient, and the steps match PyTorch's mse_loss / l1_loss."""
    torch.manual_seed(0)
    model = _AutoEncoder()
    g = trace(model, "ae", (20,), 20, 4, loss=loss)
    assert g.loss == loss
    (node,) = [n for n in g.nodes if n.kind == "loss"]
    assert node.op == loss and node.deps[1] == 0  # the target is the input
    rng = np.random.default_rng(4)
    data = [(rng.standard_normal((4, 20)).astype(np.float32), np.zeros(4, np.int32)) for _ in range(STEPS)]
    _check_model(tmp_path, "ae", model, g, data)


def test_a_regression_loss_needs_an_output_shaped_like_the_input() -> None:
    from poet.errors import PoetError

    model = torch.nn.Sequential(torch.nn.Linear(20, 3))
    with pytest.raises(PoetError, match=r"returns \[4, 3\], expected a reconstruction of its input \[4, 20\]"):
        trace(model, "m", (20,), 3, 4, loss="mse")


# MobileNetV1 at 96x96 (26-41 s: every plan of it on the native runtime) runs in CI's slow step
@pytest.mark.parametrize("name,batch,steps", [("mlperf-ic", 2, STEPS), ("mlperf-ad", 8, STEPS),
                                              pytest.param("mlperf-vww", 1, 1, marks=pytest.mark.slow)])
def test_mlperf_tiny_networks_train_like_pytorch(tmp_path: Path, name: str, batch: int, steps: int) -> None:
    """MLPerf Tiny's ResNet-8 (residual stacks, an 8x8 average pool), its anomaly-detection autoencoder
    (mean squared error against the input) and MobileNetV1-0.25 at 96x96 (depthwise convs, a 3x3 pool),
    all layers, on the native runtime: PyTorch's weights after the same steps, POET's plans bit for bit.
    The autoencoder at batch 8: its first batch norm's bias gradient is a sum over 8 samples that cancels
    to a small fraction of its terms, so float32 rounding shows at 1e-5 of it, by CPU (at batch 2, two
    values a channel, the steps amplify it until trajectories part). MobileNetV1 one step: its first
    conv's gradient comes back through 27 batch norms, each summing thousands of float32 products."""
    _check(tmp_path, name, batch, steps=steps)


class _MobileActivations(torch.nn.Module):
    """SiLU, hardswish and hardsigmoid as EfficientNet and MobileNetV3 use them, functional and as modules."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.act = nn.Hardswish()
        self.fc1, self.fc2 = nn.Linear(4 * 6 * 6, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.flatten(self.act(self.conv(x)), 1)
        h = torch.nn.functional.silu(self.fc1(h))
        return self.fc2(torch.nn.functional.hardsigmoid(h) * h)


def test_silu_hardswish_hardsigmoid_train_like_pytorch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _MobileActivations()
    g = trace(model, "acts", (2, 6, 6), 3, 2)
    assert {"silu", "hardswish", "hardsigmoid"} <= {n.op for n in g.nodes}
    rng = np.random.default_rng(5)
    data = [(rng.standard_normal((2, 2, 6, 6)).astype(np.float32) * 2, rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "acts", model, g, data)


class _TutorialNet(torch.nn.Module):
    """A network as PyTorch's MNIST example writes it: it ends in log_softmax, for nll_loss."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv, self.fc1, self.fc2 = nn.Conv2d(1, 4, 3), nn.Linear(4 * 3 * 3, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.flatten(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2), 1)
        return torch.nn.functional.log_softmax(self.fc2(torch.relu(self.fc1(h))), dim=1)


def test_a_log_softmax_network_trains_like_pytorch_with_nll_loss(tmp_path: Path) -> None:
    """poet trains with cross entropy, which on log_softmax's output is the nll_loss the tutorial trains
    with (softmax(log_softmax(x)) = softmax(x)): the same loss and gradient, checked here in float64,
    then the board's steps against PyTorch's."""
    torch.manual_seed(0)
    model = _TutorialNet()
    g = trace(model, "tutorial", (1, 8, 8), 3, 2)
    assert {"log_softmax", "log_softmax_bwd"} <= {n.op for n in g.nodes}
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((2, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    wide = copy.deepcopy(model).double()
    out = wide(torch.from_numpy(data[0][0]).double())
    labels = torch.from_numpy(data[0][1]).long()
    ce, nll = (torch.nn.functional.cross_entropy(out, labels), torch.nn.functional.nll_loss(out, labels))
    grads = [torch.autograd.grad(loss, list(wide.parameters()), retain_graph=True) for loss in (ce, nll)]
    assert torch.allclose(ce, nll, rtol=1e-12, atol=0)
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-14) for a, b in zip(*grads, strict=True))
    _check_model(tmp_path, "tutorial", model, g, data)


class _Dropouts(torch.nn.Module):
    """DS-CNN's shape in miniature: a rectangular strided conv padded unevenly per axis, dropout after
    it (a module) and after a depthwise-separable block (functional), a rectangular average pool: the
    board's masks are the reference's (graph/dropout.py), step by step."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem, self.drop = nn.Conv2d(1, 3, (5, 2), 2, (2, 0)), nn.Dropout(0.25)
        self.dw, self.pw = nn.Conv2d(3, 3, 3, padding=1, groups=3), nn.Conv2d(3, 4, 1)
        self.pool, self.fc = nn.AvgPool2d((5, 2)), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.stem(x)))
        h = torch.nn.functional.dropout(torch.relu(self.pw(torch.relu(self.dw(h)))), 0.5, self.training)
        return self.fc(torch.flatten(self.pool(h), 1))


def test_dropout_trains_like_pytorch_with_the_boards_masks(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Dropouts()
    g = trace(model, "dropouts", (1, 10, 5), 3, 2)
    drops = [n for n in g.nodes if n.op == "dropout"]
    assert [(n.attrs["p"], n.attrs["salt"]) for n in drops] == [(0.25, 0), (0.5, 1)]
    # the backward makes the mask again: it reads only the gradient, nothing of the forward
    assert all(len(n.deps) == 1 for n in g.nodes if n.op == "dropout_bwd")
    # the tighter plans recompute dropouts: their masks must come out the same the second time
    assert any(g.nodes[i.node].op == "dropout" for p in _poet_plans(g) for i in lower(p, g).schedule.instrs
               if i.op == RECOMPUTE)
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((2, 1, 10, 5)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "dropouts", model, g, data)


def test_the_reference_drops_what_the_board_drops_and_differs_by_step() -> None:
    """PoetDropout's masks: a share p dropped, the kept scaled by 1 / (1 - p), a new mask each step,
    the same one for the same step; eval mode is the identity."""
    from poet.graph.reference import PoetDropout

    x = torch.ones(4000)
    drop = PoetDropout()
    with drop:
        drop.begin(1)
        a = torch.nn.functional.dropout(x, 0.25)
        drop.begin(1)
        again = torch.nn.functional.dropout(x, 0.25)
        drop.begin(2)
        b = torch.nn.functional.dropout(x, 0.25)
        ident = torch.nn.functional.dropout(x, 0.25, training=False)
    assert torch.equal(a, again) and not torch.equal(a, b) and torch.equal(ident, x)
    assert set(a.unique().tolist()) == {0.0, float(np.float32(1 / 0.75))}
    assert abs(float((a == 0).float().mean()) - 0.25) < 0.03


def _stochastic_depth(input: torch.Tensor, p: float, mode: str, training: bool = True) -> torch.Tensor:
    """torchvision.ops.stochastic_depth as torchvision writes it (torchvision is no dependency of poet's)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    if mode == "row":
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


class _StochasticDepth(torch.nn.Module):
    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _stochastic_depth(x, self.p, self.mode, self.training)


class _Residual(torch.nn.Module):
    """EfficientNet's residual blocks in miniature: each branch dropped per sample (mode "row") or for
    the whole batch ("batch") before it joins the shortcut, with a dropout between them sharing the
    salts' count; the board's draws are the reference's, step by step."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(2, 4, 3, padding=1)
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.sd_a, self.sd_b = _StochasticDepth(0.5, "row"), _StochasticDepth(0.3, "batch")
        self.drop, self.fc = nn.Dropout(0.25), nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = h + self.sd_a(torch.relu(self.a(h)))
        h = self.drop(h)
        h = h + self.sd_b(torch.tanh(self.b(h)))
        return self.fc(torch.flatten(h, 1))


def test_stochastic_depth_trains_like_pytorch_with_the_boards_draws(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Residual()
    g = trace(model, "sdepth", (2, 4, 4), 3, 4)
    drops = [n for n in g.nodes if n.op == "dropout"]
    # a draw per sample (64 elements a row), the dropout's per element, the batch's one draw for all
    assert [(round(n.attrs["p"], 6), n.attrs["salt"], n.attrs.get("row", 0)) for n in drops] == \
        [(0.5, 0, 64), (0.25, 1, 0), (0.3, 2, 256)]
    assert all(len(n.deps) == 1 for n in g.nodes if n.op == "dropout_bwd")
    assert [a[4] for a in (model_blob(g).nodes[n.id].attrs for n in drops)] == [64, 0, 256]
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((4, 2, 4, 4)).astype(np.float32), rng.integers(0, 3, 4).astype(np.int32))
            for _ in range(STEPS)]
    # the steps drop some samples' branch and keep others' (else the test would not show rows)
    drawn = np.stack([dropout.keep(4, 0, step, 0.5) for step in range(1, STEPS + 1)])
    assert drawn.any() and not drawn.all()
    _check_model(tmp_path, "sdepth", model, g, data)


def test_the_reference_draws_stochastic_depth_as_the_board() -> None:
    """PoetDropout fills a bernoulli_ mask with the board's draws: per row (whole samples kept, scaled
    by 1 / (1 - p), or zero), one for the batch, the salt counted with the dropout calls; eval mode and
    p = 0 draw nothing."""
    from poet.graph.reference import PoetDropout

    x = torch.ones(400, 3)
    drop = PoetDropout()
    with drop:
        drop.begin(5)
        rows = _stochastic_depth(x, 0.25, "row")
        once = torch.nn.functional.dropout(x, 0.5)
        batch = _stochastic_depth(x, 0.3, "batch")
        assert torch.equal(_stochastic_depth(x, 0.3, "row", training=False), x)
        assert torch.equal(_stochastic_depth(x, 0.0, "row"), x)
    kept = dropout.keep(400, 0, 5, 0.25)  # salt 0: the first draw of the forward
    want = torch.from_numpy(np.repeat(kept, 3).reshape(400, 3) / 0.75).float()
    assert torch.allclose(rows, want, rtol=1e-6) and 0.15 < 1 - kept.mean() < 0.35
    assert torch.equal(once == 0, ~torch.from_numpy(dropout.keep(1200, 1, 5, 0.5).reshape(400, 3)))
    assert len(set(batch.flatten().tolist())) == 1
    assert bool(batch[0, 0] != 0) == bool(dropout.keep(1, 2, 5, 1 - 0.7)[0])


class _Concat(torch.nn.Module):
    """torch.cat along channels (an inception-style block: two branches joined) and along features (a
    tensor with a scaled copy of itself: the same node's gradient summed from both parts)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.a, self.b = nn.Conv2d(2, 3, 3, padding=1), nn.Conv2d(2, 5, 1)
        self.fc = nn.Linear(2 * 8 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([torch.relu(self.a(x)), self.b(x)], dim=1)
        h = torch.flatten(h, 1)
        return self.fc(torch.cat((h, h * 2), -1))


def _checked_trace(model: torch.nn.Module, name: str, shape: tuple[int, ...]) -> TrainingGraph:
    """model's graph (3 classes, batch 2), which keeps what PyTorch saves and accounts for every ATen op."""
    from poet.graph.check import op_check, real_step, saved_check

    t = real_step(model, name, shape, 3, 2)
    assert not saved_check(model, t).unexplained and not op_check(t).unaccounted
    return trace(model, name, shape, 3, 2)


def test_cat_trains_like_pytorch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Concat()
    g = _checked_trace(model, "cat", (2, 4, 4))
    cats = [n for n in g.nodes if n.op == "cat"]
    assert [(n.attrs["outer"], n.attrs["l0"], n.attrs["l1"]) for n in cats] == [(2, 48, 80), (2, 128, 128)]
    assert sum(1 for n in g.nodes if n.op == "cat_bwd") == 4
    rng = np.random.default_rng(6)
    data = [(rng.standard_normal((2, 2, 4, 4)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "cat", model, g, data)


class _Split(torch.nn.Module):
    """ShuffleNetV2's stride-1 unit: chunk the channels in two, a branch on one half, cat, the 5-d channel
    shuffle (view, transpose(1, 2), contiguous, view); then unequal pieces of split, unbind, and x[:, a:b]."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.branch = nn.Sequential(nn.Conv2d(2, 2, 1), nn.ReLU(), nn.Conv2d(2, 2, 3, padding=1, groups=2))
        self.fc = nn.Linear(3 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=1)
        h = torch.cat((x1, self.branch(x2)), dim=1)
        b, c, hh, ww = h.size()
        h = torch.transpose(h.view(b, 2, c // 2, hh, ww), 1, 2).contiguous().view(b, c, hh, ww)
        a, rest = torch.split(h, [1, 3], dim=1)  # pieces of 1 and 3 channels
        rows = torch.unbind(rest, dim=1)  # three [B, 4, 4] maps, only the second read
        flat = torch.flatten(a, 1)
        return self.fc(torch.cat((flat * torch.flatten(rows[1], 1), torch.flatten(rest[:, 2:3], 1), flat), 1))


def test_split_pieces_and_the_channel_shuffle_train_like_pytorch(tmp_path: Path) -> None:
    """Issue 49: chunk, split and unbind make one slice node per piece an op reads (an unread piece makes
    none), and the 5-d shuffle is a 4-d permute; the step agrees with PyTorch's."""
    torch.manual_seed(0)
    model = _Split()
    g = _checked_trace(model, "split", (4, 4, 4))
    slices = [(n.attrs["outer"], n.attrs["total"], n.attrs["offset"], n.attrs["len"]) for n in g.nodes
              if n.op == "slice"]
    # in the order they are first read: x2, x1; rest (by unbind), a; row 1 of rest, then rest[:, 2:3]
    assert slices == [(2, 64, 32, 32), (2, 64, 0, 32), (2, 64, 16, 48), (2, 64, 0, 16), (2, 48, 16, 16),
                      (2, 48, 32, 16)]
    perm = next(n.attrs for n in g.nodes if n.op == "permute")
    assert [perm[f"d{i}"] for i in range(4)] == [2, 2, 2, 16] and [perm[f"p{i}"] for i in range(4)] == [0, 2, 1, 3]
    assert sum(1 for n in g.nodes if n.op == "slice_bwd") == 4  # x's two pieces give none: x is the input
    rng = np.random.default_rng(7)
    data = [(rng.standard_normal((2, 4, 4, 4)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "split", model, g, data)


class _Sensor(torch.nn.Module):
    """A 1-D sensor network as tutorials write it: conv1d, BatchNorm1d, max_pool1d, a strided conv1d,
    avg_pool1d with padding, adaptive_avg_pool1d(1)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.c1, self.bn1 = nn.Conv1d(3, 4, 5, padding=2), nn.BatchNorm1d(4)
        self.c2, self.pool, self.ap = nn.Conv1d(4, 4, 3, stride=2), nn.MaxPool1d(2), nn.AvgPool1d(3, 1, 1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(torch.relu(self.bn1(self.c1(x))))
        h = self.ap(torch.relu(self.c2(h)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool1d(h, 1), 1))


def test_one_dimensional_layers_train_like_pytorch(tmp_path: Path) -> None:
    """Issue 49: conv1d, BatchNorm1d and the 1-d pools are their 2-d ops over a map one row high (a conv1d
    weight [O, C, k] is the [O, C, 1, k] the kernels read); the step agrees with PyTorch's."""
    torch.manual_seed(0)
    model = _Sensor()
    g = _checked_trace(model, "sensor", (3, 16))
    convs = [(n.attrs["H"], n.attrs["k"], n.attrs["kw"], n.attrs["padw"], n.attrs["stride"]) for n in g.nodes
             if n.op == "conv2d"]
    assert convs == [(1, 1, 5, 2, 1), (1, 1, 3, 0, 2)]
    assert {n.op for n in g.nodes if n.kind == "forward"} >= {"batchnorm", "maxpool2d_general", "avgpool2d", "mean"}
    rng = np.random.default_rng(8)
    data = [(rng.standard_normal((2, 3, 16)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "sensor", model, g, data)


class _Upsample(torch.nn.Module):
    """Nearest upsampling as small segmentation and detection heads use it: by 2 (a module) and by 3x2
    (a size), a skip joined by cat."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.down = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2)
        self.fc = nn.Linear(6 * 12 * 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([self.up(torch.relu(self.down(x))), x], dim=1)  # 6 channels at 4x4
        h = torch.nn.functional.interpolate(h, size=(12, 8), mode="nearest")
        return self.fc(torch.flatten(h, 1))


def test_nearest_upsampling_trains_like_pytorch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Upsample()
    g = _checked_trace(model, "up", (2, 4, 4))
    assert [(n.attrs["sh"], n.attrs["sw"]) for n in g.nodes if n.op == "upsample"] == [(2, 2), (3, 2)]
    rng = np.random.default_rng(7)
    data = [(rng.standard_normal((2, 2, 4, 4)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "up", model, g, data)


class _SqueezeExcite(torch.nn.Module):
    """A squeeze-and-excitation block as MobileNetV3 writes it (its scale [N, C, 1, 1] times the map,
    scale first), then a [N, 1, D] row repeated over [N, S, D] by sub, mul (the row second) and add (the
    row first)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.squeeze, self.excite = nn.Conv2d(4, 2, 1), nn.Conv2d(2, 4, 1)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nnf = torch.nn.functional
        h = torch.relu(self.conv(x))
        s = nnf.hardsigmoid(self.excite(torch.relu(self.squeeze(nnf.adaptive_avg_pool2d(h, 1)))))
        t = torch.flatten(s * h, 2)  # [N, 4, 36]
        u = t.mean(1).reshape(-1, 1, 36)
        return self.fc(torch.flatten(u + (t - u) * torch.sigmoid(u), 1))


@pytest.mark.parametrize("target", [None, "linux-asan"])
def test_squeeze_and_excitation_trains_like_pytorch(tmp_path: Path, target: str | None) -> None:
    torch.manual_seed(0)
    model = _SqueezeExcite()
    g = _checked_trace(model, "se", (2, 6, 6))
    binary = ("add", "sub", "mul", "add_bwd", "sub_bwd", "mul_bwd_a", "mul_bwd_b")
    views = [(n.op, n.attrs["n"], n.attrs["m"], n.attrs.get("inner")) for n in g.nodes
             if n.op in binary and n.attrs["m"] < n.attrs["n"]]
    assert views == [("mul", 288, 8, 1), ("sub", 288, 72, 36), ("mul", 288, 72, 36), ("add", 288, 72, 36),
                     ("add_bwd", 288, 72, 36), ("mul_bwd_a", 288, 72, 36), ("mul_bwd_b", 288, 72, 36),
                     ("sub_bwd", 288, 72, 36), ("mul_bwd_a", 288, 8, 1), ("mul_bwd_b", 288, 8, 1)]
    rng = np.random.default_rng(8)
    data = [(rng.standard_normal((2, 2, 6, 6)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "se", model, g, data, poet=target is None, target=target)  # ASan: keep-all only


def test_the_board_refuses_a_broadcast_it_cannot_view(tmp_path: Path) -> None:
    """add/sub/mul's third slot, inner, must divide b's elements m (0: inner = m), m must divide n, and
    mul_bwd_b's output is b's size: each broken node is MODEL with its index (docs/spec.md 2)."""
    from dataclasses import replace as dc_replace

    from poet.plan.lowering import modelblob as mb

    torch.manual_seed(0)
    good = model_blob(trace(_SqueezeExcite(), "se", (2, 6, 6), 3, 2))

    def at(op: str, inner: int) -> int:
        return next(i for i, n in enumerate(good.nodes) if n.op == CODE[op] and n.attrs[2] == inner)

    def with_attr(i: int, slot: int, value: int) -> mb.ModelBlob:
        a = list(good.nodes[i].attrs)
        a[slot] = value
        return dc_replace(good, nodes=[*good.nodes[:i], dc_replace(good.nodes[i], attrs=tuple(a)), *good.nodes[i + 1:]])

    se, row, grad_b = at("mul", 1), at("sub", 36), at("mul_bwd_b", 1)
    bad = [
        (with_attr(se, 2, 3), se),  # inner 3 does not divide m = 8
        (with_attr(se, 2, -1), se),
        (with_attr(row, 2, 144), row),  # inner past m = 72
        (with_attr(row, 1, 70), row),  # m = 70 does not divide n = 288
        (with_attr(grad_b, 1, 16), grad_b),  # b's gradient would be 16 elements, its tensor is 8
    ]
    assert_models_refused(tmp_path, [good], bad)


def _biases_train_like_pytorch(model: torch.nn.Module, g: TrainingGraph, data: list[Batch], losses: list[float],
                               weights: list[np.ndarray]) -> dict[str, np.ndarray]:
    """`--train bias` of a graph with frozen weights stored int8: the board's biases and losses are PyTorch's same
    steps given q x scale (reference.as_graph swaps them in); PyTorch's tensors after them, by name."""
    host_losses = train_steps(model, data, LR, frozen=g.frozen, graph=g)
    ref = dict(zip([n for n, _ in g.params], weights_of(model), strict=True))
    board = dict(zip([n for n, _ in g.params], weights, strict=True))
    trained = [n for n, _ in g.params if n not in g.frozen]
    assert trained and all(n.endswith(".bias") for n in trained)
    for name in trained:
        assert np.linalg.norm(board[name] - ref[name]) <= 1e-5 * np.linalg.norm(ref[name]), name
    assert np.allclose(losses, host_losses, rtol=1e-5)
    return ref


def test_dense_weights_stored_int8_train_like_pytorch_given_them(tmp_path: Path) -> None:
    """Weight-only int8 (poet.plan.transform.placement, the autoencoder's way into a small flash): the frozen dense
    weights sit int8 in the board's nv storage and compute in fp32 on q x scale, forward and for the input
    gradient; with `--train bias` the biases train like PyTorch's given those weights (as_graph swaps them
    in), and every plan gives the same bits."""
    from poet.graph.quantise import absmax_scale, dequantise, quantise
    from poet.plan.transform.placement import w8_candidates, weight_only_int8

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 12))
    g0 = trace(model, "ae-w8", (12,), 12, 4, train="bias", loss="mse")
    big = w8_candidates(g0)
    assert big[:2] == ["0.weight", "5.weight"]  # the largest first; batch-norm and bias tensors never
    g = weight_only_int8(g0, set(big[:2]))
    assert g.int8_params == {"0.weight", "5.weight"} and pool_for(g).flash.frozen < pool_for(g0).flash.frozen
    assert any(n.op == "linear_bwd" and n.attrs.get("w8") and n.attrs["need_grad_input"] for n in g.nodes)
    rng = np.random.default_rng(8)
    data = [(rng.standard_normal((4, 12)).astype(np.float32), np.zeros(4, np.int32)) for _ in range(STEPS)]
    w0 = weights_of(model)
    full_plan = keep_all(uncosted(g))
    tight = _poet_plans(g)
    assert tight
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        losses, weights = _run(link, g, w0, full_plan, data)
        for plan in tight:
            t_losses, t_weights = _run(link, g, w0, plan, data)
            assert t_losses == losses and all(np.array_equal(a, b) for a, b in zip(t_weights, weights, strict=True))
    ref = _biases_train_like_pytorch(model, g, data, losses, weights)
    w = ref["0.weight"]  # the reference was given q x scale only while it computed as the board does
    assert np.array_equal(dequantise(quantise(w, absmax_scale(w)), absmax_scale(w)).reshape(-1),
                          weights[[n for n, _ in g.params].index("0.weight")].reshape(-1))
    # without them the reference differs: the check can fail
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4), nn.ReLU(),
                          nn.Linear(4, 12))
    assert not np.allclose(train_steps(plain, data, LR, frozen=g.frozen, graph=g0), losses, rtol=1e-6, atol=0)


class _FrozenConvs(torch.nn.Module):
    """Each conv form weight-only int8 runs a block of output channels at a time, as many as the stream buffer
    holds (the pointwise conv's four, the widest): the first conv's and the depthwise one's in blocks of five,
    five and two, the pointwise one's of four, then two (its input gradient continues the first block's sum),
    the grouped one's ending at each group."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(1, 12, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(12, 12, 3, padding=1, groups=12), nn.ReLU(), nn.Conv2d(12, 6, 1),
                                  nn.ReLU(), nn.Conv2d(6, 4, 1, stride=2, groups=2), nn.Flatten(),
                                  nn.Linear(4 * 3 * 3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_conv_weights_stored_int8_are_the_fp32_convs_of_q_times_scale(tmp_path: Path) -> None:
    """Weight-only int8 convs (the frozen convs a backward reads behind a sparse update, issue 50): the board makes
    w = q x scale a block of output channels at a time and runs the fp32 kernels on it, so a run is bit for bit
    the fp32 graph's given those weights, under every plan, and the biases train like PyTorch's given them."""
    from poet.graph.quantise import absmax_scale, dequantise, quantise
    from poet.plan.transform.placement import w8_candidates, weight_only_int8

    torch.manual_seed(0)
    model = _FrozenConvs()
    g0 = trace(model, "convs-w8", (1, 5, 5), 3, 2, train="bias")
    convs = [f"body.{i}.weight" for i in (0, 2, 4, 6)]
    assert set(convs) <= set(w8_candidates(g0))
    g = weight_only_int8(g0, set(convs))
    assert g.int8_params == set(convs) and pool_for(g).flash.frozen < pool_for(g0).flash.frozen
    # the widest output channel (C/groups k k, fp32): the pointwise conv's 12, wider than the first conv's and the
    # depthwise conv's 9 and the grouped conv's 3; so the convs of narrower rows make several channels a block (the
    # grouped one two, its group), the pointwise one one at a time
    assert pool_for(g).stream == 4 * max(12, 9, 9, 3) and pool_for(g0).stream == 0
    assert model_blob(g).pool == pool_for(g)
    assert sum(n.op == "conv2d_bwd" and n.attrs.get("w8") and n.attrs["need_grad_input"] == 1 for n in g.nodes) == 3
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((2, 1, 5, 5)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    w0 = weights_of(model)
    deq = [dequantise(quantise(w, absmax_scale(w)), absmax_scale(w)).reshape(w.shape) if name in convs else w
           for (name, _), w in zip(g.params, w0, strict=True)]
    full_plan = keep_all(uncosted(g))
    tight = _poet_plans(g)
    assert tight
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        losses, weights = _run(link, g, w0, full_plan, data)
        # the fp32 graph given q x scale as fp32 weights: the same bits
        f_losses, f_weights = _run(link, g0, deq, keep_all(uncosted(g0)), data)
        assert f_losses == losses and all(np.array_equal(a, b) for a, b in zip(f_weights, weights, strict=True))
        for plan in tight:
            t_losses, t_weights = _run(link, g, w0, plan, data)
            assert t_losses == losses and all(np.array_equal(a, b) for a, b in zip(t_weights, weights, strict=True))
    _biases_train_like_pytorch(model, g, data, losses, weights)


def test_the_board_refuses_malformed_nodes_of_the_new_ops(tmp_path: Path) -> None:
    """The model validator's checks of this issue's node forms: each well-formed blob loads, and one
    attribute out of range is MODEL with the node's index (docs/spec.md 2)."""
    from dataclasses import replace as dc_replace

    from poet.plan.lowering import modelblob as mb
    from poet.plan.transform.placement import w8_candidates, weight_only_int8
    from poet.plan.transform.static_int8 import rewrite

    torch.manual_seed(0)
    drops = model_blob(trace(_Dropouts(), "dropouts", (1, 10, 5), 3, 2))
    nn = torch.nn
    ae = trace(nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 6)), "ae", (6,), 6, 2, train="bias", loss="mse")
    w8 = model_blob(weight_only_int8(ae, set(w8_candidates(ae))))
    conv_net = nn.Sequential(nn.Conv2d(1, 2, (3, 2), padding=(1, 0)), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 3, 3))
    prefix = rewrite(trace(conv_net, "q", (1, 4, 4), 3, 2, train="last:1"))
    assert prefix is not None and prefix.graph.nodes[0].attrs.get("i8") == 1
    staged = model_blob(prefix.graph)

    def at(blob: mb.ModelBlob, op: int) -> int:
        return next(i for i, n in enumerate(blob.nodes) if n.op == op)

    def with_attr(blob: mb.ModelBlob, i: int, slot: int, value: int) -> mb.ModelBlob:
        a = list(blob.nodes[i].attrs)
        a[slot] = value
        return dc_replace(blob, nodes=[*blob.nodes[:i], dc_replace(blob.nodes[i], attrs=tuple(a)), *blob.nodes[i + 1:]])

    d, c = at(drops, CODE["dropout"]), at(drops, CODE["conv2d"])
    lin, inp = at(w8, CODE["linear"]), at(staged, CODE["input"])
    stored = w8.nodes[lin].attrs[3]
    lin_bwd = next(i for i, n in enumerate(w8.nodes) if n.op == CODE["linear_bwd"] and n.attrs[3] == stored)
    assert w8.param_i8[stored] and w8.param_frozen[stored]
    bad = [
        (with_attr(drops, d, 1, 1 << 24), d),  # keep-from past 2^24: would drop everything
        (with_attr(drops, d, 2, 0x7F800000), d),  # an infinite scale
        (with_attr(drops, d, 4, -1), d),  # a negative row (stochastic depth's elements a draw)
        (with_attr(drops, c, 5, drops.nodes[c].attrs[5] & ~0xFF00 | 65 << 8), c),  # a kernel 65 wide
        (with_attr(drops, c, 5, drops.nodes[c].attrs[5] | 0x3F << 16), c),  # 63 columns of padding
        (with_attr(staged, inp, 1, 2), inp),  # no such input type
        (with_attr(staged, inp, 2, -1), inp),  # staged int8 without a scale
        # a stored-int8 dense weight on the SD card that a backward reads: only a forward streams its rows (the
        # forward linear reading it is node lin, which the board takes)
        (dc_replace(w8, param_aux=[i == stored for i in range(len(w8.param_elems))]), lin_bwd),
    ]
    assert_models_refused(tmp_path, [drops, w8, staged], bad)


def test_a_frozen_batch_norm_over_one_value_per_channel_trains(tmp_path: Path) -> None:
    """A batch norm on running statistics needs no second value per channel: at batch 1 over a 1x1 map (EfficientNet's
    last stages at 32x32) the board takes it, where batch statistics would need two (PyTorch's rule, kept for
    those). The board had refused it, after the host had planned it."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4, 3))
    g = trace(model, "bn1x1", (2, 3, 3), 3, 1, train="last:1")
    bn = next(n for n in g.nodes if n.op == "batchnorm_eval")
    assert bn.attrs["B"] * bn.attrs["HW"] == 1
    rng = np.random.default_rng(9)
    data = [(rng.standard_normal((1, 2, 3, 3)).astype(np.float32), rng.integers(0, 3, 1).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "bn1x1", model, g, data, poet=False)
