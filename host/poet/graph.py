"""Trace a PyTorch model's training step into poet's training graph.

The graph is plain data: nodes in topological order, one per kernel the C runtime
runs (see docs/spec.md section 2 for the op set), with the forward pass, the
loss, one backward node per forward op, and the optimizer. The tracer is
torch.fx: it sees module calls and functional calls (`torch.relu`,
`torch.flatten`) alike. An op outside the runtime's set is an error naming it.
"""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import fx, nn

from poet.errors import PoetError

SUPPORTED = ("Linear", "Conv2d (stride 1)", "ReLU", "MaxPool2d(2)", "Flatten")
F32 = 4


@dataclass
class GraphNode:
    id: int
    name: str  # qualified tensor name, e.g. "fc1/forward"
    module: str  # module path, e.g. "fc1"
    kind: str  # input | forward | loss | backward | optimizer
    op: str
    deps: list[int]
    bytes: int
    shape: list[int]
    attrs: dict[str, int] = field(default_factory=dict)
    flops: int = 0

    @property
    def recomputable(self) -> bool:
        return self.kind in ("forward", "loss")


@dataclass
class TrainingGraph:
    model: str
    batch: int
    input_shape: list[int]  # one sample
    classes: int
    params: list[tuple[str, list[int]]]  # trainable parameters in upload order
    nodes: list[GraphNode]

    @property
    def param_elems(self) -> list[int]:
        out = []
        for _, shape in self.params:
            n = 1
            for d in shape:
                n *= d
            out.append(n)
        return out

    @property
    def param_bytes(self) -> int:
        return F32 * sum(self.param_elems)

    @property
    def x_elems(self) -> int:
        n = self.batch
        for d in self.input_shape:
            n *= d
        return n

    @property
    def staging_bytes(self) -> int:
        """The batch the host uploads before each step: inputs (fp32) and labels (i32)."""
        return F32 * self.x_elems + 4 * self.batch

    def activation_bytes(self) -> int:
        return sum(n.bytes for n in self.nodes if n.kind in ("input", "forward", "loss"))

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def from_json(cls, path: str | Path) -> TrainingGraph:
        raw = json.loads(Path(path).read_text())
        raw["nodes"] = [GraphNode(**n) for n in raw["nodes"]]
        raw["params"] = [(p[0], list(p[1])) for p in raw["params"]]
        return cls(**raw)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []

    def add(self, name: str, module: str, kind: str, op: str, deps: list[int], shape: list[int],
            attrs: dict[str, int] | None = None, flops: int = 0, nbytes: int | None = None) -> int:
        nid = len(self.nodes)
        self.nodes.append(GraphNode(nid, name, module, kind, op, deps,
                                    F32 * _numel(shape) if nbytes is None else nbytes, shape,
                                    attrs or {}, flops))
        return nid


