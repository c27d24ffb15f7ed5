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
from poet.plan import modelblob as mb
from poet.plan.modelblob import BlobNode, ModelBlob
from poet.plan.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, RECOMPUTE, Instr, Schedule
from poet.plan.types import Plan

# runtime op -> (op code, the graph attributes that become a0.. in docs/spec.md section 2).
# "f:eps" is a float attribute (stored as its binary32 bits); "kernel" and "geom" are conv2d's packed
# window (k, kw, padw) and pad/stride/groups; a missing "w"/"b" (no such parameter) is -1.
_CONV = ("B", "C", "H", "W", "O", "kernel", "geom", "w", "b")
_BN = ("B", "C", "HW", "f:eps", "f:momentum", "w", "b", "rm", "rv")  # rm/rv: running statistics
_LN = ("rows", "D", "f:eps", "w", "b")
_PERM = ("d0", "d1", "d2", "d3", "p0", "p1", "p2", "p3")
_EMB = ("n", "V", "D", "ids", "w")
_DROP = ("n", "keep_from", "keep_scale", "salt")  # the mask's bound and scale, made from p (graph/dropout.py)
_POOL = ("B", "C", "H", "W", "kh", "kw", "pgeom", "include_pad")  # pgeom: avgpool2d's packed padding and strides
OPS: dict[str, tuple[int, tuple[str, ...]]] = {
    "input": (mb.OP_INPUT, ("n", "staged_i8", "staged_scale")),
    "linear": (mb.OP_LINEAR, ("B", "in", "out", "w", "b")),
    "conv2d": (mb.OP_CONV2D, _CONV),
    "relu": (mb.OP_RELU, ("n",)),
    "maxpool2d": (mb.OP_MAXPOOL2D, ("B", "C", "H", "W")),
    "avgpool2d": (mb.OP_AVGPOOL2D, _POOL),
    "upsample": (mb.OP_UPSAMPLE, ("B", "C", "H", "W", "sh", "sw")),
    "flatten": (mb.OP_FLATTEN, ("n",)),
    "cross_entropy": (mb.OP_CROSS_ENTROPY, ("B", "classes")),
    "mse": (mb.OP_MSE, ("n",)),
    "l1": (mb.OP_L1, ("n",)),
    "reshape": (mb.OP_RESHAPE, ("n",)),
    "batchnorm": (mb.OP_BATCHNORM, _BN),
    "batchnorm_eval": (mb.OP_BATCHNORM_EVAL, _BN),
    "layernorm": (mb.OP_LAYERNORM, _LN),
    "tanh": (mb.OP_TANH, ("n",)),
    "sigmoid": (mb.OP_SIGMOID, ("n",)),
    "silu": (mb.OP_SILU, ("n",)),
    "dropout": (mb.OP_DROPOUT, _DROP),
    "hardswish": (mb.OP_HARDSWISH, ("n",)),
    "hardsigmoid": (mb.OP_HARDSIGMOID, ("n",)),
    "gelu": (mb.OP_GELU, ("n", "tanh")),
    "hardtanh": (mb.OP_HARDTANH, ("n", "f:lo", "f:hi")),
    "mean": (mb.OP_MEAN, ("outer", "r", "inner")),
    "permute": (mb.OP_PERMUTE, _PERM),
    "add": (mb.OP_ADD, ("n", "m")),
    "sub": (mb.OP_SUB, ("n", "m")),
    "mul": (mb.OP_MUL, ("n", "m")),
    "scale": (mb.OP_SCALE, ("n", "f:mul", "f:add")),
    "matmul": (mb.OP_MATMUL, ("batch", "M", "K", "N")),
    "softmax": (mb.OP_SOFTMAX, ("rows", "D")),
    "embedding": (mb.OP_EMBEDDING, _EMB),
    "select": (mb.OP_SELECT, ("B", "S", "D", "index")),
    "cat": (mb.OP_CAT, ("outer", "l0", "l1", "l2", "l3")),  # each input's row length (0: no such input)
    # low precision: "w" is the parameter a cast or absmax reads instead of dep 0 (-1: none); "from"
    # and "to" are element types (fp32, fp16, bf16, int8); the int8 layers keep their fp32 layouts
    "cast": (mb.OP_CAST, ("n", "from", "to", "w")),
    "absmax": (mb.OP_ABSMAX, ("n", "w")),
    "linear_i8": (mb.OP_LINEAR_I8, ("B", "in", "out", "w", "b")),
    "conv2d_i8": (mb.OP_CONV2D_I8, _CONV),
    # static int8 (docs/spec.md 2): "scale"/"out_scale" are one-element frozen parameters; "epi" packs
    # out_scale (-1: fp32 output) and "relu"
    "quantize": (mb.OP_QUANTIZE, ("n", "scale")),
    "dequantize": (mb.OP_DEQUANTIZE, ("n",)),
    "conv2d_q": (mb.OP_CONV2D_Q, (*_CONV, "epi")),
    "add_q": (mb.OP_ADD_Q, ("n", "epi")),
    "bn_relu_mean": (mb.OP_BN_RELU_MEAN, _BN),  # a head's batch norm, ReLU and spatial mean fused
    "linear_bwd": (mb.OP_LINEAR_BWD, ("B", "in", "out", "w", "b", "need_grad_input")),
    "conv2d_bwd": (mb.OP_CONV2D_BWD, (*_CONV, "need_grad_input")),
    "relu_bwd": (mb.OP_RELU_BWD, ("n",)),
    "maxpool2d_bwd": (mb.OP_MAXPOOL2D_BWD, ("B", "C", "H", "W")),
    "avgpool2d_bwd": (mb.OP_AVGPOOL2D_BWD, _POOL),
    "upsample_bwd": (mb.OP_UPSAMPLE_BWD, ("B", "C", "H", "W", "sh", "sw")),
    "flatten_bwd": (mb.OP_FLATTEN_BWD, ("n",)),
    "cross_entropy_bwd": (mb.OP_CROSS_ENTROPY_BWD, ("B", "classes")),
    "mse_bwd": (mb.OP_MSE_BWD, ("n",)),
    "l1_bwd": (mb.OP_L1_BWD, ("n",)),
    "reshape_bwd": (mb.OP_RESHAPE_BWD, ("n",)),
    "batchnorm_bwd": (mb.OP_BATCHNORM_BWD, (*_BN, "need_grad_input")),
    "batchnorm_eval_bwd": (mb.OP_BATCHNORM_EVAL_BWD, (*_BN, "need_grad_input")),
    "bn_relu_mean_bwd": (mb.OP_BN_RELU_MEAN_BWD, (*_BN, "need_grad_input")),
    "layernorm_bwd": (mb.OP_LAYERNORM_BWD, (*_LN, "need_grad_input")),
    "tanh_bwd": (mb.OP_TANH_BWD, ("n",)),
    "sigmoid_bwd": (mb.OP_SIGMOID_BWD, ("n",)),
    "silu_bwd": (mb.OP_SILU_BWD, ("n",)),
    "dropout_bwd": (mb.OP_DROPOUT_BWD, _DROP),
    "hardswish_bwd": (mb.OP_HARDSWISH_BWD, ("n",)),
    "hardsigmoid_bwd": (mb.OP_HARDSIGMOID_BWD, ("n",)),
    "gelu_bwd": (mb.OP_GELU_BWD, ("n", "tanh")),
    "hardtanh_bwd": (mb.OP_HARDTANH_BWD, ("n", "f:lo", "f:hi")),
    "mean_bwd": (mb.OP_MEAN_BWD, ("outer", "r", "inner")),
    "permute_bwd": (mb.OP_PERMUTE_BWD, _PERM),
    "add_bwd": (mb.OP_ADD_BWD, ("n", "m")),
    "sub_bwd": (mb.OP_SUB_BWD, ("n", "m")),
    "mul_bwd_a": (mb.OP_MUL_BWD_A, ("n", "m")),
    "mul_bwd_b": (mb.OP_MUL_BWD_B, ("n", "m")),
    "scale_bwd": (mb.OP_SCALE_BWD, ("n", "f:mul", "f:add")),
    "matmul_bwd_a": (mb.OP_MATMUL_BWD_A, ("batch", "M", "K", "N")),
    "matmul_bwd_b": (mb.OP_MATMUL_BWD_B, ("batch", "M", "K", "N")),
    "softmax_bwd": (mb.OP_SOFTMAX_BWD, ("rows", "D")),
    "embedding_bwd": (mb.OP_EMBEDDING_BWD, (*_EMB, "need_grad_input")),
    "select_bwd": (mb.OP_SELECT_BWD, ("B", "S", "D", "index")),
    "cat_bwd": (mb.OP_CAT_BWD, ("outer", "total", "offset", "len")),
    "sgd": (mb.OP_SGD, ("opt", "f:p1", "f:p2", "f:p3", "in_backward")),
}


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


