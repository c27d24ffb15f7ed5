"""Trace a PyTorch model's training step into poet's TrainingGraph, through the instrumentation layer.

The model runs once on an example batch under `poet.instrument.Instrumented`;
every call its code makes into the torch API (`F.linear`, `x + y`,
`torch.matmul`, `x.view(...)`) becomes at most one forward node, one kernel of
the runtime's op set (the `FORWARD` table below; docs/graph.md lists it with what
each backward reads). Calls that only make constants (`torch.arange`) or read
metadata (`x.shape`) make no node; views that the runtime needs no kernel for
(`contiguous`, `dropout` with p=0 or in eval mode) alias their input. Any other call is an error
naming the call, its module path and the supported set: nothing is dropped.

The backward pass is then built from the forward nodes, not traced: one backward
node per forward node that a trainable parameter needs a gradient through
(docs/graph.md, "Backward"), gradient sums where a tensor feeds two ops (ResNet
shortcuts, attention's q/k/v), the loss gradient, and SGD over the trainable
parameters. `poet.graphcheck` proves it against what PyTorch really does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from poet.errors import PoetError, UsageError
from poet.graph import file as graphfile
from poet.graph.dtypes import F32
from poet.graph.instrument import CallEvent, Instrumented
from poet.graph.reference import LOSSES, state_tensors
from poet.graph.training_graph import GraphNode, TrainingGraph, name_problem, numel
from poet.models.zoo import ModelChoice
from poet.ops import OPS

IGNORED = {"dim", "size", "__get__", "numel", "backward", "__len__", "__format__", "__bool__", "item"}
ALIAS = {"contiguous", "clone", "detach"}  # runtime tensors are always contiguous, private copies


@dataclass
class Fwd:
    """A forward node as a handler describes it, before it gets an id and a name."""

    op: str
    inputs: list[torch.Tensor]  # activation tensors read, in the op's argument order
    attrs: dict[str, Any]
    out: torch.Tensor
    flops: int
    params: dict[str, torch.Tensor] = field(default_factory=dict)  # role ("w", "b") -> parameter
    # the nodes that made `inputs`, fixed when the call is recorded: an in-place op's output is its
    # input's tensor object, which from then on stands for the op's node
    deps: list[int] = field(default_factory=list)


class _Ctx:
    """What a handler may ask about the tensors it is given."""

    def __init__(self, tracer: _Tracer, call: CallEvent) -> None:
        self.tracer = tracer
        self.call = call

    def fail(self, why: str) -> PoetError:
        return PoetError(f"{self.call.module or 'model'}: {self.call.name}: {why}")

    def live(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and id(t) in self.tracer.node_of

    def param(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and id(t) in self.tracer.pindex


def _arg(call: CallEvent, i: int, name: str, default: Any = None) -> Any:
    if len(call.args) > i:
        return call.args[i]
    return call.kwargs.get(name, default)


def _self_and_dims(call: CallEvent) -> tuple[torch.Tensor, list[int]]:
    x = call.args[0]
    dims = call.args[1:]
    if len(dims) == 1 and isinstance(dims[0], (tuple, list, torch.Size)):
        dims = tuple(dims[0])
    return x, [int(d) for d in dims]


# ---------------------------------------------------------------- forward handlers, one per runtime op

def _linear(c: _Ctx) -> Fwd:
    x, w, b = c.call.args[0], c.call.args[1], _arg(c.call, 2, "bias")
    if not c.param(w):
        raise c.fail("the weight must be a parameter (a matmul of two activations is torch.matmul)")
    rows = x.numel() // x.shape[-1]
    attrs = {"B": rows, "in": w.shape[1], "out": w.shape[0]}
    params = {"w": w} | ({"b": b} if b is not None else {})
    return Fwd("linear", [x], attrs, c.call.result, 2 * rows * w.shape[0] * w.shape[1], params)


def _conv2d(c: _Ctx) -> Fwd:
    x, w, b = c.call.args[0], c.call.args[1], _arg(c.call, 2, "bias")
    stride, pad, dil, groups = (_arg(c.call, i, n, d) for i, n, d in
                                ((3, "stride", 1), (4, "padding", 0), (5, "dilation", 1), (6, "groups", 1)))
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    stride, pad, dil = pair(stride), pair(pad), pair(dil)
    k = tuple(w.shape[2:])
    if x.dim() != 4 or stride[0] != stride[1] or dil != (1, 1) or isinstance(pad[0], str) \
            or max(k) > 64 or max(pad) > 64 or stride[0] > 64:
        raise c.fail(f"kernel {k} stride {stride} padding {pad} dilation {dil}: the runtime supports "
                     f"kernels up to 64x64, one stride on both axes (up to 64), zero padding up to 64 on "
                     f"each side, no dilation")
    y = c.call.result
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3], "O": w.shape[0], "k": k[0],
             "pad": int(pad[0]), "stride": int(stride[0]), "groups": int(groups)}
    if k[1] != k[0] or pad[1] != pad[0]:  # a rectangle: training_graph.conv_window reads both
        attrs |= {"kw": k[1], "padw": int(pad[1])}
    params = {"w": w} | ({"b": b} if b is not None else {})
    return Fwd("conv2d", [x], attrs, y, 2 * y.numel() * (x.shape[1] // groups) * k[0] * k[1], params)


def _batch_norm(c: _Ctx) -> Fwd:
    """Training mode (batch statistics; the running ones, when tracked, move once per step) or, for
    a module the user put in eval() mode, frozen statistics: an affine map with the running ones."""
    x = c.call.args[0]
    mean, var = _arg(c.call, 1, "running_mean"), _arg(c.call, 2, "running_var")
    w, b = _arg(c.call, 3, "weight"), _arg(c.call, 4, "bias")
    training = bool(_arg(c.call, 5, "training", False))
    momentum = _arg(c.call, 6, "momentum", 0.1)
    if x.dim() < 2:
        raise c.fail(f"batch norm on a {x.dim()}-d input")
    tracked = mean is not None and var is not None and c.param(mean) and c.param(var)
    if not training and not tracked:
        raise c.fail("batch norm in eval mode without running statistics the runtime can read")
    if training and tracked and momentum is None:
        raise c.fail("batch norm with momentum=None (a cumulative average); give a number")
    attrs = {"B": x.shape[0], "C": x.shape[1], "HW": x.numel() // (x.shape[0] * x.shape[1]),
             "eps": float(_arg(c.call, 7, "eps", 1e-5)), "momentum": float(momentum or 0.0)}
    roles = (("w", w), ("b", b)) + ((("rm", mean), ("rv", var)) if tracked else ())
    params = {k: v for k, v in roles if v is not None}
    return Fwd("batchnorm" if training else "batchnorm_eval", [x], attrs, c.call.result,
               (8 if training else 2) * x.numel(), params)


def _layer_norm(c: _Ctx) -> Fwd:
    x, shape = c.call.args[0], tuple(c.call.args[1])
    w, b = _arg(c.call, 2, "weight"), _arg(c.call, 3, "bias")
    d = numel(list(shape))
    attrs = {"rows": x.numel() // d, "D": d, "eps": float(_arg(c.call, 4, "eps", 1e-5))}
    params = {k: v for k, v in (("w", w), ("b", b)) if v is not None}
    return Fwd("layernorm", [x], attrs, c.call.result, 8 * x.numel(), params)


def _pointwise(op: str, flops_per: int = 1) -> Callable[[_Ctx], Fwd]:
    def handler(c: _Ctx) -> Fwd:
        x = c.call.args[0]
        attrs: dict[str, Any] = {"n": x.numel()}
        if op == "gelu":
            attrs["tanh"] = int(_arg(c.call, 1, "approximate", "none") == "tanh")
        return Fwd(op, [x], attrs, c.call.result, flops_per * x.numel())
    return handler


def _dropout(c: _Ctx) -> Fwd:
    """Training-mode dropout with p > 0 (p = 0 and eval mode are aliases): the board makes the mask
    from the layer's salt, which dropout call of the model's forward this is (graph/dropout.py), and
    the step; the PyTorch reference drops with the same mask."""
    x, p = c.call.args[0], float(_arg(c.call, 1, "p", 0.5))
    if not 0.0 < p < 1.0:
        raise c.fail(f"p={p}: the runtime drops a share 0 < p < 1")
    return Fwd("dropout", [x], {"n": x.numel(), "p": p, "salt": c.tracer.dropout_calls[c.call.id]}, c.call.result,
               2 * x.numel())


def _hardtanh(c: _Ctx) -> Fwd:
    """hardtanh, relu6, and clamp / clip with constant bounds (both is hardtanh, a lower bound of 0
    alone is relu)."""
    x = c.call.args[0]
    if c.call.name.startswith("relu6"):
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": 0.0, "hi": 6.0}, c.call.result, x.numel())
    if c.call.name.startswith("hardtanh"):
        lo, hi = float(_arg(c.call, 1, "min_val", -1.0)), float(_arg(c.call, 2, "max_val", 1.0))
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": lo, "hi": hi}, c.call.result, x.numel())
    lo, hi = _arg(c.call, 1, "min"), _arg(c.call, 2, "max")
    if not all(v is None or isinstance(v, int | float) for v in (lo, hi)):
        raise c.fail("clamp with tensor bounds: the runtime clamps to constants")
    if lo is not None and hi is not None:
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": float(lo), "hi": float(hi)}, c.call.result, x.numel())
    if lo is not None and float(lo) == 0.0:
        return Fwd("relu", [x], {"n": x.numel()}, c.call.result, x.numel())
    raise c.fail(f"clamp(min={lo}, max={hi}): the runtime clamps to both bounds (hardtanh) or at 0 from below (relu)")


def _max_pool2d(c: _Ctx) -> Fwd:
    x = c.call.args[0]
    k = _arg(c.call, 1, "kernel_size")
    s = _arg(c.call, 2, "stride") or k
    p, d = _arg(c.call, 3, "padding", 0), _arg(c.call, 4, "dilation", 1)
    one = lambda v: v if isinstance(v, int) else (v[0] if len(set(v)) == 1 else None)  # noqa: E731
    k, s, p, d = one(k), one(s), one(p), one(d)
    if k is None or k != s or p != 0 or d != 1 or _arg(c.call, 5, "ceil_mode", False) or x.dim() != 4:
        raise c.fail("the runtime pools square windows with stride equal to the window, no padding")
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3], "k": k}
    return Fwd("maxpool2d", [x], attrs, c.call.result, c.call.result.numel() * k * k)


def _avg_pool2d(c: _Ctx) -> Fwd:
    """avg_pool2d with any window, stride and padding (ceil_mode False, no divisor override)."""
    x = c.call.args[0]
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v) if len(v) == 2 else (v[0], v[0])  # noqa: E731
    k = pair(_arg(c.call, 1, "kernel_size"))
    s = pair(_arg(c.call, 2, "stride") or k)
    p = pair(_arg(c.call, 3, "padding", 0))
    if _arg(c.call, 4, "ceil_mode", False) or _arg(c.call, 6, "divisor_override") is not None or x.dim() != 4:
        raise c.fail("the runtime pools 4-d maps with ceil_mode False and the window's own divisor")
    if max(p) > 255 or max(s) > 256 or max(x.shape[2:]) > 0xFFFF:
        raise c.fail(f"padding {p}, stride {s} on a {tuple(x.shape[2:])} map: the runtime takes padding up to 255, "
                     "stride up to 256, maps up to 65535")
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3], "kh": k[0], "kw": k[1],
             "sh": s[0], "sw": s[1], "ph": p[0], "pw": p[1],
             "include_pad": int(bool(_arg(c.call, 5, "count_include_pad", True)))}
    return Fwd("avgpool2d", [x], attrs, c.call.result, c.call.result.numel() * k[0] * k[1])


def _interpolate(c: _Ctx) -> Fwd:
    """F.interpolate / nn.Upsample in mode nearest by whole factors (given as factors or as a size)."""
    x = c.call.args[0]
    if _arg(c.call, 3, "mode", "nearest") != "nearest" or x.dim() != 4:
        raise c.fail(f"mode {_arg(c.call, 3, 'mode', 'nearest')!r} on a {x.dim()}-d tensor: the runtime upsamples "
                     "4-d maps in mode 'nearest'")
    H, W = x.shape[2], x.shape[3]
    Ho, Wo = c.call.result.shape[2], c.call.result.shape[3]
    if Ho % H or Wo % W:
        raise c.fail(f"{H}x{W} -> {Ho}x{Wo}: the runtime upsamples by whole factors")
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": H, "W": W, "sh": Ho // H, "sw": Wo // W}
    return Fwd("upsample", [x], attrs, c.call.result, 0)


def _mean(c: _Ctx) -> Fwd:
    """mean over adjacent dims, and adaptive_avg_pool2d to one element per map."""
    if c.call.name == "adaptive_avg_pool2d":
        return _adaptive_avg_pool2d(c)
    x = c.call.args[0]
    dims = _arg(c.call, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or range(x.dim()))
    dims = sorted(d % x.dim() for d in dims)
    if dims != list(range(dims[0], dims[-1] + 1)) or _arg(c.call, 2, "keepdim", False):
        raise c.fail(f"mean over dims {dims}: the runtime reduces adjacent dims, keepdim False")
    shape = list(x.shape)
    attrs = {"outer": numel(shape[:dims[0]]), "r": numel(shape[dims[0]:dims[-1] + 1]),
             "inner": numel(shape[dims[-1] + 1:])}
    return Fwd("mean", [x], attrs, c.call.result, x.numel())


def _adaptive_avg_pool2d(c: _Ctx) -> Fwd:
    x, size = c.call.args[0], _arg(c.call, 1, "output_size")
    if size not in (1, (1, 1), [1, 1]) or x.dim() != 4:
        raise c.fail(f"output size {size}: the runtime averages the whole map (output size 1)")
    attrs = {"outer": x.shape[0] * x.shape[1], "r": x.shape[2] * x.shape[3], "inner": 1}
    return Fwd("mean", [x], attrs, c.call.result, x.numel())


def _reshape(op: str) -> Callable[[_Ctx], Fwd]:
    def handler(c: _Ctx) -> Fwd:
        x = c.call.args[0]
        if op == "flatten" and x.dim() > 1 and c.call.result.shape[0] != x.shape[0]:
            raise c.fail("flatten must keep the batch dimension (start_dim=1)")
        return Fwd(op, [x], {"n": x.numel()}, c.call.result, 0)
    return handler


def _permute(c: _Ctx) -> Fwd:
    x = c.call.args[0]
    nd = x.dim()
    if c.call.name == "permute":
        perm = [d % nd for d in _self_and_dims(c.call)[1]]
    else:
        perm = list(range(nd))
        if c.call.name == "transpose":
            a, b = (int(d) % nd for d in c.call.args[1:3])
        else:  # t()
            a, b = 0, 1
        perm[a], perm[b] = perm[b], perm[a]
    if nd > 4:
        raise c.fail(f"a {nd}-d permute; the runtime permutes up to 4 dims")
    pad = 4 - nd  # leading unit dims, so every permute is a 4-d one
    dims = [1] * pad + list(x.shape)
    perm = list(range(pad)) + [p + pad for p in perm]
    attrs = {f"d{i}": dims[i] for i in range(4)} | {f"p{i}": perm[i] for i in range(4)}
    return Fwd("permute", [x], attrs, c.call.result, 0)


def _binary(c: _Ctx) -> Fwd:
    """x + y, x - y, x * y, x / y: elementwise on two activations, or an affine map by a scalar."""
    name = {"scale": "div"}.get(CALL_OP[c.call.name], CALL_OP[c.call.name])  # x / y is a scale by 1 / y
    a, b = c.call.args[0], c.call.args[1]
    alpha = c.call.kwargs.get("alpha", 1)
    reflected = c.call.name.startswith("__r")
    if isinstance(b, (int, float)) or (isinstance(b, torch.Tensor) and b.dim() == 0 and not c.live(b)):
        s = float(b)
        mul, add = {"add": (1.0, s * alpha), "sub": (-1.0, s) if reflected else (1.0, -s * alpha),
                    "mul": (s, 0.0), "div": (1.0 / s, 0.0)}.get(name, (None, None))
        if mul is None or (name == "div" and reflected):
            raise c.fail("this scalar form is not in the runtime's op set")
        return Fwd("scale", [a], {"n": a.numel(), "mul": mul, "add": add}, c.call.result, a.numel())
    if reflected:
        a, b = b, a
    if not (c.live(a) and c.live(b)):
        raise c.fail("an elementwise op between an activation and a parameter or constant tensor; "
                     "the runtime's elementwise ops take two activations (use a module such as nn.Linear)")
    if name not in ("add", "sub", "mul") or alpha != 1 or (name == "mul" and a.shape != b.shape):
        raise c.fail(f"elementwise {name} of tensors {list(a.shape)} and {list(b.shape)} (alpha {alpha}); "
                     f"the runtime has add, sub and same-shape mul")
    if a.numel() < b.numel():
        a, b = b, a  # commutative (sub is not, but sub's broadcast operand is always b)
        if name == "sub":
            raise c.fail("x - y where y is the larger (broadcast) operand")
    if list(torch.broadcast_shapes(a.shape, b.shape)) != list(a.shape) or \
            (b.numel() != a.numel() and list(a.shape[a.dim() - b.dim():]) != list(b.shape)):
        raise c.fail(f"shapes {list(a.shape)} and {list(b.shape)}: the runtime broadcasts only a trailing-shape "
                     f"operand over leading dimensions")
    op = {"add": "add", "sub": "sub", "mul": "mul"}[name]
    return Fwd(op, [a, b], {"n": a.numel(), "m": b.numel()}, c.call.result, a.numel())


def _matmul(c: _Ctx) -> Fwd:
    a, b = c.call.args[0], c.call.args[1]
    if not (c.live(a) and c.live(b)) or a.dim() < 2 or b.dim() < 2 or a.shape[:-2] != b.shape[:-2]:
        raise c.fail(f"matmul of {list(a.shape)} and {list(b.shape)}: the runtime multiplies two activations "
                     f"with equal batch dims (for x @ W use nn.Linear)")
    batch = numel(list(a.shape[:-2]))
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    return Fwd("matmul", [a, b], {"batch": batch, "M": m, "K": k, "N": n}, c.call.result, 2 * batch * m * k * n)


def _softmax(c: _Ctx) -> Fwd:
    x, dim = c.call.args[0], _arg(c.call, 1, "dim")
    if dim is None or dim % x.dim() != x.dim() - 1:
        raise c.fail(f"softmax over dim {dim}; the runtime normalises the last dim")
    d = x.shape[-1]
    return Fwd("softmax", [x], {"rows": x.numel() // d, "D": d}, c.call.result, 5 * x.numel())


def _embedding(c: _Ctx) -> Fwd:
    ids, w = c.call.args[0], c.call.args[1]
    if not c.param(w):
        raise c.fail("the embedding table must be a parameter")
    src = c.tracer.const_index(ids) if not c.live(ids) else 0
    if src is None:
        raise c.fail("indices must be the model's input or torch.arange / torch.zeros")
    attrs = {"n": ids.numel(), "V": w.shape[0], "D": w.shape[1], "ids": src}
    return Fwd("embedding", [ids] if c.live(ids) else [], attrs, c.call.result, 0, {"w": w})


def _cat(c: _Ctx) -> Fwd:
    """torch.cat of two to four activations along one dim: rows of [outer, size x inner] side by side."""
    xs, dim = list(c.call.args[0]), _arg(c.call, 1, "dim", 0)
    if not 2 <= len(xs) <= 4 or not all(c.live(t) for t in xs):
        raise c.fail(f"cat of {len(xs)} tensors: the runtime joins two to four activations")
    d = dim % xs[0].dim()
    outer = numel(list(xs[0].shape[:d]))
    lens = [numel(list(t.shape[d:])) for t in xs]
    attrs = {"outer": outer, **{f"l{i}": (lens[i] if i < len(lens) else 0) for i in range(4)}}
    return Fwd("cat", xs, attrs, c.call.result, 0)


def _getitem(c: _Ctx) -> Fwd:
    x, idx = c.call.args[0], c.call.args[1]
    if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] == slice(None) and isinstance(idx[1], int)
            and x.dim() == 3):
        raise c.fail(f"indexing {idx!r}: the runtime selects one position of a [B, S, D] tensor, x[:, i]")
    attrs = {"B": x.shape[0], "S": x.shape[1], "D": x.shape[2], "index": idx[1] % x.shape[1]}
    return Fwd("select", [x], attrs, c.call.result, 0)


# The handler of each op the tracer makes from a PyTorch call (the op's `calls` in poet.ops): it reads the
# call's arguments into the node's attributes. A pointwise op of the table (its `flops`) needs none.
HANDLERS: dict[str, Callable[[_Ctx], Fwd]] = {
    "linear": _linear, "conv2d": _conv2d, "batchnorm": _batch_norm, "layernorm": _layer_norm, "hardtanh": _hardtanh,
    "maxpool2d": _max_pool2d, "avgpool2d": _avg_pool2d, "upsample": _interpolate, "mean": _mean,
    "flatten": _reshape("flatten"), "reshape": _reshape("reshape"), "permute": _permute,
    **{op: _binary for op in ("add", "sub", "mul", "scale")},
    "matmul": _matmul, "softmax": _softmax, "embedding": _embedding, "select": _getitem, "cat": _cat,
    "dropout": _dropout,
}
# PyTorch call name -> the op it becomes (the handler may pick a sibling: clamp(min=0) is a relu)
CALL_OP = {call: op.name for op in OPS.values() for call in op.calls}
FORWARD: dict[str, Callable[[_Ctx], Fwd]] = {
    call: HANDLERS[op] if op in HANDLERS else _pointwise(op, OPS[op].flops) for call, op in CALL_OP.items()}
SUPPORTED = ", ".join(op.traced or "/".join(c for c in op.calls if not c.startswith("_") and not c.endswith("_"))
                      for op in OPS.values() if op.calls or op.traced)


# ---------------------------------------------------------------- the tracer

class _Tracer:
    def __init__(self, model: nn.Module, train: str, subst: dict[str, torch.Tensor] | None = None) -> None:
        self.model = model
        # parameters, then the running statistics the runtime keeps (frozen: moved by the forward only)
        self.params = state_tensors(model)
        # the tensors the forward pass will really see: the parameters, or their meta stand-ins
        seen = [subst[n] if subst else p for n, p in self.params]
        self.pindex = {id(p): i for i, p in enumerate(seen)}
        self.buffers = {id(subst[n] if subst else b) for n, b in model.named_buffers()}
        self.node_of: dict[int, int] = {}  # id(tensor) -> node id (tensors are kept alive by the calls)
        self.node_of_call: dict[int, int] = {}  # CallEvent id -> the node it made (or aliased)
        self.const_calls: set[int] = set()  # calls that make constants or only read metadata
        self.poison: dict[int, PoetError] = {}  # id(tensor) -> why no runtime op can make it
        self.consts: dict[int, tuple[str, CallEvent]] = {}
        self.fwd: list[tuple[Fwd, CallEvent]] = []
        self.train = train
        self.dropout_calls: dict[int, int] = {}  # CallEvent id -> which dropout call of the forward (its salt)

    def const_index(self, t: torch.Tensor) -> int | None:
        """Index tensors the model makes itself: 1 = arange(n), 2 = zeros(n); None = anything else."""
        made = self.consts.get(id(t))
        if made is None:
            return None
        name, call = made
        if name == "arange" and len(call.args) == 1:
            return 1
        if name == "zeros":
            return 2
        return None

    def add_call(self, call: CallEvent) -> None:
        if call.name == "dropout":  # numbered as reference.PoetDropout numbers them: every call counts
            self.dropout_calls[call.id] = len(self.dropout_calls)
        outs = call.outputs
        if call.name in IGNORED or not outs:
            self.const_calls.add(call.id)
            return
        ins = call.inputs
        # An op outside the op set is an error only if the loss depends on it: its outputs carry the
        # error, and the first supported op that reads one (or the logits) raises it. So values read
        # only for control flow (`if x.sum() > 0`) or logging do not stop a trace.
        inherited = next((self.poison[id(t)] for t in ins if id(t) in self.poison), None)
        live = [t for t in ins if id(t) in self.node_of]
        if inherited is None and not live and not any(id(t) in self.pindex for t in ins):
            for t in outs:  # made from constants only: arange, zeros, running-statistics updates
                self.consts[id(t)] = (call.name, call)
            self.const_calls.add(call.id)
            return
        ctx = _Ctx(self, call)
        alias = call.name in ALIAS or (call.name == "dropout" and (not _arg(call, 2, "training", True)
                                                                  or _arg(call, 1, "p", 0.5) == 0))
        handler = FORWARD.get(call.name)
        if inherited is not None:
            if handler is None or alias:
                self._poison(outs, inherited)
                return
            raise inherited
        if alias:
            self.node_of[id(call.result)] = self.node_of_call[call.id] = self.node_of[id(call.args[0])]
            return
        if handler is None:
            self._poison(outs, PoetError(f"{call.module or 'model'}: {call.name} is not in the runtime's op set; "
                                         f"supported: {SUPPORTED}"))
            return
        try:
            f = handler(ctx)
        except PoetError as exc:  # a supported op in a form the runtime lacks: same rule
            self._poison(outs, exc)
            return
        for t in f.inputs:
            if id(t) not in self.node_of:
                raise ctx.fail("reads a tensor that is neither an activation nor a parameter "
                               "(register constant tensors as buffers, or compute them from the input)")
        f.deps = [self.node_of[id(t)] for t in f.inputs]
        self.node_of[id(f.out)] = self.node_of_call[call.id] = len(self.fwd) + 1  # node 0 is the input
        self.fwd.append((f, call))

    def _poison(self, outs: list[torch.Tensor], err: PoetError) -> None:
        for t in outs:
            self.poison[id(t)] = err


# The most elements one tensor may have: the board counts them in i32 (docs/spec.md section 2,
# graphfile.I32), so a bigger one cannot be described to it, let alone trained there.
MAX_ELEMENTS = 2**31 - 1
# A model whose code needs values (it fails on meta tensors) is traced on a real batch, allocated
# here, every activation kept alive by the recorded calls: its batch may take at most this much.
REAL_BATCH_BYTES = 2**30


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _example_batch(batch: int, input_shape: tuple[int, ...], input_dtype: str, device: str = "cpu") -> torch.Tensor:
    shape = (batch, *input_shape)
    if input_dtype == "int64":
        return torch.zeros(shape, dtype=torch.long, device=device)  # token 0 exists in every vocabulary
    if device == "meta":
        return torch.empty(shape, device="meta")
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g)


def _check_batch(name: str, shape: tuple[int, ...], input_dtype: str) -> None:
    """Refuse an example batch beyond MAX_ELEMENTS before anything is allocated for it."""
    n = numel(list(shape))
    if n > MAX_ELEMENTS:
        size = _gib(n * (8 if input_dtype == "int64" else 4))
        raise UsageError(f"model {name!r}: an input batch of shape {list(shape)} has {n:,} elements ({size} as "
                         f"{input_dtype}); poet's tensors hold at most 2**31 - 1 elements (the board counts them in "
                         f"i32): use a smaller --input-shape or --batch")


def traced(choice: ModelChoice) -> tuple[nn.Module, TrainingGraph]:
    """The chosen model, freshly initialised, and its traced training step."""
    if choice.batch < 1:
        raise UsageError(f"--batch {choice.batch}: must be at least 1")
    model, spec = choice.build()
    return model, trace(model, spec.name, spec.input_shape, spec.classes, choice.batch, spec.input_dtype,
                        choice.train, spec.loss)


def trace(model: nn.Module, name: str, input_shape: tuple[int, ...] | list[int], classes: int, batch: int,
          input_dtype: str = "float32", train: str = "all", loss: str = "cross_entropy") -> TrainingGraph:
    """The training step of `model` (the mean `loss`, SGD) as a TrainingGraph.

    `loss`: "cross_entropy" of logits [batch, classes] against the staged labels, or "mse" / "l1" of
    the output against the input (an autoencoder reconstructing it: the output has the input's shape).

    `train`: "all" (every parameter that requires grad), "last:N" (the last N layers with
    parameters, in the order the forward pass uses them), "bias" (only parameters named bias), or
    modes joined by "+" (their union: "bias+last:N", tiny-training's sparse update).
    The pass runs on meta tensors (shapes only, nothing allocated); a model whose code needs
    values gets a real batch of at most REAL_BATCH_BYTES.
    """
    if loss != "cross_entropy" and (loss not in LOSSES or input_dtype != "float32"):
        raise UsageError(f"loss {loss!r} for a {input_dtype} input: poet has cross_entropy, and "
                         f"{', '.join(LOSSES)} of a float32 output against the input")
    shape = (batch, *input_shape)
    _check_batch(name, shape, input_dtype)
    # module and parameter names become the graph's node and tensor names, printed one to a line
    for kind, names in (("module", (n for n, _ in model.named_modules())),
                        ("parameter", (n for n, _ in model.named_parameters()))):
        for n in names:
            why = name_problem(n) if n else None
            if why:
                raise UsageError(f"model {name!r}: the {kind} name {n[:60]!r} {why}; rename it")
    labels = torch.zeros(batch, dtype=torch.long)
    x = _example_batch(batch, tuple(input_shape), input_dtype, device="meta")
    try:
        return _trace_step(model, name, x, labels.to("meta"), classes, input_dtype, train, False, set(),
                           meta=True, loss=loss).graph
    except _NeedsValues as exc:
        need = numel(list(shape)) * x.element_size()
        if need > REAL_BATCH_BYTES:
            why = exc.__cause__
            msg = f" ({type(why).__name__}: {str(why).splitlines()[0][:80]})" if why and str(why) else ""
            raise UsageError(f"model {name!r} needs values to trace, not only shapes{msg}, and a real batch of "
                             f"shape {list(shape)} takes {_gib(need)}; poet traces on real batches up to "
                             f"{_gib(REAL_BATCH_BYTES)}: use a smaller --input-shape or --batch") from exc
    return _trace_step(model, name, _example_batch(batch, tuple(input_shape), input_dtype), labels, classes,
                       input_dtype, train, False, set(), meta=False, loss=loss).graph


@dataclass
class Traced:
    """A traced step and what it was traced from, for tools that compare the graph with PyTorch."""

    graph: TrainingGraph
    ins: Instrumented
    node_of_call: dict[int, int]  # CallEvent id -> graph node (the loss call -> the loss node)
    const_calls: set[int]  # CallEvent ids that made constants (arange, buffer updates) or read metadata
    x: torch.Tensor
    labels: torch.Tensor


def trace_step(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
               input_dtype: str = "float32", train: str = "all", real_step: bool = False,
               loss: str = "cross_entropy") -> Traced:
    """Trace one step on batch `x`. With `real_step`, run it as PyTorch trains it (autograd on, only
    the mode's parameters requiring grad, backward run) and record its ATen ops and saved tensors
    too. Either way the model's parameters, gradients, buffers and flags are left as they were."""
    frozen: set[str] = set()
    if real_step:  # the frozen set depends on the forward order, known from a first, plain trace
        frozen = set(trace_step(model, name, x, labels, classes, input_dtype, train, loss=loss).graph.frozen)
    else:
        # Shapes are all a graph needs: a pass on meta tensors costs no arithmetic (BERT-base in
        # well under a second). Models whose code needs values (data-dependent control flow) fall
        # back to a real pass.
        try:
            return _trace_step(model, name, x.to("meta"), labels.to("meta"), classes, input_dtype, train,
                               False, frozen, meta=True, loss=loss)
        except _NeedsValues:
            pass
    return _trace_step(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta=False, loss=loss)


class _NeedsValues(Exception):
    """The model failed on meta tensors: trace it on real ones."""


def _trace_step(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
                input_dtype: str, train: str, real_step: bool, frozen: set[str], meta: bool,
                loss: str = "cross_entropy") -> Traced:
    """One traced step; fine-tuning part of the model, its frozen batch norms use running statistics.

    A batch norm in training mode none of whose parameters trains (`--train last:N`, `bias` on a
    layer without a bias...) normalises with its running statistics instead of the batch's, as
    Keras runs frozen BatchNormalization layers and tiny-training folds frozen ones: a frozen layer
    then computes the same function every step, its statistics stay read-only in flash instead of
    taking RAM to be moved, and a batch of one is well defined. The PyTorch reference does the same
    (reference.as_graph)."""
    try:
        t = _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, frozenset(),
                        loss)
    except PoetError:
        if train == "all":
            raise
        # a batch norm that cannot run in training mode here (BatchNorm1d on a batch of one) may be one
        # the mode freezes: learn which parameters train with every batch norm on running statistics
        every = frozenset(p.replace(".", "/") for p, m in model.named_modules()
                          if isinstance(m, nn.modules.batchnorm._BatchNorm))
        t = _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, every, loss)
        fixed = set(t.graph.frozen)
        norms = frozenset(n.module for n in t.graph.nodes if n.op == "batchnorm_eval" and all(
            t.graph.params[n.attrs[k]][0] in fixed for k in ("w", "b") if n.attrs.get(k, -1) >= 0))
        return _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, norms,
                           loss)
    norms = _norms_to_freeze(t.graph) if train != "all" else frozenset()
    # only a batch norm module switches (a functional call inside a larger module keeps its mode)
    norms = frozenset(n for n in norms if isinstance(_module(model, n), nn.modules.batchnorm._BatchNorm))
    return t if not norms else _trace_once(model, name, x, labels, classes, input_dtype, train, real_step,
                                           frozen, meta, norms, loss)


