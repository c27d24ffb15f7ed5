"""MIT tiny-training's networks (poet.models.zoo.tiny_training) against their published int8 graphs: every
conv's shape, the activations and residuals, the MACs, the sparse-update configs and their --train strings,
and a trace of each. Nothing here reads the .pkl files: the expected data below was extracted from them
once (algorithm/assets/mcu_models/<name>.pkl of mit-han-lab/tiny-training at commit 7bf8e05)."""


import pytest
import torch
from poet.graph import train_modes
from poet.graph.tracer import traced
from poet.models.zoo import ZOO, ModelChoice
from poet.models.zoo.tiny_training import (
    HEADLINE,
    SPARSE_UPDATES,
    TinyTrainingNet,
    _conv_paths,
    conv_names,
    train_mode,
)
from torch import nn

NETS = ["mbv2-w0.35", "proxyless-w0.3", "mcunet-5fps"]

# Per conv, in tiny-training's conv index order (first_conv, then each block's pointwise1, depthwise,
# pointwise2; one line per block): (in_channel, out_channel, kernel_size, stride, groups, out_shape) as
# the pkl records them at 128x128 (out_shape is the square map's side; in_shape is out_shape * stride
# for every conv of the three).
PUBLISHED = {
    "mbv2-w0.35": [
        (3, 16, 3, 2, 1, 64),
        (16, 16, 3, 1, 16, 64), (16, 8, 1, 1, 1, 64),
        (8, 48, 1, 1, 1, 64), (48, 48, 3, 2, 48, 32), (48, 8, 1, 1, 1, 32),
        (8, 48, 1, 1, 1, 32), (48, 48, 3, 1, 48, 32), (48, 8, 1, 1, 1, 32),
        (8, 48, 1, 1, 1, 32), (48, 48, 3, 2, 48, 16), (48, 16, 1, 1, 1, 16),
        (16, 96, 1, 1, 1, 16), (96, 96, 3, 1, 96, 16), (96, 16, 1, 1, 1, 16),
        (16, 96, 1, 1, 1, 16), (96, 96, 3, 1, 96, 16), (96, 16, 1, 1, 1, 16),
        (16, 96, 1, 1, 1, 16), (96, 96, 3, 2, 96, 8), (96, 24, 1, 1, 1, 8),
        (24, 144, 1, 1, 1, 8), (144, 144, 3, 1, 144, 8), (144, 24, 1, 1, 1, 8),
        (24, 144, 1, 1, 1, 8), (144, 144, 3, 1, 144, 8), (144, 24, 1, 1, 1, 8),
        (24, 144, 1, 1, 1, 8), (144, 144, 3, 1, 144, 8), (144, 24, 1, 1, 1, 8),
        (24, 144, 1, 1, 1, 8), (144, 144, 3, 1, 144, 8), (144, 32, 1, 1, 1, 8),
        (32, 192, 1, 1, 1, 8), (192, 192, 3, 1, 192, 8), (192, 32, 1, 1, 1, 8),
        (32, 192, 1, 1, 1, 8), (192, 192, 3, 1, 192, 8), (192, 32, 1, 1, 1, 8),
        (32, 192, 1, 1, 1, 8), (192, 192, 3, 2, 192, 4), (192, 56, 1, 1, 1, 4),
        (56, 336, 1, 1, 1, 4), (336, 336, 3, 1, 336, 4), (336, 56, 1, 1, 1, 4),
        (56, 336, 1, 1, 1, 4), (336, 336, 3, 1, 336, 4), (336, 56, 1, 1, 1, 4),
        (56, 336, 1, 1, 1, 4), (336, 336, 3, 1, 336, 4), (336, 112, 1, 1, 1, 4),
    ],
    "proxyless-w0.3": [
        (3, 16, 3, 2, 1, 64),
        (16, 16, 3, 1, 16, 64), (16, 8, 1, 1, 1, 64),
        (8, 24, 1, 1, 1, 64), (24, 24, 5, 2, 24, 32), (24, 16, 1, 1, 1, 32),
        (16, 48, 1, 1, 1, 32), (48, 48, 3, 1, 48, 32), (48, 16, 1, 1, 1, 32),
        (16, 48, 1, 1, 1, 32), (48, 48, 7, 2, 48, 16), (48, 16, 1, 1, 1, 16),
        (16, 48, 1, 1, 1, 16), (48, 48, 3, 1, 48, 16), (48, 16, 1, 1, 1, 16),
        (16, 48, 1, 1, 1, 16), (48, 48, 5, 1, 48, 16), (48, 16, 1, 1, 1, 16),
        (16, 48, 1, 1, 1, 16), (48, 48, 5, 1, 48, 16), (48, 16, 1, 1, 1, 16),
        (16, 96, 1, 1, 1, 16), (96, 96, 7, 2, 96, 8), (96, 24, 1, 1, 1, 8),
        (24, 72, 1, 1, 1, 8), (72, 72, 5, 1, 72, 8), (72, 24, 1, 1, 1, 8),
        (24, 72, 1, 1, 1, 8), (72, 72, 5, 1, 72, 8), (72, 24, 1, 1, 1, 8),
        (24, 72, 1, 1, 1, 8), (72, 72, 5, 1, 72, 8), (72, 24, 1, 1, 1, 8),
        (24, 144, 1, 1, 1, 8), (144, 144, 5, 1, 144, 8), (144, 32, 1, 1, 1, 8),
        (32, 96, 1, 1, 1, 8), (96, 96, 5, 1, 96, 8), (96, 32, 1, 1, 1, 8),
        (32, 96, 1, 1, 1, 8), (96, 96, 5, 1, 96, 8), (96, 32, 1, 1, 1, 8),
        (32, 96, 1, 1, 1, 8), (96, 96, 5, 1, 96, 8), (96, 32, 1, 1, 1, 8),
        (32, 192, 1, 1, 1, 8), (192, 192, 7, 2, 192, 4), (192, 64, 1, 1, 1, 4),
        (64, 384, 1, 1, 1, 4), (384, 384, 7, 1, 384, 4), (384, 64, 1, 1, 1, 4),
        (64, 192, 1, 1, 1, 4), (192, 192, 7, 1, 192, 4), (192, 64, 1, 1, 1, 4),
        (64, 192, 1, 1, 1, 4), (192, 192, 7, 1, 192, 4), (192, 64, 1, 1, 1, 4),
        (64, 384, 1, 1, 1, 4), (384, 384, 7, 1, 384, 4), (384, 96, 1, 1, 1, 4),
    ],
    "mcunet-5fps": [
        (3, 16, 3, 2, 1, 64),
        (16, 16, 3, 1, 16, 64), (16, 8, 1, 1, 1, 64),
        (8, 32, 1, 1, 1, 64), (32, 32, 3, 2, 32, 32), (32, 16, 1, 1, 1, 32),
        (16, 48, 1, 1, 1, 32), (48, 48, 3, 1, 48, 32), (48, 16, 1, 1, 1, 32),
        (16, 48, 1, 1, 1, 32), (48, 48, 7, 2, 48, 16), (48, 24, 1, 1, 1, 16),
        (24, 120, 1, 1, 1, 16), (120, 120, 3, 1, 120, 16), (120, 24, 1, 1, 1, 16),
        (24, 120, 1, 1, 1, 16), (120, 120, 3, 2, 120, 8), (120, 40, 1, 1, 1, 8),
        (40, 160, 1, 1, 1, 8), (160, 160, 7, 1, 160, 8), (160, 40, 1, 1, 1, 8),
        (40, 160, 1, 1, 1, 8), (160, 160, 5, 1, 160, 8), (160, 48, 1, 1, 1, 8),
        (48, 144, 1, 1, 1, 8), (144, 144, 3, 1, 144, 8), (144, 48, 1, 1, 1, 8),
        (48, 192, 1, 1, 1, 8), (192, 192, 3, 1, 192, 8), (192, 48, 1, 1, 1, 8),
        (48, 240, 1, 1, 1, 8), (240, 240, 7, 2, 240, 4), (240, 96, 1, 1, 1, 4),
        (96, 384, 1, 1, 1, 4), (384, 384, 5, 1, 384, 4), (384, 96, 1, 1, 1, 4),
        (96, 384, 1, 1, 1, 4), (384, 384, 5, 1, 384, 4), (384, 96, 1, 1, 1, 4),
        (96, 576, 1, 1, 1, 4), (576, 576, 3, 1, 576, 4), (576, 160, 1, 1, 1, 4),
    ],

}

