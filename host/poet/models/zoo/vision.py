"""The small ImageNet networks users bring from torchvision, written from their papers in plain torch.nn
(poet does not depend on torchvision): ResNet-18 with its ImageNet stem (He et al. 2016), SqueezeNet 1.1
(Iandola et al. 2016), ShuffleNetV2 x0.5 (Ma et al. 2018), MNASNet 0.5 (Tan et al. 2019), MobileNetV3-Small
(Howard et al. 2019) and EfficientNet-B0 (Tan and Le 2019).

Each has torchvision's module names, parameter shapes and forward pass, so a torchvision state_dict
(pretrained weights) loads with `--weights`, and poet traces the calls torchvision's code makes: in-place
activations, max pools with padding or ceil_mode, chunk and the 5-d channel shuffle, squeeze-and-excitation
scales broadcast over their maps, stochastic depth. tests/test_zoo.py checks the published sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn


def _divisible(v: float, by: int = 8) -> int:
    """A channel count rounded to a multiple of 8, never more than 10% below v (the MobileNets' rule)."""
    out = max(by, int(v + by / 2) // by * by)
    return out + by if out < 0.9 * v else out


class ConvBNAct(nn.Sequential):
    """conv (no bias) -> batch norm -> activation (in place), torchvision's Conv2dNormActivation."""

    def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                 act: Callable[..., nn.Module] | None = nn.ReLU, eps: float = 1e-5, momentum: float = 0.1) -> None:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout, eps=eps, momentum=momentum)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Squeeze (global average pool), excite (two 1x1 convs), scale the map channel by channel."""

    def __init__(self, channels: int, squeeze: int, act: Callable[..., nn.Module] = nn.ReLU,
                 gate: Callable[..., nn.Module] = nn.Sigmoid) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = act(), gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x))))) * x


def stochastic_depth(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Drop the residual branch of whole samples with probability p, scaling the kept ones by 1 / (1 - p),
    written as torchvision.ops.stochastic_depth (mode "row") writes it, so poet traces the same calls."""
    if not training or p == 0.0:
        return x
    keep = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device).bernoulli_(keep)
    if keep > 0.0:
        noise.div_(keep)
    return x * noise


class StochasticDepth(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return stochastic_depth(x, self.p, self.training)


# ---------------------------------------------------------------- ResNet-18 (ImageNet stem)

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class ResNet18(nn.Module):
    """The ImageNet ResNet-18: a 7x7/2 stem and a 3x3/2 max pool with padding 1 before four stages."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.relu, self.maxpool = nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        cin = 64
        for i, cout in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(512, num_classes)
        for m in self.modules():  # He initialisation, as torchvision
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # type: ignore[operator]
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------- SqueezeNet 1.1

class Fire(nn.Module):
    """Squeeze to s channels with 1x1 convs, expand with 1x1 and 3x3 convs side by side, concatenated."""

    def __init__(self, cin: int, s: int, e1: int, e3: int) -> None:
        super().__init__()
        self.squeeze, self.squeeze_activation = nn.Conv2d(cin, s, 1), nn.ReLU(inplace=True)
        self.expand1x1, self.expand1x1_activation = nn.Conv2d(s, e1, 1), nn.ReLU(inplace=True)
        self.expand3x3, self.expand3x3_activation = nn.Conv2d(s, e3, 3, padding=1), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet11(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            pool(), Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
        final = nn.Conv2d(512, num_classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(0.5), final, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# ---------------------------------------------------------------- ShuffleNetV2 x0.5

def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.size()
    x = torch.transpose(x.view(b, groups, c // groups, h, w), 1, 2).contiguous()
    return x.view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """Stride 1: half the channels pass, the other half go through 1x1 - depthwise 3x3 - 1x1; stride 2:
    both halves are whole-input branches. Then the halves are interleaved (channel shuffle)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride, half = stride, cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        bin_ = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            nn.Conv2d(bin_, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, stages: tuple[int, ...] = (4, 8, 4), channels: tuple[int, ...] = (24, 48, 96, 192, 1024),
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for i, (repeats, cout) in enumerate(zip(stages, channels[1:4], strict=True)):
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            setattr(self, f"stage{i + 2}", nn.Sequential(*units))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))  # type: ignore[operator]
        return self.fc(x.mean([2, 3]))


# ---------------------------------------------------------------- MNASNet 0.5

_BN_MOMENTUM = 1 - 0.9997  # MNASNet's TensorFlow batch norm decay