def _norms_to_freeze(g: TrainingGraph) -> frozenset[str]:
    """Module paths of the batch norms in training mode that train no parameter."""
    fixed = set(g.frozen)
    return frozenset(n.module for n in g.nodes if n.op == "batchnorm" and all(
        g.params[n.attrs[k]][0] in fixed for k in ("w", "b") if n.attrs.get(k, -1) >= 0))


def _module(model: nn.Module, path: str) -> nn.Module:
    return model.get_submodule(path.replace("/", "."))


def _trace_once(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
                input_dtype: str, train: str, real_step: bool, frozen: set[str], meta: bool,
                eval_norms: frozenset[str], loss: str = "cross_entropy") -> Traced:
    batch = x.shape[0]
    params = list(model.named_parameters())
    before = [(p.requires_grad, p.grad) for _, p in params]
    # BN running stats: the trace leaves no mark. A meta pass reads and moves only meta stand-ins
    # (subst below), so it needs no copy, which for a large model is as big as the model.
    state = {} if meta else {k: v.clone() for k, v in model.state_dict().items()}
    modes = {m: m.training for m in model.modules()}
    if not model.training:  # a model handed over in eval mode trains as a whole; one in train mode
        model.train()       # keeps the modes its user set (a batch norm in eval(): frozen statistics)
    for path in eval_norms:
        _module(model, path).training = False
    subst = None
    if meta:
        subst = {n: torch.empty_like(t, device="meta").requires_grad_(t.requires_grad)
                 for n, t in [*model.named_parameters(), *model.named_buffers()]}
    tr = _Tracer(model, train, subst)
    tr.node_of[id(x)] = 0
    try:
        if real_step:
            for n, p in params:
                p.requires_grad_(n not in frozen)
                p.grad = None
        with torch.set_grad_enabled(real_step), Instrumented(model, aten=real_step, saved=real_step) as ins:
            try:
                logits = model(x) if subst is None else torch.func.functional_call(model, subst, (x,))
            except PoetError:
                raise
            except Exception as exc:  # the user's code can raise anything; say where and why in one line
                if meta:
                    raise _NeedsValues() from exc
                msg = str(exc).splitlines()[0] if str(exc) else ""
                if batch == 1 and "more than 1 value per channel" in msg:  # torch's batch norm in training mode
                    raise PoetError(f"model {name!r} cannot train on a batch of 1: its batch norm needs more than "
                                    f"one value per channel; use --batch 2 or more, or a --train mode that freezes "
                                    f"its batch norms (last:N)") from exc
                raise PoetError(f"model {name!r} fails on a batch of shape {list(x.shape)} ({input_dtype}): "
                                f"{type(exc).__name__}: {msg}") from exc
            want = [batch, classes] if loss == "cross_entropy" else list(x.shape)
            if not isinstance(logits, torch.Tensor) or list(logits.shape) != want:
                got = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                raise PoetError(f"model {name!r} returns {got}, expected " + (
                    f"logits [{batch}, {classes}]" if loss == "cross_entropy" else
                    f"a reconstruction of its input {want} (--loss {loss} compares the output with the input)"))
            n_model_calls = len(ins.calls)
            step_loss = F.cross_entropy(logits, labels) if loss == "cross_entropy" else LOSSES[loss](logits, x)
            if real_step:
                step_loss.backward()
        for call in ins.calls[:n_model_calls]:
            tr.add_call(call)
    finally:
        if state:
            model.load_state_dict(state)
        for m, mode in modes.items():
            m.training = mode
        for (_, p), (req, grad) in zip(params, before):
            p.requires_grad_(req)
            p.grad = grad
    if id(logits) in tr.poison:
        raise tr.poison[id(logits)]
    if id(logits) not in tr.node_of:
        raise PoetError(f"model {name!r}: its output is not computed from its input by traced ops")
    g = _build(tr, name, batch, tuple(x.shape[1:]), classes, input_dtype, tr.node_of[id(logits)], loss)
    loss_call = ins.calls[n_model_calls].id
    return Traced(g, ins, tr.node_of_call | {loss_call: len(tr.fwd) + 1}, tr.const_calls, x, labels)


