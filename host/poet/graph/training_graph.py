"""poet's training graph: one training step of a model as plain data (docs/graph.md).

Nodes in topological order, one per kernel the C runtime runs: the input, the
forward pass, the loss, the backward pass and the optimizer. `poet.tracer` makes
it from a PyTorch model; `poet graph -o` writes it as JSON and anything that
writes the same JSON can feed the planner.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from poet.errors import UsageError
from poet.graph.dtypes import F32
from poet.graph.quantise import i8_bytes


@dataclass(frozen=True)
class StoredParam:
    """One entry of the board's parameter table (TrainingGraph.stored): its elements and where they live."""

    elems: int
    trained: bool  # in RAM, with a gradient and optimizer state
    moved: bool = False  # untrained, written by the forward pass: in RAM, without a gradient
    int8: bool = False  # frozen, stored int8 with one scale
    aux: bool = False  # frozen int8, on aux storage


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
    attrs: dict[str, Any] = field(default_factory=dict)  # ints, and floats for eps, scale factors
    flops: int = 0
    saved: list[int] = field(default_factory=list)  # backward nodes: the forward tensors among deps

    @property
    def recomputable(self) -> bool:
        return self.kind in ("forward", "loss")


@dataclass
class TrainingGraph:
    model: str
    batch: int
    input_shape: list[int]  # one sample
    classes: int
    params: list[tuple[str, list[int]]]  # every parameter, in upload order; attrs "w"/"b" index it
    nodes: list[GraphNode]
    frozen: list[str] = field(default_factory=list)  # not trained: no gradient, no optimizer state
    train: str = "all"  # the fine-tuning mode the graph was traced for
    input_dtype: str = "float32"
    # the optimizer node's settings: {"name": "sgd"}, {"name": "momentum", "momentum": m} or
    # {"name": "adam", "beta1": b1, "beta2": b2, "eps": e}; the learning rate comes with each step
    optimizer: dict[str, Any] = field(default_factory=lambda: {"name": "sgd"})
    # the loss node's op: cross_entropy (logits against the staged labels), or mse / l1 (the output
    # against the input: an autoencoder)
    loss: str = "cross_entropy"

    @property
    def vocab(self) -> int | None:
        """How many token ids an int64 input may hold (0..vocab-1): the smallest table an embedding looks
        the input up in. None for a float input."""
        tables = [n.attrs["V"] for n in self.nodes if n.op == "embedding" and n.attrs["ids"] == 0]
        return min(tables) if self.input_dtype == "int64" and tables else None

    @property
    def param_elems(self) -> list[int]:
        return [numel(shape) for _, shape in self.params]

    @property
    def param_bytes(self) -> int:
        """Bytes of the trainable parameters as the board stores them (a weight trained in part: its share,
        `stored`): these, their gradients and optimizer state live in RAM."""
        frozen = set(self.frozen)
        return F32 * sum(t.elems for (n, _), t in zip(self.params, self.stored, strict=False) if n not in frozen)

    @property
    def stored(self) -> list[StoredParam]:
        """The board's parameter table (docs/spec.md 2): every parameter in upload order, then the frozen rest
        of each weight trained in part (partial_weights), in that order. Such a weight is stored split: its
        share in RAM, trained (only it has a gradient and optimizer state), the rest frozen in flash, read in
        place; its layer makes the whole weight a block of output channels at a time (firmware/core/ops/conv.c).
        tiny-training keeps the rest of a partly updated weight in flash the same way."""
        frozen, moved, i8, aux = set(self.frozen), self.moved, self.int8_params, self.streamed_params
        shares = self.partial_weights
        out = [StoredParam(share_elems(shape, *shares[name]) if name in shares else numel(shape),
                           name not in frozen, name in moved, name in i8, name in aux) for name, shape in self.params]
        return out + [StoredParam(numel(shape) - out[i].elems, False) for i, (name, shape) in enumerate(self.params)
                      if name in shares]

    @property
    def rests(self) -> dict[int, int]:
        """Each weight trained in part (its parameter index) -> its frozen rest's index in `stored`."""
        shares = self.partial_weights
        split = [i for i, (name, _) in enumerate(self.params) if name in shares]
        return {i: len(self.params) + k for k, i in enumerate(split)}

    @property
    def moved(self) -> set[str]:
        """Untrained tensors the forward pass writes: the running statistics of a batch norm in training
        mode (alone or fused into a head, poet.plan.transform.fuse). They stay in RAM with no gradient (the board
        does not write flash during a step)."""
        return {self.params[n.attrs[k]][0] for n in self.nodes if n.op in ("batchnorm", "bn_relu_mean")
                for k in ("rm", "rv") if n.attrs.get(k, -1) >= 0}

    @property
    def partial_weights(self) -> dict[str, tuple[int, int]]:
        """Conv weights trained for a share only (--train NAME@R): name -> (axis, ck), the weight's first ck
        input channels (axis 1), or a depthwise conv's first ck channels (axis 0). The rest of each gets no
        gradient, so no optimizer moves it."""
        return {self.params[n.attrs["w"]][0]: (0 if n.attrs.get("groups", 1) == n.attrs["C"] == n.attrs["O"] else 1,
                                               n.attrs["ck"]) for n in self.nodes
                if n.op == "conv2d_bwd" and "ck" in n.attrs}

    @property
    def updates_in_backward(self) -> bool:
        """Whether the board updates every trained parameter in the backward pass, so it keeps no
        gradients (docs/spec.md 3, "Update in backward"; tiny-training's in-place update): each is written
        by one backward node whose kernel hands each gradient element over once, finished (UPDATING_BWD),
        and nothing after that node reads the parameter or an output made from it (a recompute there
        would see the updated weight). Otherwise the gradients are stored and the optimizer node
        applies them at the end of the step; both give the same weights."""
        frozen, moved = set(self.frozen), self.moved
        trained = {i for i, (name, _) in enumerate(self.params) if name not in frozen and name not in moved}
        writer: dict[int, int] = {}
        for n in self.nodes:
            for k in ("w", "b"):
                p = n.attrs.get(k, -1)
                if n.kind == "backward" and p in trained:
                    if n.op not in UPDATING_BWD or p in writer:
                        return False
                    writer[p] = n.id
        read_by = readers(self)
        for n in self.nodes:
            for k in PARAM_ATTRS:
                p = n.attrs.get(k, -1)
                last_use = max([n.id, *read_by[n.id]])
                if p in writer and n.id != writer[p] and last_use > writer[p]:
                    return False
        return True

    @property
    def int8_params(self) -> set[str]:
        """Frozen weights stored int8 (one fp32 scale each): those an int8 layer reads from the parameter
        itself (two deps, poet.plan.transform.precision), which nothing else reads, every static-int8 conv's, and
        the weight-only int8 ones of fp32 linear and conv layers (`w8`, poet.plan.transform.placement)."""
        return {self.params[n.attrs["w"]][0] for n in self.nodes
                if (n.op in ("linear_i8", "conv2d_i8") and len(n.deps) == 2) or n.op == "conv2d_q"
                or (n.op in W8_READERS and n.attrs.get("w8"))}

    @property
    def streamed_params(self) -> set[str]:
        """Frozen int8 weights kept on the board's aux storage (the SD card), not in flash: those of the
        nodes marked `stream` (static-int8 convs, and frozen linears whose weight is stored int8), which read
        them a few output channels at a time (poet.plan.transform.placement)."""
        return {self.params[n.attrs["w"]][0] for n in self.nodes if n.op in STREAMING and n.attrs.get("stream")}

    @property
    def frozen_bytes(self) -> int:
        """Bytes of the tensors read in place from the board's flash: frozen, never written, not streamed."""
        return sum(i8_bytes(t.elems) if t.int8 else F32 * t.elems for t in self.stored
                   if not (t.trained or t.moved or t.aux))

    @property
    def x_elems(self) -> int:
        n = self.batch
        for d in self.input_shape:
            n *= d
        return n

    def activation_bytes(self) -> int:
        return sum(n.bytes for n in self.nodes if n.kind in ("input", "forward", "loss"))

    def saved_ids(self) -> set[int]:
        """The forward tensors (and input) some backward node reads."""
        return {d for n in self.nodes if n.kind == "backward" for d in n.saved}

    def saved_bytes(self) -> int:
        """Activation bytes the backward pass keeps: what PyTorch's saved tensors hold (graphcheck)."""
        return sum(self.nodes[i].bytes for i in self.saved_ids())

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json_text())

    def to_json_text(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, path: str | Path) -> TrainingGraph:
        """A graph file poet wrote; one from a user is read by poet.graph.file.read_graph, which checks it."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrainingGraph:
        """The graph in a parsed graph file (the JSON schema of docs/graph.md)."""
        raw = dict(raw)
        raw["nodes"] = [GraphNode(**n) for n in raw["nodes"]]
        raw["params"] = [(p[0], list(p[1])) for p in raw["params"]]
        for n in raw["nodes"]:
            if n.kind == "backward" and not n.saved:  # files from before "saved" was written
                n.saved = [d for d in n.deps if raw["nodes"][d].kind in ("input", "forward", "loss")]
        return cls(**raw)


# the ops that may read their weight from aux storage a few output rows at a time (`stream` set): a
# static-int8 conv, an int8 conv whose weight is stored int8 (two deps), a linear whose is (w8)
STREAMING = ("conv2d_q", "conv2d_i8", "linear")
# the fp32 ops that read a frozen weight stored int8 as w = q x scale (weight-only int8, `w8`)
W8_READERS = ("linear", "linear_bwd", "conv2d", "conv2d_bwd")
# the node attributes that name a parameter (an index into TrainingGraph.params)
PARAM_ATTRS = ("w", "b", "rm", "rv", "scale", "out_scale")
# backward ops whose kernel hands over each element of a parameter gradient once, finished, so it can
# apply the update there (firmware/core/kernels/kernels.h); the layer norm's and the embedding's add
# into an element once per row
UPDATING_BWD = frozenset({"linear_bwd", "conv2d_bwd", "batchnorm_bwd", "batchnorm_eval_bwd", "bn_relu_mean_bwd"})

# torch.optim's defaults for what the runtime implements (SGD without weight decay or dampening)
OPTIMIZER_DEFAULTS: dict[str, dict[str, float]] = {
    "sgd": {}, "momentum": {"momentum": 0.9}, "adam": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}}
# arithmetic per trained element per step, for the optimizer node's cost estimate
OPTIMIZER_FLOPS = {"sgd": 2, "momentum": 4, "adam": 12}


NAME_MAX = 500  # characters of a node, module, op or parameter name: traced names are under 100


def name_problem(v: Any) -> str | None:
    """Why `v` cannot be a name poet shows (of a node, module, op, parameter or model); None when it can.
    A control character would print a name over two lines, or rewrite the terminal, wherever it is shown."""
    if not isinstance(v, str):
        return "must be text"
    if not v.strip():
        return "must not be empty"
    if len(v) > NAME_MAX:
        return f"is {len(v)} characters long; at most {NAME_MAX}"
    bad = next((c for c in v if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        return f"holds the control character {bad!r} (names are printed, one to a line)"
    return None


def parse_optimizer(text: str) -> dict[str, Any]:
    """`sgd`, `momentum[:M]`, `adam[:B1,B2,EPS]` -> the settings TrainingGraph.optimizer holds."""
    name, _, args = text.partition(":")
    if name not in OPTIMIZER_DEFAULTS:
        raise UsageError(f"--optimizer {text!r}: give sgd, momentum[:M] or adam[:BETA1,BETA2,EPS]")
    keys = list(OPTIMIZER_DEFAULTS[name])
    out: dict[str, Any] = {"name": name, **OPTIMIZER_DEFAULTS[name]}
    if args:
        try:
            values = [float(v) for v in args.split(",")]
        except ValueError:
            values = []
        if not values or len(values) > len(keys):
            raise UsageError(f"--optimizer {text!r}: {name} takes {', '.join(keys) or 'no settings'}")
        out.update(zip(keys, values, strict=False))
    for k in ("momentum", "beta1", "beta2"):
        if k in out and not 0.0 <= out[k] < 1.0:
            raise UsageError(f"--optimizer {text!r}: {k} must be in [0, 1)")
    if "eps" in out and not 0.0 < out["eps"] < 1.0:  # an infinite eps would make every step a no-op
        raise UsageError(f"--optimizer {text!r}: eps must be in (0, 1)")
    return out


def with_optimizer(g: TrainingGraph, optimizer: dict[str, Any] | str) -> TrainingGraph:
    """The same graph stepping with another optimizer (its state changes the fixed RAM, not the arena)."""
    opt = parse_optimizer(optimizer) if isinstance(optimizer, str) else dict(optimizer)
    nodes = list(g.nodes)
    last = nodes[-1]
    nodes[-1] = replace(last, flops=OPTIMIZER_FLOPS[opt["name"]] * (g.param_bytes // F32))
    return replace(g, nodes=nodes, optimizer=opt)


def readers(g: TrainingGraph) -> dict[int, list[int]]:
    """Node id -> the nodes that read its output (each once, however many of its deps it is)."""
    out: dict[int, list[int]] = {n.id: [] for n in g.nodes}
    for n in g.nodes:
        for d in dict.fromkeys(n.deps):
            out[d].append(n.id)
    return out


def conv_window(attrs: dict[str, Any]) -> tuple[int, int, int, int]:
    """A conv node's kernel height and width and its padding of rows and of columns. A square kernel
    with the same padding on both axes has only k and pad; kw and padw are given where they differ."""
    k, pad = int(attrs["k"]), int(attrs["pad"])
    return k, int(attrs.get("kw", k)), pad, int(attrs.get("padw", pad))


def numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def share_elems(shape: list[int], axis: int, ck: int) -> int:
    """The elements of a weight's share (TrainingGraph.partial_weights): its first ck along `axis`."""
    return numel(shape) // shape[axis] * ck


