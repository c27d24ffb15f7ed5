"""The same training steps in plain PyTorch on the host: what the board's results are checked against."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from poet.graph.quantise import absmax_scale, quantise
from poet.graph.training_graph import TrainingGraph


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


def running_stat_norms(g: TrainingGraph) -> set[str]:
    """Module paths of the batch norms the graph runs on their running statistics (the user's eval()
    ones, and frozen ones when fine-tuning part of a model): train_steps' `eval_norms`."""
    return {n.module for n in g.nodes if n.op == "batchnorm_eval"}


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
                optimizer: dict[str, Any] | None = None, frozen: Collection[str] = (),
                graph: TrainingGraph | None = None) -> list[float]:
    """Mean cross-entropy, one optimizer step per batch, `frozen` parameters left alone (as the graph's
    optimizer and frozen list say); returns the losses. Given the `graph` the board runs, the model
    computes as it does (as_graph): frozen batch norms on running statistics, int8 layers in int8."""
    opt = torch_optimizer([p for n, p in model.named_parameters() if n not in frozen], lr, optimizer)
    losses = []
    with as_graph(model, graph):
        for x, y in batches:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


class _Int8Output(torch.autograd.Function):
    """The int8 layer's value with the fp32 layer's gradient, as the board's backward computes it."""

    @staticmethod
    def forward(ctx: Any, y_fp32: torch.Tensor, y_int8: torch.Tensor) -> torch.Tensor:
        return y_int8

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


def int8_forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """linear_i8 / conv2d_i8 as the firmware computes them (kernels/lowp.c): input and weight quantised
    by absmax, exact integer sums, one rounding for the product of the scales, one for the bias."""
    xn = x.detach().cpu().numpy()
    wn = module.weight.detach().cpu().numpy()
    xs, ws = absmax_scale(xn), absmax_scale(wn)
    xq = torch.from_numpy(quantise(xn, xs).astype(np.float64))
    wq = torch.from_numpy(quantise(wn, ws).astype(np.float64))
    if isinstance(module, nn.Conv2d):  # float64 sums of int8 products are exact at these sizes
        acc = nn.functional.conv2d(xq, wq, None, module.stride, module.padding, module.dilation, module.groups)
        shape = (1, -1, 1, 1)
    else:
        acc = nn.functional.linear(xq, wq)
        shape = (1, -1)
    y = acc.numpy().astype(np.float32) * np.float32(xs * ws)
    if module.bias is not None:
        y = y + module.bias.detach().cpu().numpy().astype(np.float32).reshape(shape)
    return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32))


@contextmanager
def as_graph(model: nn.Module, g: TrainingGraph | None) -> Iterator[None]:
    """The model computing as graph g runs on the board: its frozen batch norms on their running
    statistics (running_stat_norms) and its int8 layers in int8 (int8_forward); restored after."""
    if g is None:
        yield
        return
    norms = [model.get_submodule(path.replace("/", ".")) for path in running_stat_norms(g)]
    modes = [m.training for m in norms]
    hooks = []
    for n in g.nodes:
        if n.op in ("linear_i8", "conv2d_i8"):
            mod = model.get_submodule(n.module.replace("/", "."))
            if not isinstance(mod, nn.Linear | nn.Conv2d):
                raise ValueError(f"{n.module}: an int8 layer the reference can run must be an nn.Linear or nn.Conv2d")
            hooks.append(mod.register_forward_hook(
                lambda m, inp, out: _Int8Output.apply(out, int8_forward(m, inp[0]))))
    try:
        for m in norms:
            m.eval()
        yield
    finally:
        for m, mode in zip(norms, modes, strict=True):
            m.training = mode
        for h in hooks:
            h.remove()


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())
