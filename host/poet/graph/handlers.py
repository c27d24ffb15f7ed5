"""How each PyTorch call the tracer records becomes a forward node of the runtime's op set.

An op's record in poet.ops says which calls make it (`calls`); its handler here reads such a call's
arguments into the node's attributes, its FLOPs and its parameters, or refuses the call in one line
that says what the runtime takes instead. A pointwise op of the table needs no handler of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from poet.errors import PoetError
from poet.graph import composite
from poet.graph.dropout import Mask
from poet.graph.instrument import CallEvent
from poet.graph.training_graph import numel
from poet.ops import OPS


class Seen(Protocol):
    """What the tracer knows of the tensors a call is given (graph/tracer.py's _Tracer)."""

    node_of: dict[int, int]  # id(tensor) -> the node that made it
    pindex: dict[int, int]  # id(tensor) -> the parameter it is
    dropout_calls: dict[int, int]  # CallEvent id -> which dropout call of the forward (its mask's salt)
    masks: dict[int, Mask]  # id(tensor) -> the bernoulli_ mask it holds (stochastic depth)

    def const_index(self, t: torch.Tensor) -> int | None: ...


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
    # nodes the call needs made first, whose outputs this one reads (a parameter read as an activation)
    pre: list[Fwd] = field(default_factory=list)


class Ctx:
    """What a handler may ask about the tensors it is given."""

    def __init__(self, tracer: Seen, call: CallEvent) -> None:
        self.tracer = tracer
        self.call = call

    def fail(self, why: str) -> PoetError:
        return PoetError(f"{self.call.module or 'model'}: {self.call.name}: {why}")

    def live(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and id(t) in self.tracer.node_of

    def param(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and id(t) in self.tracer.pindex


def arg(call: CallEvent, i: int, name: str, default: Any = None) -> Any:
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

def _linear(c: Ctx) -> Fwd:
    x, w, b = c.call.args[0], c.call.args[1], arg(c.call, 2, "bias")
    if not c.param(w):
        raise c.fail("the weight must be a parameter (a matmul of two activations is torch.matmul)")
    rows = x.numel() // x.shape[-1]
    attrs = {"B": rows, "in": w.shape[1], "out": w.shape[0]}
    params = {"w": w} | ({"b": b} if b is not None else {})
    return Fwd("linear", [x], attrs, c.call.result, 2 * rows * w.shape[0] * w.shape[1], params)


def _one(v: Any) -> Any:
    """A 1-d call's size argument as its one number (conv1d's padding=(2,) is 2); a string stays one."""
    return v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v


def _conv2d(c: Ctx) -> Fwd:
    """conv2d, and conv1d as a conv2d of a map one row high: its [O, C/g, k] weight is the [O, C/g, 1, k]
    the kernels read, byte for byte."""
    x, w, b = c.call.args[0], c.call.args[1], arg(c.call, 2, "bias")
    stride, pad, dil, groups = (arg(c.call, i, n, d) for i, n, d in
                                ((3, "stride", 1), (4, "padding", 0), (5, "dilation", 1), (6, "groups", 1)))
    pair = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v)  # noqa: E731
    if c.call.name == "conv1d" and x.dim() == 3:
        x = x.unsqueeze(2)  # shapes only: the node reads the traced tensor (Fwd's input below)
        stride, pad, dil = (1, _one(stride)), (0, _one(pad)), (1, _one(dil))
    stride, pad, dil = pair(stride), pair(pad), pair(dil)
    k = tuple(w.shape[2:]) if w.dim() == 4 else (1, w.shape[2])
    if x.dim() != 4 or (stride[0] != stride[1] and x.shape[2] > 1) or dil != (1, 1) or isinstance(pad[0], str) \
            or max(k) > 64 or max(pad) > 64 or stride[0] > 64:
        raise c.fail(f"kernel {k} stride {stride} padding {pad} dilation {dil}: the runtime supports "
                     f"kernels up to 64x64, one stride on both axes (up to 64), zero padding up to 64 on "
                     f"each side, no dilation")
    y = c.call.result
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3], "O": w.shape[0], "k": k[0],
             "pad": int(pad[0]), "stride": int(stride[1]), "groups": int(groups)}
    if k[1] != k[0] or pad[1] != pad[0]:  # a rectangle: training_graph.conv_window reads both
        attrs |= {"kw": k[1], "padw": int(pad[1])}
    params = {"w": w} | ({"b": b} if b is not None else {})
    return Fwd("conv2d", [c.call.args[0]], attrs, y, 2 * y.numel() * (x.shape[1] // groups) * k[0] * k[1], params)


def _batch_norm(c: Ctx) -> Fwd:
    """Training mode (batch statistics; the running ones, when tracked, move once per step) or, for
    a module the user put in eval() mode, frozen statistics: an affine map with the running ones."""
    x = c.call.args[0]
    mean, var = arg(c.call, 1, "running_mean"), arg(c.call, 2, "running_var")
    w, b = arg(c.call, 3, "weight"), arg(c.call, 4, "bias")
    training = bool(arg(c.call, 5, "training", False))
    momentum = arg(c.call, 6, "momentum", 0.1)
    if x.dim() < 2:
        raise c.fail(f"batch norm on a {x.dim()}-d input")
    tracked = mean is not None and var is not None and c.param(mean) and c.param(var)
    if not training and not tracked:
        raise c.fail("batch norm in eval mode without running statistics the runtime can read")
    if training and tracked and momentum is None:
        raise c.fail("batch norm with momentum=None (a cumulative average); give a number")
    attrs = {"B": x.shape[0], "C": x.shape[1], "HW": x.numel() // (x.shape[0] * x.shape[1]),
             "eps": float(arg(c.call, 7, "eps", 1e-5)), "momentum": float(momentum or 0.0)}
    roles = (("w", w), ("b", b)) + ((("rm", mean), ("rv", var)) if tracked else ())
    params = {k: v for k, v in roles if v is not None}
    return Fwd("batchnorm" if training else "batchnorm_eval", [x], attrs, c.call.result,
               (8 if training else 2) * x.numel(), params)


def _layer_norm(c: Ctx) -> Fwd:
    x, shape = c.call.args[0], tuple(c.call.args[1])
    w, b = arg(c.call, 2, "weight"), arg(c.call, 3, "bias")
    d = numel(list(shape))
    attrs = {"rows": x.numel() // d, "D": d, "eps": float(arg(c.call, 4, "eps", 1e-5))}
    params = {k: v for k, v in (("w", w), ("b", b)) if v is not None}
    return Fwd("layernorm", [x], attrs, c.call.result, 8 * x.numel(), params)


def _pointwise(op: str, flops_per: int = 1) -> Callable[[Ctx], Fwd]:
    def handler(c: Ctx) -> Fwd:
        x = c.call.args[0]
        attrs: dict[str, Any] = {"n": x.numel()}
        if op == "gelu":
            attrs["tanh"] = int(arg(c.call, 1, "approximate", "none") == "tanh")
        return Fwd(op, [x], attrs, c.call.result, flops_per * x.numel())
    return handler


def _dropout(c: Ctx) -> Fwd:
    """Training-mode dropout with p > 0 (p = 0 and eval mode are aliases): the board makes the mask
    from the layer's salt, which dropout call of the model's forward this is (graph/dropout.py), and
    the step; the PyTorch reference drops with the same mask."""
    x, p = c.call.args[0], float(arg(c.call, 1, "p", 0.5))
    if not 0.0 < p < 1.0:
        raise c.fail(f"p={p}: the runtime drops a share 0 < p < 1")
    return Fwd("dropout", [x], {"n": x.numel(), "p": p, "salt": c.tracer.dropout_calls[c.call.id]}, c.call.result,
               2 * x.numel())


def _masked(c: Ctx, a: Any, b: Any) -> Fwd | None:
    """x * mask, mask a bernoulli_ draw divided by its keep share (torchvision's stochastic_depth; the
    tracer follows the mask, graph/tracer.py): a dropout node with one draw per row of x, the row being
    what the mask's trailing 1s span. None when neither operand is such a mask."""
    masks = c.tracer.masks
    if isinstance(a, torch.Tensor) and id(a) in masks:
        a, b = b, a
    mask = masks.get(id(b)) if isinstance(b, torch.Tensor) else None
    if mask is None or not c.live(a):
        return None
    if not mask.scaled:
        raise c.fail(f"x times a bernoulli_({mask.kept}) mask not divided by {mask.kept}; the runtime's dropout "
                     f"scales what it keeps by 1 / (1 - p), as torchvision's stochastic_depth does")
    if not 0.0 < mask.kept <= 1.0:
        raise c.fail(f"a mask keeping a share {mask.kept}: the runtime keeps a share 0 < 1 - p <= 1")
    shape = [1] * (a.dim() - b.dim()) + list(b.shape)
    lead = len(shape)
    while lead and shape[lead - 1] == 1:
        lead -= 1
    if b.dim() > a.dim() or shape[:lead] != list(a.shape[:lead]):
        raise c.fail(f"x of {list(a.shape)} times a mask of {list(b.shape)}: the runtime draws a mask of x's "
                     f"leading dims then 1s ([N, 1, ..., 1] per sample, [1, ..., 1] per batch)")
    attrs = {"n": a.numel(), "p": 1.0 - mask.kept, "salt": mask.salt, "row": numel(list(a.shape[lead:]))}
    return Fwd("dropout", [a], attrs, c.call.result, 2 * a.numel())


def _hardtanh(c: Ctx) -> Fwd:
    """hardtanh, relu6, and clamp / clip with constant bounds (both is hardtanh, a lower bound of 0
    alone is relu)."""
    x = c.call.args[0]
    if c.call.name.startswith("relu6"):
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": 0.0, "hi": 6.0}, c.call.result, x.numel())
    if c.call.name.startswith("hardtanh"):
        lo, hi = float(arg(c.call, 1, "min_val", -1.0)), float(arg(c.call, 2, "max_val", 1.0))
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": lo, "hi": hi}, c.call.result, x.numel())
    lo, hi = arg(c.call, 1, "min"), arg(c.call, 2, "max")
    if not all(v is None or isinstance(v, int | float) for v in (lo, hi)):
        raise c.fail("clamp with tensor bounds: the runtime clamps to constants")
    if lo is not None and hi is not None:
        return Fwd("hardtanh", [x], {"n": x.numel(), "lo": float(lo), "hi": float(hi)}, c.call.result, x.numel())
    if lo is not None and float(lo) == 0.0:
        return Fwd("relu", [x], {"n": x.numel()}, c.call.result, x.numel())
    raise c.fail(f"clamp(min={lo}, max={hi}): the runtime clamps to both bounds (hardtanh) or at 0 from below (relu)")


def _pool_args(c: Ctx, what: str) -> tuple[torch.Tensor, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """A 2-d pooling call's input, window, stride and padding as (h, w) pairs (stride defaults to the
    window), refused in one line where the model blob cannot hold them."""
    x = c.call.args[0]
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v) if len(v) == 2 else (v[0], v[0])  # noqa: E731
    k = pair(arg(c.call, 1, "kernel_size"))
    s = pair(arg(c.call, 2, "stride") or k)
    p = pair(arg(c.call, 3, "padding", 0))
    if "pool1d" in c.call.name and x.dim() == 3:  # a 1-d pool: a 2-d one over a map one row high
        x = x.unsqueeze(2)  # shapes only: the node reads the traced tensor
        k, s, p = (1, _one(k[1])), (1, _one(s[1])), (0, _one(p[1]))
    if x.dim() != 4:
        raise c.fail(f"{what} of a {x.dim()}-d tensor: the runtime pools 4-d maps [N, C, H, W]")
    if max(p) > 255 or max(s) > 256 or max(x.shape[2:]) > 0xFFFF:
        raise c.fail(f"padding {p}, stride {s} on a {tuple(x.shape[2:])} map: the runtime takes padding up to 255, "
                     "stride up to 256, maps up to 65535")
    return x, k, s, p


def _max_pool2d(c: Ctx) -> Fwd:
    """max_pool2d: 2x2 windows of stride 2 on even maps as maxpool2d (the fast kernel), any other window,
    stride, padding or ceil_mode as maxpool2d_general (dilation 1)."""
    x, k, s, p = _pool_args(c, "max_pool2d")
    d = arg(c.call, 4, "dilation", 1)
    ceil = bool(arg(c.call, 5, "ceil_mode", False))
    if d not in (1, (1, 1), [1, 1]):
        raise c.fail(f"dilation {d}: the runtime pools dense windows (dilation 1)")
    H, W = x.shape[2], x.shape[3]
    flops = c.call.result.numel() * k[0] * k[1]
    if k == s == (2, 2) and p == (0, 0) and H % 2 == 0 and W % 2 == 0:
        return Fwd("maxpool2d", [c.call.args[0]], {"B": x.shape[0], "C": x.shape[1], "H": H, "W": W, "k": 2},
                   c.call.result, flops)
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": H, "W": W, "kh": k[0], "kw": k[1], "sh": s[0], "sw": s[1],
             "ph": p[0], "pw": p[1], "ceil": int(ceil)}
    return Fwd("maxpool2d_general", [c.call.args[0]], attrs, c.call.result, flops)


def _avg_pool2d(c: Ctx) -> Fwd:
    """avg_pool2d with any window, stride and padding (ceil_mode False, no divisor override)."""
    x, k, s, p = _pool_args(c, "avg_pool2d")
    if arg(c.call, 4, "ceil_mode", False) or arg(c.call, 6, "divisor_override") is not None:
        raise c.fail("the runtime averages with ceil_mode False and the window's own divisor")
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3], "kh": k[0], "kw": k[1],
             "sh": s[0], "sw": s[1], "ph": p[0], "pw": p[1],
             "include_pad": int(bool(arg(c.call, 5, "count_include_pad", True)))}
    return Fwd("avgpool2d", [c.call.args[0]], attrs, c.call.result, c.call.result.numel() * k[0] * k[1])