def trace(model: nn.Module, name: str, input_shape: tuple[int, ...], classes: int, batch: int) -> TrainingGraph:
    """The training step of `model` with mean cross-entropy loss and SGD, as a TrainingGraph."""
    try:
        gm = fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many types; the message is what matters to the user
        raise PoetError(f"cannot trace model {name!r} with torch.fx: {exc}") from exc
    modules = dict(gm.named_modules())
    params = [(pname, list(p.shape)) for pname, p in model.named_parameters() if p.requires_grad]
    pindex = {pname: i for i, (pname, _) in enumerate(params)}

    b = _Builder()
    shape_of: dict[str, list[int]] = {}
    node_of: dict[str, int] = {}
    fwd: list[tuple[int, str, str, dict[str, int]]] = []  # (node id, op, module, attrs) in order
    users = {n.name: len(n.users) for n in gm.graph.nodes}

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            shape = [batch, *input_shape]
            node_of[n.name] = b.add("input", "input", "input", "input", [], shape, {"n": _numel(shape)})
            shape_of[n.name] = shape
            continue
        if n.op == "output":
            out = n.args[0]
            logits = out.name if isinstance(out, fx.Node) else None
            if logits is None:
                raise PoetError(f"model {name!r} must return one logits tensor")
            continue
        if n.op == "get_attr":
            raise PoetError(f"model {name!r} reads tensor attribute {n.target!r} directly; "
                            f"only parameters of supported modules are allowed ({', '.join(SUPPORTED)})")
        args = [a for a in n.args if isinstance(a, fx.Node)]
        if len(args) != 1:
            raise PoetError(f"op {n.target} at {n.name} takes {len(args)} tensor inputs; "
                            f"this runtime supports single-input chains of {', '.join(SUPPORTED)}")
        src = args[0].name
        if users.get(src, 0) > 1:
            raise PoetError(f"tensor {src} feeds {users[src]} ops; branching graphs (residuals) are not "
                            f"supported yet, only chains of {', '.join(SUPPORTED)}")
        x_shape = shape_of[src]
        path, op, attrs, y_shape, flops = _lower_op(n, modules, pindex, x_shape, name)
        nid = b.add(f"{path}/forward", path, "forward", op, [node_of[src]], y_shape, attrs, flops)
        node_of[n.name] = nid
        shape_of[n.name] = y_shape
        fwd.append((nid, op, path, attrs))

    logits_id = node_of[logits]
    lshape = shape_of[logits]
    if lshape != [batch, classes]:
        raise PoetError(f"model {name!r} returns shape {lshape}, expected logits [{batch}, {classes}]")
    ce = {"B": batch, "classes": classes}
    b.add("loss/forward", "loss", "loss", "cross_entropy", [logits_id], [1], ce, 5 * batch * classes)
    grad = b.add("loss/backward", "loss", "backward", "cross_entropy_bwd", [logits_id], lshape, ce,
                 4 * batch * classes)
    for nid, op, path, attrs in reversed(fwd):
        node = b.nodes[nid]
        x_id = node.deps[0]
        needs_gx = b.nodes[x_id].kind != "input"
        x_shape = b.nodes[x_id].shape
        if op in ("linear", "conv2d"):
            bw_attrs = dict(attrs, need_grad_input=int(needs_gx))
            grad = b.add(f"{path}/backward", path, "backward", f"{op}_bwd", [grad, x_id], x_shape, bw_attrs,
                         2 * node.flops if needs_gx else node.flops, nbytes=None if needs_gx else 0)
        elif not needs_gx:
            continue  # a parameter-free op on the input: no gradient is wanted
        elif op == "relu":
            grad = b.add(f"{path}/backward", path, "backward", "relu_bwd", [grad, nid], x_shape, attrs,
                         node.flops)
        elif op == "maxpool2d":
            grad = b.add(f"{path}/backward", path, "backward", "maxpool2d_bwd", [grad, x_id], x_shape, attrs,
                         node.flops)
        elif op == "flatten":
            grad = b.add(f"{path}/backward", path, "backward", "flatten_bwd", [grad], x_shape, attrs, 0)
    b.add("optimizer/sgd", "optimizer", "optimizer", "sgd", [], [0], {},
          2 * sum(_numel(s) for _, s in params), nbytes=0)
    return TrainingGraph(name, batch, list(input_shape), classes, params, b.nodes)


