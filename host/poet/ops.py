"""The runtime's op set, one record per op: the one place an op's number, attribute slots and
backward are written on the host.

The tracer makes graph nodes of these ops (graph/tracer.py: which PyTorch calls become which op,
and how each backward is built), the graph file checks a node's attributes against its slots
(graph/file.py), and lowering packs the slots into the model blob's node records with the opcode
(plan/lowering/lower.py, docs/spec.md section 2). The firmware has the same table, one row per op, in
firmware/core/ops/optable.h; tests/test_op_table.py fails when the two disagree on an op, a number,
a kind or a slot count. docs/adding-an-op.md is the guide to adding one.

This module imports nothing of poet's: everything else may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Slots are named by the graph attribute they carry. Three spellings say how lowering packs one:
# "f:eps" is a float attribute stored as its binary32 bits; "w", "b", "rm", "rv" are parameter indices,
# -1 when the node has no such parameter; the names in PACKED are made from other attributes.
PARAM_SLOTS = ("w", "b", "rm", "rv")
PACKED: dict[str, tuple[str, ...]] = {
    "kernel": ("k",),  # conv2d's window (k, kw, padw), modelblob.conv_kernel
    "geom": ("pad",),  # conv2d's pad, stride and groups, modelblob.conv_geometry
    "pgeom": ("ph", "pw", "sh", "sw"),  # avg/max pooling's padding and strides, modelblob.pool_geometry
    "epi": ("out_scale",),  # a static-int8 output's scale parameter, activation and in place, modelblob.q_epilogue
    "keep_from": ("p",),  # dropout's mask bound and scale, from its drop share (graph/dropout.py)
    "keep_scale": ("p",),
    "drop_row": ("n",),  # dropout's elements a draw (optional "row": 0 or 1 one per element, stochastic depth more)
    "staged_i8": ("n",),  # an input staged int8 (optional "i8", "scale")
    "staged_scale": ("n",),
    # add/sub/mul's broadcast (b viewed [outer, inner] over a's [outer, r, inner]): the optional "inner",
    # 0 when absent, meaning inner = m (b is a's trailing shape, the form before the slot)
    "b_inner": ("m",),
    # conv2d_bwd's need_grad_input in bit 0, and above it the optional "ck" (bits 1-14): the first ck input channels
    # are all the weight gradient covers (a sparse update's share of the layer, poet.graph.train_modes), 0 for all;
    # bit 15 the optional "inplace" (poet.plan.transform.in_place_convs)
    "need_ck": ("need_grad_input",),
    # a conv weight trained in part (TrainingGraph.rests), stored split: the parameter index + 1 of its frozen rest,
    # 0 for a weight stored whole; lowering sets it (and the same in conv2d_bwd's need_ck, bits 16-30); bit 19 the
    # optional "inplace"
    "rest": (),
}

KINDS = ("input", "forward", "loss", "backward", "optimizer")

# A node record's room (docs/spec.md section 2): its deps, its attribute slots, and the dep index no
# node has (nodes are numbered below it)
MAX_DEPS = 4
N_ATTRS = 10
NO_DEP = 0xFFFF


@dataclass(frozen=True)
class Op:
    name: str  # as graph nodes carry it (docs/graph.md)
    code: int  # the opcode in the model blob (firmware/core/ops/optable.h)
    kind: str  # the kind of its nodes (KINDS); add is also the backward pass's gradient sum
    slots: tuple[str, ...]  # the attributes lowering packs into a0.. in this order
    # What the backward of a one-input op reads besides dL/dy: "x" its input, "y" its output, "" nothing.
    # "rule": the tracer builds its backward by a rule of its own (parameters, two inputs, a loss).
    saves: str = "rule"
    backward: tuple[str, ...] = ()  # the ops that make its input's (and parameters') gradient
    calls: tuple[str, ...] = ()  # the PyTorch calls the tracer makes it from
    flops: int = 0  # > 0: a pointwise op of this many FLOPs per element (the tracer's generic handler)
    traced: str = ""  # how it is written in PyTorch, for the tracer's "supported:" list ("": its calls)
    limits: tuple[tuple[str, int], ...] = ()  # attributes the C runtime takes only one value of, for now
    even: tuple[str, ...] = ()  # attributes the C runtime takes only even values of, for now
    # its output may be made over dep 0, element by element, where dep 0 is not needed after it (docs/spec.md 1,
    # "In place"; the firmware's POET_OPF_INPLACE)
    inplace: bool = False


_CONV = ("B", "C", "H", "W", "O", "kernel", "geom", "w", "b")
_BN = ("B", "C", "HW", "f:eps", "f:momentum", "w", "b", "rm", "rv")  # rm/rv: running statistics
_LN = ("rows", "D", "f:eps", "w", "b")
_PERM = ("d0", "d1", "d2", "d3", "p0", "p1", "p2", "p3")
_EMB = ("n", "V", "D", "ids", "w")
_DROP = ("n", "keep_from", "keep_scale", "salt", "drop_row")
_POOL = ("B", "C", "H", "W", "kh", "kw", "pgeom", "include_pad")
_MAP = ("B", "C", "H", "W")
_BIN = ("n", "m", "b_inner")  # a's elements, b's, how b repeats over a (PACKED)
_NEED = ("need_grad_input",)  # a backward that may skip dL/dx (nothing before it needs one)


def _pair(name: str, code: int, bwd_code: int, slots: tuple[str, ...], saves: str = "rule",
          bwd_slots: tuple[str, ...] | None = None, kind: str = "forward", calls: tuple[str, ...] = (),
          flops: int = 0, traced: str = "", limits: tuple[tuple[str, int], ...] = (),
          even: tuple[str, ...] = ()) -> tuple[Op, Op]:
    """An op and its one backward op, `<name>_bwd`, whose slots are the op's unless given."""
    bwd = f"{name}_bwd"
    return (Op(name, code, kind, slots, saves, (bwd,), calls, flops, traced, limits, even),
            Op(bwd, bwd_code, "backward", slots if bwd_slots is None else bwd_slots, limits=limits, even=even))