# The blocks whose `residual` is not None (all identity adds: none has a residual conv)
RESIDUAL = {
    "mbv2-w0.35": [2, 4, 5, 7, 8, 9, 11, 12, 14, 15],
    "proxyless-w0.3": [2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18],
    "mcunet-5fps": [2, 4, 6, 8, 9, 11, 12],
}

# The convs whose int8 output is not clamped at zero (y_zero != -128): exactly every pointwise2, conv
# 2, 5, 8, ... (the pkl's 17, 20 and 14 of them); every other conv's output goes through ReLU6.
LINEAR = {"mbv2-w0.35": list(range(2, 51, 3)), "proxyless-w0.3": list(range(2, 60, 3)),
          "mcunet-5fps": list(range(2, 42, 3))}

# Every weight and bias in the pkl, whose classifier has 1000 classes (tests/test_zoo.py counts the
# 10-class zoo entries from these)
PARAMS_1000 = {"mbv2-w0.35": 357_448, "proxyless-w0.3": 423_232, "mcunet-5fps": 630_224}

# Multiply-accumulates of one 128x128 forward at 10 classes: the convs' (out_channel * out_shape^2 *
# kernel^2 * in_channel / groups, summed over PUBLISHED: 16,646,912, 18,619,904 and 22,453,504) plus the
# 10-class classifier. Computed from the pkl shapes, not quoted: the repository's READMEs give no MAC
# counts.
MACS = {"mbv2-w0.35": 16_646_912 + 112 * 10, "proxyless-w0.3": 18_619_904 + 96 * 10,
        "mcunet-5fps": 22_453_504 + 160 * 10}


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


