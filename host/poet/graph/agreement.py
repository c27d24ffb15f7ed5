"""Whether the board's training steps agree with PyTorch's: one rule, the same on every CPU.

The board and PyTorch both compute in float32, each summing in its own order, and PyTorch's order
depends on the CPU it runs on (its kernels are chosen by the instruction set and the thread count).
So no fixed bound on board-minus-PyTorch holds everywhere: an ill-conditioned value (a batch norm's
bias gradient that cancels to a small fraction of its terms) differs by 1e-5 on one CPU and 6e-5 on
another. What holds everywhere is the question this rule asks: is the board as close to exact
arithmetic as float32 PyTorch is? The same steps run twice in PyTorch, in float32 and in float64
(the "exact" values: float64's rounding is 2^29 times smaller), and for every tensor, and for the
sequence of losses,

    ||board - exact|| <= FACTOR * max(||fp32 - exact||, fp32_model * ||exact||, UNIT * ||exact||)

- ||fp32 - exact||: PyTorch's own float32 error on this tensor: how ill-conditioned its computation
  is, measured rather than guessed.
- fp32_model * ||exact||: PyTorch's float32 error over the whole model (every tensor as one vector,
  relative), scaled to this tensor. Two float32 errors of one small tensor are two draws of a few
  numbers each (a bias of four values), and a ratio of two such draws is unbounded: PyTorch's may
  cancel to nothing by luck. Over the whole model the error is a norm over thousands of values and
  does not fluctuate so.
- UNIT * ||exact||: float32's unit roundoff, the error of storing the exact value at all.

FACTOR allows the board's rounding to be that many times PyTorch's: two float32 evaluations of one
expression in different orders have errors of one distribution, not one size. A wrong kernel (a
missed term, a wrong scale, an off-by-one window) is wrong by the size of the gradient it computes,
orders of magnitude past this bound (tests/test_agreement.py shows both sides).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from poet.graph.reference import state_tensors, train_steps

UNIT = 2.0 ** -24  # float32's unit roundoff
# How many times PyTorch's float32 error the board's may be. Two float32 evaluations of one step in
# different summation orders have errors of one distribution, not one size: PyTorch against itself in
# a fourth order (one thread, each batch rotated) uses at most 13% of the bound on the zoo's networks
# (tests/test_agreement.py); the board at most 44% over the suite (MLPerf Tiny's autoencoder, a bias
# feeding a batch norm, where the board's plain loops sum less accurately than PyTorch's blocked
# kernels). A wrong kernel is far past it: a learning rate 1% off is 1,000 to 11,000 times the bound,
# and the firmware's Adam, whose float32 bias correction cancelled (kernels/optim.c), 2.4 times.
FACTOR = 8.0

Batch = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Reference:
    """The same steps in PyTorch, in float32 (what the board computes) and float64 (exact, for the rule):
    the losses of each step, and the state tensors (parameters, then running statistics) after them."""

    losses: list[float]
    weights: list[np.ndarray]  # float32
    exact_losses: list[float]
    exact_weights: list[np.ndarray]  # float64
    other_orders: list[tuple[list[float], list[np.ndarray]]] = field(default_factory=list)  # ORDERS[1:]'s

    def agree(self, weights: Sequence[np.ndarray], losses: Sequence[float] | None = None,
              names: Sequence[str] | None = None, only: Iterable[int] | None = None) -> Agreement:
        """The board's state tensors (and losses) against this reference under the rule above;
        `only`: the indices of the tensors to judge (the trained ones, say)."""
        idx = list(range(len(self.weights))) if only is None else list(only)
        names = list(names) if names is not None else [f"tensor {i}" for i in range(len(self.weights))]
        if len(weights) != len(self.weights):
            raise ValueError(f"{len(weights)} tensors to compare, the reference has {len(self.weights)}")
        runs = [(self.losses, self.weights), *self.other_orders]
        exact = [self.exact_weights[i].ravel() for i in idx]
        fp32 = [[w[i].astype(np.float64).ravel() for i in idx] for _, w in runs]
        board = [np.asarray(weights[i], np.float64).ravel() for i in idx]
        whole = np.concatenate(exact) if exact else np.zeros(0)
        model_rel = max(_norm(np.concatenate(f) - whole) for f in fp32) / max(_norm(whole), 1e-300) if exact else 0.0
        rows = [_judge(names[i], board[j], [f[j] for f in fp32], exact[j], model_rel) for j, i in enumerate(idx)]
        if losses is not None:
            if len(losses) != len(self.losses):
                raise ValueError(f"{len(losses)} losses to compare, the reference has {len(self.losses)}")
            rows.append(_judge("losses", np.asarray(losses, np.float64), [np.asarray(ls, np.float64) for ls, _ in runs],
                               np.asarray(self.exact_losses, np.float64), model_rel))
        return Agreement(rows, model_rel)


@dataclass(frozen=True)
class Row:
    """One tensor's (or the losses') errors against exact arithmetic, in its own units."""

    name: str
    board: float  # ||board - exact||
    fp32: float  # ||fp32 PyTorch - exact||
    allowed: float  # FACTOR * the larger of the rule's three terms
    size: float  # ||exact||

    @property
    def ok(self) -> bool:
        return self.board <= self.allowed

    @property
    def ratio(self) -> float:
        """How much of the bound the board uses (1: all of it)."""
        return self.board / self.allowed if self.allowed > 0 else (0.0 if self.board == 0 else math.inf)


@dataclass(frozen=True)
class Agreement:
    rows: list[Row]
    fp32_model: float = 0.0  # PyTorch float32's relative error over the whole model
    failures: list[Row] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "failures", [r for r in self.rows if not r.ok])

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def worst(self) -> Row:
        return max(self.rows, key=lambda r: r.ratio)

    def summary(self) -> str:
        """One line: the verdict and the tensor closest to (or furthest past) its bound."""
        w = self.worst
        verdict = ("as close to exact arithmetic as PyTorch's float32" if self.ok
                   else "NOT as close to exact arithmetic as PyTorch's float32")
        return (f"{verdict} (closest to its bound, {w.ratio:.0%} of it: {w.name}, board {_rel(w.board, w.size)} from "
                f"float64 PyTorch, float32 PyTorch {_rel(w.fp32, w.size)})")

    def report(self) -> str:
        """Every tensor past its bound, one line each (the assertion message of a test)."""
        lines = [f"{r.name}: board {_rel(r.board, r.size)} from float64 PyTorch, float32 PyTorch "
                 f"{_rel(r.fp32, r.size)}, allowed {_rel(r.allowed, r.size)}" for r in self.failures or [self.worst]]
        return "\n".join([self.summary(), *lines])


def reference(model: nn.Module, batches: Iterable[Batch], lr: float, **train: Any) -> Reference:
    """train_steps(model, batches, lr, **train) in float32 (on `model` itself, as train_steps does), and
    on copies of it made first: in float64, and in float32 in the other summation orders of ORDERS."""
    batches = list(batches)
    exact_model = copy.deepcopy(model).double()
    exact_losses = train_steps(exact_model, [(_wide(x), y) for x, y in batches], lr, **train)
    others = []
    for order in ORDERS[1:]:
        m = copy.deepcopy(model)
        others.append((order(m, batches, lr, train), _state(m, np.float32)))
    losses = train_steps(model, batches, lr, **train)
    return Reference(losses, _state(model, np.float32), exact_losses, _state(exact_model, np.float64), others)


def _as_given(model: nn.Module, batches: list[Batch], lr: float, train: dict[str, Any]) -> list[float]:
    return train_steps(model, batches, lr, **train)


def _reversed(model: nn.Module, batches: list[Batch], lr: float, train: dict[str, Any]) -> list[float]:
    """Each batch's samples in reverse: every sum over the batch (a batch norm's statistics, a weight's
    gradient, the mean loss) adds in another order; the mean loss is the same value. Not where dropout
    drops: its masks are the board's by position in the batch, so reversed samples get other masks."""
    if _drops(model, train):
        return train_steps(model, batches, lr, **train)
    return train_steps(model, [(x[::-1].copy(), y[::-1].copy()) for x, y in batches], lr, **train)