def _pointwise(name: str, code: int, bwd_code: int, saves: str, flops: int, calls: tuple[str, ...],
               slots: tuple[str, ...] = ("n",)) -> tuple[Op, Op]:
    return _pair(name, code, bwd_code, slots, saves, calls=calls, flops=flops)


_TABLE: tuple[Op, ...] = (
    Op("input", 0, "input", ("n", "staged_i8", "staged_scale"), saves=""),
    # ---- dense
    *_pair("linear", 1, 16, ("B", "in", "out", "w", "b"), bwd_slots=("B", "in", "out", "w", "b", *_NEED),
           calls=("linear",)),
    *_pair("conv2d", 2, 17, (*_CONV, "rest"), bwd_slots=(*_CONV, "need_ck"), calls=("conv2d", "conv1d"),
           traced="conv2d, conv1d"),
    Op("matmul", 44, "forward", ("batch", "M", "K", "N"), backward=("matmul_bwd_a", "matmul_bwd_b"),
       calls=("matmul", "__matmul__", "bmm")),
    Op("matmul_bwd_a", 61, "backward", ("batch", "M", "K", "N")),
    Op("matmul_bwd_b", 62, "backward", ("batch", "M", "K", "N")),
    # ---- elementwise
    *_pointwise("relu", 3, 18, "y", 1, ("relu", "relu_")),
    *_pointwise("tanh", 10, 25, "y", 6, ("tanh",)),
    *_pointwise("sigmoid", 11, 26, "y", 4, ("sigmoid",)),
    *_pointwise("silu", 79, 80, "x", 5, ("silu", "silu_")),
    *_pointwise("hardswish", 81, 82, "x", 4, ("hardswish", "hardswish_")),
    *_pointwise("hardsigmoid", 83, 84, "x", 3, ("hardsigmoid", "hardsigmoid_")),
    *_pointwise("gelu", 12, 27, "x", 8, ("gelu",), slots=("n", "tanh")),
    *_pair("hardtanh", 13, 28, ("n", "f:lo", "f:hi"), "x",
           calls=("hardtanh", "hardtanh_", "relu6", "relu6_", "clamp", "clamp_", "clip", "clip_"),
           traced="hardtanh, relu6, clamp (both bounds, or min=0)"),
    *_pair("add", 40, 56, _BIN, calls=("add", "__add__", "__radd__", "__iadd__", "add_"), traced="x + y"),
    *_pair("sub", 41, 57, _BIN, calls=("sub", "__sub__", "__rsub__"), traced="x - y"),
    Op("mul", 42, "forward", _BIN, backward=("mul_bwd_a", "mul_bwd_b"), calls=("mul", "__mul__", "__rmul__"),
       traced="x * y"),
    Op("mul_bwd_a", 58, "backward", _BIN),
    Op("mul_bwd_b", 59, "backward", _BIN),
    *_pair("scale", 43, 60, ("n", "f:mul", "f:add"), "", calls=("div", "__truediv__"),
           traced="x + s, x - s, x * s, x / s (s a scalar)"),
    *_pair("dropout", 89, 90, _DROP, "", calls=("dropout",)),
    # ---- pooling and resampling
    *_pair("maxpool2d", 4, 19, _MAP, "x", calls=("max_pool2d", "_max_pool2d", "max_pool1d", "_max_pool1d"),
          traced="max_pool2d, max_pool1d", limits=(("k", 2),),
          even=("H", "W")),
    *_pair("avgpool2d", 73, 74, _POOL, "", calls=("avg_pool2d", "avg_pool1d"), traced="avg_pool2d, avg_pool1d"),
    # any window, stride, padding and ceil_mode, any map (max_pool2d's handler picks it when maxpool2d cannot)
    *_pair("maxpool2d_general", 93, 94, (*_MAP, "kh", "kw", "pgeom", "ceil"), "x"),
    *_pair("upsample", 87, 88, (*_MAP, "sh", "sw"), "", calls=("interpolate",),
           traced="interpolate (nearest, whole factors)"),
    *_pair("mean", 14, 29, ("outer", "r", "inner"), "", calls=("mean", "adaptive_avg_pool2d", "adaptive_avg_pool1d"),
           traced="mean, adaptive_avg_pool2d(1), adaptive_avg_pool1d(1)"),
    # ---- normalisation
    *_pair("batchnorm", 8, 23, _BN, bwd_slots=(*_BN, *_NEED), calls=("batch_norm",)),
    *_pair("batchnorm_eval", 48, 66, _BN, bwd_slots=(*_BN, *_NEED)),  # frozen (running) statistics
    *_pair("bn_relu_mean", 71, 72, _BN, bwd_slots=(*_BN, *_NEED)),  # a head's batch norm, ReLU and mean fused
    *_pair("layernorm", 9, 24, _LN, bwd_slots=(*_LN, *_NEED), calls=("layer_norm",)),
    # (nn.MultiheadAttention and scaled_dot_product_attention are traced as the calls they are made of:
    # linear, chunk, view, transpose, scale, matmul, softmax, dropout; graph/composite.py)
    *_pair("softmax", 45, 63, ("rows", "D"), "y", calls=("softmax",)),
    *_pair("log_softmax", 91, 92, ("rows", "D"), "y", calls=("log_softmax",)),
    # ---- layout
    *_pair("flatten", 5, 20, ("n",), "", calls=("flatten",)),
    *_pair("reshape", 7, 22, ("n",), "", calls=("view", "reshape", "unsqueeze", "squeeze", "unflatten"),
           traced="view/reshape/unsqueeze/squeeze, contiguous"),
    *_pair("permute", 15, 30, _PERM, "", calls=("transpose", "permute", "t"), traced="transpose/permute"),
    *_pair("select", 47, 65, ("B", "S", "D", "index"), "", calls=("__getitem__",), traced="x[:, i]"),
    *_pair("cat", 85, 86, ("outer", "l0", "l1", "l2", "l3"), bwd_slots=("outer", "total", "offset", "len"),
           calls=("cat", "concat", "concatenate"), traced="cat (2 to 4 activations)"),
    # one piece of a split: the columns [offset, offset + len) of x's rows [outer, total], a node per piece read;
    # its backward writes g there and zeros in the rest of x's gradient (the pieces' parts are summed)
    # (x[:, a:b] too: __getitem__ is select's call, whose handler makes a slice of a basic slice)
    *_pair("slice", 95, 96, ("outer", "total", "offset", "len"), "",
           calls=("chunk", "split", "split_with_sizes", "tensor_split", "unbind"),
           traced="chunk/split/unbind, x[:, a:b]"),
    *_pair("embedding", 46, 64, _EMB, bwd_slots=(*_EMB, *_NEED), calls=("embedding",)),
    # ---- losses (the one --loss names; not traced from calls)
    *_pair("cross_entropy", 6, 21, ("B", "classes"), kind="loss", traced="cross_entropy loss"),
    *_pair("mse", 75, 76, ("n",), kind="loss", traced="mse loss"),
    *_pair("l1", 77, 78, ("n",), kind="loss", traced="l1 loss"),
    # ---- low precision (made by the precision rewrite, plan/transform/precision.py): "from"/"to" are element types
    Op("cast", 49, "forward", ("n", "from", "to", "w"), saves=""),  # "w": a parameter read instead of dep 0
    Op("absmax", 50, "forward", ("n", "w"), saves=""),  # an int8 scale, max |x| / 127
    Op("linear_i8", 51, "forward", ("B", "in", "out", "w", "b"), saves=""),
    Op("conv2d_i8", 52, "forward", _CONV, saves=""),
    # ---- static int8 (the frozen prefix, plan/transform/static_int8.py)
    Op("quantize", 67, "forward", ("n", "scale"), saves=""),
    Op("dequantize", 68, "forward", ("n",), saves=""),
    Op("conv2d_q", 69, "forward", (*_CONV, "epi"), saves=""),
    Op("add_q", 70, "forward", ("n", "epi"), saves=""),
    # max pooling of an int8 tensor: its output has its input's scale ("scale", the same parameter), as max
    # commutes with the monotone quantisation
    Op("maxpool2d_q", 97, "forward", (*_MAP, "kh", "kw", "pgeom", "ceil", "scale"), saves=""),
    # the mean over adjacent dims of an int8 tensor (global average pooling: squeeze-and-excitation's squeeze)
    Op("mean_q", 98, "forward", ("outer", "r", "inner", "epi"), saves=""),
    # a product of int8 tensors, b repeated over a as mul's (squeeze-and-excitation's excite: scale * map)
    Op("mul_q", 99, "forward", (*_BIN, "epi"), saves=""),
    # int8 slice and cat at their input's scale ("scale"), as slice's and cat's slots: the row strips of a stage run
    # patch by patch and the stage's output stitched from them (plan/transform/patches.py)
    Op("slice_q", 100, "forward", ("outer", "total", "offset", "len", "scale"), saves=""),
    Op("cat_q", 101, "forward", ("outer", "l0", "l1", "l2", "l3", "scale"), saves=""),
    # ---- an activation's backward from bits (plan/transform/masks.py): act_mask makes a bit per element of the
    # activation's output y, lo < y (and y < hi where bounded), in u32 words; mask_bwd passes dL/dy where the bit is
    # set: relu_bwd's and hardtanh_bwd's values from 1/32 of the bytes
    Op("act_mask", 102, "forward", ("n", "f:lo", "f:hi", "bounded"), saves=""),
    Op("mask_bwd", 103, "backward", ("n",), saves=""),
    # ---- the optimizer: its slots come from the graph's optimizer settings (lower.optimizer_attrs)
    Op("sgd", 32, "optimizer", ("opt", "f:p1", "f:p2", "f:p3", "in_backward"), saves=""),
)

