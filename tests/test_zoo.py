"""Every zoo model builds, runs forward and backward on its own input, and has its published size."""

import pytest
import torch
from poet.models.zoo import ZOO, ZooModel, get_model
from poet.models.zoo.bert import bert
from poet.models.zoo.mobilenetv2 import mobilenetv2_cifar
from poet.models.zoo.resnet import BasicBlock, resnet18_cifar
from torch import nn

# A training step on 110M parameters takes over a second on CPU: forward pass only (0.2 s).
FORWARD_ONLY = {"bert-base"}

# Parameter counts: each asserted against a published or hand-derived number.
PARAMS = {
    "mlp-digits": 4_522,
    "cnn-digits": 4_538,
    # LeNet-5, 10 classes: conv 1*6*25+6 = 156, conv 6*16*25+16 = 2,416, fc 400*120+120 = 48,120,
    # fc 120*84+84 = 10,164, fc 84*10+10 = 850.
    "lenet": 61_706,
    # the number kuangliu/pytorch-cifar and most CIFAR papers quote for ResNet-18
    "resnet18-cifar": 11_173_962,
    # 13 convs with bias 14,714,688 + 13 BNs (2 per channel) 8,448 + Linear(512, 10) 5,130 = 14,728,266
    "vgg16-cifar": 14_728_266,
    # kuangliu's MobileNetV2 (every block expands, projection shortcuts on stride-1 channel changes)
    "mobilenetv2-cifar": 2_296_922,
    "mobilenetv2-cifar-0.35": 416_698,
    # tokens 1000*128 + positions 32*128 + block (2 LN 512, 4 proj 66,048, FFN 131,712) + LN 256 + fc 1,290
    "transformer-block": 331_914,
    "bert-tiny": 608_394,
    # BERT-base, H=768, V=30522, L=12, 10 classes:
    #   embeddings (30522 + 512 + 2) * 768 + 2*768 (LayerNorm)             =  23,837,184
    #   12 layers * (12 H^2 + 13 H) = 12 * 7,087,872                        =  85,054,464
    #   pooler 768*768 + 768                                                =     590,592
    #   = 109,482,240: the exact count of Hugging Face's bert-base-uncased BertModel, the "110M" of the paper
    #   classifier 768*10 + 10                                              =       7,690
    "bert-base": 109_489_930,
    # MLPerf Tiny (models/zoo/mlperf_tiny.py): the Keras models' totals less their batch norms' running
    # statistics (two per channel, buffers in PyTorch). ResNet-8: Keras 78,666, 240 BN channels.
    "mlperf-kws": 23_756,  # Keras 24,908 - 2 x 576
    # torchvision's (models/zoo/vision.py) at 10 classes: its published 1000-class totals (docs of
    # torchvision.models: 11,689,512, 1,235,496, 1,366,792, 2,218,512, 2,542,856, 5,288,548) less the
    # classifier's difference (test_vision_counts_at_1000_classes checks those)
    "resnet18": 11_689_512 - 990 * 513,
    "squeezenet1.1": 1_235_496 - 990 * 513,
    "mnasnet-0.5": 2_218_512 - 990 * 1281,
    "mobilenetv3-small": 2_542_856 - 990 * 1025,
    "efficientnet-b0": 5_288_548 - 990 * 1281,
    "shufflenetv2-0.5": 1_366_792 - 990 * 1025,
    "mlperf-ic": 78_186,
    # MobileNetV1 0.25 at 96x96, 2 classes, convs with bias: Keras 221,794, 2,736 BN channels
    "mlperf-vww": 216_322,
    # the DCASE 2020 task 2 baseline autoencoder: Keras 269,992, 1,032 BN channels
    "mlperf-ad": 267_928,
    # MIT tiny-training's (models/zoo/tiny_training.py): every weight and bias of its published int8 graph
    # (algorithm/assets/mcu_models/<name>.pkl, mit-han-lab/tiny-training at 7bf8e05, a 1000-class
    # classifier: 357,448, 423,232 and 630,224) less the classifier's difference, as for torchvision's;
    # tests/test_tiny_training_nets.py checks the 1000-class totals
    "mbv2-w0.35": 357_448 - 990 * 113,
    "proxyless-w0.3": 423_232 - 990 * 97,
    "mcunet-5fps": 630_224 - 990 * 161,
}


def _input(spec: ZooModel, model: nn.Module, batch: int) -> torch.Tensor:
    if spec.input_dtype == "int64":
        vocab = next(m for m in model.modules() if isinstance(m, nn.Embedding)).num_embeddings
        return torch.randint(0, vocab, (batch, *spec.input_shape), dtype=torch.int64)
    assert spec.input_dtype == "float32"
    return torch.randn((batch, *spec.input_shape))


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_model_has_a_count():
    assert set(PARAMS) == set(ZOO)
    assert list(ZOO)[:2] == ["mlp-digits", "cnn-digits"]


@pytest.mark.parametrize("name", list(ZOO))
def test_builds_with_its_parameter_count(name):
    model, spec = get_model(name)
    assert spec.name == name
    assert _n_params(model) == PARAMS[name]


@pytest.mark.parametrize("name", list(ZOO))
def test_forward_and_backward_at_batch_2(name):
    model, spec = get_model(name)
    x = _input(spec, model, 2)
    with torch.set_grad_enabled(name not in FORWARD_ONLY):
        logits = model(x)
    if spec.loss != "cross_entropy":  # an autoencoder: its output reconstructs its input
        assert logits.shape == x.shape
        torch.nn.functional.mse_loss(logits, x).backward()
        assert all(p.grad is not None for p in model.parameters())
        return
    assert logits.shape == (2, spec.classes) and logits.dtype == torch.float32
    if name in FORWARD_ONLY:
        return
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1])).backward()
    # every parameter takes part in the step (no dead branch)
    assert all(p.grad is not None for p in model.parameters())


