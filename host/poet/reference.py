"""The same training steps in plain PyTorch on the host: what the board's results are checked against."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn


def weights_of(model: nn.Module) -> list[np.ndarray]:
    """Trainable parameters in upload order (named_parameters order), as float32 arrays."""
    return [p.detach().cpu().numpy().astype(np.float32).copy() for p in model.parameters() if p.requires_grad]


def load_weights(model: nn.Module, weights: list[np.ndarray]) -> None:
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        for p, w in zip(params, weights, strict=True):
            p.copy_(torch.from_numpy(w.reshape(p.shape)))


def train_steps(model: nn.Module, batches: Iterable[tuple[np.ndarray, np.ndarray]], lr: float) -> list[float]:
    """Plain SGD with mean cross-entropy, one step per batch; returns the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())
