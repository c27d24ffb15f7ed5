"""Lower a traced graph to the model blob and a plan to the byte schedule (docs/spec.md 2 and 5).

Arena offsets are chosen here, greedily by size like TensorFlow Lite Micro's
greedy memory planner: every allocation lives from the instruction that makes it
resident to the one that frees it, and the largest are placed first at the
lowest offset that overlaps no placed allocation alive at the same time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poet.errors import PoetError
from poet.graph import dropout
from poet.graph.training_graph import TrainingGraph, conv_window
from poet.ops import OPS
from poet.plan.cost.memory import arena_bytes, in_place
from poet.plan.lowering import modelblob as mb
from poet.plan.lowering.modelblob import BlobNode, ModelBlob
from poet.plan.lowering.schedule import (
    COMPUTE,
    FORWARD,
    FREE,
    IN_PLACE,
    PAGE_IN,
    PAGE_OUT,
    RECOMPUTE,
    Instr,
    Schedule,
)
from poet.plan.types import Plan


def optimizer_attrs(opt: dict[str, Any]) -> dict[str, Any]:
    """The optimizer node's a0..a3 (docs/spec.md section 2) from a graph's optimizer settings (a4, whether
    it updates in backward, is the graph's: TrainingGraph.updates_in_backward)."""
    name = opt.get("name", "sgd")
    if name == "sgd":
        return {"opt": 0, "p1": 0.0, "p2": 0.0, "p3": 0.0}
    if name == "momentum":
        return {"opt": 1, "p1": opt["momentum"], "p2": 0.0, "p3": 0.0}
    if name == "adam":
        return {"opt": 2, "p1": opt["beta1"], "p2": opt["beta2"], "p3": opt["eps"]}
    raise PoetError(f"optimizer {name!r}: the runtime has sgd, momentum and adam")


KINDS = {"input": mb.KIND_INPUT, "forward": mb.KIND_FORWARD, "loss": mb.KIND_LOSS, "backward": mb.KIND_BACKWARD,
         "optimizer": mb.KIND_OPTIMIZER}
ALIGN = 4
# conv2d_bwd's a9 packs its share's input channels (bits 1-14), its in-place mark (bit 15) and its rest's
# parameter index + 1 (bits 16-30)
PACKED_MAX = 2**15 - 1
CK_MAX = 2**14 - 1


def check_runtime(g: TrainingGraph) -> None:
    """Raise, naming the first node in a form of its op the firmware cannot run yet (poet.ops, an op's
    limits), before anything is uploaded."""
    for n in g.nodes:
        for attr, want in OPS[n.op].limits:
            if n.attrs.get(attr, want) != want:
                raise PoetError(f"{n.name}: {n.op} with {attr}={n.attrs[attr]}; the C runtime supports "
                                f"{attr}={want} for now")
        odd = [f"{a}={n.attrs[a]}" for a in OPS[n.op].even if n.attrs.get(a, 0) % 2]
        if odd:  # the board's check refuses it (firmware/core/ops): say so before anything boots
            raise PoetError(f"{n.name}: {n.op} with {', '.join(odd)}; the C runtime supports even "
                            f"{' and '.join(OPS[n.op].even)} for now")


def _attr(attrs: dict[str, Any], name: str) -> int:
    """One a-slot of docs/spec.md section 2 from the graph node's attributes."""
    if name == "staged_i8":  # an input staged int8 (memory.staged_input_scale), its scale parameter
        return int(bool(attrs.get("i8")))
    if name == "staged_scale":
        return int(attrs["scale"]) if attrs.get("i8") else 0
    if name == "b_inner":
        return int(attrs.get("inner", 0))
    if name == "keep_from":
        return dropout.threshold(float(attrs["p"]))
    if name == "keep_scale":
        return mb.f32_bits(float(dropout.scale(float(attrs["p"]))))
    if name == "drop_row":  # absent in graphs written before stochastic depth: a draw per element
        return int(attrs.get("row", 0))
    if name == "need_ck":  # bits 16-30: the rest's parameter index + 1 of a weight stored split, 0 for none
        return (int(attrs["need_grad_input"]) | int(attrs.get("ck", 0)) << 1 | _rest(attrs) + 1 << 16
                | (mb.CONV_BWD_IN_PLACE if attrs.get("inplace") else 0))
    if name == "rest":  # + 1: 0, as a blob's absent slots read, is none; bit 19 the in-place mark
        return _rest(attrs) + 1 | (mb.CONV_IN_PLACE if attrs.get("inplace") else 0)
    if name == "kernel":
        kh, kw, ph, pw = conv_window(attrs)
        return mb.conv_kernel(kh, kw, pw, int(attrs.get("padb", ph)) if "padb" in attrs else None)
    if name == "geom":
        return mb.conv_geometry(int(attrs["pad"]), int(attrs.get("stride", 1)), int(attrs.get("groups", 1)))
    if name == "pgeom":
        return mb.pool_geometry(int(attrs["ph"]), int(attrs["pw"]), int(attrs["sh"]), int(attrs["sw"]))
    if name == "epi":
        return mb.q_epilogue(int(attrs["out_scale"]), int(attrs.get("relu", 0)), bool(attrs.get("inplace")))
    if name in ("from", "to"):
        return mb.dtype_code(attrs[name])
    if name.startswith("f:"):
        return mb.f32_bits(float(attrs[name[2:]]))
    if name in ("w", "b", "rm", "rv"):
        return int(attrs.get(name, -1))
    return int(attrs[name])


def _rest(attrs: dict[str, Any]) -> int:
    """The parameter index of the frozen rest of a conv weight trained in part, -1 for none (TrainingGraph.rests)."""
    rest, ck = int(attrs.get("rest", -1)), int(attrs.get("ck", 0))
    if rest >= PACKED_MAX or ck > CK_MAX:
        raise PoetError(f"a conv weight trained in part with {ck} channels in its share and its rest at parameter "
                        f"{rest}: the board's conv2d_bwd packs the share's channels up to {CK_MAX} and the rest "
                        f"below {PACKED_MAX}")
    return rest


def blob_attrs(op: str, attrs: dict[str, Any]) -> tuple[int, ...]:
    """a0.. of a runtime op (docs/spec.md section 2) from a graph node's attributes."""
    return tuple(_attr(attrs, a) for a in OPS[op].slots)


def model_blob(g: TrainingGraph) -> ModelBlob:
    check_runtime(g)
    in_backward, rests = g.updates_in_backward, g.rests
    nodes = []
    for n in g.nodes:
        op = OPS[n.op]
        attrs = optimizer_attrs(g.optimizer) | {"in_backward": int(in_backward)} if n.kind == "optimizer" else n.attrs
        if attrs.get("w", -1) in rests and n.op in ("conv2d", "conv2d_bwd"):
            attrs = {**attrs, "rest": rests[attrs["w"]]}
        nodes.append(BlobNode(op=op.code, kind=KINDS[n.kind], deps=tuple(n.deps), bytes=n.bytes,
                              attrs=tuple(_attr(attrs, a) for a in op.slots)))
    t = g.stored
    return ModelBlob(batch=g.batch, x_elems=g.x_elems, param_elems=[p.elems for p in t], nodes=nodes,
                     param_frozen=[not p.trained for p in t], param_moved=[p.moved for p in t],
                     param_i8=[p.int8 for p in t], param_aux=[p.aux for p in t])


@dataclass(frozen=True)
class Lowered:
    schedule: Schedule
    peak_live_bytes: int  # the firmware's peak of resident bytes, predicted
    extent_bytes: int  # highest offset + bytes of any live tensor


def instructions(plan: Plan, sizes: list[int], over: list[int] | None = None
                 ) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """The plan's stages as (op, node) in execution order (docs/spec.md section 1: page-ins, frees
    of what the stage does not use, each compute followed by the frees right after it, page-outs,
    frees at the end); tensors of 0 bytes are never paged or freed. over[i]: the dep node i may be made in place
    of (-1: none; memory.in_place); where that dep leaves right after i, i is made in place (section 1, "In
    place"): the compute carries the flag and the dep's free is its own. Also {instruction index: dep} of those."""
    out: list[tuple[int, int]] = []
    in_place: dict[int, int] = {}
    for t, st in enumerate(plan.stages):
        out += [(PAGE_IN, i) for i in st.page_in if sizes[i]]
        out += [(FREE, i) for i in st.free_before if sizes[i]]
        for c in st.compute:
            leaving = st.free_after.get(c, ())
            d = over[c] if over is not None and sizes[c] else -1
            if d >= 0 and d in leaving:
                in_place[len(out)] = d
            else:
                d = -1
            out.append((COMPUTE if c == t else RECOMPUTE, c))
            out += [(FREE, i) for i in leaving if sizes[i] and i != d]
        out += [(PAGE_OUT, i) for i in st.page_out if sizes[i]]
        out += [(FREE, i) for i in st.free if sizes[i]]
    return out, in_place


def place(ops: list[tuple[int, int]], sizes: list[int], in_place: dict[int, int] | None = None
          ) -> tuple[list[int], int, int]:
    """Arena offsets per instruction (greedy by size), the extent, and the peak of live bytes. in_place:
    {instruction index: dep} of computes made in place of their dep: the output at the dep's offset, which
    leaves there (the two placed together)."""
    in_place = in_place or {}
    intervals: list[tuple[int, int, int]] = []  # (start instr, end instr, bytes)
    group: list[int] = []  # each interval's group: intervals at one offset (a tensor and those made in place of it)
    open_at: dict[int, int] = {}
    live = peak = 0
    for k, (op, node) in enumerate(ops):
        if op in (COMPUTE, RECOMPUTE, PAGE_IN) and sizes[node]:
            if k in in_place:  # made in dep d's bytes: d leaves here, and during the compute both are d's bytes
                d = in_place[k]
                idx = open_at.pop(d)
                s, _, b = intervals[idx]
                intervals[idx] = (s, k, b)
                group.append(group[idx])
                live -= sizes[d]
            else:
                group.append(len(intervals))
            open_at[node] = len(intervals)
            intervals.append((k, len(ops), sizes[node]))
            live += sizes[node]
            peak = max(peak, live)
        elif op == FREE:
            idx = open_at.pop(node)
            s, _, b = intervals[idx]
            intervals[idx] = (s, k, b)
            live -= sizes[node]
    members: dict[int, list[int]] = {}
    for idx, gid in enumerate(group):
        members.setdefault(gid, []).append(idx)
    offsets, extent = _least_extent(intervals, members)
    by_instr = [0] * len(ops)
    for idx, (s, _, _) in enumerate(intervals):
        by_instr[s] = offsets[idx]
    return by_instr, extent, peak


def _least_extent(intervals: list[tuple[int, int, int]], members: dict[int, list[int]]) -> tuple[list[int], int]:
    """Offsets of the intervals, each group at one offset, by the greedy placement in a few orders (TFLM's: the
    largest first; then the longest-lived, the earliest and the largest in bytes x time), the one of least extent
    (the first on a tie). One order alone can leave a plan's tensors a tenth above its live bytes (mcunet-5fps's
    backward pass: 112 KiB placed for 100 KiB live), where another places them within."""
    def size(g: int) -> int:
        return max(intervals[i][2] for i in members[g])

    def life(g: int) -> int:
        return max(intervals[i][1] for i in members[g]) - intervals[g][0]

    orders = [lambda g: (-size(g), intervals[g][0]), lambda g: (-life(g), -size(g), intervals[g][0]),
              lambda g: (intervals[g][0], -size(g)), lambda g: (-size(g) * (life(g) + 1), intervals[g][0])]
    best: tuple[list[int], int] | None = None
    for key in orders:
        offsets = _greedy(intervals, members, sorted(members, key=key))
        extent = max((offsets[i] + intervals[i][2] for i in range(len(intervals))), default=0)
        if best is None or extent < best[1]:
            best = (offsets, extent)
    assert best is not None
    return best


def _greedy(intervals: list[tuple[int, int, int]], members: dict[int, list[int]], order: list[int]) -> list[int]:
    """Each group in `order` at the lowest offset where every member fits beside what is placed in its time."""
    offsets = [0] * len(intervals)
    placed: list[int] = []
    for gid in order:
        busy = [sorted((offsets[j], offsets[j] + intervals[j][2]) for j in placed
                       if intervals[j][0] <= intervals[i][1] and intervals[i][0] <= intervals[j][1])
                for i in members[gid]]
        off = 0
        moved = True
        while moved:  # the lowest offset where every member fits beside what is placed in its time
            moved = False
            for i, spans in zip(members[gid], busy, strict=True):
                for lo, hi in spans:
                    if off < hi and lo < off + intervals[i][2]:
                        off, moved = (hi + ALIGN - 1) // ALIGN * ALIGN, True
        for i in members[gid]:
            offsets[i] = off
            placed.append(i)
    return offsets


def lower(plan: Plan, g: TrainingGraph, blob: ModelBlob | None = None, in_place_ops: bool = True) -> Lowered:
    """The plan's schedule for g: its tensors placed in the arena, each at its arena bytes (the input none:
    its readers read the staged batch in place, so no page, free or offset of it is ever emitted), and each op
    that may be made over its dep 0 made so where the dep leaves right after it (in_place_ops False: none, the
    schedule a planner without in place would have made of the same plan)."""
    blob = blob or model_blob(g)
    sizes = [arena_bytes(n) for n in g.nodes]
    ops, over = instructions(plan, sizes, [n.deps[0] if in_place_ops and in_place(g, n) else -1 for n in g.nodes])
    offsets, extent, peak = place(ops, sizes, over)
    instrs = [Instr(op, node, offsets[k], IN_PLACE if k in over else 0) for k, (op, node) in enumerate(ops)]
    sched = Schedule(n_nodes=len(g.nodes), model_hash=blob.hash(), arena_bytes=extent, instrs=instrs)
    return Lowered(sched, peak, extent)


def forward_lowered(blob: ModelBlob) -> Lowered:
    """The forward schedule predict runs (docs/spec.md section 5, flag FORWARD): the nodes before the
    model's first loss in order, each tensor freed after its last reader there, the output (the loss's
    input) kept. It recomputes and pages nothing: it holds at most a node's inputs, its output and what
    later nodes still read, never more than a training step's forward half keeps."""
    nodes = blob.nodes
    limit = next((i for i, n in enumerate(nodes) if n.kind == mb.KIND_LOSS), None)
    if limit is None:
        raise ValueError("the model has no loss node: no forward pass to predict with")
    out = nodes[limit].deps[0]
    sizes = [n.arena_bytes for n in nodes]
    last_read = {d: i for i in range(limit) for d in nodes[i].deps}
    ops: list[tuple[int, int]] = []
    for i in range(limit):
        ops.append((COMPUTE, i))
        done = [d for d in dict.fromkeys(nodes[i].deps) if last_read[d] == i]
        if i not in last_read:
            done.append(i)  # read by nothing before the loss (a tensor only the backward uses)
        ops += [(FREE, d) for d in done if d != out and sizes[d]]
    offsets, extent, peak = place(ops, sizes)
    instrs = [Instr(op, node, offsets[k]) for k, (op, node) in enumerate(ops)]
    sched = Schedule(n_nodes=len(nodes), model_hash=blob.hash(), arena_bytes=extent, instrs=instrs, flags=FORWARD)
    return Lowered(sched, peak, extent)