class MnasBlock(nn.Module):
    """An inverted residual: 1x1 expand, depthwise k x k, 1x1 project; the input added when shapes allow."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.apply_residual = cin == cout and stride == 1
        m = _BN_MOMENTUM
        self.layers = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=m), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid, momentum=m),
            nn.ReLU(inplace=True), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout, momentum=m))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x) + x if self.apply_residual else self.layers(x)


class MNASNet(nn.Module):
    def __init__(self, alpha: float = 0.5, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        m = _BN_MOMENTUM
        depths = [_divisible(c * alpha) for c in (32, 16, 24, 40, 80, 96, 192, 320)]
        layers: list[nn.Module] = [
            nn.Conv2d(3, depths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(depths[0], momentum=m), nn.ReLU(inplace=True),
            nn.Conv2d(depths[0], depths[0], 3, 1, 1, groups=depths[0], bias=False),
            nn.BatchNorm2d(depths[0], momentum=m), nn.ReLU(inplace=True),
            nn.Conv2d(depths[0], depths[1], 1, bias=False), nn.BatchNorm2d(depths[1], momentum=m)]
        # (kernel, stride, expansion, repeats) of the six stacks after the stem
        for (k, s, e, r), cin, cout in zip(((3, 2, 3, 3), (5, 2, 3, 3), (5, 2, 6, 3), (3, 1, 6, 2), (5, 2, 6, 4),
                                            (3, 1, 6, 1)), depths[1:7], depths[2:8], strict=True):
            layers.append(nn.Sequential(MnasBlock(cin, cout, k, s, e),
                                        *(MnasBlock(cout, cout, k, 1, e) for _ in range(r - 1))))
        layers += [nn.Conv2d(depths[7], 1280, 1, bias=False), nn.BatchNorm2d(1280, momentum=m), nn.ReLU(inplace=True)]
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))


# ---------------------------------------------------------------- MobileNetV3-Small

class V3Block(nn.Module):
    """MobileNetV3's inverted residual: expand (unless the width stays), depthwise, squeeze-and-excitation
    (hardsigmoid gate), project; ReLU or hardswish."""

    def __init__(self, cin: int, k: int, mid: int, cout: int, se: bool, hs: bool, stride: int) -> None:
        super().__init__()
        bn = {"eps": 0.001, "momentum": 0.01}
        act = nn.Hardswish if hs else nn.ReLU
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if mid != cin:
            layers.append(ConvBNAct(cin, mid, 1, act=act, **bn))
        layers.append(ConvBNAct(mid, mid, k, stride, groups=mid, act=act, **bn))
        if se:
            layers.append(SqueezeExcitation(mid, _divisible(mid // 4), gate=nn.Hardsigmoid))
        layers.append(ConvBNAct(mid, cout, 1, act=None, **bn))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.use_res_connect:
            out += x
        return out


class MobileNetV3Small(nn.Module):
    # (in, kernel, expanded, out, squeeze-and-excitation, hardswish, stride)
    BLOCKS = ((16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2), (24, 3, 88, 24, False, False, 1),
              (24, 5, 96, 40, True, True, 2), (40, 5, 240, 40, True, True, 1), (40, 5, 240, 40, True, True, 1),
              (40, 5, 120, 48, True, True, 1), (48, 5, 144, 48, True, True, 1), (48, 5, 288, 96, True, True, 2),
              (96, 5, 576, 96, True, True, 1), (96, 5, 576, 96, True, True, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        bn = {"eps": 0.001, "momentum": 0.01}
        self.features = nn.Sequential(ConvBNAct(3, 16, 3, 2, act=nn.Hardswish, **bn),
                                      *(V3Block(*b) for b in self.BLOCKS),
                                      ConvBNAct(96, 576, 1, act=nn.Hardswish, **bn))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True),
                                        nn.Dropout(dropout, inplace=True), nn.Linear(1024, num_classes))
        _init_mobile(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _init_mobile(net: nn.Module) -> None:
    """The MobileNets' and EfficientNet's initialisation, as torchvision's."""
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            if isinstance(net, EfficientNetB0):
                r = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -r, r)
            else:
                nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


# ---------------------------------------------------------------- EfficientNet-B0

class MBConv(nn.Module):
    """EfficientNet's inverted residual with SiLU, squeeze-and-excitation to a quarter of the input width,
    and stochastic depth on the residual branch."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int, drop: float) -> None:
        super().__init__()
        mid = _divisible(cin * expand)
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if mid != cin:
            layers.append(ConvBNAct(cin, mid, 1, act=nn.SiLU))
        layers += [ConvBNAct(mid, mid, k, stride, groups=mid, act=nn.SiLU),
                   SqueezeExcitation(mid, max(1, cin // 4), act=partial(nn.SiLU, inplace=True)),
                   ConvBNAct(mid, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.use_res_connect:
            out = self.stochastic_depth(out)
            out += x
        return out


class EfficientNetB0(nn.Module):
    # (expansion, kernel, stride, in, out, repeats) of the seven stages
    STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
              (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2, stochastic_depth: float = 0.2) -> None:
        super().__init__()
        total, done = sum(s[-1] for s in self.STAGES), 0
        layers: list[nn.Module] = [ConvBNAct(3, 32, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, r in self.STAGES:
            stage = []
            for j in range(r):  # the drop rate grows linearly with the block's depth
                stage.append(MBConv(cin if j == 0 else cout, cout, k, s if j == 0 else 1, e,
                                    stochastic_depth * done / total))
                done += 1
            layers.append(nn.Sequential(*stage))
        layers.append(ConvBNAct(320, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(1280, num_classes))
        _init_mobile(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))