def _interpolate(c: Ctx) -> Fwd:
    """F.interpolate / nn.Upsample in mode nearest by whole factors (given as factors or as a size)."""
    x = c.call.args[0]
    if arg(c.call, 3, "mode", "nearest") != "nearest" or x.dim() != 4:
        raise c.fail(f"mode {arg(c.call, 3, 'mode', 'nearest')!r} on a {x.dim()}-d tensor: the runtime upsamples "
                     "4-d maps in mode 'nearest'")
    H, W = x.shape[2], x.shape[3]
    Ho, Wo = c.call.result.shape[2], c.call.result.shape[3]
    if Ho % H or Wo % W:
        raise c.fail(f"{H}x{W} -> {Ho}x{Wo}: the runtime upsamples by whole factors")
    attrs = {"B": x.shape[0], "C": x.shape[1], "H": H, "W": W, "sh": Ho // H, "sw": Wo // W}
    return Fwd("upsample", [x], attrs, c.call.result, 0)


def _mean(c: Ctx) -> Fwd:
    """mean over adjacent dims, and adaptive_avg_pool2d to one element per map."""
    if c.call.name.startswith("adaptive_avg_pool"):
        return _adaptive_avg_pool2d(c)
    x = c.call.args[0]
    dims = arg(c.call, 1, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or range(x.dim()))
    dims = sorted(d % x.dim() for d in dims)
    if dims != list(range(dims[0], dims[-1] + 1)) or arg(c.call, 2, "keepdim", False):
        raise c.fail(f"mean over dims {dims}: the runtime reduces adjacent dims, keepdim False")
    shape = list(x.shape)
    attrs = {"outer": numel(shape[:dims[0]]), "r": numel(shape[dims[0]:dims[-1] + 1]),
             "inner": numel(shape[dims[-1] + 1:])}
    return Fwd("mean", [x], attrs, c.call.result, x.numel())


def _adaptive_avg_pool2d(c: Ctx) -> Fwd:
    """adaptive_avg_pool2d (and 1d) to one element per map: the mean of each map."""
    x, size = c.call.args[0], arg(c.call, 1, "output_size")
    if size not in (1, (1,), (1, 1), [1], [1, 1]) or x.dim() != (3 if "1d" in c.call.name else 4):
        raise c.fail(f"output size {size}: the runtime averages the whole map (output size 1)")
    attrs = {"outer": x.shape[0] * x.shape[1], "r": numel(list(x.shape[2:])), "inner": 1}
    return Fwd("mean", [x], attrs, c.call.result, x.numel())


def _reshape(op: str) -> Callable[[Ctx], Fwd]:
    def handler(c: Ctx) -> Fwd:
        x = c.call.args[0]
        if op == "flatten" and x.dim() > 1 and c.call.result.shape[0] != x.shape[0]:
            raise c.fail("flatten must keep the batch dimension (start_dim=1)")
        return Fwd(op, [x], {"n": x.numel()}, c.call.result, 0)
    return handler


def merged_permute(shape: list[int], perm: list[int]) -> tuple[list[int], list[int]]:
    """The same permute with every run of input dims that stays together, in order, merged into one: the
    channel shuffle's 5-d transpose (b, g, c/g, h, w) -> (b, c/g, g, h, w) is the 4-d (b, g, c/g, h*w) one."""
    runs: list[list[int]] = []  # runs of input dims, in output order
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    merged = [numel([shape[i] for i in runs[r]]) for r in order]
    return merged, [order.index(r) for r in range(len(runs))]


def _permute(c: Ctx) -> Fwd:
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
    shape = list(x.shape)
    if nd > 4:  # (only then: a 4-d permute keeps the attributes, and the profile keys, it always had)
        shape, perm = merged_permute(shape, perm)
        nd = len(perm)
    if nd > 4:
        raise c.fail(f"a {nd}-d permute (after merging the dims it keeps together); the runtime permutes up to 4 dims")
    pad = 4 - nd  # leading unit dims, so every permute is a 4-d one
    dims = [1] * pad + shape
    perm = list(range(pad)) + [p + pad for p in perm]
    attrs = {f"d{i}": dims[i] for i in range(4)} | {f"p{i}": perm[i] for i in range(4)}
    return Fwd("permute", [x], attrs, c.call.result, 0)


def _binary(c: Ctx) -> Fwd:
    """x + y, x - y, x * y, x / y: elementwise on two activations, or an affine map by a scalar."""
    name = {"scale": "div"}.get(CALL_OP[c.call.name], CALL_OP[c.call.name])  # x / y is a scale by 1 / y
    a, b = c.call.args[0], c.call.args[1]
    if name == "mul" and (drop := _masked(c, a, b)) is not None:  # stochastic depth
        return drop
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
    pre: list[Fwd] = []
    if c.live(a) != c.live(b) and (c.param(a) or c.param(b)):
        # an activation and a parameter (a learned positional embedding, a layer scale): the parameter is
        # first made an activation by an embedding node reading its rows in order (ids arange), so it trains
        # through embedding's backward, and the op is one between two activations
        p = a if c.param(a) else b
        d = p.shape[-1] if p.dim() else 1
        t = torch.empty(p.shape, device=p.device)
        pre.append(Fwd("embedding", [], {"n": p.numel() // d, "V": p.numel() // d, "D": d, "ids": 1}, t, 0,
                       {"w": p}))
        a, b = (t, b) if p is a else (a, t)
    made = {id(f.out) for f in pre}
    if not all(c.live(v) or id(v) in made for v in (a, b)):
        raise c.fail("an elementwise op between an activation and a constant tensor; the runtime's elementwise "
                     "ops take two activations or parameters (register the constant as an nn.Parameter with "
                     "requires_grad=False, or compute it from the input)")
    shapes = f"tensors {list(a.shape)} and {list(b.shape)}"
    if name not in ("add", "sub", "mul") or alpha != 1:
        raise c.fail(f"elementwise {name} of {shapes} (alpha {alpha}); the runtime has add, sub and mul")
    out = list(c.call.result.shape)
    if a.numel() == b.numel() == numel(out):  # the same elements, whatever size-1 dims either has
        return Fwd(name, [a, b], {"n": a.numel(), "m": b.numel()}, c.call.result, a.numel(), pre=pre)
    if list(a.shape) != out:
        if name == "sub":  # sub is not commutative: its broadcast operand must be y
            raise c.fail(f"x - y of {shapes}, y the larger (broadcast) operand; the runtime repeats y over x")
        a, b = b, a  # add and mul commute: a is the operand of the output's shape
    view = bcast_view(list(a.shape), list(b.shape))
    if view is None:
        raise c.fail(f"elementwise {name} of {shapes}: the runtime repeats one operand along one run of the "
                     f"other's dims, [outer, inner] over [outer, r, inner] (e.g. [N, C, 1, 1] over [N, C, H, W])")
    outer, r, inner = view
    attrs = {"n": a.numel(), "m": b.numel()}
    if r > 1 and outer > 1:  # absent: inner = m, b repeated over a's leading dims
        attrs["inner"] = inner
    return Fwd(name, [a, b], attrs, c.call.result, a.numel(), pre=pre)


def bcast_view(big: list[int], small: list[int]) -> tuple[int, int, int] | None:
    """(outer, r, inner) such that `small`, broadcast to `big`, is b[outer, inner] repeated r times over
    a[outer, r, inner]; None when its repeated dims are not one run of adjacent dims of `big` (size-1
    dims of `big` are no dims: they squeeze away) or `small` does not broadcast to `big`."""
    if len(small) > len(big):
        return None
    sizes = [1] * (len(big) - len(small)) + small
    runs: list[tuple[bool, int]] = []  # (repeated, size) of big's dims, adjacent dims of one kind merged
    for dim, size in zip(big, sizes, strict=True):
        if size not in (1, dim):
            return None
        if dim == 1:
            continue
        repeated = size == 1
        if runs and runs[-1][0] == repeated:
            runs[-1] = (repeated, runs[-1][1] * dim)
        else:
            runs.append((repeated, dim))
    kinds = [rep for rep, _ in runs]
    if kinds.count(True) > 1:
        return None
    if True not in kinds:
        return numel(big), 1, 1
    k = kinds.index(True)
    return numel([size for _, size in runs[:k]]), runs[k][1], numel([size for _, size in runs[k + 1:]])


def _matmul(c: Ctx) -> Fwd:
    a, b = c.call.args[0], c.call.args[1]
    if not (c.live(a) and c.live(b)) or a.dim() < 2 or b.dim() < 2 or a.shape[:-2] != b.shape[:-2]:
        raise c.fail(f"matmul of {list(a.shape)} and {list(b.shape)}: the runtime multiplies two activations "
                     f"with equal batch dims (for x @ W use nn.Linear)")
    batch = numel(list(a.shape[:-2]))
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    return Fwd("matmul", [a, b], {"batch": batch, "M": m, "K": k, "N": n}, c.call.result, 2 * batch * m * k * n)


def _softmax(c: Ctx) -> Fwd:
    """softmax and log_softmax over the last dim."""
    op = CALL_OP[c.call.name]
    x, dim = c.call.args[0], arg(c.call, 1, "dim")
    if dim is None or dim % x.dim() != x.dim() - 1:
        raise c.fail(f"{op} over dim {dim}; the runtime normalises the last dim")
    d = x.shape[-1]
    return Fwd(op, [x], {"rows": x.numel() // d, "D": d}, c.call.result, 5 * x.numel())


def _embedding(c: Ctx) -> Fwd:
    ids, w = c.call.args[0], c.call.args[1]
    if not c.param(w):
        raise c.fail("the embedding table must be a parameter")
    src = c.tracer.const_index(ids) if not c.live(ids) else 0
    if src is None:
        raise c.fail("indices must be the model's input or torch.arange / torch.zeros")
    attrs = {"n": ids.numel(), "V": w.shape[0], "D": w.shape[1], "ids": src}
    return Fwd("embedding", [ids] if c.live(ids) else [], attrs, c.call.result, 0, {"w": w})


def _cat(c: Ctx) -> Fwd:
    """torch.cat of two to four activations along one dim: rows of [outer, size x inner] side by side."""
    xs, dim = list(c.call.args[0]), arg(c.call, 1, "dim", 0)
    if not 2 <= len(xs) <= 4 or not all(c.live(t) for t in xs):
        raise c.fail(f"cat of {len(xs)} tensors: the runtime joins two to four activations")
    d = dim % xs[0].dim()
    outer = numel(list(xs[0].shape[:d]))
    lens = [numel(list(t.shape[d:])) for t in xs]
    attrs = {"outer": outer, **{f"l{i}": (lens[i] if i < len(lens) else 0) for i in range(4)}}
    return Fwd("cat", xs, attrs, c.call.result, 0)


def _basic_slice(x: torch.Tensor, idx: Any) -> dict[str, int] | None:
    """x[:, a:b] (step 1, along one dim, every other dim whole) as a slice node's attributes; None if not that."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if not idx or len(idx) > x.dim() or not all(isinstance(i, slice) for i in idx):
        return None
    cut = [d for d, i in enumerate(idx) if i != slice(None)]
    if len(cut) != 1 or idx[cut[0]].step not in (None, 1):
        return None
    d = cut[0]
    start, stop, _ = idx[d].indices(x.shape[d])
    return _columns(list(x.shape), d, start, stop - start) if stop > start else None


def _columns(shape: list[int], d: int, start: int, size: int) -> dict[str, int]:
    """A slice node's attributes for positions [start, start + size) of dim d: x as rows [outer, total]."""
    inner = numel(shape[d + 1:])
    return {"outer": numel(shape[:d]), "total": shape[d] * inner, "offset": start * inner, "len": size * inner}


def _slice(c: Ctx) -> list[Fwd]:
    """chunk, split, split_with_sizes, tensor_split and unbind along one dim: each piece is the columns
    [offset, offset + len) of x's rows [outer, dim's size x inner], a node of its own (the tracer makes those
    a later op reads)."""
    x = c.call.args[0]
    dim = arg(c.call, 1, "dim", 0) if c.call.name == "unbind" else arg(c.call, 2, "dim", 0)
    d = int(dim) % x.dim()
    offset, out = 0, []
    for p in c.call.outputs:
        size = 1 if c.call.name == "unbind" else p.shape[d]
        if size == 0:
            raise c.fail(f"an empty piece along dim {d}: the runtime's pieces hold at least one element")
        out.append(Fwd("slice", [x], _columns(list(x.shape), d, offset, size), p, 0))
        offset += size
    return out


def _getitem(c: Ctx) -> Fwd:
    x, idx = c.call.args[0], c.call.args[1]
    cut = _basic_slice(x, idx)
    if cut is not None:
        return Fwd("slice", [x], cut, c.call.result, 0)
    if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] == slice(None) and isinstance(idx[1], int)
            and x.dim() == 3):
        raise c.fail(f"indexing {idx!r}: the runtime selects one position of a [B, S, D] tensor, x[:, i]")
    attrs = {"B": x.shape[0], "S": x.shape[1], "D": x.shape[2], "index": idx[1] % x.shape[1]}
    return Fwd("select", [x], attrs, c.call.result, 0)


# The handler of each op the tracer makes from a PyTorch call (the op's `calls` in poet.ops): it reads the
# call's arguments into the node's attributes. A pointwise op of the table (its `flops`) needs none.
HANDLERS: dict[str, Callable[[Ctx], Fwd | list[Fwd]]] = {
    "linear": _linear, "conv2d": _conv2d, "batchnorm": _batch_norm, "layernorm": _layer_norm, "hardtanh": _hardtanh,
    "maxpool2d": _max_pool2d, "avgpool2d": _avg_pool2d, "upsample": _interpolate, "mean": _mean,
    "flatten": _reshape("flatten"), "reshape": _reshape("reshape"), "permute": _permute,
    **{op: _binary for op in ("add", "sub", "mul", "scale")}, "matmul": _matmul,
    "softmax": _softmax, "log_softmax": _softmax, "embedding": _embedding, "select": _getitem, "cat": _cat,
    "dropout": _dropout, "slice": _slice,
}
# PyTorch call name -> the op it becomes (the handler may pick a sibling: clamp(min=0) is a relu)
CALL_OP = {call: op.name for op in OPS.values() for call in op.calls}


def _composite(c: Ctx) -> Fwd:
    """Attention reaches the tracer whole only in a form graph/composite.py does not write out: say which."""
    raise c.fail(composite.why_not(c.call.name, c.call.args, c.call.kwargs) or "not written out")


FORWARD: dict[str, Callable[[Ctx], Fwd | list[Fwd]]] = {
    call: HANDLERS[op] if op in HANDLERS else _pointwise(op, OPS[op].flops) for call, op in CALL_OP.items()} | {
    name: _composite for name in composite.NAMES}
SUPPORTED = ", ".join(op.traced or "/".join(c for c in op.calls if not c.startswith("_") and not c.endswith("_"))
                      for op in OPS.values() if op.calls or op.traced) + \
    ", nn.MultiheadAttention and scaled_dot_product_attention (unmasked)"
