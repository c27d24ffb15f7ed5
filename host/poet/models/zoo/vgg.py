"""VGG-16 (Simonyan & Zisserman 2015, configuration D) with BatchNorm, for 32x32 CIFAR inputs.

As in kuangliu/pytorch-cifar: five 2x2 pools take 32x32 to 1x1, so the 4096-wide ImageNet
classifier becomes one Linear(512, classes). Convs keep their bias (as that version and
torchvision's vgg16_bn do). 14,728,266 parameters for 10 classes.
"""

from __future__ import annotations

from torch import nn

# channels per conv; "M" is a 2x2 max pool
CONFIG_D: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                   512, 512, 512, "M", 512, 512, 512, "M")


def vgg16_cifar(classes: int = 10) -> nn.Module:
    layers: list[nn.Module] = []
    c = 3
    for v in CONFIG_D:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            assert isinstance(v, int)
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU()]
            c = v
    layers += [nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)