def test_input_dtypes():
    tokens = {"transformer-block", "bert-tiny", "bert-base"}
    for name, spec in ZOO.items():
        assert spec.input_dtype == ("int64" if name in tokens else "float32")
        if name in tokens:
            assert len(spec.input_shape) == 1
    # positional construction without the new field still works and defaults to float32
    assert ZooModel("m", nn.Identity, (4,), 2, "about").input_dtype == "float32"


def test_resnet_uses_three_projection_shortcuts():
    model = resnet18_cifar()
    one_by_one = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1)]
    assert len(one_by_one) == 3  # entering stages 2, 3 and 4
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    # and they run: a hook on each projection fires once per forward pass
    calls: list[tuple[int, ...]] = []
    for m in one_by_one:
        m.register_forward_hook(lambda _m, _i, out: calls.append(tuple(out.shape)))
    model(torch.randn(1, 3, 32, 32))
    assert calls == [(1, 128, 16, 16), (1, 256, 8, 8), (1, 512, 4, 4)]


@pytest.mark.parametrize("in_planes,planes,stride", [(16, 16, 1), (16, 32, 2)])
def test_resnet_block_adds_the_shortcut_before_the_final_relu(in_planes, planes, stride):
    torch.manual_seed(0)
    block = BasicBlock(in_planes, planes, stride).eval()
    # Silence the residual branch: the block must then output relu(shortcut(x)). Had the ReLU come
    # before the add, negative shortcut values would pass through; without the add, all would be 0.
    with torch.no_grad():
        block.bn2.weight.zero_()
        block.bn2.bias.zero_()
    x = torch.randn(2, in_planes, 8, 8)
    expected = torch.relu(block.shortcut(x))
    assert (expected > 0).any() and (block.shortcut(x) < 0).any()
    torch.testing.assert_close(block(x), expected)
    if stride == 1:
        torch.testing.assert_close(block(x), torch.relu(x))  # identity shortcut


def test_mobilenetv2_width_scales_channels():
    narrow = mobilenetv2_cifar(0.35)
    convs = [m for m in narrow.modules() if isinstance(m, nn.Conv2d)]
    assert convs[0].out_channels == 16  # 32 * 0.35 = 11.2, rounded up to a multiple of 8
    assert convs[-1].out_channels == 1280  # the last conv is not narrowed below 1280
    assert all(c.out_channels % 8 == 0 for c in convs)
    # CIFAR strides: only three stride-2 convs (stages 3, 4 and 6), so 32x32 ends at 4x4
    assert sum(c.stride == (2, 2) for c in convs) == 3


def test_attention_is_spelled_out():
    for name in ("transformer-block", "bert-tiny"):
        model, _ = get_model(name)
        assert not any(isinstance(m, nn.MultiheadAttention) for m in model.modules())
        gm = torch.fx.symbolic_trace(model)
        targets = {n.target for n in gm.graph.nodes}
        assert torch.softmax in targets and torch.matmul in targets


def test_bert_factory_scales():
    # BERT parameters per layer are 12 H^2 + 13 H: two more layers add exactly that twice
    h = 64
    assert _n_params(bert(3, h, 2, 16, 100, 5)) - _n_params(bert(1, h, 2, 16, 100, 5)) == 2 * (12 * h * h + 13 * h)
    with pytest.raises(ValueError, match="divisible"):
        bert(1, 30, 4, 16, 100, 5)


def test_bert_family_is_sized_on_the_command_line():
    model, spec = get_model("bert", layers=1, hidden=64)
    h, v = 64, 30522
    assert _n_params(model) == (v + 512 + 2) * h + 2 * h + (12 * h * h + 13 * h) + (h * h + h) + (h * 10 + 10)
    assert spec.input_dtype == "int64" and spec.input_shape == (128,)


@pytest.mark.parametrize(("build", "published"), [
    ("ResNet18", 11_689_512), ("SqueezeNet11", 1_235_496), ("ShuffleNetV2", 1_366_792), ("MNASNet", 2_218_512),
    ("MobileNetV3Small", 2_542_856), ("EfficientNetB0", 5_288_548)])
def test_vision_counts_at_1000_classes(build, published):
    """torchvision's published parameter counts (ImageNet, 1000 classes), and a few of its state_dict names,
    so its pretrained weights load into poet's definitions by name."""
    from poet.models.zoo import vision

    net = getattr(vision, build)(num_classes=1000)
    assert _n_params(net) == published
    keys = set(net.state_dict())
    expect = {"ResNet18": ["layer2.0.downsample.0.weight", "fc.weight"],
              "SqueezeNet11": ["features.3.expand3x3.weight", "classifier.1.weight"],
              "ShuffleNetV2": ["stage2.0.branch1.0.weight", "conv5.1.running_var"],
              "MNASNet": ["layers.8.0.layers.3.weight", "classifier.1.weight"],
              "MobileNetV3Small": ["features.1.block.1.fc2.weight", "classifier.3.weight"],
              "EfficientNetB0": ["features.2.1.block.2.fc1.weight", "classifier.1.weight"]}[build]
    assert set(expect) <= keys, sorted(keys)[:20]