# Forms of the graph's op set (docs/graph.md) the C runtime has no kernel for yet.
RUNTIME_LIMITS = {"maxpool2d": {"k": 2}, "maxpool2d_bwd": {"k": 2}}


def check_runtime(g: TrainingGraph) -> None:
    """Raise, naming the first node the firmware cannot run yet, before anything is uploaded."""
    for n in g.nodes:
        if n.op not in OPS:
            raise PoetError(f"{n.name}: op {n.op} is in poet's graph but not yet in the C runtime "
                            f"(it runs {', '.join(o for o in OPS if not o.endswith('_bwd'))})")
        for attr, want in RUNTIME_LIMITS.get(n.op, {}).items():
            if n.attrs.get(attr, want) != want:
                raise PoetError(f"{n.name}: {n.op} with {attr}={n.attrs[attr]}; the C runtime supports "
                                f"{attr}={want} for now")


def _attr(attrs: dict[str, Any], name: str) -> int:
    """One a-slot of docs/spec.md section 2 from the graph node's attributes."""
    if name == "staged_i8":  # an input staged int8 (memory.staged_input_scale), its scale parameter
        return int(bool(attrs.get("i8")))
    if name == "staged_scale":
        return int(attrs["scale"]) if attrs.get("i8") else 0
    if name == "keep_from":
        return dropout.threshold(float(attrs["p"]))
    if name == "keep_scale":
        return mb.f32_bits(float(dropout.scale(float(attrs["p"]))))
    if name == "kernel":
        kh, kw, _, pw = conv_window(attrs)
        return mb.conv_kernel(kh, kw, pw)
    if name == "geom":
        return mb.conv_geometry(int(attrs["pad"]), int(attrs.get("stride", 1)), int(attrs.get("groups", 1)))
    if name == "pgeom":
        return mb.pool_geometry(int(attrs["ph"]), int(attrs["pw"]), int(attrs["sh"]), int(attrs["sw"]))
    if name == "epi":
        return mb.q_epilogue(int(attrs["out_scale"]), bool(attrs.get("relu", 0)))
    if name in ("from", "to"):
        return mb.dtype_code(attrs[name])
    if name.startswith("f:"):
        return mb.f32_bits(float(attrs[name[2:]]))
    if name in ("w", "b", "rm", "rv"):
        return int(attrs.get(name, -1))
    return int(attrs[name])


