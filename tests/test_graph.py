"""The traced graph must be what PyTorch really computes and keeps."""

import pytest
import torch
from poet.errors import PoetError
from poet.graph import TrainingGraph, trace
from poet.models import ZOO, get_model
from torch import nn


def _forward_sizes(model: nn.Module, x: torch.Tensor) -> list[int]:
    """Output bytes of every leaf module, as forward hooks see them."""
    sizes = []
    for m in model.modules():
        if not list(m.children()):
            m.register_forward_hook(lambda _m, _i, out: sizes.append(out.numel() * out.element_size()))
    model(x)
    return sizes


# Zoo models the current tracer can lower. LeNet-5 belongs here: it is a chain of stride-1 convs,
# ReLUs, 2x2 max pools and Linears, all in the runtime's op set.
TRACEABLE = ("mlp-digits", "cnn-digits", "lenet")

# The rest must be refused with an error naming the first module the runtime lacks, never traced
# with that module silently dropped.
REFUSED = {
    "resnet18-cifar": r"^bn1: module BatchNorm2d is not in the runtime's op set",
    "vgg16-cifar": r"^1: module BatchNorm2d is not in the runtime's op set",
    "mobilenetv2-cifar": r"^bn1: module BatchNorm2d is not in the runtime's op set",
    "mobilenetv2-cifar-0.35": r"^bn1: module BatchNorm2d is not in the runtime's op set",
    "transformer-block": r"^tokens: module Embedding is not in the runtime's op set",
    "bert-tiny": r"^embeddings/word: module Embedding is not in the runtime's op set",
    "bert-base": r"^embeddings/word: module Embedding is not in the runtime's op set",
}


def test_every_zoo_model_is_either_traced_or_refused():
    assert sorted([*TRACEABLE, *REFUSED]) == sorted(ZOO)


@pytest.mark.parametrize("name", TRACEABLE)
def test_forward_bytes_match_pytorch(name):
    model, spec = get_model(name)
    g = trace(model, name, spec.input_shape, spec.classes, batch=8)
    fwd = [n for n in g.nodes if n.kind == "forward"]
    x = torch.zeros((8, *spec.input_shape))
    if name == "mlp-digits":
        assert [n.bytes for n in fwd] == _forward_sizes(model, x)
    # every forward output equals the real tensor's size, functional calls included
    gm = torch.fx.symbolic_trace(model)
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(x)
    real = [n.meta["tensor_meta"].shape.numel() * 4 for n in gm.graph.nodes if n.op in ("call_module",
                                                                                        "call_function")]
    assert [n.bytes for n in fwd] == real
    assert g.nodes[0].bytes == x.numel() * 4
    assert g.param_bytes == sum(p.numel() * 4 for p in model.parameters())


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsupported_zoo_model_is_refused_by_name(name):
    model, spec = get_model(name)
    with pytest.raises(PoetError, match=REFUSED[name]):
        trace(model, name, spec.input_shape, spec.classes, batch=2)


def test_training_graph_shape():
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, batch=4)
    kinds = [n.kind for n in g.nodes]
    assert kinds[0] == "input" and kinds[-1] == "optimizer"
    assert kinds.count("loss") == 1
    # one backward node per forward op, plus the loss's; the first conv computes no input gradient
    assert kinds.count("backward") == kinds.count("forward") + 1
    conv_bwd = next(n for n in g.nodes if n.op == "conv2d_bwd")
    assert conv_bwd.bytes == 0 and conv_bwd.attrs["need_grad_input"] == 0
    for n in g.nodes:
        assert all(d < n.id for d in n.deps)
    # relu's backward reads relu's own output, as PyTorch's threshold_backward does
    relu = next(n for n in g.nodes if n.op == "relu")
    relu_bwd = next(n for n in g.nodes if n.op == "relu_bwd" and relu.id in n.deps)
    assert relu_bwd.deps[1] == relu.id


def test_json_round_trip(tmp_path):
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, batch=2)
    g.to_json(tmp_path / "g.json")
    assert TrainingGraph.from_json(tmp_path / "g.json") == g


def test_unsupported_op_is_named_with_its_module_path():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.Linear(4, 2))
    with pytest.raises(PoetError, match=r"1: module Sigmoid is not in the runtime's op set \(Linear"):
        trace(model, "m", (4,), 2, batch=2)


def test_unsupported_function_is_named():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(torch.tanh(x))

    with pytest.raises(PoetError, match="tanh"):
        trace(M(), "m", (4,), 2, batch=2)


def test_branching_is_refused_not_dropped():
    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.out = nn.Linear(4, 2)

        def forward(self, x):
            h = self.fc(x)
            return self.out(torch.relu(h) + h)

    with pytest.raises(PoetError, match="feeds 2 ops"):
        trace(Res(), "m", (4,), 2, batch=2)