# the ops whose kernel makes each output element from the same element of dep 0 (and of the other deps), so the
# output may overwrite dep 0 as it goes; and conv2d_q, whose depthwise nodes marked `inplace` (static_int8) make a
# channel at a time in a one-channel buffer and copy it over the input channels already read (firmware ops/quant.c)
_INPLACE = ("relu", "relu_bwd", "hardtanh", "hardtanh_bwd", "mask_bwd", "conv2d_q", "conv2d", "conv2d_bwd")
_TABLE = tuple(replace(op, inplace=True) if op.name in _INPLACE else op for op in _TABLE)
OPS: dict[str, Op] = {op.name: op for op in _TABLE}
BY_CODE: dict[int, Op] = {op.code: op for op in _TABLE}
CODE: dict[str, int] = {op.name: op.code for op in _TABLE}  # the opcode of each op, by name
assert len(OPS) == len(BY_CODE) == len(_TABLE), "an op name or opcode is in the table twice"

# A static-int8 prefix's ops (plan/transform/static_int8.py), the quantize and dequantize at its edges included: the
# one list of them, so that an op added to the prefix is known to the rewrite, the graph file's byte check and the
# reports at once.
STATIC_INT8_OPS = ("quantize", "conv2d_q", "add_q", "maxpool2d_q", "mean_q", "mul_q", "slice_q", "cat_q", "dequantize")
# its layers: the edges only convert between fp32 and int8 and slice_q and cat_q move rows, so `poet solve` and the
# energy report do not count them
STATIC_INT8_LAYERS = tuple(op for op in STATIC_INT8_OPS if op not in ("quantize", "dequantize", "slice_q", "cat_q"))
assert all(op in OPS for op in STATIC_INT8_OPS), "a static int8 op is not in the table"


def attrs_needed(op: Op) -> list[str]:
    """The graph attributes a node of `op` must carry for lowering to fill its slots (parameter slots
    are optional: absent means no such parameter)."""
    out: list[str] = []
    for slot in op.slots:
        if slot in PARAM_SLOTS:
            continue
        for a in PACKED.get(slot, (slot[2:] if slot.startswith("f:") else slot,)):
            if a not in out:
                out.append(a)
    return out