def blob_attrs(op: str, attrs: dict[str, Any]) -> tuple[int, ...]:
    """a0.. of a runtime op (docs/spec.md section 2) from a graph node's attributes."""
    return tuple(_attr(attrs, a) for a in OPS[op][1])


def model_blob(g: TrainingGraph) -> ModelBlob:
    check_runtime(g)
    in_backward = g.updates_in_backward
    nodes = []
    for n in g.nodes:
        code, names = OPS[n.op]
        attrs = optimizer_attrs(g.optimizer) | {"in_backward": int(in_backward)} if n.kind == "optimizer" else n.attrs
        nodes.append(BlobNode(op=code, kind=KINDS[n.kind], deps=tuple(n.deps), bytes=n.bytes,
                              attrs=tuple(_attr(attrs, a) for a in names)))
    frozen, moved, i8, aux = set(g.frozen), g.moved, g.int8_params, g.streamed_params
    return ModelBlob(batch=g.batch, x_elems=g.x_elems, param_elems=g.param_elems, nodes=nodes,
                     param_frozen=[name in frozen for name, _ in g.params],
                     param_moved=[name in moved for name, _ in g.params],
                     param_i8=[name in i8 for name, _ in g.params],
                     param_aux=[name in aux for name, _ in g.params])


@dataclass(frozen=True)
class Lowered:
    schedule: Schedule
    peak_live_bytes: int  # the firmware's peak of resident bytes, predicted
    extent_bytes: int  # highest offset + bytes of any live tensor


