"""MobileNetV2 (Sandler et al. 2018), CIFAR variant after kuangliu/pytorch-cifar, with a width multiplier.

CIFAR changes from the ImageNet network, as in that version: the stem conv has stride 1 and the
second stage (24 channels) stride 1, so a 32x32 input reaches the last stage at 4x4 instead of 1x1.
Also as there, every block has its 1x1 expansion conv (even with expansion 1), and a stride-1 block
whose channel count changes gets a 1x1 conv + BN projection shortcut. Width 1.0 has 2,296,922 parameters.

The width multiplier scales every channel count, rounded to a multiple of 8 as in the paper's
reference code (never more than 10% below the exact product), and the last 1x1 conv keeps 1280
channels for widths below 1 (the paper: "we apply the width multiplier to all layers except the
very last convolutional layer" for widths < 1).
"""

from __future__ import annotations

import torch
from torch import nn

# (expansion t, output channels c, blocks n, stride s) per stage, CIFAR strides
CONFIG: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),  # stride 2 in the paper; 1 for 32x32 inputs
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round to the nearest multiple of `divisor`, but not below 90% of v (the reference rounding)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new < 0.9 * v:
        new += divisor
    return new


class InvertedResidual(nn.Module):
    """expand 1x1 - depthwise 3x3 - project 1x1 (linear bottleneck: no ReLU after the projection)."""

    def __init__(self, in_planes: int, out_planes: int, expansion: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        planes = expansion * in_planes
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, groups=planes, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        # kuangliu's variant: a residual on every stride-1 block, projected where channels change
        self.shortcut: nn.Module = nn.Identity()
        if stride == 1 and in_planes != out_planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, out_planes, 1, bias=False),
                                          nn.BatchNorm2d(out_planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.stride == 1:  # a Python attribute, so fx traces it as a constant branch
            out = out + self.shortcut(x)
        return out


class MobileNetV2Cifar(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = 10) -> None:
        super().__init__()
        c = make_divisible(32 * width)
        self.conv1 = nn.Conv2d(3, c, 3, stride=1, padding=1, bias=False)  # stride 1 for CIFAR
        self.bn1 = nn.BatchNorm2d(c)
        self.relu1 = nn.ReLU()
        blocks: list[nn.Module] = []
        for t, out, n, s in CONFIG:
            out = make_divisible(out * width)
            for i in range(n):
                blocks.append(InvertedResidual(c, out, t, s if i == 0 else 1))
                c = out
        self.layers = nn.Sequential(*blocks)
        last = make_divisible(1280 * max(1.0, width))
        self.conv2 = nn.Conv2d(c, last, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(last)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)  # kuangliu's avg_pool2d(4) on the 4x4 map, shape-agnostic
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.relu2(self.bn2(self.conv2(self.layers(x))))
        return self.linear(self.flatten(self.pool(x)))


def mobilenetv2_cifar(width: float = 1.0, classes: int = 10) -> nn.Module:
    return MobileNetV2Cifar(width, classes)
