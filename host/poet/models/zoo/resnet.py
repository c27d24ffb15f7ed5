"""ResNet-18 for CIFAR (He et al. 2016), as in the widely used kuangliu/pytorch-cifar version.

Differences from the ImageNet ResNet-18: a 3x3 stride-1 stem and no max pool, because a 32x32 input
downsampled 4x at the stem would leave a 1x1 map before the last stage. 11,173,962 parameters.
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 convs; the shortcut is added before the final ReLU, as in the paper (Fig. 2)."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        # convs followed by BN carry no bias: BN's shift makes it redundant (and the count assumes it)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        # Projection shortcut (option B) only where the shape changes; identity elsewhere.
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (2, 2, 2, 2), classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        layers: list[nn.Module] = []
        in_planes = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
            stage: list[nn.Module] = []
            for j in range(n):
                # the first block of every stage but the first halves the map
                stage.append(BasicBlock(in_planes, planes, stride=2 if i > 0 and j == 0 else 1))
                in_planes = planes
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)  # global average pool: 4x4 -> 1x1 on 32x32 input
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.pool(x)))


def resnet18_cifar(classes: int = 10) -> nn.Module:
    return ResNetCifar((2, 2, 2, 2), classes)
