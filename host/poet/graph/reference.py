"""The same training steps in plain PyTorch on the host: what the board's results are checked against."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from poet.graph import composite, dropout
from poet.graph.quantise import absmax_scale, quantise
from poet.graph.training_graph import W8_READERS, TrainingGraph

# the regression losses, of the output against the input (mean reduction): TrainingGraph.loss
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"mse": nn.functional.mse_loss,
                                                                            "l1": nn.functional.l1_loss}


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


Call = tuple[str, int]  # the k-th call of a torch function in a model's forward: ("conv2d", 3)


class Fed(TorchFunctionMode):
    """A model's forward with the results of some of its torch calls given instead of computed: the
    board's values of a frozen prefix it runs differently (static int8), fed where the trained part
    reads them. A call is named by its function and how many calls of that function the model's code
    made before it (as poet.graph.instrument sees them), which names the same call in train and eval
    mode (eval skips only the batch norms' counter updates); its shape is checked, so a model whose
    calls differ from its trace's is refused, not misfed."""

    def __init__(self, expect: dict[Call, list[int]], values: Callable[[np.ndarray], dict[Call, np.ndarray]]) -> None:
        super().__init__()
        self.expect = expect  # call -> the shape of one sample's result
        self.values = values  # a batch -> call -> the result to give
        self._given: dict[Call, np.ndarray] = {}
        self._seen: dict[str, int] = {}

    def batch(self, x: np.ndarray) -> None:
        """The next forward's input: computes what it is fed."""
        self._given = self.values(x)
        self._seen = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if torch._C._current_autograd_node() is not None:
            return func(*args, **(kwargs or {}))
        done, out = composite.run(self, func, args, kwargs or {})  # its parts are calls, as the trace's are
        if done:
            return out
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", str(func))
        k = self._seen.get(name, 0)
        self._seen[name] = k + 1
        shape = self.expect.get((name, k))
        if shape is None:
            return out
        if not isinstance(out, torch.Tensor) or list(out.shape[1:]) != shape:
            got = list(out.shape[1:]) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"{name} call {k} of the model gives {got}, its trace's gave {shape}: the model "
                             "does not make the calls it was traced with")
        # the board's float32 values, in the model's dtype (a float64 reference computes on from them)
        return torch.from_numpy(np.ascontiguousarray(self._given[(name, k)], dtype=np.float32)).to(out.dtype)