@pytest.mark.parametrize("name", NETS)
def test_every_conv_has_its_published_shape(name):
    model = TinyTrainingNet(name)
    out_hw: dict[nn.Module, int] = {}
    for conv in _convs(model):
        conv.register_forward_hook(lambda m, _i, y: out_hw.__setitem__(m, y.shape[-1]))
    model(torch.zeros(1, 3, 128, 128))
    got = [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0], c.groups, out_hw[c]) for c in _convs(model)]
    assert got == PUBLISHED[name]
    for c in _convs(model):  # square kernels, "same" padding as their builder's (k - 1) // 2, a bias (BN folded)
        assert c.kernel_size[0] == c.kernel_size[1] and c.padding == ((c.kernel_size[0] - 1) // 2,) * 2
        assert c.bias is not None
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@pytest.mark.parametrize("name", NETS)
def test_relu6_follows_every_conv_but_pointwise2(name):
    model = TinyTrainingNet(name)
    convs = _convs(model)
    outputs: dict[int, int] = {}  # id of a conv's output tensor -> conv index
    for i, conv in enumerate(convs):
        conv.register_forward_hook(lambda _m, _i, y, i=i: outputs.__setitem__(id(y), i))
    clamped: list[int] = []
    for m in model.modules():
        if isinstance(m, nn.ReLU6):
            assert not m.inplace
            m.register_forward_hook(lambda _m, x, _y: clamped.append(outputs[id(x[0])]))
    model(torch.randn(1, 3, 128, 128))
    assert sorted(clamped) == [i for i in range(len(convs)) if i not in LINEAR[name]]


@pytest.mark.parametrize("name", NETS)
def test_residual_blocks_add_their_input(name):
    model = TinyTrainingNet(name)
    assert [i for i, b in enumerate(model.blocks) if b.residual] == RESIDUAL[name]
    torch.manual_seed(0)
    for i, block in enumerate(model.blocks):
        with torch.no_grad():  # a silenced pointwise2 leaves the residual path alone
            block.pointwise2.weight.zero_()
            block.pointwise2.bias.zero_()
        x = torch.randn(1, (block.pointwise1 or block.depthwise).in_channels, 8, 8)
        y = block(x)
        if i in RESIDUAL[name]:
            torch.testing.assert_close(y, x)
        else:
            assert not y.any()


@pytest.mark.parametrize("name", NETS)
def test_parameters_at_1000_classes(name):
    model = TinyTrainingNet(name, classes=1000)
    assert sum(p.numel() for p in model.parameters()) == PARAMS_1000[name]
    assert model.classifier.out_features == 1000 and isinstance(model.classifier, nn.Linear)


@pytest.mark.parametrize("name", NETS)
def test_macs_at_128(name):
    model, spec = ZOO[name].build(), ZOO[name]
    assert spec.input_shape == (3, 128, 128) and spec.classes == 10
    macs: list[int] = []

    def count(m: nn.Module, _x: tuple[torch.Tensor, ...], y: torch.Tensor) -> None:
        if isinstance(m, nn.Conv2d):
            macs.append(y.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1])
        elif isinstance(m, nn.Linear):
            macs.append(y.numel() * m.in_features)

    for m in model.modules():
        m.register_forward_hook(count)
    model(torch.zeros(1, *spec.input_shape))
    print(f"{name}: {sum(macs):,} MACs at 128x128, 10 classes")
    assert sum(macs) == MACS[name]
    assert f"{MACS[name] / 1e6:.1f}M MACs" in spec.about


