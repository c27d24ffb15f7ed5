"""A frozen prefix run in static int8: the graph rewrite, its weights and scales, and its exact forward.

Fine-tuning the last layers of a network (`--train last:N`, `bias+last:N`) leaves a frozen prefix
whose activations the backward pass never reads. In fp32 its early feature maps alone outgrow a
256 KB board (MobileNetV2-0.35's 48 channels at 32x32 are 192 KiB); in int8 they take a quarter,
and the prefix computes them as deployed int8 networks do (TFLite Micro, tiny-training): a frozen
batch norm folded into the conv before it, the ReLU after it fused, each tensor quantised with a
scale fixed once on the host from calibration data, so no fp32 copy of an activation exists inside
the prefix. The runtime's ops are quantize, conv2d_q, add_q, maxpool2d_q and dequantize (docs/spec.md 2).

`rewrite(g)` makes the graph (sizes only: enough to plan); `Int8Prefix.weights` fills in the
folded weights and calibrated scales from the model's weights and a calibration batch;
`Int8Prefix.forward` is the prefix's exact output (poet.graph.quantise mirrors the kernels bit for
bit), what a reference feeds the trained part.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from poet.graph import quantise as qz
from poet.graph.dtypes import F32
from poet.graph.quantise import (
    ACTIVATIONS,
    absmax_scale,
    add_q,
    conv2d_padded,
    conv2d_q,
    dequantise,
    maxpool2d_q,
    mean_q,
    quantise,
)
from poet.graph.training_graph import PARAM_ATTRS, GraphNode, TrainingGraph, conv_window, numel
from poet.graph.training_graph import readers as reader_map
from poet.ops import STATIC_INT8_OPS
from poet.plan.transform.fuse import fuse_heads
from poet.plan.transform.masks import with_masks
from poet.plan.transform.patches import Patching, cuts, patch, renumbered

if TYPE_CHECKING:
    from poet.graph.reference import Fed

POOLS = ("maxpool2d", "maxpool2d_general")  # max pooling runs on int8 values at its input's scale
FUSED = ("relu", "hardtanh", "hardswish", "hardsigmoid")  # activations an epilogue applies (hardtanh: ReLU6 only)


def _activation(t: Any, act: int) -> Any:
    """An epilogue's activation on a torch tensor in fp32 (calibration: the values, not the board's bits)."""
    import torch.nn.functional as F

    return [lambda v: v, F.relu, F.relu6, F.hardswish, F.hardsigmoid][act](t)
FOLDED = "#folded"  # a conv's weight or bias with its frozen batch norm folded in: "layer.conv.weight#folded"


@dataclass(frozen=True)
class Fold:
    """How a static-int8 conv's fp32 weight and bias come from the model's tensors (names): the conv's
    own, with the frozen batch norm after it (if any) folded in."""

    w: str
    b: str | None
    bn: tuple[str | None, str | None, str, str] | None = None  # weight, bias, running mean, running var
    eps: float = 0.0


@dataclass
class Int8Prefix:
    graph: TrainingGraph  # the rewritten graph: what is planned, lowered and run
    source: TrainingGraph  # the fp32 graph it was rewritten from
    layers: list[str]  # the fp32 nodes (names) now computed in int8
    folds: dict[str, Fold] = field(default_factory=dict)  # folded weight / bias param name -> how
    scales: dict[str, int] = field(default_factory=dict)  # scale param name -> the node whose output it scales
    # the prefix's fp32 outputs (the trained part reads them): node id here -> the source graph's node
    boundary: dict[int, int] = field(default_factory=dict)
    # the graph before its first stage was patched (poet.plan.transform.patches): where the scales were calibrated,
    # on whole maps (`scales` names its nodes); None when the stage is not patched
    unpatched: TrainingGraph | None = None
    patching: Patching | None = None

    def patched(self, p: Patching) -> Int8Prefix:
        """This prefix with its first stage run as `p` says (poet.plan.transform.patches; plan.json `patches`: the cut
        by its name); its scales stay calibrated on the whole maps. ValueError when its graph has no such stage."""
        g = self.graph
        ids = {n.name: n.id for n in g.nodes}
        if p.cut not in ids or ids[p.cut] not in cuts(g):
            raise ValueError(f"{p.cut}: no int8 stage of {g.model} ends there")
        cut = ids[p.cut]
        pg = patch(g, cut, p.strips)
        moved = renumbered(g, cut, pg)
        return replace(self, graph=pg, boundary={moved[k]: v for k, v in self.boundary.items()}, unpatched=g,
                       patching=p)

    # ------------------------------------------------------------ values

    def fp32_weights(self, model_weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every fp32 tensor the rewritten graph reads, by param name: the model's, and the folded ones."""
        out = dict(model_weights)
        for name, f in self.folds.items():
            w = model_weights[f.w].astype(np.float32)
            b = model_weights[f.b].astype(np.float32) if f.b else np.zeros(w.shape[0], np.float32)
            if f.bn is not None:
                gw, gb, rm, rv = f.bn
                gamma = model_weights[gw].astype(np.float32) if gw else np.ones(w.shape[0], np.float32)
                beta = model_weights[gb].astype(np.float32) if gb else np.zeros(w.shape[0], np.float32)
                k = (gamma / np.sqrt(model_weights[rv].astype(np.float32) + np.float32(f.eps))).astype(np.float32)
                w = (w * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
                b = ((b - model_weights[rm].astype(np.float32)) * k + beta).astype(np.float32)
            out[name] = w if name.endswith(f".weight{FOLDED}") else b
        return out

    def weights(self, model_weights: dict[str, np.ndarray], calib_x: np.ndarray) -> list[np.ndarray]:
        """The rewritten graph's parameters in its order: the model's tensors, the folded weights and
        biases, and every int8 tensor's scale calibrated on `calib_x` (max |x| / 127 of its fp32 value
        over the calibration batch, the int8 layers' own absmax rule)."""
        w = self.fp32_weights(model_weights)
        vals = self._run(w, calib_x, None, self.unpatched or self.graph)
        for name, node in self.scales.items():
            w[name] = np.array([absmax_scale(vals[node])], np.float32)
        return [np.asarray(w[name], np.float32).reshape(shape) for name, shape in self.graph.params]

    def forward(self, weights: list[np.ndarray], x: np.ndarray) -> dict[int, np.ndarray]:
        """The prefix's fp32 outputs (node id in the rewritten graph -> value) for a batch x, exactly as
        the board computes them from the uploaded `weights` (the rewritten graph's, in its order)."""
        w = {name: np.asarray(v, np.float32) for (name, _), v in zip(self.graph.params, weights, strict=True)}
        g = self.graph
        vals = self._run(w, x, {name: np.float32(w[name].reshape(-1)[0]) for name in self.scales}, g)
        return {i: v for i, v in vals.items() if g.nodes[i].op in STATIC_INT8_OPS and v.dtype == np.float32}

    def fed(self, model: Any, weights: list[np.ndarray]) -> Fed:
        """What a PyTorch reference of a run feeds `model` (the one the source graph was traced from):
        the prefix's outputs as the board computes them from its `weights`, given in place of the
        model's fp32 calls that make them (poet.graph.reference.Fed)."""
        import torch

        from poet.graph.reference import Call, Fed
        from poet.graph.tracer import trace_step

        src = self.source
        # a real (zero) batch: trace_step passes it on meta tensors first, and a model that needs values (one
        # drawing a stochastic depth mask) is traced on it for real
        dtype = torch.long if src.input_dtype == "int64" else torch.float32
        t = trace_step(model, src.model, torch.zeros(src.batch, *src.input_shape, dtype=dtype),
                       torch.zeros(src.batch, dtype=torch.long), src.classes, src.input_dtype, src.train)
        made: dict[str, Call] = {}  # source node (name) -> the call that makes it (the first: later ones alias it)
        count: dict[str, int] = {}
        for c in t.ins.calls:
            k = count.get(c.name, 0)
            count[c.name] = k + 1
            node = t.node_of_call.get(c.id)
            if node is not None and t.graph.nodes[node].name not in made:
                made[t.graph.nodes[node].name] = (c.name, k)
        calls: dict[int, Call] = {}  # prefix output (node here) -> the model's call
        for nid, old in self.boundary.items():
            name = src.nodes[old].name  # by name: the source may be fused (poet.plan.transform.fuse), the trace is not
            if name not in made:
                raise ValueError(f"{name}: the model's trace does not make it; is this the model the graph was "
                                 "traced from?")
            calls[nid] = made[name]
        expect = {calls[nid]: list(src.nodes[old].shape[1:]) for nid, old in self.boundary.items()}

        def values(x: np.ndarray) -> dict[Call, np.ndarray]:
            out = self.forward(weights, x)
            return {calls[nid]: out[nid] for nid in self.boundary}

        return Fed(expect, values)

    def _run(self, w: dict[str, np.ndarray], x: np.ndarray, scales: dict[str, np.float32] | None, g: TrainingGraph
             ) -> dict[int, np.ndarray]:
        """The prefix forward of graph g (this prefix's, or the unpatched one): in fp32 (scales None: calibration,
        int8 nodes give their fp32 values), or in int8 as the kernels compute it."""
        import torch
        import torch.nn.functional as F

        names = [n for n, _ in g.params]
        batch = len(x)  # any batch, not only the graph's: the reference evaluates test sets with it
        vals: dict[int, np.ndarray] = {0: np.asarray(x, np.float32).reshape(batch, *g.nodes[0].shape[1:])}
        scale_of: dict[int, np.float32] = {}
        staged = g.nodes[0].attrs.get("i8")  # the input staged int8: quantised as the host sends it
        if staged and scales is not None:
            scale_of[0] = scales[names[g.nodes[0].attrs["scale"]]]
            vals[0] = quantise(vals[0], scale_of[0])
        for n in g.nodes:
            if n.op not in STATIC_INT8_OPS:
                continue
            a = n.attrs
            out_scale = names[a["out_scale"]] if a.get("out_scale", -1) >= 0 else None
            if n.op in ("quantize", "maxpool2d_q", "slice_q", "cat_q"):
                out_scale = names[a["scale"]]
            ys = None if scales is None or out_scale is None else scales[out_scale]
            xs = [vals[d] for d in n.deps]
            if n.op == "maxpool2d_q":
                window = ((a["kh"], a["kw"]), (a["sh"], a["sw"]), (a["ph"], a["pw"]), bool(a["ceil"]))
                y = (F.max_pool2d(torch.from_numpy(xs[0]), *window[:3], ceil_mode=window[3]).numpy()
                     if scales is None else maxpool2d_q(xs[0], *window))
            elif n.op == "mean_q":  # outer holds the batch: any batch reshapes by r and inner alone
                r, inner = int(a["r"]), int(a["inner"])
                if scales is None:
                    t = torch.from_numpy(np.asarray(xs[0], np.float32).reshape(-1, r, inner).mean(axis=1))
                    y = _activation(t, int(a.get("relu", 0))).numpy()
                else:
                    y = mean_q(xs[0], scale_of[n.deps[0]], r, inner, int(a.get("relu", 0)), ys)
            elif n.op == "mul_q":  # the values as shaped (batch first) broadcast as the model's mul did
                if scales is None:
                    t = np.asarray(xs[0] * xs[1], np.float32)
                    y = _activation(torch.from_numpy(t), int(a.get("relu", 0))).numpy()
                else:
                    y = qz.mul_q(xs[0], scale_of[n.deps[0]], xs[1], scale_of[n.deps[1]], int(a.get("relu", 0)), ys)
            elif n.op == "quantize":
                y = xs[0] if scales is None else quantise(xs[0], ys)
            elif n.op == "dequantize":
                y = xs[0] if scales is None else dequantise(xs[0], scale_of[n.deps[0]])
            elif n.op == "slice_q":  # rows of a strip: x[outer, total]'s columns offset .. offset + len
                o0 = int(a["offset"])
                y = np.asarray(xs[0]).reshape(-1, int(a["total"]))[:, o0:o0 + int(a["len"])]
            elif n.op == "cat_q":
                y = np.concatenate([np.asarray(v).reshape(-1, int(a[f"l{k}"])) for k, v in enumerate(xs)], axis=1)
            elif n.op == "conv2d_q":
                wt, bias = w[names[a["w"]]], (w[names[a["b"]]] if a.get("b", -1) >= 0 else None)
                pad = conv_window(a)[2:] if "padb" not in a else (*conv_window(a)[2:], int(a["padb"]))
                geo = (int(a.get("stride", 1)), pad, int(a.get("groups", 1)))
                if scales is None:
                    t = conv2d_padded(torch.from_numpy(xs[0]), torch.from_numpy(wt),
                                      None if bias is None else torch.from_numpy(bias), *geo)
                    y = _activation(t, int(a.get("relu", 0))).numpy()
                else:
                    ws = absmax_scale(wt)
                    y = conv2d_q(xs[0], scale_of[n.deps[0]], quantise(wt, ws), ws, bias, *geo, int(a.get("relu", 0)),
                                 ys)
            else:  # add_q
                if scales is None:
                    y = xs[0] + xs[1]
                    y = _activation(torch.from_numpy(np.asarray(y, np.float32)), int(a.get("relu", 0))).numpy()
                else:
                    y = add_q(xs[0], scale_of[n.deps[0]], xs[1], scale_of[n.deps[1]], int(a.get("relu", 0)), ys)
            vals[n.id] = np.asarray(y).reshape(batch, *n.shape[1:])
            if ys is not None:
                scale_of[n.id] = ys
        return vals


def rewrite(g: TrainingGraph) -> Int8Prefix | None:
    """g with its frozen prefix in static int8, or None when no layer of g can run so.

    A frozen conv (weight and bias frozen, its weight read by nothing else) reading the input or an
    int8 tensor runs as conv2d_q, with the frozen batch norm reading only it folded in and the ReLU
    reading only that fused; an add of two int8 tensors runs as add_q (ReLU fused likewise). A fused
    layer's output is int8 when some int8 layer reads it, with a dequantize for its other readers (the
    trained part, or a layer that has no int8 form), else fp32 straight from the epilogue; a mean (global
    average pooling) of an int8 tensor runs as mean_q, a product of two (squeeze-and-excitation's) as mul_q,
    with the same epilogue. A max pool of an
    int8 tensor runs as maxpool2d_q, int8 out at its input's scale (dequantized for fp32 readers). Nothing
    inside a fused layer may be saved for the backward pass (so only a frozen prefix qualifies)."""
    # the trained head's maps too would outgrow the board (poet.plan.transform.fuse), and the activations' maps
    # their backward keeps (poet.plan.transform.masks)
    g = with_masks(fuse_heads(g))
    found = _chains(g)
    if found is None:
        return None
    chains, member, int8_out = found
    saved, readers = g.saved_ids(), reader_map(g)
    pname = [n for n, _ in g.params]

    # pass 2: the new graph
    params = list(g.params)
    folds: dict[str, Fold] = {}
    scales: dict[str, int] = {}
    nodes: list[GraphNode] = []
    new: dict[int, int] = {}  # old id -> new id of the tensor fp32 readers read
    q_new: dict[int, int] = {}  # old id -> new id of its int8 form
    layers: list[str] = []
    boundary: dict[int, int] = {}

    def add(src: GraphNode, name: str, op: str, deps: list[int], nbytes: int, attrs: dict[str, Any],
            flops: int) -> int:
        nodes.append(GraphNode(len(nodes), name, src.module, "forward", op, deps, nbytes, list(src.shape), attrs,
                               flops))
        return len(nodes) - 1

    scale_at: dict[int, int] = {}  # new id of an int8 tensor -> its scale parameter

    def scale_param(name: str, node: int) -> int:
        params.append((f"{name}#scale", [1]))
        scales[f"{name}#scale"] = node
        scale_at[node] = len(params) - 1
        return len(params) - 1

    for n in g.nodes:
        if n.id in member and n.id not in chains:
            continue  # fused into its chain's head
        if n.id in chains:
            chain = [g.nodes[i] for i in chains[n.id]]
            last = chain[-1]
            elems = numel(last.shape)
            relu = ACTIVATIONS["relu6" if last.op == "hardtanh" else last.op] if last.op in FUSED else 0
            pool = n.op in POOLS  # int8 out always: at its input's scale, no epilogue to make fp32
            i8 = last.id in int8_out or pool
            if n.op == "conv2d" and n.deps[0] not in q_new:  # the input: quantized once, first
                _quantize(g, n.deps[0], nodes, new, q_new, scale_param,
                          staged=all(r in chains and g.nodes[r].op == "conv2d" for r in readers[n.deps[0]]))
            nid = len(nodes)
            out_scale = scale_param(last.name, nid) if i8 and not pool else -1
            if pool:
                a = n.attrs
                window = {"kh": a["k"], "kw": a["k"], "sh": a["k"], "sw": a["k"], "ph": 0, "pw": 0, "ceil": 0} \
                    if n.op == "maxpool2d" else {k: a[k] for k in ("kh", "kw", "sh", "sw", "ph", "pw", "ceil")}
                scale_at[nid] = scale_at[q_new[n.deps[0]]]
                add(last, last.name, "maxpool2d_q", [q_new[n.deps[0]]], elems,
                    {k: a[k] for k in ("B", "C", "H", "W")} | window | {"scale": scale_at[nid]}, n.flops)
            elif n.op == "conv2d":
                bn = next((c for c in chain if c.op == "batchnorm_eval"), None)
                w, b = n.attrs["w"], n.attrs.get("b", -1)
                attrs = {k: n.attrs[k] for k in ("B", "C", "H", "W", "O", "k", "kw", "pad", "padw", "stride", "groups")
                         if k in n.attrs}
                if bn is not None:
                    ba = bn.attrs
                    fold = Fold(pname[w], pname[b] if b >= 0 else None,
                                tuple(pname[ba[k]] if ba.get(k, -1) >= 0 else None  # type: ignore[arg-type]
                                      for k in ("w", "b", "rm", "rv")), float(ba["eps"]))
                    base = pname[w].rsplit(".", 1)[0]
                    params += [(f"{base}.weight{FOLDED}", list(g.params[w][1])), (f"{base}.bias{FOLDED}",
                                                                                 [int(n.attrs["O"])])]
                    folds[params[-2][0]] = folds[params[-1][0]] = fold
                    w, b = len(params) - 2, len(params) - 1
                out = elems if i8 else F32 * elems
                # a depthwise conv may run in place, a channel at a time (memory.in_place), where its output is no
                # larger than its int8 input
                over = {"inplace": 1} if (attrs.get("groups", 1) == attrs["C"] == attrs["O"] and attrs["C"] > 1
                                          and out <= numel(g.nodes[n.deps[0]].shape)) else {}
                add(last, last.name, "conv2d_q", [q_new[n.deps[0]]], out,
                    attrs | {"w": w, "b": b, "out_scale": out_scale, "relu": relu} | over, n.flops)
            elif n.op == "mul":
                add(last, last.name, "mul_q", [q_new[d] for d in n.deps], elems if i8 else F32 * elems,
                    {k: n.attrs[k] for k in ("n", "m", "inner") if k in n.attrs}
                    | {"out_scale": out_scale, "relu": relu}, n.flops)
            elif n.op == "mean":
                add(last, last.name, "mean_q", [q_new[n.deps[0]]], elems if i8 else F32 * elems,
                    {k: n.attrs[k] for k in ("outer", "r", "inner")} | {"out_scale": out_scale, "relu": relu}, n.flops)
            else:
                add(last, last.name, "add_q", [q_new[d] for d in n.deps], elems if i8 else F32 * elems,
                    {"n": elems, "out_scale": out_scale, "relu": relu}, n.flops)
            layers += [c.name for c in chain]
            if i8:
                q_new[last.id] = nid
                if any(r not in chains for r in readers[last.id]) or last.id in saved:
                    new[last.id] = add(last, f"{last.name}/fp32", "dequantize", [nid], F32 * elems,
                                       {"n": elems}, elems)
                    boundary[new[last.id]] = last.id
            else:
                new[last.id] = nid
                boundary[nid] = last.id
            continue
        deps = [new[d] for d in n.deps]
        nodes.append(replace(n, id=len(nodes), deps=deps, saved=[new[d] for d in n.saved], attrs=dict(n.attrs),
                             shape=list(n.shape)))
        new[n.id] = len(nodes) - 1
    out = _drop_unused(replace(g, nodes=nodes, params=params))
    return Int8Prefix(out, g, layers, folds, scales, boundary)


def _chains(g: TrainingGraph) -> tuple[dict[int, list[int]], set[int], set[int]] | None:
    """Pass 1 of rewrite: which fp32 nodes fuse into which static-int8 layer (head node id -> chain of node
    ids), every node in a chain, and the chain outputs (and the input) some int8 layer reads; None if none."""
    saved, readers = g.saved_ids(), reader_map(g)
    frozen = set(g.frozen) - g.moved
    pname = [n for n, _ in g.params]
    weight_readers: dict[int, int] = {}
    for n in g.nodes:
        if n.attrs.get("w", -1) >= 0 and n.kind != "optimizer":
            weight_readers[n.attrs["w"]] = weight_readers.get(n.attrs["w"], 0) + 1

    def is_frozen(p: int) -> bool:
        return p < 0 or pname[p] in frozen

    def sole_reader(i: int, op: str) -> int | None:
        r = readers[i]
        if len(r) == 1 and g.nodes[r[0]].op == op and g.nodes[r[0]].kind == "forward" and i not in saved:
            return r[0]
        return None

    chains: dict[int, list[int]] = {}
    out_of: dict[int, int] = {}  # a chain's last node -> its head
    member: set[int] = set()
    q_out = {0}  # nodes whose value an int8 layer can read (0: the input, through a quantize)
    for n in g.nodes:
        if n.kind != "forward":
            continue
        chain: list[int] = []
        if n.op == "conv2d" and n.deps[0] in q_out and weight_readers.get(n.attrs["w"]) == 1 \
                and is_frozen(n.attrs["w"]) and is_frozen(n.attrs.get("b", -1)):
            chain = [n.id]
            bn = sole_reader(n.id, "batchnorm_eval")
            if bn is not None and all(is_frozen(g.nodes[bn].attrs.get(k, -1)) for k in ("w", "b", "rm", "rv")):
                chain.append(bn)
        elif n.op == "add" and n.attrs.get("n") == n.attrs.get("m") and len(n.deps) == 2 \
                and all(d in q_out and d != 0 for d in n.deps):
            chain = [n.id]
        elif n.op in POOLS and n.deps[0] in q_out and n.deps[0] != 0 and n.deps[0] not in saved:  # no backward
            chain = [n.id]
        elif n.op == "mean" and n.deps[0] in q_out and n.deps[0] != 0 and n.attrs["r"] <= 0x10000 \
                and all(g.nodes[r].op == "conv2d" for r in readers[n.id]):  # a squeeze, not a trained head's pool
            chain = [n.id]
        elif n.op == "mul" and len(n.deps) == 2 and all(d in q_out and d != 0 for d in n.deps):
            chain = [n.id]
        if not chain:
            continue
        act = None if n.op in POOLS else \
            next((r for op in FUSED if (r := sole_reader(chain[-1], op)) is not None), None)
        if act is not None and (g.nodes[act].op != "hardtanh"  # of hardtanh, only ReLU6 (0..6)
                                or (g.nodes[act].attrs["lo"], g.nodes[act].attrs["hi"]) == (0.0, 6.0)):
            chain.append(act)
        if any(i in saved for i in chain[:-1]):
            continue
        chains[n.id] = chain
        out_of[chain[-1]] = n.id
        member.update(chain)
        q_out.add(chain[-1])
    if not chains:
        return None
    q_readers = {i: [r for r in readers[i] if r in chains] for i in q_out}
    int8_out = {i for i in q_out if q_readers[i]}  # chain outputs (and the input) some int8 layer reads
    return chains, member, int8_out



def _quantize(g: TrainingGraph, i: int, nodes: list[GraphNode], new: dict[int, int], q_new: dict[int, int],
              scale_param: Any, staged: bool = False) -> int:
    """The int8 form of fp32 tensor i (the input): a quantize node after it, made once; or, `staged`
    (only int8 layers read the model's input), the input itself staged int8: the host quantises each
    batch with the scale, so the board holds a quarter of the bytes in its staging area and arena."""
    src = g.nodes[i]
    elems = numel(src.shape)
    if staged and src.op == "input":
        nid = new[i]
        nodes[nid] = replace(nodes[nid], bytes=elems, attrs=nodes[nid].attrs | {"i8": 1, "scale": scale_param(
            src.name, nid)})
        q_new[i] = nid
        return nid
    nid = len(nodes)
    p = scale_param(src.name, nid)
    nodes.append(GraphNode(nid, f"{src.name}/int8", src.module, "forward", "quantize", [new[i]], elems,
                           list(src.shape), {"n": elems, "scale": p}, elems))
    q_new[i] = nid
    return nid


def _drop_unused(g: TrainingGraph) -> TrainingGraph:
    """g without the parameters no node reads any more (a folded conv's own weight and bias, its batch
    norm's tensors), the others renumbered."""
    used = sorted({n.attrs[k] for n in g.nodes for k in PARAM_ATTRS if isinstance(n.attrs.get(k), int)
                   and n.attrs[k] >= 0} | {i for i, (name, _) in enumerate(g.params) if name not in g.frozen})
    renum = {old: new for new, old in enumerate(used)}
    nodes = [replace(n, attrs={k: (renum[v] if k in PARAM_ATTRS and isinstance(v, int) and v >= 0 else v)
                                for k, v in n.attrs.items()}) for n in g.nodes]
    params = [g.params[i] for i in used]
    names = {name for name, _ in params}
    return replace(g, nodes=nodes, params=params,
                   frozen=[n for n in g.frozen if n in names] + [n for n, _ in params if "#" in n])
