"""Which fp32 depthwise convs run a channel at a time, so that a plan may make their output over their input.

A depthwise conv makes each output channel from its own input channel. Made one channel at a time in the pool's
stream buffer and copied over the input channels already read, its output needs no bytes beyond its input's
(firmware/core/ops/conv.c by_channel; docs/spec.md 1, "In place"). Its backward does the same with the input
gradient over the output gradient, at batch 1 only: a channel's weight gradient sums over the batch, so every
sample's output gradient of that channel is read before any is overwritten. The bits are the layer's either way.

The price is the stream buffer, which must hold one channel's plane for the whole step (the pool's fixed part). So
a conv is marked (its node's `inplace`, as static_int8 marks a conv2d_q) where it pays:

- every conv whose plane the stream buffer already holds, for free;
- then, while it lowers the widest op's bytes plus the stream buffer's (the --ram no plan can go below), the
  convs that make the widest op.

tiny-training's mbv2-w0.35 49kb scheme: its widest ops are the trained blocks' depthwise convs at 8x8x192, forward
and backward (an input and an output of 48 KiB each); marked, the plan needs 34 KiB less.
"""

from __future__ import annotations

from dataclasses import replace

from poet.graph.training_graph import GraphNode, TrainingGraph
from poet.plan.cost.memory import arena_bytes, in_place_plane, op_floor, stream_bytes

CONVS = ("conv2d", "conv2d_bwd")


def eligible(g: TrainingGraph, n: GraphNode) -> bool:
    """Whether the board can run node n a channel at a time in place (conv.c in_place_ok checks the same): an fp32
    depthwise conv of two channels or more whose output is no larger than its dep 0 (an arena tensor); a backward
    one at batch 1 that makes the input gradient."""
    a = n.attrs
    if n.op not in CONVS or not n.deps or n.deps.count(n.deps[0]) > 1:
        return False
    if not a.get("groups", 1) == a["C"] == a["O"] or a["C"] < 2:
        return False
    if n.op == "conv2d_bwd" and (a["B"] != 1 or not a.get("need_grad_input")):
        return False
    return 0 < arena_bytes(n) <= arena_bytes(g.nodes[n.deps[0]])


def marked(g: TrainingGraph, names: set[str] | frozenset[str]) -> TrainingGraph:
    """g with the conv nodes `names` marked to run in place (and no others)."""
    nodes = []
    for n in g.nodes:
        if n.op in CONVS and (n.name in names) != bool(n.attrs.get("inplace")):
            attrs = {k: v for k, v in n.attrs.items() if k != "inplace"}
            n = replace(n, attrs=attrs | ({"inplace": 1} if n.name in names else {}))
        nodes.append(n)
    return replace(g, nodes=nodes)


def _need(g: TrainingGraph) -> int:
    """The widest op's arena bytes plus the stream buffer's: what marking trades."""
    return max((op_floor(g, n) for n in g.nodes), default=0) + stream_bytes(g)


def choose(g: TrainingGraph) -> frozenset[str]:
    """The names of the convs of g to mark (the module's rule): deterministic, a function of g alone."""
    cands = [n for n in g.nodes if eligible(g, n)]
    names: set[str] = set()
    out = g
    while True:
        free = {n.name for n in cands if n.name not in names and in_place_plane(n) <= stream_bytes(out)}
        if free:
            names |= free
            out = marked(g, names)
            continue
        widest = max((op_floor(out, n) for n in out.nodes), default=0)
        top = {n.name for n in cands if n.name not in names and op_floor(out, n) == widest}
        if not top:
            return frozenset(names)
        trial = marked(g, names | top)
        if _need(trial) >= _need(out):
            return frozenset(names)
        names |= top
        out = trial


def with_in_place_convs(g: TrainingGraph) -> TrainingGraph:
    """g with the convs `choose` picks marked."""
    names = choose(g)
    return marked(g, names) if names else g


def in_place_names(g: TrainingGraph) -> tuple[str, ...]:
    """The fp32 convs of g marked to run in place, sorted: what a plan records of the choice."""
    return tuple(sorted(n.name for n in g.nodes if n.op in CONVS and n.attrs.get("inplace")))


def in_place_lines(g: TrainingGraph) -> list[str]:
    """What `poet solve` says of the choice: how many convs, and the stream buffer they share."""
    names = in_place_names(g)
    if not names:
        return []
    return [f"  {len(names)} depthwise conv{'s' if len(names) != 1 else ''} (forward or backward) run a channel at "
            f"a time, so the plan may make each over its input (a {stream_bytes(g)} B buffer for a channel)"]