def instructions(plan: Plan, sizes: list[int]) -> list[tuple[int, int]]:
    """The plan's stages as (op, node) in execution order (docs/spec.md section 1: page-ins, frees
    of what the stage does not use, each compute followed by the frees right after it, page-outs,
    frees at the end); tensors of 0 bytes are never paged or freed."""
    out: list[tuple[int, int]] = []
    for t, st in enumerate(plan.stages):
        out += [(PAGE_IN, i) for i in st.page_in if sizes[i]]
        out += [(FREE, i) for i in st.free_before if sizes[i]]
        for c in st.compute:
            out.append((COMPUTE if c == t else RECOMPUTE, c))
            out += [(FREE, i) for i in st.free_after.get(c, ()) if sizes[i]]
        out += [(PAGE_OUT, i) for i in st.page_out if sizes[i]]
        out += [(FREE, i) for i in st.free if sizes[i]]
    return out


def place(ops: list[tuple[int, int]], sizes: list[int]) -> tuple[list[int], int, int]:
    """Arena offsets per instruction (greedy by size), the extent, and the peak of live bytes."""
    intervals: list[tuple[int, int, int]] = []  # (start instr, end instr, bytes)
    open_at: dict[int, int] = {}
    live = peak = 0
    for k, (op, node) in enumerate(ops):
        if op in (COMPUTE, RECOMPUTE, PAGE_IN) and sizes[node]:
            open_at[node] = len(intervals)
            intervals.append((k, len(ops), sizes[node]))
            live += sizes[node]
            peak = max(peak, live)
        elif op == FREE:
            idx = open_at.pop(node)
            s, _, b = intervals[idx]
            intervals[idx] = (s, k, b)
            live -= sizes[node]
    offsets = [0] * len(intervals)
    placed: list[int] = []
    for idx in sorted(range(len(intervals)), key=lambda i: (-intervals[i][2], intervals[i][0])):
        s, e, b = intervals[idx]
        busy = sorted((offsets[j], offsets[j] + intervals[j][2]) for j in placed
                      if intervals[j][0] <= e and s <= intervals[j][1])
        off = 0
        for lo, hi in busy:
            if off + b <= lo:
                break
            off = max(off, (hi + ALIGN - 1) // ALIGN * ALIGN)
        offsets[idx] = off
        placed.append(idx)
    extent = max((offsets[i] + intervals[i][2] for i in range(len(intervals))), default=0)
    by_instr = [0] * len(ops)
    for idx, (s, _, _) in enumerate(intervals):
        by_instr[s] = offsets[idx]
    return by_instr, extent, peak


def lower(plan: Plan, g: TrainingGraph, blob: ModelBlob | None = None) -> Lowered:
    blob = blob or model_blob(g)
    sizes = [n.bytes for n in g.nodes]
    ops = instructions(plan, sizes)
    offsets, extent, peak = place(ops, sizes)
    instrs = [Instr(op, node, offsets[k]) for k, (op, node) in enumerate(ops)]
    sched = Schedule(n_nodes=len(g.nodes), model_hash=blob.hash(), arena_bytes=extent, instrs=instrs)
    return Lowered(sched, peak, extent)
