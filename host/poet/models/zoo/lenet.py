"""LeNet-5 (LeCun et al. 1998) for 1x32x32 inputs, with ReLU and max pooling as in most modern re-creations."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn


def lenet5(classes: int = 10) -> nn.Module:
    """conv5(6)-pool-conv5(16)-pool-fc120-fc84-fc(classes): 61,706 parameters for 10 classes.

    A flat Sequential of modules (no functional calls) so every op has a module path to name.
    """
    return nn.Sequential(OrderedDict(
        conv1=nn.Conv2d(1, 6, 5), relu1=nn.ReLU(), pool1=nn.MaxPool2d(2),  # 32 -> 28 -> 14
        conv2=nn.Conv2d(6, 16, 5), relu2=nn.ReLU(), pool2=nn.MaxPool2d(2),  # 14 -> 10 -> 5
        flatten=nn.Flatten(),
        fc1=nn.Linear(16 * 5 * 5, 120), relu3=nn.ReLU(),
        fc2=nn.Linear(120, 84), relu4=nn.ReLU(),
        fc3=nn.Linear(84, classes)))