@pytest.mark.parametrize("name", NETS)
def test_conv_names_follow_their_conv_index(name):
    model = TinyTrainingNet(name)
    names = conv_names(model)
    assert names == _conv_paths(name) and len(names) == len(PUBLISHED[name])
    assert names[0] == "first_conv" and names[1:3] == ["blocks.0.depthwise", "blocks.0.pointwise2"]
    assert names[3] == "blocks.1.pointwise1"
    assert [n for n, _ in model.named_children()] == ["first_conv", "first_act", "blocks", "classifier"]


# Convs a config trains the weights of (ratio > 0) that are not pointwise1: mcu_ir_gen.py's smaller
# mbv2 budgets also pick pointwise2 convs (41: blocks.13, 32: blocks.10) and, in "49kb", a depthwise one
# (49: blocks.16). Every headline config trains pointwise1 weights only.
NOT_POINTWISE1 = {("mbv2-w0.35", "49kb"): {41, 49}, ("mbv2-w0.35", "73kb"): {32, 41}}


@pytest.mark.parametrize(("name", "budget"), [(n, b) for n in NETS for b in SPARSE_UPDATES[n]])
def test_sparse_update_configs(name, budget):
    cfg = SPARSE_UPDATES[name][budget]
    model = TinyTrainingNet(name)
    convs, names = _convs(model), conv_names(model)
    n = len(convs)
    assert len(cfg.manual_weight_idx) == len(cfg.weight_update_ratio)
    assert list(cfg.manual_weight_idx) == sorted(cfg.manual_weight_idx)  # prepare_model_for_backward_config's
    # parsed_backward_config's checks: a conv whose weight trains has its bias trained too
    assert all(i >= n - cfg.n_bias_update for i in cfg.manual_weight_idx) and cfg.n_bias_update <= n
    trained = {i for i, r in zip(cfg.manual_weight_idx, cfg.weight_update_ratio) if r > 0}
    pw1 = {i for i in trained if names[i].endswith("pointwise1")}
    assert trained - pw1 == NOT_POINTWISE1.get((name, budget), set())
    for i in pw1:  # pointwise1: 1x1, groups 1, expanding (their _is_pw1)
        c = convs[i]
        assert c.kernel_size == (1, 1) and c.groups == 1 and c.out_channels > c.in_channels
    if HEADLINE[name] == budget:
        assert trained == pw1


