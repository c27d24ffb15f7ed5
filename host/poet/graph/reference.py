"""The same training steps in plain PyTorch on the host: what the board's results are checked against."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
import torch
from torch import nn


def state_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """What the board holds of a model, in upload order: every parameter (named_parameters order),
    then the running mean and variance of every batch norm that tracks them."""
    stats = []
    for prefix, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.track_running_stats \
                and mod.running_mean is not None and mod.running_var is not None:
            dot = f"{prefix}." if prefix else ""
            stats += [(f"{dot}running_mean", mod.running_mean), (f"{dot}running_var", mod.running_var)]
    return [*model.named_parameters(), *stats]


def weights_of(model: nn.Module) -> list[np.ndarray]:
    """The weights blob's tensors (state_tensors) as float32 arrays."""
    return [t.detach().cpu().numpy().astype(np.float32).copy() for _, t in state_tensors(model)]


def load_weights(model: nn.Module, weights: list[np.ndarray]) -> None:
    params = [t for _, t in state_tensors(model)]
    with torch.no_grad():
        for p, w in zip(params, weights, strict=True):
            p.copy_(torch.from_numpy(w.reshape(p.shape)))


def torch_optimizer(params: list[nn.Parameter], lr: float, optimizer: dict[str, Any] | None
                    ) -> torch.optim.Optimizer:
    """The torch.optim twin of a graph's optimizer settings (TrainingGraph.optimizer)."""
    opt = optimizer or {"name": "sgd"}
    if opt["name"] == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=opt["momentum"])
    if opt["name"] == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    return torch.optim.SGD(params, lr=lr)


def train_steps(model: nn.Module, batches: Iterable[tuple[np.ndarray, np.ndarray]], lr: float,
                optimizer: dict[str, Any] | None = None, frozen: Collection[str] = ()) -> list[float]:
    """Mean cross-entropy, one optimizer step per batch, `frozen` parameters left alone (as the
    graph's optimizer and frozen list say); returns the losses."""
    opt = torch_optimizer([p for n, p in model.named_parameters() if n not in frozen], lr, optimizer)
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
