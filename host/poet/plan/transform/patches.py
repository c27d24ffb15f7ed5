"""Patch-based execution of a static-int8 prefix's first stage (MCUNetV2's patch-based inference, which
tiny-training runs its networks' first blocks with): the stage's output is made a strip of rows at a time, each
strip computed from just the rows of the stage's input it needs, so that the large maps of the first blocks
(MobileNetV2-w0.35 at 128x128 expands to 48x64x64 int8, 192 KiB) exist only a strip at a time.

The stage is a run of int8 convs and adds from the first int8 tensor (the staged input, or a quantize) to a
`cut`, whose output is the only one read past it. For `strips` strips of the cut's output rows, every stage
layer is repeated once per strip over the rows its readers in that strip need: a conv2d_q of fewer input rows,
padded above and below only where the strip meets the image's edge (its `pad` and `padb`, the firmware's
POET_CONV_PAD_B), an add_q of fewer elements. A strip's rows of the stage input, and of a tensor one reader
needs fewer rows of than another, are `slice_q` copies; the cut's strips are joined by `cat_q` (four at
most each, so a second level above four strips). Each output element is computed from the same int8 values
by the same kernel, so a patched stage gives the stage's output bit for bit (integer sums are exact; the
epilogue is per element); tests/test_patches.py checks it on the C runtime and in the host's reference.

The cost is the halo: the rows neighbouring strips both compute, more with each stride the stage holds. The
rewrite is a graph like any other, so the planner costs it as it costs recompute and paging; `choose` picks the
cut and the number of strips (none when the stage already fits): the cheapest that lets the widest op fit the
arena, else the one that needs the least.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from poet.graph.training_graph import GraphNode, TrainingGraph, conv_window
from poet.plan.cost.memory import arena_bytes, op_floor, pool_for

STAGE_OPS = ("conv2d_q", "add_q")
STRIPS = (2, 3, 4, 6, 8, 12, 16)  # the counts `choose` tries: a cat_q joins four, two levels join sixteen
Rows = tuple[int, int]  # [first, end) of a map's rows


@dataclass(frozen=True)
class Patching:
    """A stage run patch by patch: the node (name, in the unpatched graph) whose output the strips make, and how
    many strips."""

    cut: str
    strips: int

    def to_json(self) -> dict[str, Any]:
        return {"cut": self.cut, "strips": self.strips}

    @classmethod
    def from_json(cls, info: Any) -> Patching:
        """plan.json's `patches` (ValueError when it is not one)."""
        if not (isinstance(info, dict) and isinstance(info.get("cut"), str) and type(info.get("strips")) is int):
            raise ValueError("patches is not {\"cut\": a node's name, \"strips\": a count}")
        return cls(info["cut"], info["strips"])


def _int8_out(n: GraphNode) -> bool:
    return n.op in STAGE_OPS and n.attrs.get("out_scale", -1) >= 0


def stage_start(g: TrainingGraph) -> int | None:
    """The stage's input: the staged int8 input, or the first quantize; None when no int8 layer reads one."""
    first = next((n for n in g.nodes if n.op == "quantize" or (n.op == "input" and n.attrs.get("i8"))), None)
    if first is None or not any(n.op == "conv2d_q" and first.id in n.deps for n in g.nodes):
        return None
    return first.id


def cuts(g: TrainingGraph) -> list[int]:
    """The nodes a stage may end at: the stage is every node from its input's next one to the cut, all int8 convs
    and adds with int8 outputs, none read past the cut but the cut (whose output has rows: a map)."""
    x = stage_start(g)
    if x is None:
        return []
    readers: dict[int, list[int]] = {n.id: [] for n in g.nodes}
    for n in g.nodes:
        for d in n.deps:
            readers[d].append(n.id)
    out = []
    for k in range(x + 1, len(g.nodes)):
        n = g.nodes[k]
        if not _int8_out(n) or any(d != x and not x < d < k for d in n.deps) or len(n.shape) != 4:
            break
        if all(r <= k for i in range(x + 1, k) for r in readers[i]):
            out.append(k)
    return out


def _need(n: GraphNode, rows: Rows, dep: int) -> Rows:
    """The rows of dep's map node n reads to make its output rows `rows`."""
    if n.op == "add_q":
        return rows
    a = n.attrs
    kh, _, ph, _ = conv_window(a)
    s, H = int(a.get("stride", 1)), int(a["H"])
    return max(0, rows[0] * s - ph), min(H, (rows[1] - 1) * s - ph + kh)