def _lower_op(n: fx.Node, modules: dict[str, nn.Module], pindex: dict[str, int], x: list[int],
              model: str) -> tuple[str, str, dict[str, int], list[int], int]:
    """Map one fx node to (module path, runtime op, attributes, output shape, FLOPs)."""
    if n.op == "call_module":
        mod = modules[n.target]
        path = n.target.replace(".", "/")
        if isinstance(mod, nn.Linear):
            if len(x) != 2:
                raise PoetError(f"{path}: Linear on a {len(x)}-d input; flatten first")
            attrs = {"B": x[0], "in": mod.in_features, "out": mod.out_features,
                     "w": pindex[f"{n.target}.weight"],
                     "b": pindex[f"{n.target}.bias"] if mod.bias is not None else -1}
            return path, "linear", attrs, [x[0], mod.out_features], 2 * x[0] * mod.in_features * mod.out_features
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size
            if (mod.stride != (1, 1) or mod.dilation != (1, 1) or mod.groups != 1 or k[0] != k[1]
                    or mod.padding_mode != "zeros" or not isinstance(mod.padding, tuple)
                    or mod.padding[0] != mod.padding[1]):
                raise PoetError(f"{path}: Conv2d{tuple(k)} stride {mod.stride} groups {mod.groups} "
                                f"padding {mod.padding}: the runtime supports square kernels, stride 1, "
                                f"groups 1, symmetric zero padding")
            pad = mod.padding[0]
            ho, wo = x[2] + 2 * pad - k[0] + 1, x[3] + 2 * pad - k[0] + 1
            attrs = {"B": x[0], "C": x[1], "H": x[2], "W": x[3], "O": mod.out_channels, "k": k[0], "pad": pad,
                     "w": pindex[f"{n.target}.weight"],
                     "b": pindex[f"{n.target}.bias"] if mod.bias is not None else -1}
            y = [x[0], mod.out_channels, ho, wo]
            return path, "conv2d", attrs, y, 2 * _numel(y) * x[1] * k[0] * k[0]
        if isinstance(mod, nn.ReLU):
            return path, "relu", {"n": _numel(x)}, list(x), _numel(x)
        if isinstance(mod, nn.MaxPool2d):
            if mod.kernel_size not in (2, (2, 2)) or mod.stride not in (2, (2, 2)) or mod.padding not in (0, (0, 0)):
                raise PoetError(f"{path}: MaxPool2d{mod.kernel_size}: the runtime supports kernel 2, stride 2")
            return path, "maxpool2d", _pool_attrs(x, path), [x[0], x[1], x[2] // 2, x[3] // 2], _numel(x)
        if isinstance(mod, nn.Flatten):
            return path, "flatten", {"n": _numel(x)}, [x[0], _numel(x) // x[0]], 0
        raise PoetError(f"{path}: module {type(mod).__name__} is not in the runtime's op set "
                        f"({', '.join(SUPPORTED)})")
    if n.op in ("call_function", "call_method"):
        target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        path = n.name
        if n.target in (torch.relu, torch.nn.functional.relu) or target == "relu":
            return path, "relu", {"n": _numel(x)}, list(x), _numel(x)
        if n.target is torch.flatten or target == "flatten":
            start = n.args[1] if len(n.args) > 1 else n.kwargs.get("start_dim", 0)
            if start != 1:
                raise PoetError(f"{path}: flatten(x, {start}); only start_dim=1 keeps the batch dimension")
            return path, "flatten", {"n": _numel(x)}, [x[0], _numel(x) // x[0]], 0
        if n.target is operator.getitem:
            raise PoetError(f"{path}: indexing is not in the runtime's op set ({', '.join(SUPPORTED)})")
        raise PoetError(f"{path}: function {target} is not in the runtime's op set ({', '.join(SUPPORTED)}) "
                        f"in model {model!r}")
    raise PoetError(f"{n.name}: unsupported fx node kind {n.op}")


def _pool_attrs(x: list[int], path: str) -> dict[str, int]:
    if len(x) != 4 or x[2] % 2 or x[3] % 2:
        raise PoetError(f"{path}: MaxPool2d(2) needs an NCHW input with even H and W, got {x}")
    return {"B": x[0], "C": x[1], "H": x[2], "W": x[3]}


def summary(g: TrainingGraph) -> str:
    counts: dict[str, int] = {}
    for n in g.nodes:
        counts[n.kind] = counts.get(n.kind, 0) + 1
    flops = sum(n.flops for n in g.nodes)
    return (f"{g.model}: batch {g.batch}, {len(g.nodes)} nodes "
            f"({', '.join(f'{v} {k}' for k, v in counts.items())}), "
            f"activations {g.activation_bytes()} B, parameters {g.param_bytes} B, {flops / 1e6:.2f} MFLOP/step")
