"""Check a traced graph against PyTorch's own record of the same training step.

Two tools on the instrumentation layer:

- `saved_check`: the tensors PyTorch's autograd saves for backward (seen by
  `saved_tensors_hooks`) against the tensors the graph's backward nodes read.
  Tensor by tensor, each attributed to the graph node whose call made its
  storage; every difference must be one of `DOCUMENTED` (docs/graph.md) with the
  bytes the rule predicts, or it is reported as unexplained.
- `op_check`: every ATen op PyTorch ran, forward and backward, assigned to the
  graph node that accounts for it; and, per forward node, whether PyTorch ran
  backward work for it exactly when the graph has a backward node for it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from poet.graph.tracer import Traced, trace_step
from poet.graph.training_graph import GraphNode, TrainingGraph

INPLACE = {"relu_", "add_", "__iadd__"}
VIEWS = {"flatten", "reshape", "permute", "select", "slice"}

# Saved-tensor differences by design, by the op of the node whose backward saves the tensor: why, and
# which kinds of difference the reason covers: "internal" (PyTorch keeps a tensor made inside the call
# that no node outputs), "output" (PyTorch keeps a node's output the graph does not, or more bytes of it),
# "graph" (the graph keeps a node output PyTorch does not). docs/graph.md lists the same.
DOCUMENTED: dict[str, tuple[str, set[str]]] = {
    "batchnorm": ("PyTorch keeps the batch mean and 1/std per channel; the runtime recomputes them from x",
                  {"internal"}),
    "layernorm": ("PyTorch keeps the mean and 1/std per row; the runtime recomputes them from x", {"internal"}),
    "cross_entropy": ("PyTorch keeps log-softmax(logits) and the int64 labels; the runtime keeps the logits and "
                      "reads the labels from the staged batch", {"internal", "graph"}),
    "maxpool2d": ("PyTorch keeps the argmax indices (int64); the runtime finds the max again in x", {"internal"}),
    "maxpool2d_general": ("PyTorch keeps the argmax indices (int64); the runtime finds the max again in x",
                          {"internal"}),
    "l1": ("PyTorch keeps the difference output - target; the runtime keeps the output and subtracts again",
           {"internal", "graph"}),
    "dropout": ("PyTorch keeps the mask it drew; the runtime makes it again from the layer's salt and the step "
                "(graph/dropout.py)", {"internal"}),
    "mean": ("PyTorch's adaptive_avg_pool2d keeps its input only for its shape; the runtime keeps nothing",
             {"output"}),
    "avgpool2d": ("PyTorch's avg_pool2d keeps its input only for its shape; the runtime keeps nothing",
                  {"output"}),
    "matmul": ("PyTorch keeps contiguous copies of transposed operands; the runtime's operands are contiguous",
               {"internal", "graph"}),
    "linear": ("PyTorch's linear keeps a contiguous copy of a transposed input, made inside the call; the runtime's "
               "permute node made that copy, and the graph keeps it", {"internal"}),
    "embedding": ("PyTorch keeps indices as int64; the runtime's ids are int32 from the staged batch, or "
                  "generated (arange, zeros)", {"internal", "output"}),
    # with the weight frozen (--train bias): autograd saves what the full backward formula uses
    "conv2d (weight frozen)": ("PyTorch's convolution keeps its input even when only the bias trains; the "
                               "runtime needs the input only for the weight gradient", {"output"}),
    "batchnorm (weight frozen)": ("PyTorch keeps the input and statistics of a normalisation even when only "
                                  "its bias trains and no gradient flows further", {"internal", "output"}),
    "layernorm (weight frozen)": ("PyTorch keeps the input and statistics of a normalisation even when only "
                                  "its bias trains and no gradient flows further", {"internal", "output"}),
    "parameter": ("a parameter an op reads as an activation (x + P, x * g): PyTorch keeps the parameter, which is "
                  "not an activation; the graph keeps the copy the embedding node made of it", {"graph"}),
    "view": ("a view: PyTorch keeps the whole storage it views (x[:, 0] keeps all of x) and counts a "
             "reshaped alias once; the runtime copies views into tensors of their own", {"internal", "output",
                                                                                         "graph"}),
}


@dataclass
class Difference:
    tensor: str  # the node whose output it is, or "inside <node>" for a tensor made within a call
    savers: list[str]  # the nodes whose backward keeps it
    kind: str  # internal | output | graph (see DOCUMENTED)
    torch_bytes: int
    graph_bytes: int
    reason: str | None  # None: unexplained
    storage: int = 0  # the storage it is about (only to pair an in-place call's two differences)


@dataclass
class SavedReport:
    torch_bytes: int  # distinct storages autograd saved, parameters and buffers excluded
    graph_bytes: int  # TrainingGraph.saved_bytes()
    differences: list[Difference] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if d.reason is None]

    def render(self) -> str:
        lines = [f"PyTorch saves {self.torch_bytes} B, the graph keeps {self.graph_bytes} B"]
        for d in self.differences:
            lines.append(f"  {d.tensor:36s} {d.kind:8s} torch {d.torch_bytes:>9d} B  graph {d.graph_bytes:>9d} B  "
                         f"{d.reason or 'UNEXPLAINED (saved by ' + ', '.join(d.savers) + ')'}")
        return "\n".join(lines)


def real_step(model: nn.Module, name: str, input_shape: tuple[int, ...], classes: int, batch: int,
              input_dtype: str = "float32", train: str = "all", seed: int = 0, loss: str = "cross_entropy") -> Traced:
    """Trace the step and run it for real on a random batch (token ids 0/1 for int inputs)."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, *input_shape)
    x = (torch.randint(0, 2, shape, generator=g) if input_dtype == "int64" else torch.randn(shape, generator=g))
    labels = torch.randint(0, classes, (batch,), generator=g)
    return trace_step(model, name, x, labels, classes, input_dtype, train, real_step=True, loss=loss)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _storages(t: Traced) -> tuple[dict[int, int], dict[int, int], set[int]]:
    """storage -> the node whose call made it (views keep their base's node, in-place ops take it
    over); node -> the storage of its output; the nodes whose output PyTorch made as a view."""
    made = {_storage(t.x): 0}
    of_node = {0: _storage(t.x)}
    views: set[int] = set()
    for call in t.ins.calls:
        nid = t.node_of_call.get(call.id)
        if nid is None or not call.outputs:
            continue
        own = {_storage(i) for i in call.inputs}
        st = _storage(call.outputs[0])
        inplace = call.name in INPLACE or bool(call.kwargs.get("inplace"))
        if st not in own or inplace:
            made[st] = nid
        elif t.graph.nodes[nid].op in VIEWS:
            views.add(nid)
        of_node.setdefault(nid, st)
        for piece in t.pieces.get(call.id, ()):  # a split's other pieces: views of the same storage
            views.add(piece)
            of_node.setdefault(piece, st)
    for nid in (n for ns in t.extra.values() for n in ns):  # a parameter as an activation: no storage of torch's
        made[-nid] = nid
        of_node[nid] = -nid
    return made, of_node, views


