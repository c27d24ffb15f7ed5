"""The model zoo: small models that train on the digits set (more come with the graph issue)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from poet.errors import UsageError


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    classes: int
    about: str


def _mlp() -> nn.Module:
    # Three hidden layers, so activations held across the forward pass (not just the
    # backward working set) set the keep-everything peak: the case recompute helps.
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, 32), relu1=nn.ReLU(), fc2=nn.Linear(32, 32), relu2=nn.ReLU(),
        fc3=nn.Linear(32, 32), relu3=nn.ReLU(), fc4=nn.Linear(32, 10)))


class CnnDigits(nn.Module):
    """conv3x3(8) - relu - maxpool2 - flatten - fc(32) - relu - fc(10) on 1x8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = torch.flatten(x, 1)
        return self.fc2(torch.relu(self.fc1(x)))


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("mlp-digits", _mlp, (64,), 10, "MLP 64-32-32-32-10 on flattened 8x8 digits"),
        ZooModel("cnn-digits", CnnDigits, (1, 8, 8), 10, "conv3x3x8-pool-fc32-fc10 on 8x8 digits"),
    )
}


def get_model(name: str, seed: int = 0) -> tuple[nn.Module, ZooModel]:
    """A freshly initialised zoo model; the same seed gives the same weights on every machine."""
    if name not in ZOO:
        raise UsageError(f"unknown model {name!r}; known: {', '.join(ZOO)}")
    spec = ZOO[name]
    torch.manual_seed(seed)
    return spec.build(), spec