def summary(g: TrainingGraph) -> str:
    counts: dict[str, int] = {}
    for n in g.nodes:
        counts[n.kind] = counts.get(n.kind, 0) + 1
    flops = sum(n.flops for n in g.nodes)
    return (f"{g.model}: batch {g.batch}, {len(g.nodes)} nodes "
            f"({', '.join(f'{v} {k}' for k, v in counts.items())}), "
            f"activations {g.activation_bytes()} B (backward keeps {g.saved_bytes()} B), "
            f"parameters {g.param_bytes} B trained" + (f" + {g.frozen_bytes} B frozen" if g.frozen else "")
            + f", {flops / 1e6:.2f} MFLOP/step")


def layers_text(g: TrainingGraph) -> str:
    """The layers with parameters in forward order, one a line: what last:N and bias:K count from the end,
    named as layers: takes them, each parameter's shape and whether the graph's --train mode trains it (a
    share of a conv's input channels, NAME@R, shown as ck/C)."""
    frozen, partial = set(g.frozen), g.partial_weights
    seen: list[tuple[int, ...]] = []
    for n in g.nodes:
        ps = tuple(n.attrs[k] for k in ("w", "b") if n.kind == "forward" and n.attrs.get(k, -1) >= 0)
        if ps and (not seen or seen[-1] != ps):
            seen.append(ps)
    lines = [f"{len(seen)} layers with parameters (--train last:N and bias:K count from the last; "
             f"layers:NAME names one):"]
    for k, ps in enumerate(seen):
        module = g.params[ps[0]][0].rsplit(".", 1)[0]
        parts = []
        for p in ps:
            name, shape = g.params[p]
            axis, ck = partial.get(name, (1, 0))
            state = (f"trained (its first {ck} of {shape[axis]} {'input ' if axis else ''}channels)" if ck else
                     "frozen" if name in frozen else "trained")
            parts.append(f"{name.rsplit('.', 1)[-1]} {'x'.join(map(str, shape))} {state}")
        lines.append(f"  {len(seen) - k:>4}  {module}: " + ", ".join(parts))
    return "\n".join(lines)