def _rule(g: TrainingGraph, node: GraphNode) -> str:
    frozen = set(g.frozen)
    w = node.attrs.get("w", -1)
    if node.op in ("conv2d", "batchnorm", "layernorm") and w >= 0 and g.params[w][0] in frozen:
        return f"{node.op} (weight frozen)"
    return node.op


def saved_check(model: nn.Module, t: Traced) -> SavedReport:
    """Compare, storage by storage, what autograd saved in `t` (a `real_step`) with the graph."""
    g: TrainingGraph = t.graph
    assert t.ins.saved is not None, "saved_check needs a real_step trace"
    excluded = {_storage(p) for p in model.parameters()} | {_storage(b) for b in model.buffers()}
    made, of_node, views = _storages(t)
    torch_bytes: dict[int, int] = {}
    savers: dict[int, set[int]] = defaultdict(set)  # storage -> the nodes whose backward keeps it
    for call_id, ten in t.ins.saved:
        st = _storage(ten)
        if st in excluded or st == 0:
            continue
        torch_bytes[st] = ten.untyped_storage().nbytes()
        saver = t.node_of_call.get(call_id) if call_id is not None else None
        if saver is not None:
            savers[st].add(saver)
    fwd_of = {n.module: n.id for n in g.nodes if n.kind in ("forward", "loss")}
    graph_nodes: dict[int, set[int]] = defaultdict(set)  # storage -> graph nodes kept for backward
    for n in g.nodes:
        for d in n.saved if n.kind == "backward" else ():
            graph_nodes[of_node[d]].add(d)
            savers[of_node[d]].add(fwd_of[n.module])
    report = SavedReport(sum(torch_bytes.values()), g.saved_bytes())
    for st in sorted(set(torch_bytes) | set(graph_nodes), key=lambda s: min(savers[s] or {0})):
        tb, nodes = torch_bytes.get(st, 0), graph_nodes.get(st, set())
        gb = sum(g.nodes[i].bytes for i in nodes)
        if tb == gb:
            continue
        prod = made.get(st)
        kind = "graph" if not tb else "output" if prod is not None else "internal"
        ops = {_rule(g, g.nodes[s]) for s in savers[st]}
        if st < 0:  # (_storages)
            ops = {"parameter"}
        elif nodes & views or (prod is not None and any(g.nodes[i].op in VIEWS for i in savers[st])):
            ops = {"view"}
        reason = next((DOCUMENTED[o][0] for o in sorted(ops) if o in DOCUMENTED and kind in DOCUMENTED[o][1]),
                      None)
        name = g.nodes[prod].name if prod is not None else f"inside {', '.join(g.nodes[s].name for s in savers[st])}"
        report.differences.append(Difference(name, sorted(g.nodes[s].name for s in savers[st]), kind, tb, gb, reason,
                                             st))
    _explain_in_place(t, report, of_node)
    return report