def test_headline_train_strings():
    assert train_mode("mcunet-5fps", "99kb") == (
        "last:1+bias:23+layers:blocks.7.pointwise1,blocks.8.pointwise1,blocks.9.pointwise1,blocks.10.pointwise1,"
        "blocks.12.pointwise1@0.125,blocks.13.pointwise1@0.25")
    assert train_mode("mbv2-w0.35", "99kb") == (
        "last:1+bias:26+layers:blocks.9.pointwise1,blocks.10.pointwise1,blocks.11.pointwise1,blocks.12.pointwise1,"
        "blocks.13.pointwise1,blocks.14.pointwise1@0.125,blocks.15.pointwise1@0.5,blocks.16.pointwise1")
    assert train_mode("proxyless-w0.3", "98kb") == (
        "last:1+bias:26+layers:blocks.12.pointwise1,blocks.13.pointwise1@0.5,blocks.14.pointwise1,"
        "blocks.15.pointwise1,blocks.16.pointwise1@0.25,blocks.17.pointwise1@0.5,blocks.18.pointwise1,"
        "blocks.19.pointwise1")
    # a ratio of 0 trains the conv's bias only (bias:K holds it): no layers entry
    assert "blocks.7.pointwise2" not in train_mode("mcunet-5fps", "74kb")
    assert "blocks.13.depthwise" not in train_mode("mbv2-w0.35", "49kb")


@pytest.mark.parametrize("name", NETS)
def test_traces_with_one_conv_node_per_conv(name):
    model, g = traced(ModelChoice(name, batch=1, train="all"))
    convs = [n for n in g.nodes if n.kind == "forward" and n.op == "conv2d"]
    assert [n.module.replace("/", ".") for n in convs] == conv_names(model)  # the graph names modules a/b/c
    assert sum(n.op == "linear" for n in g.nodes if n.kind == "forward") == 1
    assert g.input_shape == [3, 128, 128] and g.classes == 10 and not g.frozen


@pytest.mark.parametrize(("name", "budget"), [(n, b) for n in NETS for b in (HEADLINE[n], "49kb")])
def test_a_scheme_trains_what_tiny_training_trains(name, budget):
    """A scheme's --train string trains the classifier, the last n_bias_update convs' biases, and the
    chosen convs' weights, each for its share: int(ratio x in_channels) input channels, or channels of a
    depthwise conv (partial_backward.py); every other parameter is frozen."""
    cfg = SPARSE_UPDATES[name][budget]
    mode = train_mode(name, budget)
    assert len(train_modes.parse(mode)) == 3
    model, g = traced(ModelChoice(name, batch=1, train=mode))
    convs = conv_names(model)
    modules = dict(model.named_modules())
    expect = {"classifier.weight", "classifier.bias"}
    expect |= {f"{c}.bias" for c in convs[len(convs) - cfg.n_bias_update:]}
    expect |= {f"{convs[i]}.weight" for i, r in zip(cfg.manual_weight_idx, cfg.weight_update_ratio) if r > 0}
    trained = {p for p, _ in g.params} - set(g.frozen)
    assert {p.replace("/", ".") for p in trained} == expect
    shares = {}
    for i, r in zip(cfg.manual_weight_idx, cfg.weight_update_ratio, strict=True):
        conv = modules[convs[i]]
        if 0 < r < 1:
            shares[f"{convs[i]}.weight"] = (0 if conv.groups > 1 else 1, int(conv.in_channels * r))
    assert g.partial_weights == shares and (budget != "49kb" or shares)