def _drops(model: nn.Module, train: dict[str, Any]) -> bool:
    """The steps apply dropout: the graph's dropout nodes, or without a graph the model's dropout modules."""
    graph = train.get("graph")
    if graph is not None:
        return any(n.op == "dropout" for n in graph.nodes)
    # torchvision's StochasticDepth by name: torchvision is no dependency of poet's
    return any((isinstance(m, nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth")
               and getattr(m, "p", 0) > 0 for m in model.modules())


def _one_thread_channels_last(model: nn.Module, batches: list[Batch], lr: float, train: dict[str, Any]) -> list[float]:
    """Reversed, on one thread, with convolutions in channels-last layout and without oneDNN: other
    kernels, blocked and vectorised differently, for every convolution and its gradients."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():  # torch 2.13 warns of Intel GPUs' TF32 whenever oneDNN is switched
            warnings.filterwarnings("ignore", message="TF32 acceleration")
            with torch.backends.mkldnn.flags(enabled=False):
                return _reversed(model.to(memory_format=torch.channels_last), batches, lr, train)
    finally:
        torch.set_num_threads(threads)


# The float32 runs whose errors estimate PyTorch's: a tensor's float32 error is one draw of the
# rounding of one summation order, and a draw of a few values (a small bias) can cancel to nothing
# by luck; the largest of three draws rarely does. The first is the run the reference reports.
ORDERS = (_as_given, _reversed, _one_thread_channels_last)


def _state(model: nn.Module, dtype: type) -> list[np.ndarray]:
    return [t.detach().cpu().numpy().astype(dtype) for _, t in state_tensors(model)]


def _wide(x: np.ndarray) -> np.ndarray:
    """A float32 batch as float64, exactly; token ids as they are."""
    return x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x


def _norm(v: np.ndarray) -> float:
    return float(np.linalg.norm(v))


def _judge(name: str, board: np.ndarray, fp32: list[np.ndarray], exact: np.ndarray, model_rel: float) -> Row:
    size = _norm(exact)
    fp32_err = max(_norm(f - exact) for f in fp32)
    allowed = FACTOR * max(fp32_err, model_rel * size, UNIT * size)
    return Row(name, _norm(board - exact), fp32_err, allowed, size)


def _rel(err: float, size: float) -> str:
    """An error relative to the value's size, or absolute where the value is about nothing (a running
    mean of a zero-mean signal)."""
    return f"{err / size:.2e}" if size > 0 and err < size else f"{err:.2e} (absolute)"
