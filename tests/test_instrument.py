"""The op-level instrumentation sees every op of a real training step, forward and backward."""

import torch
import torch.nn.functional as F
from poet.graph.instrument import Instrumented, OpTimer, saved_activation_bytes
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from torch import nn


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 6))
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        h = self.block(x)
        h = F.relu(h) + h  # functional calls module hooks never see
        return self.head(torch.flatten(h, 1))


def _step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()


def test_sees_functional_ops_loss_and_backward_with_module_paths():
    model = Functional()
    with Instrumented(model) as ins:
        before = []
        ins.on_before(lambda ev: before.append(ev.id))
        _step(model, torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    ops = [(e.phase, e.module, e.op) for e in ins.events]
    assert ("forward", "block/0", "aten.addmm.default") in ops
    assert ("forward", "", "aten.relu.default") in ops
    assert ("forward", "", "aten.add.Tensor") in ops
    assert ("forward", "", "aten.nll_loss_forward.default") in ops  # the loss
    assert before == [e.id for e in ins.events]  # before-hooks ran for every op, in order
    assert [e.id for e in ins.events] == list(range(len(ins.events)))
    # gradient accumulation into the parameters is visible as autograd's own ops
    assert any(e.autograd_node.endswith("AccumulateGrad") for e in ins.events if e.phase == "backward")


def test_backward_ops_map_to_the_forward_op_they_differentiate():
    model, _ = get_model("cnn-digits")
    with Instrumented(model) as ins:
        _step(model, torch.randn(2, 1, 8, 8), torch.tensor([3, 7]))
    by_id = {e.id: e for e in ins.events}
    conv_bwd = next(e for e in ins.events if e.op == "aten.convolution_backward.default")
    assert by_id[conv_bwd.forward_id].op == "aten.convolution.default"
    assert conv_bwd.module == "conv1"
    pool_bwd = next(e for e in ins.events if e.op == "aten.max_pool2d_with_indices_backward.default")
    assert by_id[pool_bwd.forward_id].module == "pool"
    relu_bwds = [e for e in ins.events if e.op == "aten.threshold_backward.default"]
    assert sorted(by_id[e.forward_id].op for e in relu_bwds) == ["aten.relu.default"] * 2


def test_op_timer_times_every_op():
    model, _ = get_model("mlp-digits")
    with Instrumented(model) as ins:
        timer = OpTimer(ins)
        _step(model, torch.randn(4, 64), torch.tensor([1, 2, 3, 4]))
    assert set(timer.ns) == {e.id for e in ins.events}
    assert all(ns >= 0 for ns in timer.ns.values())


def test_graph_keeps_exactly_what_pytorch_saves_for_the_mlp():
    """The activation-bytes checker: PyTorch's saved tensors vs the forward tensors our backward nodes read."""
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, batch=16)
    read_by_backward = {d for n in g.nodes if n.kind == "backward" for d in n.deps
                        if g.nodes[d].kind in ("input", "forward")}
    ours = sum(g.nodes[d].bytes for d in read_by_backward)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    theirs = saved_activation_bytes(model, lambda: F.cross_entropy(model(x), y))
    # PyTorch also saves nll_loss's total_weight, a 4-byte scalar our cross-entropy backward does not need
    assert theirs == ours + 4


def test_api_calls_are_recorded_and_own_their_aten_ops():
    model = Functional()
    with Instrumented(model) as ins:
        _step(model, torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    names = [(c.module, c.name) for c in ins.calls]
    assert ("block/0", "linear") in names and ("", "relu") in names and ("", "add") in names
    assert ("", "flatten") in names and ("", "cross_entropy") in names
    add = next(c for c in ins.calls if c.name == "add")
    assert [e.op for e in ins.events if e.call_id == add.id] == ["aten.add.Tensor"]
    assert all(e.call_id is not None for e in ins.events if e.phase == "forward")


def test_gradient_sums_are_marked():
    """h feeds relu and the add: autograd sums h's two gradients, and only that op is marked."""
    model = Functional()
    with Instrumented(model) as ins:
        _step(model, torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    sums = [e for e in ins.events if e.accumulate]
    assert [e.op for e in sums] == ["aten.add.Tensor"]
    assert sums[0].phase == "backward"


def test_saved_tensors_are_recorded_with_the_call_that_saved_them():
    model = Functional()
    with Instrumented(model, saved=True) as ins:
        _step(model, torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    relu = next(c for c in ins.calls if c.name == "relu")
    saved_by_relu = [t for cid, t in ins.saved if cid == relu.id]
    assert len(saved_by_relu) == 1 and saved_by_relu[0].data_ptr() == relu.result.data_ptr()