IN_PLACE_REASON = ("in place: PyTorch keeps a copy of the input it overwrites, and the output in the input's "
                   "storage when a later op needs it; the graph keeps each as a tensor of its own, of the same bytes")


def _explain_in_place(t: Traced, report: SavedReport, of_node: dict[int, int]) -> None:
    """An activation run in place (ReLU6, hardswish, SiLU... with inplace=True) whose backward reads its input:
    PyTorch saves a copy of that input (a tensor inside the call) and the output shares the input's storage,
    so the graph's tensors on that storage are torch's plus the copy. The two differences, when their bytes
    make up exactly the graph's, are that and no more. The storage's difference may name a later in-place call
    (a dropout after the activation takes the storage over), and torch may keep nothing of it (a mean after the
    activation keeps only the shape): the graph then keeps the input where torch keeps its copy."""
    g = t.graph
    inplace = {t.node_of_call[c.id] for c in t.ins.calls
               if c.id in t.node_of_call and (c.name in INPLACE or c.kwargs.get("inplace"))}
    for nid in sorted(inplace):
        name = g.nodes[nid].name
        inside = [i for i, d in enumerate(report.differences)
                  if d.reason is None and d.kind == "internal" and d.savers == [name]]
        # its output may be read by a view too (a flatten after it): that storage's difference is this one
        out = [i for i, d in enumerate(report.differences)
               if d.kind in ("output", "graph") and d.storage == of_node.get(nid)]
        if len(inside) == 1 and len(out) == 1:
            a, b = report.differences[inside[0]], report.differences[out[0]]
            if a.torch_bytes + b.torch_bytes == b.graph_bytes:
                report.differences[inside[0]] = replace(a, reason=IN_PLACE_REASON)
                report.differences[out[0]] = replace(b, reason=IN_PLACE_REASON)


