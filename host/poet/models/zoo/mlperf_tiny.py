"""MLPerf Tiny's reference networks (Banbury et al., "MLPerf Tiny Benchmark", NeurIPS 2021 Datasets and
Benchmarks; the mlcommons/tiny repository's Keras models), written here from their published
architectures: what embedded-ML engineers deploy, and would fine-tune on the device.

Differences from the Keras originals, none of which changes a shape or a parameter count: PyTorch's
symmetric padding where Keras pads "same" unevenly (a stride-2 3x3 conv on an even map; DS-CNN's
10x4 stride-2 conv on 49x10, which Keras pads 4 above and 5 below, is padded 5 and 5 here: the same
25x5 output), and PyTorch's parameter initialisation. Keras counts a batch norm's running statistics among
its parameters; PyTorch keeps them as buffers, so each count here is the Keras total minus two per
batch-norm channel.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn_relu(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups), nn.BatchNorm2d(c_out), nn.ReLU()]


class _ResidualStack(nn.Module):
    """conv3x3 - BN - ReLU - conv3x3 - BN, plus the input (a strided 1x1 conv where the shape changes), ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c_out, 3, stride, 1), nn.BatchNorm2d(c_out)
        self.conv2, self.bn2 = nn.Conv2d(c_out, c_out, 3, 1, 1), nn.BatchNorm2d(c_out)
        self.shortcut = nn.Conv2d(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.shortcut(x))


class ResNet8(nn.Module):
    """Image classification (CIFAR-10, 32x32x3): conv3x3(16) - BN - ReLU, three residual stacks of 16, 32
    and 64 channels (the last two at stride 2 with 1x1 projections), 8x8 average pool, dense 10. Keras
    78,666 parameters; 78,186 here (240 batch-norm channels)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn_relu(3, 16, 3))
        self.stack1, self.stack2, self.stack3 = _ResidualStack(16, 16, 1), _ResidualStack(16, 32, 2), \
            _ResidualStack(32, 64, 2)
        self.pool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stack3(self.stack2(self.stack1(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


# MobileNetV1's depthwise-separable blocks: (output channels at width 1.0, stride)
_MOBILENET_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]


class MobileNetV1(nn.Module):
    """Visual wake words (person / no person, 96x96x3): MobileNetV1 at width 0.25, a 3x3 stride-2 conv
    then 13 depthwise-separable blocks (depthwise 3x3 - BN - ReLU - pointwise 1x1 - BN - ReLU), a 3x3
    average pool, dense 2. Every conv keeps Keras's default bias. Keras 221,794 parameters; 216,322
    here (2,736 batch-norm channels)."""

    def __init__(self, width: float = 0.25, classes: int = 2) -> None:
        super().__init__()
        c = int(32 * width)
        layers: list[nn.Module] = _conv_bn_relu(3, c, 3, 2)
        for out, stride in _MOBILENET_V1:
            o = int(out * width)
            layers += _conv_bn_relu(c, c, 3, stride, groups=c) + _conv_bn_relu(c, o, 1)
            c = o
        self.features = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d(3)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class AutoEncoder(nn.Module):
    """Anomaly detection (ToyADMOS machine sounds: 5 frames of 128 log-mel bins, 640 features): dense
    layers 640-128-128-128-128-8-128-128-128-128-640, each but the last followed by batch norm and
    ReLU, trained to reconstruct its input (mean squared error); a sound it reconstructs badly is an
    anomaly. The DCASE 2020 task 2 baseline MLPerf Tiny adopted: Keras 269,992 parameters; 267,928 here
    (1,032 batch-norm channels)."""

    def __init__(self, features: int = 640, hidden: int = 128, bottleneck: int = 8) -> None:
        super().__init__()
        sizes = [features, hidden, hidden, hidden, hidden, bottleneck, hidden, hidden, hidden, hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes, sizes[1:], strict=False):
            layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU()]
        layers.append(nn.Linear(hidden, features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DSCNN(nn.Module):
    """Keyword spotting (Speech Commands, 12 classes, 49 frames x 10 MFCC features, one channel):
    DS-CNN-S, a 10x4 stride-2 conv(64) - BN - ReLU - dropout 0.2, four depthwise-separable blocks
    (depthwise 3x3 - BN - ReLU - pointwise 1x1 - BN - ReLU, 64 channels, 25x5 maps), dropout 0.4, a
    24x5 average pool, dense 12. Keras 24,908 parameters; 23,756 here (576 batch-norm channels)."""

    def __init__(self, classes: int = 12, filters: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, filters, (10, 4), 2, (5, 1)), nn.BatchNorm2d(filters), nn.ReLU(),
                                   nn.Dropout(0.2)]
        for _ in range(4):
            layers += _conv_bn_relu(filters, filters, 3, groups=filters) + _conv_bn_relu(filters, filters, 1)
        layers.append(nn.Dropout(0.4))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d((24, 5))
        self.fc = nn.Linear(filters, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))