TRAIN_MODES = "give all, bias, or last:N (N >= 1), or bias+last:N (a sparse update)"



def _trainable(tr: _Tracer, train: str) -> set[int]:
    """Indices of the parameters the mode trains. Modes joined by + train the union: bias+last:N is
    tiny-training's sparse update (every bias, and the last N layers in full)."""
    if "+" in train:
        parts = train.split("+")
        if "all" in parts or len(set(parts)) != len(parts) or not all(parts):
            raise UsageError(f"--train {train!r}: {TRAIN_MODES}")
        return set().union(*(_trainable(tr, part) for part in parts))
    wanted = {i for i, (_, p) in enumerate(tr.params) if p.requires_grad}
    if train == "all":
        return wanted
    if train == "bias":
        return {i for i in wanted if tr.params[i][0].rsplit(".", 1)[-1] == "bias"}
    if train.startswith("last:") and train[5:].isdigit() and int(train[5:]) > 0:
        layers: list[list[int]] = []  # parameter sets of the layers, in forward order
        for f, _ in tr.fwd:
            ps = [tr.pindex[id(p)] for p in f.params.values()]
            if ps and (not layers or layers[-1] != ps):
                layers.append(ps)
        n = int(train[5:])
        if n > len(layers):
            raise UsageError(f"--train {train}: the model has only {len(layers)} layers with parameters")
        return {i for ps in layers[-n:] for i in ps} & wanted
    raise UsageError(f"--train {train!r}: {TRAIN_MODES}")