class PoetDropout(TorchFunctionMode):
    """Dropout with the board's masks (graph/dropout.py): the k-th dropout call of a forward has salt
    k, as the tracer numbers them, and `step` is the optimizer step it belongs to. Eval-mode and p = 0
    calls count too (so do the tracer's) and stay identities. A `bernoulli_(q)` mask (stochastic depth)
    counts as a dropout call and is filled with the board's draws."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 1
        self._calls = 0

    def begin(self, step: int) -> None:
        """The next forward is the one of optimizer step `step` (1: the first after weights are loaded)."""
        self.step, self._calls = step, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if torch._C._current_autograd_node() is None:
            done, out = composite.run(self, func, args, kwargs)  # the attention's dropout is the board's too
            if done:
                return out
        kept = dropout.drawn_share(name, args, kwargs)
        if (name != "dropout" and kept is None) or torch._C._current_autograd_node() is not None:
            return func(*args, **kwargs)
        salt = self._calls
        self._calls += 1
        if kept is not None:  # a stochastic depth mask: draw j is the mask's element j (graph/dropout.py)
            t = args[0]
            with torch.no_grad():
                t.copy_(torch.from_numpy(dropout.keep(t.numel(), salt, self.step, 1.0 - kept).reshape(t.shape)))
            return t
        x = args[0]
        p = float(args[1] if len(args) > 1 else kwargs.get("p", 0.5))
        training = bool(args[2] if len(args) > 2 else kwargs.get("training", True))
        if not training or p == 0.0:
            return func(*args, **kwargs)
        keep = torch.from_numpy(dropout.keep(x.numel(), salt, self.step, p).reshape(x.shape))
        return torch.where(keep, x * float(dropout.scale(p)), torch.zeros((), dtype=x.dtype))


def forward(model: nn.Module, x: np.ndarray, fed: Fed | None = None) -> torch.Tensor:
    """model(x), with the calls `fed` gives fed."""
    if fed is None:
        return model(torch.from_numpy(x))
    fed.batch(x)
    with fed:
        return model(torch.from_numpy(x))


def train_steps(model: nn.Module, batches: Iterable[tuple[np.ndarray, np.ndarray]], lr: float,
                optimizer: dict[str, Any] | None = None, frozen: Collection[str] = (),
                graph: TrainingGraph | None = None, fed: Fed | None = None, first_step: int = 1) -> list[float]:
    """The graph's mean loss (cross-entropy without a graph), one optimizer step per batch, `frozen`
    parameters left alone (as the graph's optimizer and frozen list say); returns the losses. Given
    the `graph` the board runs, the model computes as it does (as_graph): frozen batch norms on
    running statistics, int8 layers in int8, and a static-int8 prefix's outputs as `fed` gives them
    (the traced `graph` it was rewritten from). Dropout drops what the board's does in the steps
    first_step, first_step + 1, ... (counted from the last upload of weights)."""
    opt = torch_optimizer([p for n, p in model.named_parameters() if n not in frozen], lr, optimizer)
    shares = graph.partial_weights if graph is not None else {}
    partial = [(p, *shares[n]) for n, p in model.named_parameters() if n in shares]
    losses = []
    kind = graph.loss if graph is not None else "cross_entropy"
    drop = PoetDropout()
    with as_graph(model, graph), drop:
        for step, (x, y) in enumerate(batches, first_step):
            drop.begin(step)
            opt.zero_grad()
            out = forward(model, x, fed)
            loss = (nn.functional.cross_entropy(out, torch.from_numpy(y).long()) if kind == "cross_entropy"
                    else LOSSES[kind](out, torch.from_numpy(x).reshape(out.shape)))
            loss.backward()
            for p, axis, ck in partial:  # the channels past a share's get no gradient, as on the board
                p.grad.narrow(axis, ck, p.shape[axis] - ck).zero_()
            opt.step()
            losses.append(loss.item())
    return losses


class _Int8Output(torch.autograd.Function):
    """The int8 layer's value with the fp32 layer's gradient, as the board's backward computes it."""

    @staticmethod
    def forward(ctx: Any, y_fp32: torch.Tensor, y_int8: torch.Tensor) -> torch.Tensor:
        # a copy: an input returned as-is is a view autograd forbids the next in-place op on (torchvision's
        # ReLU(inplace=True) after a conv the board runs in int8)
        return y_int8.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


def int8_forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """linear_i8 / conv2d_i8 as the firmware computes them (kernels/lowp.c): input and weight quantised
    by absmax, exact integer sums, one rounding for the product of the scales, one for the bias. In float32
    whatever the model's dtype, as the board does (a float64 reference's int8 layer is the board's)."""
    xn = x.detach().cpu().numpy().astype(np.float32)
    wn = module.weight.detach().cpu().numpy().astype(np.float32)
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
    return torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(x.dtype)


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
    # frozen fp32 weights the board stores int8 (weight-only, poet.plan.transform.placement): the model computes
    # with the weights the board does, q x scale, for as long as it computes as the graph
    w8 = {g.params[n.attrs["w"]][0] for n in g.nodes if n.op in W8_READERS and n.attrs.get("w8")}
    swapped = []
    for name, p in model.named_parameters():
        if name in w8:
            w = p.detach().cpu().numpy().astype(np.float32)
            s = absmax_scale(w)
            swapped.append((p, p.detach().clone()))
            with torch.no_grad():
                p.copy_(torch.from_numpy(quantise(w, s).astype(np.float32) * np.float32(s)))
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
        with torch.no_grad():
            for p, was in swapped:
                p.copy_(was)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, fed: Fed | None = None,
             graph: TrainingGraph | None = None) -> float:
    """The share of x the model classifies as y; with `fed` and the `graph` it was traced to, as the
    board computes it (a static-int8 prefix)."""
    with torch.no_grad(), as_graph(model, graph) if graph is not None else nullcontext():
        return float((forward(model, x, fed).argmax(1).numpy() == y).mean())


def reconstruction_errors(model: nn.Module, x: np.ndarray, loss: str, fed: Fed | None = None,
                          graph: TrainingGraph | None = None) -> np.ndarray:
    """Each sample's `loss` (mse or l1) of the model's output against its input: an autoencoder's
    anomaly score, the mean of which over a batch is its training loss."""
    with torch.no_grad(), as_graph(model, graph) if graph is not None else nullcontext():
        out = forward(model, x, fed).reshape(len(x), -1).double()
    diff = out - torch.from_numpy(x).reshape(len(x), -1).double()
    per = diff * diff if loss == "mse" else diff.abs()
    return per.mean(dim=1).numpy()