def _strip_rows(g: TrainingGraph, x: int, cut: int, out: Rows) -> dict[int, Rows]:
    """The rows each stage map (and the stage input x) must hold for the cut to make `out`: the union of what its
    readers in the stage need, readers first."""
    rows = {cut: out}
    for k in range(cut, x, -1):
        if k not in rows:
            continue
        for d in dict.fromkeys(g.nodes[k].deps):
            lo, hi = _need(g.nodes[k], rows[k], d)
            if d in rows:
                lo, hi = min(lo, rows[d][0]), max(hi, rows[d][1])
            rows[d] = (lo, hi)
    return rows


def _split(n_rows: int, strips: int) -> list[Rows]:
    """n_rows in `strips` strips as even as can be, the larger first."""
    base, extra = divmod(n_rows, strips)
    out, at = [], 0
    for k in range(strips):
        size = base + (k < extra)
        out.append((at, at + size))
        at += size
    return out


class _Builder:
    """The patched graph's nodes, appended in order, with the old ids' new ones."""

    def __init__(self, g: TrainingGraph) -> None:
        self.g = g
        self.nodes: list[GraphNode] = []

    def add(self, src: GraphNode, name: str, op: str, deps: list[int], shape: list[int], attrs: dict[str, Any],
            flops: int) -> int:
        nid = len(self.nodes)
        self.nodes.append(GraphNode(id=nid, name=name, module=src.module, kind="forward", op=op, deps=deps,
                                    bytes=_elems(shape), shape=shape, attrs=attrs, flops=flops))
        return nid

    def rows_of(self, src: GraphNode, nid: int, have: Rows, want: Rows, tag: str, scale: int) -> int:
        """Node nid (the rows `have` of src's map) cut to the rows `want`: itself when they are the same, else a
        slice_q copy."""
        if have == want:
            return nid
        B, C, _, W = src.shape
        return self.add(src, f"{src.name}{tag}rows{want[0]}-{want[1]}", "slice_q", [nid],
                        [B, C, want[1] - want[0], W],
                        {"outer": B * C, "total": (have[1] - have[0]) * W, "offset": (want[0] - have[0]) * W,
                         "len": (want[1] - want[0]) * W, "scale": scale}, 0)