def _names(tr: _Tracer) -> list[str]:
    """Qualified names: a leaf module's path for its one op, else module/op with _1, _2 for repeats."""
    leaves = {n.replace(".", "/") for n, m in tr.model.named_modules() if not any(m.children())}
    per_module: dict[str, int] = {}
    for _, call in tr.fwd:
        per_module[call.module] = per_module.get(call.module, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for f, call in tr.fwd:
        mod = call.module
        if mod and mod in leaves and per_module[mod] == 1:  # a bare layer as the model: "" is no name
            out.append(mod)
            continue
        base = f"{mod}/{f.op}" if mod else f.op
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(base if k == 0 else f"{base}_{k}")
    return out


def _build(tr: _Tracer, name: str, batch: int, input_shape: tuple[int, ...], classes: int, input_dtype: str,
           logits_id: int, loss: str = "cross_entropy") -> TrainingGraph:
    trainable = _trainable(tr, tr.train)
    nodes: list[GraphNode] = []
    shape0 = [batch, *input_shape]
    nodes.append(GraphNode(0, "input", "input", "input", "input", [], F32 * numel(shape0), shape0,
                           {"n": numel(shape0)}))
    rg = [False]  # does the node's output need a gradient?
    for (f, _call), path in zip(tr.fwd, _names(tr)):
        deps = list(f.deps)
        pidx = {role: tr.pindex[id(p)] for role, p in f.params.items()}
        attrs = dict(f.attrs) | pidx
        shape = list(f.out.shape)
        if numel(shape) > MAX_ELEMENTS:  # in a meta pass, before any real tensor of that size exists
            raise UsageError(f"model {name!r}: {path} makes a tensor of shape {shape}, {numel(shape):,} elements "
                             f"({_gib(F32 * numel(shape))}); poet's tensors hold at most 2**31 - 1 elements (the "
                             f"board counts them in i32): use a smaller --input-shape or --batch")
        nid = len(nodes)
        nodes.append(GraphNode(nid, f"{path}/forward", path, "forward", f.op, deps, F32 * numel(shape), shape,
                               attrs, f.flops))
        rg.append(any(rg[d] for d in deps) or any(i in trainable for i in pidx.values()))
    if not any(rg):
        raise PoetError(f"--train {tr.train}: no parameter of model {name!r} would be trained")

    lshape = nodes[logits_id].shape
    if loss == "cross_entropy":
        ce = {"B": batch, "classes": classes}
        nodes.append(GraphNode(len(nodes), "loss/forward", "loss", "loss", "cross_entropy", [logits_id], 4, [1], ce,
                               5 * batch * classes))
        b = _Backward(nodes, rg, trainable)
        b.grads[logits_id] = [b.add("loss/backward", "loss", "cross_entropy_bwd", [], [logits_id], lshape, ce,
                                    4 * batch * classes)]
    else:  # the output against the input (node 0), which gets no gradient
        reg = {"n": numel(lshape)}
        nodes.append(GraphNode(len(nodes), "loss/forward", "loss", "loss", loss, [logits_id, 0], 4, [1], reg,
                               3 * numel(lshape)))
        b = _Backward(nodes, rg, trainable)
        b.grads[logits_id] = [b.add("loss/backward", "loss", f"{loss}_bwd", [], [logits_id, 0], lshape, reg,
                                    3 * numel(lshape))]
    for nid in range(len(nodes) - 2, 0, -1):
        b.differentiate(nid)
    n_train = sum(numel(list(tr.params[i][1].shape)) for i in trainable)
    nodes.append(GraphNode(len(nodes), "optimizer/sgd", "optimizer", "optimizer", "sgd", [], 0, [0], {},
                           2 * n_train))
    params = [(n, list(p.shape)) for n, p in tr.params]
    frozen = [n for i, (n, _) in enumerate(tr.params) if i not in trainable]
    if len(nodes) > graphfile.MAX_NODES:  # first known here: refused before any planner spends minutes on it
        raise UsageError(graphfile.too_many_nodes(f"model {name!r}", len(nodes),
                                                  "trace fewer layers (bert: --layers) or a smaller model"))
    return TrainingGraph(name, batch, list(input_shape), classes, params, nodes, frozen=frozen, train=tr.train,
                         input_dtype=input_dtype, loss=loss)


class _Backward:
    def __init__(self, nodes: list[GraphNode], rg: list[bool], trainable: set[int]) -> None:
        self.nodes = nodes
        self.rg = rg
        self.trainable = trainable
        self.grads: dict[int, list[int]] = {}  # node -> backward nodes holding parts of its gradient

    def add(self, name: str, module: str, op: str, grad: list[int], saved: list[int], shape: list[int],
            attrs: dict[str, Any], flops: int, nbytes: int | None = None) -> int:
        nid = len(self.nodes)
        self.nodes.append(GraphNode(nid, name, module, "backward", op, grad + saved,
                                    F32 * numel(shape) if nbytes is None else nbytes, shape, attrs, flops,
                                    saved=saved))
        return nid

    def _grad_of(self, nid: int) -> int | None:
        """The one node holding the whole gradient of `nid`'s output, summing parts if needed."""
        parts = self.grads.get(nid)
        if not parts:
            return None
        node = self.nodes[nid]
        g = parts[0]
        for k, p in enumerate(parts[1:]):
            suffix = "" if k == 0 else f"_{k}"
            g = self.add(f"{node.module}/grad_sum{suffix}", node.module, "add", [g, p], [], node.shape,
                         {"n": numel(node.shape), "m": numel(node.shape)}, numel(node.shape))
        return g

    def _give(self, target: int, g: int) -> None:
        if self.rg[target]:
            self.grads.setdefault(target, []).append(g)

    def differentiate(self, nid: int) -> None:
        node = self.nodes[nid]
        g = self._grad_of(nid)
        if g is None:
            return
        op, x = node.op, node.deps
        trains = {r for r in ("w", "b") if node.attrs.get(r, -1) in self.trainable and r in node.attrs}
        need = [self.rg[d] for d in x]
        if not any(need) and not trains:
            return
        name, mod, attrs = f"{node.module}/backward", node.module, dict(node.attrs)
        if op in ("add", "sub"):
            self._give(x[0], g)
            if need[1] and attrs["m"] == attrs["n"] and op == "add":
                self._give(x[1], g)
            elif need[1]:  # negate and/or sum the gradient over the broadcast dimensions
                s = self.add(name, mod, OPS[op].backward[0], [g], [], self.nodes[x[1]].shape, attrs, attrs["n"])
                self._give(x[1], s)
            return
        if op == "cat":  # each input's gradient is its columns of g's rows
            total, offset = sum(attrs[f"l{i}"] for i in range(4)), 0
            for i, d in enumerate(x):
                length = attrs[f"l{i}"]
                if need[i]:
                    cut = {"outer": attrs["outer"], "total": total, "offset": offset, "len": length}
                    part = self.add(f"{name}_{i}", mod, OPS[op].backward[0], [g], [], self.nodes[d].shape, cut, 0)
                    self._give(d, part)
                offset += length
            return
        if op in ("mul", "matmul"):
            for i in (0, 1):
                if need[i]:
                    other = x[1 - i]
                    s = self.add(f"{name}_{'ab'[i]}", mod, OPS[op].backward[i], [g], [other],
                                 self.nodes[x[i]].shape, attrs, node.flops)
                    self._give(x[i], s)
            return
        if op in ("linear", "conv2d", "embedding", "batchnorm", "batchnorm_eval", "layernorm"):
            gx = bool(need and need[0]) and op != "embedding"
            if op in ("linear", "conv2d", "batchnorm_eval"):  # x only for the weight gradient
                saved = [x[0]] if "w" in trains else []
            elif op == "embedding":
                saved = list(x)  # the token ids, when they come from the input
            else:  # normalisation: the input gives back the statistics and x-hat
                saved = [x[0]] if gx or "w" in trains else []
            attrs["need_grad_input"] = int(gx)
            work = (int(gx) + int("w" in trains)) * node.flops if op in ("linear", "conv2d") else node.flops
            shape = self.nodes[x[0]].shape if x else [0]
            s = self.add(name, mod, OPS[op].backward[0], [g], saved, shape, attrs, work, nbytes=None if gx else 0)
            if gx:
                self._give(x[0], s)
            return
        saves = OPS[op].saves  # a one-input op: its backward reads its input, its output or neither
        if saves in ("x", "y", ""):
            saved = {"x": [x[0]], "y": [nid], "": []}[saves]
            flops = 0 if op in ("flatten", "reshape", "permute", "select") else node.flops
            s = self.add(name, mod, OPS[op].backward[0], [g], saved, self.nodes[x[0]].shape, attrs, flops)
            self._give(x[0], s)
            return
        raise PoetError(f"{node.module}: no backward for runtime op {op}")  # poet.ops names a rule no one wrote
