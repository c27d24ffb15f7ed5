"""Fusions that shrink a step's working set: several graph nodes run as one runtime op whose
intermediate maps never exist.

`fuse_heads`: a classifier head's trained batch norm, ReLU and global average pool (MobileNetV2,
MCUNet, EfficientNet: conv -> BN -> ReLU -> mean over HW -> linear). Apart, the three keep [B, C, HW]
maps alive into the backward pass (MobileNetV2-0.35's 1280x4x4 is 80 KiB each, three at once in the
ReLU's backward, more than a 256 KB board has for activations); as `bn_relu_mean` and its backward
(firmware/core/ops/norm.c) only the batch norm's input and the pooled [B, C] exist, a channel at a time.
"""

from __future__ import annotations

from dataclasses import replace

from poet.graph.training_graph import GraphNode, TrainingGraph, readers


def _head(g: TrainingGraph, bn: GraphNode, readers: dict[int, list[int]]) -> list[int] | None:
    """bn, its ReLU, the mean, and their three backward nodes (mean's, ReLU's, bn's), when bn starts a
    head that fuses: the batch norm read only by the ReLU, the ReLU only by the mean and its own
    backward, which reads the mean's backward (read by nothing else) and is read only by bn's."""
    def read_by(i: int) -> list[GraphNode]:
        return [g.nodes[j] for j in readers[i]]

    a = bn.attrs
    (relu, *more) = read_by(bn.id) or [None]
    if relu is None or more or relu.op != "relu":
        return None
    after = {n.op: n for n in read_by(relu.id)}
    mean, relu_bwd = after.get("mean"), after.get("relu_bwd")
    if len(after) != 2 or len(readers[relu.id]) != 2 or mean is None or relu_bwd is None \
            or mean.attrs != {"outer": a["B"] * a["C"], "r": a["HW"], "inner": 1} or relu_bwd.deps[1:] != [relu.id]:
        return None
    mean_bwd = g.nodes[relu_bwd.deps[0]]
    (bn_bwd, *more) = read_by(relu_bwd.id) or [None]
    if mean_bwd.op != "mean_bwd" or mean_bwd.attrs != mean.attrs or readers[mean_bwd.id] != [relu_bwd.id] \
            or bn_bwd is None or more or bn_bwd.op != "batchnorm_bwd" or bn_bwd.deps[1:] != [bn.deps[0]] \
            or any(bn_bwd.attrs.get(k) != v for k, v in a.items()):
        return None
    return [bn.id, relu.id, mean.id, mean_bwd.id, relu_bwd.id, bn_bwd.id]


def fuse_heads(g: TrainingGraph) -> TrainingGraph:
    """g with every trained BN -> ReLU -> spatial mean head as bn_relu_mean and its backward (g itself
    when it has none). Nodes keep their names; the fused ones are named by the three they replace."""
    by = readers(g)
    heads = [h for n in g.nodes if n.op == "batchnorm" and n.kind == "forward" and (h := _head(g, n, by))]
    if not heads:
        return g
    fused: dict[int, GraphNode] = {}  # the node whose place a fused node takes -> it
    gone: set[int] = set()
    for bn_id, relu_id, mean_id, mean_bwd_id, relu_bwd_id, bn_bwd_id in heads:
        bn, relu, mean = g.nodes[bn_id], g.nodes[relu_id], g.nodes[mean_id]
        mb, rb, bb = g.nodes[mean_bwd_id], g.nodes[relu_bwd_id], g.nodes[bn_bwd_id]
        name = f"{bn.module}+{relu.module}+{mean.module}"
        fused[mean_id] = GraphNode(mean_id, f"{name}/forward", bn.module, "forward", "bn_relu_mean", [bn.deps[0]],
                                   mean.bytes, list(mean.shape), dict(bn.attrs), bn.flops + relu.flops + mean.flops)
        fused[bb.id] = GraphNode(bb.id, f"{name}/backward", bn.module, "backward", "bn_relu_mean_bwd",
                                 [mb.deps[0], bn.deps[0]], bb.bytes, list(bb.shape), dict(bb.attrs),
                                 mb.flops + rb.flops + bb.flops, saved=[bn.deps[0]])
        gone |= {bn_id, relu_id, mean_bwd_id, relu_bwd_id}
    nodes: list[GraphNode] = []
    new: dict[int, int] = {}
    for n in g.nodes:
        if n.id in gone:
            continue
        n = fused.get(n.id, n)
        new[n.id] = len(nodes)
        nodes.append(replace(n, id=len(nodes), deps=[new[d] for d in n.deps], saved=[new[d] for d in n.saved],
                             attrs=dict(n.attrs), shape=list(n.shape)))
    return replace(g, nodes=nodes)