def _elems(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _scale_of(g: TrainingGraph, i: int) -> int:
    """The scale parameter of int8 node i's output."""
    a = g.nodes[i].attrs
    return int(a["scale"]) if g.nodes[i].op in ("input", "quantize") else int(a["out_scale"])


def patch(g: TrainingGraph, cut: int, strips: int) -> TrainingGraph:
    """g with its stage up to node `cut` (one of cuts(g)) run in `strips` strips of the cut's output rows."""
    x = stage_start(g)
    if x is None or cut not in cuts(g):
        raise ValueError(f"node {cut} does not end an int8 stage of {g.model}")
    H_out = g.nodes[cut].shape[2]
    if not 2 <= strips <= min(16, H_out):
        raise ValueError(f"{strips} strips of {H_out} rows: from 2 to 16, at most a strip a row")
    b = _Builder(g)
    for n in g.nodes[:x + 1]:
        b.nodes.append(copy.deepcopy(n))
    made: list[int] = []
    for k, out in enumerate(_split(H_out, strips)):
        rows = _strip_rows(g, x, cut, out)
        new: dict[int, int] = {x: x}
        have: dict[int, Rows] = {x: (0, g.nodes[x].shape[2]) if len(g.nodes[x].shape) == 4 else (0, 0)}
        tag = f"#p{k}:"
        for i in range(x + 1, cut + 1):
            if i not in rows:
                continue
            n = g.nodes[i]
            lo, hi = rows[i]
            deps = []
            for d in n.deps:
                want = _need(n, (lo, hi), d)
                deps.append(b.rows_of(g.nodes[d], new[d], have[d], want, tag, _scale_of(g, d)))
            B, C, H, W = n.shape
            a = dict(n.attrs)
            shape = [B, C, hi - lo, W]
            if n.op == "conv2d_q":
                kh, kw, ph, pw = conv_window(a)
                s = int(a.get("stride", 1))
                top, end = rows[i][0] * s - ph, (hi - 1) * s - ph + kh
                want = _need(n, (lo, hi), n.deps[0])
                a.update(H=want[1] - want[0], k=kh, kw=kw, pad=max(0, -top), padw=pw,
                         padb=max(0, end - int(n.attrs["H"])))
                assert (a["H"] + a["pad"] + a["padb"] - kh) // s + 1 == hi - lo, (n.name, lo, hi, a)
            else:
                a["n"] = _elems(shape)
            new[i] = b.add(n, f"{n.name}{tag}{lo}-{hi}", n.op, deps, shape, a, n.flops * (hi - lo) // H)
            have[i] = (lo, hi)
        made.append(new[cut])
    c = g.nodes[cut]
    B, channels, _, W = c.shape
    scale = _scale_of(g, cut)
    level = [(m, r) for m, r in zip(made, _split(H_out, strips), strict=True)]
    while len(level) > 1:
        joined = []
        for j in range(0, len(level), 4):
            group = level[j:j + 4]
            if len(group) == 1:
                joined.append(group[0])
                continue
            lo, hi = group[0][1][0], group[-1][1][1]
            lens = [(r[1] - r[0]) * W for _, r in group] + [0] * (4 - len(group))
            name = c.name if len(level) <= 4 else f"{c.name}#rows{lo}-{hi}"
            nid = b.add(c, name, "cat_q", [m for m, _ in group], [B, channels, hi - lo, W],
                        {"outer": B * channels, "l0": lens[0], "l1": lens[1], "l2": lens[2], "l3": lens[3],
                         "scale": scale}, 0)
            joined.append((nid, (lo, hi)))
        level = joined
    shift = {i: i for i in range(x + 1)}
    shift[cut] = level[0][0]
    offset = len(b.nodes) - (cut + 1)
    for n in g.nodes[cut + 1:]:
        shift[n.id] = n.id + offset
    for n in g.nodes[cut + 1:]:
        b.nodes.append(replace(copy.deepcopy(n), id=shift[n.id], deps=[shift[d] for d in n.deps],
                               saved=[shift[d] for d in n.saved]))
    return replace(g, nodes=b.nodes)


def renumbered(g: TrainingGraph, cut: int, patched: TrainingGraph) -> dict[int, int]:
    """Each node of g outside the stage ending at `cut`, by its id in `patched` (patch(g, cut, ...)): the nodes up
    to the stage input keep theirs, the cut's is the join, the rest move by the strips' nodes."""
    x = stage_start(g)
    assert x is not None
    offset = len(patched.nodes) - len(g.nodes)
    out = {i: i for i in range(x + 1)}
    out.update({i: i + offset for i in range(cut + 1, len(g.nodes))})
    out[cut] = cut + offset
    return out


def widest(g: TrainingGraph, ids: range | None = None) -> int:
    """The most arena bytes one op of g (among `ids`) needs at once: its output and its inputs (memory.op_floor)."""
    return max((op_floor(g, g.nodes[i]) for i in (ids if ids is not None else range(len(g.nodes)))), default=0)


def stage_peak(g: TrainingGraph, first: int, last: int) -> int:
    """What the strips of a patched stage (nodes first..last, the join last) need at most: the widest strip op
    beside the cut's strips made before it (all of them, at the join)."""
    return widest(g, range(first, last + 1)) + arena_bytes(g.nodes[last])


@dataclass(frozen=True)
class Option:
    patching: Patching | None
    graph: TrainingGraph
    need: int  # the widest op's arena bytes, the stage's strips counted as stage_peak
    flops: int


def options(g: TrainingGraph) -> list[Option]:
    """g unpatched, and patched at each cut with each count of strips its output's rows allow."""
    out = [Option(None, g, widest(g), sum(n.flops for n in g.nodes))]
    x = stage_start(g)
    for cut in cuts(g):
        for strips in STRIPS:
            if strips > g.nodes[cut].shape[2]:
                break
            p = patch(g, cut, strips)
            last = renumbered(g, cut, p)[cut]
            need = max(stage_peak(p, (x or 0) + 1, last), widest(p, range(last + 1, len(p.nodes))))
            out.append(Option(Patching(g.nodes[cut].name, strips), p, need, sum(n.flops for n in p.nodes)))
    return out


def choose(g: TrainingGraph, ram: int, runtime_static: int) -> Option:
    """The option for a budget of `ram`: unpatched when its widest op fits the arena; else the one of fewest flops
    (the least halo) whose widest op fits; else the one that needs the least arena."""
    opts = options(g)
    fits = [o for o in opts if o.need <= pool_for(o.graph).arena(ram - runtime_static)]
    if fits and fits[0].patching is None:
        return fits[0]
    if fits:
        return min(fits, key=lambda o: (o.flops, o.need))
    return min(opts, key=lambda o: (o.need + pool_for(o.graph).fixed, o.flops))