@dataclass
class OpReport:
    aten_forward: int  # ATen ops PyTorch ran in the forward pass and loss
    aten_backward: int  # ... and in backward
    by_account: dict[str, int]  # how they were accounted for: "node", "constant", "parameter gradient", ...
    unaccounted: list[str]  # "phase op (module)" of every ATen op no graph node accounts for
    backward_mismatch: list[str]  # forward nodes where PyTorch ran backward work and the graph has none, or v.v.


def op_check(t: Traced) -> OpReport:
    """Assign every ATen op of the real step to the graph node that accounts for it."""
    g = t.graph
    ins = t.ins
    has_bwd = {n.module for n in g.nodes if n.kind == "backward" and not n.name.split("/")[-1].startswith("grad_sum")}
    sums_for = {n.module for n in g.nodes if n.kind == "backward" and "/grad_sum" in n.name}
    accounts: dict[str, int] = defaultdict(int)
    unaccounted: list[str] = []
    torch_bwd: set[int] = set()  # forward nodes PyTorch ran backward ops for
    node_of_event: dict[int, int] = {}
    for ev in ins.events:
        if ev.phase == "forward":
            nid = t.node_of_call.get(ev.call_id) if ev.call_id is not None else None
            if nid is not None:
                node_of_event[ev.id] = nid
                accounts["forward node"] += 1
            elif ev.call_id in t.const_calls:
                accounts["constant, buffer update or unused value"] += 1
            elif ev.call_id is not None and ins.calls[ev.call_id].name == "backward":
                accounts["loss gradient seed (loss/backward)"] += 1
            else:
                unaccounted.append(f"forward {ev.op} ({ev.module or 'model'})")
            continue
        if ev.autograd_node.endswith("AccumulateGrad"):
            accounts["parameter gradient (written by the backward node)"] += 1
            continue
        nid = node_of_event.get(ev.forward_id) if ev.forward_id is not None else None
        if nid is None:
            unaccounted.append(f"backward {ev.op} under {ev.autograd_node}")
            continue
        node = g.nodes[nid]
        if ev.accumulate:  # the sum of two gradients of one of the node's inputs
            if any(g.nodes[d].module in sums_for for d in node.deps):
                accounts["gradient sum node"] += 1
            else:
                unaccounted.append(f"backward {ev.op}: a gradient sum for an input of {node.name}")
            continue
        torch_bwd.add(nid)
        # a split's one autograd node (SplitBackward) is the backward of every piece the graph made a node of
        torch_bwd.update(next((ps for ps in t.pieces.values() if nid in ps), ()))
        # a parameter an op read as an activation (handlers._binary): its gradient is part of the op's backward
        torch_bwd.update(t.extra.get(next((c for c, n in t.node_of_call.items() if n == nid), -1), ()))
        if node.module in has_bwd:
            accounts["backward node"] += 1
        else:
            unaccounted.append(f"backward {ev.op} under {ev.autograd_node} for {node.name}")
    graph_bwd = {n.id for n in g.nodes if n.kind in ("forward", "loss") and n.module in has_bwd}
    mismatch = [f"{g.nodes[i].name}: PyTorch ran backward ops, the graph has no backward node"
                for i in sorted(torch_bwd - graph_bwd)]
    # ops whose backward PyTorch runs as no ATen op at all (a plain add passes its gradient through), and views
    # an op then wrote in place (their backward is folded into the in-place op's CopySlices)
    silent = {"add"}
    written = {d for c in ins.calls if c.id in t.node_of_call and (c.name in INPLACE or c.kwargs.get("inplace"))
               for d in g.nodes[t.node_of_call[c.id]].deps if g.nodes[d].op in VIEWS}
    mismatch += [f"{g.nodes[i].name}: the graph has a backward node, PyTorch ran no backward op"
                 for i in sorted(graph_bwd - torch_bwd) if g.nodes[i].op not in silent and i not in written]
    n_fwd = sum(1 for e in ins.events if e.phase == "forward")
    return OpReport(n_fwd, len(ins.events) - n_fwd, dict(accounts), unaccounted, mismatch)
