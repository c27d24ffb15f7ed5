"""Bit masks for the backward of ReLU and ReLU6: a step keeps one bit of each activation, not its fp32 map.

relu_bwd reads the ReLU's output y and hardtanh_bwd (ReLU6, clamp) the activation's input x, only to see where
the gradient passes: y > 0, or lo < x < hi. Where nothing else in the backward pass reads that map, `with_masks`
makes a bit of each element right after the activation (act_mask, from y: clamp(x) lies strictly inside its
bounds exactly where x does) and the backward reads the bits (mask_bwd): the same gradient, bit for bit
(firmware/core/kernels/elementwise.c), from 1/32 of the bytes. The planner then keeps, pages or recomputes the
bits like any tensor, and the fp32 map leaves with its forward readers. A bias-only layer behind a sparse update
(tiny-training's) needs nothing else of its ReLU6's maps: mcunet-5fps's 8x8x240 ones are 60 KiB each, their
bits 1.9 KiB. tiny-training keeps such a mask too (in int8); poet's is a bit.

An activation whose saved map another backward node reads (a trained layer's weight gradient reading the ReLU's
output as its input) keeps its fp32 backward: the map stays alive for that reader anyway, and bits beside it
would only add bytes.
"""

from __future__ import annotations

from dataclasses import replace

from poet.graph.training_graph import GraphNode, TrainingGraph, readers

BITS_PER_WORD = 32


def mask_words(n: int) -> int:
    """The u32 words of n elements' bits."""
    return -(-n // BITS_PER_WORD)


def _masked(g: TrainingGraph) -> dict[int, int]:
    """The activations whose backward can read bits: forward relu/hardtanh id -> its backward's id."""
    by = readers(g)
    out: dict[int, int] = {}
    for n in g.nodes:
        if n.kind != "forward" or n.op not in ("relu", "hardtanh"):
            continue
        bwd = [g.nodes[j] for j in by[n.id] if g.nodes[j].op == f"{n.op}_bwd"]
        if n.op == "hardtanh":  # its backward reads x, the activation's input: this one's, if x has no other clamp
            if sum(g.nodes[j].op == "hardtanh" for j in by[n.deps[0]]) != 1:
                continue
            bwd = [g.nodes[j] for j in by[n.deps[0]] if g.nodes[j].op == "hardtanh_bwd"
                   and (g.nodes[j].attrs["lo"], g.nodes[j].attrs["hi"]) == (n.attrs["lo"], n.attrs["hi"])]
        if len(bwd) != 1:
            continue
        saved = bwd[0].deps[1]
        if saved != (n.id if n.op == "relu" else n.deps[0]):
            continue
        if any(g.nodes[j].kind == "backward" and j != bwd[0].id for j in by[saved]):
            continue
        out[n.id] = bwd[0].id
    return out


def with_masks(g: TrainingGraph) -> TrainingGraph:
    """g with each activation whose backward needs only where its gradient passes (_masked) saving bits
    (act_mask, right after it) that its backward reads (mask_bwd); g itself when there is none."""
    masked = _masked(g)
    if not masked:
        return g
    bwd_of = {b: f for f, b in masked.items()}
    nodes: list[GraphNode] = []
    new: dict[int, int] = {}
    mask_of: dict[int, int] = {}  # forward activation's old id -> its mask's new id
    for n in g.nodes:
        if n.id in bwd_of:
            act = g.nodes[bwd_of[n.id]]
            m = mask_of[act.id]
            node = GraphNode(len(nodes), n.name, n.module, "backward", "mask_bwd", [new[n.deps[0]], m], n.bytes,
                             list(n.shape), {"n": act.attrs["n"]}, n.flops, saved=[m])
        else:
            node = replace(n, id=len(nodes), deps=[new[d] for d in n.deps], saved=[new[d] for d in n.saved],
                           attrs=dict(n.attrs), shape=list(n.shape))
        new[n.id] = len(nodes)
        nodes.append(node)
        if n.id in masked:
            count = int(n.attrs["n"])
            lo, hi = (0.0, 0.0) if n.op == "relu" else (float(n.attrs["lo"]), float(n.attrs["hi"]))
            mask_of[n.id] = len(nodes)
            name = n.name.removesuffix("/forward")
            nodes.append(GraphNode(len(nodes), f"{name}/mask", n.module, "forward", "act_mask", [new[n.id]],
                                   4 * mask_words(count), [mask_words(count)],
                                   {"n": count, "lo": lo, "hi": hi, "bounded": int(n.op == "hardtanh")}, count))
    return replace(g, nodes=nodes)
