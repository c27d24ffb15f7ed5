"""The model, weights and batch blobs the firmware loads (docs/spec.md sections 2-4).

Byte-exact encoders live here, apart from graph tracing, so the format has one
Python implementation that tests can compare against the C parser.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from poet.graph.dtypes import BY_CODE, ELEMENT_TYPES, F32
from poet.graph.quantise import decode_i8, encode_i8, i8_bytes, quantise
from poet.ops import BY_CODE as OP_BY_CODE
from poet.ops import CODE, MAX_DEPS, N_ATTRS, NO_DEP
from poet.plan.cost.memory import AUX_ALIGN, Pool, stream_row, swap_slot, w8_conv_block
from poet.plan.cost.memory import MODEL_HEADER_BYTES as HEADER_BYTES
from poet.plan.cost.memory import MODEL_NODE_BYTES as NODE_BYTES

MAGIC = b"PMDL"
VERSION = 1
PARAM_FROZEN = 0x80000000  # param table word: not trained (no gradient, no optimizer state), in flash
PARAM_STATE = 0x40000000  # param table word: not trained but moved by the forward pass, in RAM
PARAM_I8 = 0x20000000  # param table word, with PARAM_FROZEN: stored int8 with an fp32 scale
PARAM_AUX = 0x10000000  # with PARAM_FROZEN | PARAM_I8: on aux storage (the SD card), streamed (docs/spec.md 3)
PARAM_ELEMS_MASK = 0x0FFFFFFF
OPTIMIZERS = ("sgd", "momentum", "adam")  # by the optimizer node's a0 (docs/spec.md section 2)

# ops (docs/spec.md section 2)
# static int8 (a frozen prefix in int8; scales fixed on the host, each a one-element frozen parameter)
Q_FP32 = 0xFFFF  # an epilogue's scale field when the output is fp32 (firmware/core/ops/op_util.h)


Q_IN_PLACE = 1 << 19  # a depthwise conv2d_q's a9: it may run in place, a channel at a time (memory.in_place)
CONV_IN_PLACE = 1 << 19  # the same of an fp32 depthwise conv2d's a9 (firmware/core/ops/conv.c by_channel)
CONV_BWD_IN_PLACE = 1 << 15  # and of its conv2d_bwd's a9


def marked_in_place(op: str, attrs: tuple[int, ...]) -> bool:
    """Whether a blob node of op `op` with slots `attrs` may be made over its dep 0 (docs/spec.md 1, "In place"):
    the ops that may (poet.ops Op.inplace), the convs among them only where their a9 marks it."""
    a9 = attrs[9] if len(attrs) > 9 else 0
    if op in ("conv2d_q", "conv2d"):
        return bool(a9 & (Q_IN_PLACE if op == "conv2d_q" else CONV_IN_PLACE))
    return op != "conv2d_bwd" or bool(a9 & CONV_BWD_IN_PLACE)


def q_epilogue(out_scale: int, relu: int, in_place: bool = False) -> int:
    """conv2d_q's a9 and add_q's a1: the output's scale parameter (-1: an fp32 output), the activation
    in bits 16-18 (poet.graph.quantise.ACTIVATIONS: 1 ReLU, 2 ReLU6, 3 hardswish, 4 hardsigmoid), and for a
    depthwise conv2d_q bit 19: it may run in place (the pool's stream buffer holds one output channel)."""
    return (Q_FP32 if out_scale < 0 else out_scale) | (int(relu) << 16) | (Q_IN_PLACE if in_place else 0)


def dtype_code(t: int | str) -> int:
    """A cast's type attribute as the blob stores it, from its name (fp32, fp16, bf16, int8) or code
    (poet.graph.dtypes)."""
    known = ELEMENT_TYPES.get(t) if isinstance(t, str) else BY_CODE.get(int(t))
    if known is None:
        raise ValueError(f"element type {t!r}: the runtime has {', '.join(ELEMENT_TYPES)}")
    return known.code


# node kinds
KIND_INPUT = 0
KIND_FORWARD = 1
KIND_LOSS = 2
KIND_BACKWARD = 3
KIND_OPTIMIZER = 4

_HEADER = struct.Struct("<4sBBHHHI")
_NODE = struct.Struct("<BBBx4HI10i")


def f32_bits(v: float) -> int:
    """A float attribute as the blob stores it: its IEEE binary32 bit pattern read as an i32."""
    return int(struct.unpack("<i", struct.pack("<f", v))[0])


def conv_geometry(pad: int, stride: int, groups: int) -> int:
    """conv2d's a6: the padding of rows, stride and groups in one attribute (firmware/core/model.h
    POET_CONV_*; zero-based, so a dense stride-1 conv's a6 is its padding)."""
    return pad | (stride - 1) << 8 | (groups - 1) << 16


def conv_kernel(kh: int, kw: int, pad_w: int, pad_b: int | None = None) -> int:
    """conv2d's a5: the kernel's height and width, the padding of columns and, for a row strip of a stage run patch
    by patch (conv2d_q only), the rows of padding below where they differ from above (firmware/core/model.h)."""
    for v, lo, hi in ((kh, 1, 64), (kw, 1, 64), (pad_w, 0, 64), (pad_b or 0, 0, 64)):
        if not lo <= v <= hi:
            raise ValueError(f"conv kernel {kh}x{kw}, column padding {pad_w}: the blob holds kernels up to "
                             f"64x64 and padding up to 64")
    return kh | kw << 8 | pad_w << 16 | (0 if pad_b is None else pad_b + 1) << 24


def pool_geometry(pad_h: int, pad_w: int, stride_h: int, stride_w: int) -> int:
    """avgpool2d's a6: padding and strides per axis in one attribute (firmware/core/model.h POET_POOL_*)."""
    for v, most in ((pad_h, 255), (pad_w, 255), (stride_h, 256), (stride_w, 256)):
        if not 0 <= v <= most:
            raise ValueError(f"pooling padding/stride {v}: the blob holds padding 0..255 and stride 1..256")
    return pad_h | pad_w << 8 | (stride_h - 1) << 16 | (stride_w - 1) << 24


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64: cheap on a microcontroller, and enough to bind a schedule to its model."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


@dataclass(frozen=True)
class BlobNode:
    """One node of the training graph as the firmware sees it: an op with integer attributes."""

    op: int
    kind: int
    deps: tuple[int, ...]
    bytes: int
    attrs: tuple[int, ...] = ()

    @property
    def arena_bytes(self) -> int:
        """The bytes it takes in the arena (firmware/core/model.h poet_arena_bytes): its output's, but none
        for an input node, whose tensor is the staged batch, read in place (docs/spec.md section 1)."""
        return 0 if self.kind == KIND_INPUT else self.bytes

    def __post_init__(self) -> None:
        if len(self.deps) > MAX_DEPS:
            raise ValueError(f"node has {len(self.deps)} deps, the blob holds at most {MAX_DEPS}")
        if len(self.attrs) > N_ATTRS:
            raise ValueError(f"node has {len(self.attrs)} attributes, the blob holds at most {N_ATTRS}")


@dataclass
class ModelBlob:
    """Header, parameter table and node table of a PMDL blob."""

    batch: int
    x_elems: int
    param_elems: list[int]
    nodes: list[BlobNode] = field(default_factory=list)
    param_frozen: list[bool] = field(default_factory=list)  # per parameter; missing entries: trained
    param_moved: list[bool] = field(default_factory=list)  # untrained, written by the forward: in RAM
    param_i8: list[bool] = field(default_factory=list)  # frozen, stored int8 (read by an int8 layer only)
    param_aux: list[bool] = field(default_factory=list)  # frozen int8 on aux storage, streamed

    def frozen(self, p: int) -> bool:
        """Read in place from flash: not trained and never written."""
        return p < len(self.param_frozen) and self.param_frozen[p] and not self.moved(p)

    def moved(self, p: int) -> bool:
        return p < len(self.param_moved) and self.param_moved[p]

    def i8(self, p: int) -> bool:
        return self.frozen(p) and p < len(self.param_i8) and self.param_i8[p]

    def aux(self, p: int) -> bool:
        """Streamed from aux storage (the SD card) rather than read in place from flash."""
        return self.i8(p) and p < len(self.param_aux) and self.param_aux[p]

    def trained(self, p: int) -> bool:
        return not (p < len(self.param_frozen) and self.param_frozen[p]) and not self.moved(p)

    def encode(self) -> bytes:
        out = bytearray(_HEADER.pack(MAGIC, VERSION, 0, len(self.nodes), len(self.param_elems),
                                     self.batch, self.x_elems))
        for p, n in enumerate(self.param_elems):
            kind = PARAM_FROZEN | (PARAM_I8 if self.i8(p) else 0) | (PARAM_AUX if self.aux(p) else 0) \
                if self.frozen(p) else PARAM_STATE if self.moved(p) else 0
            out += struct.pack("<I", n | kind)
        for node in self.nodes:
            deps = list(node.deps) + [NO_DEP] * (MAX_DEPS - len(node.deps))
            attrs = list(node.attrs) + [0] * (N_ATTRS - len(node.attrs))
            out += _NODE.pack(node.op, node.kind, len(node.deps), *deps, node.bytes, *attrs)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> ModelBlob:
        if len(data) < HEADER_BYTES:
            raise ValueError(f"model blob is {len(data)} bytes, shorter than its {HEADER_BYTES}-byte header")
        magic, version, _, n_nodes, n_params, batch, x_elems = _HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"not a version-{VERSION} PMDL model blob (magic {magic!r}, version {version})")
        want = HEADER_BYTES + 4 * n_params + NODE_BYTES * n_nodes
        if len(data) != want:
            raise ValueError(f"model blob is {len(data)} bytes, its header says {want}")
        words = list(struct.unpack_from(f"<{n_params}I", data, HEADER_BYTES))
        params = [w & PARAM_ELEMS_MASK for w in words]
        frozen = [bool(w & (PARAM_FROZEN | PARAM_STATE)) for w in words]
        moved = [bool(w & PARAM_STATE) for w in words]
        i8 = [bool(w & PARAM_I8) for w in words]
        aux = [bool(w & PARAM_AUX) for w in words]
        nodes = []
        off = HEADER_BYTES + 4 * n_params
        for _ in range(n_nodes):
            op, kind, n_deps, *rest = _NODE.unpack_from(data, off)
            deps, nbytes, attrs = rest[:4], rest[4], rest[5:]
            last = max((i + 1 for i, a in enumerate(attrs) if a != 0), default=0)
            nodes.append(BlobNode(op, kind, tuple(deps[:n_deps]), nbytes, tuple(attrs[:last])))
            off += NODE_BYTES
        return cls(batch, x_elems, params, nodes, frozen, moved, i8, aux)

    def hash(self) -> int:
        return fnv1a64(self.encode())

    @property
    def optimizer(self) -> str:
        """The optimizer node (last) names the optimizer in a0; a code the runtime lacks keeps no state, as SGD."""
        last = self.nodes[-1] if self.nodes else None
        code = last.attrs[0] if last is not None and last.op == CODE["sgd"] and last.attrs else 0
        return OPTIMIZERS[code] if 0 <= code < len(OPTIMIZERS) else "sgd"

    @property
    def in_backward(self) -> bool:
        """The optimizer node's a4: every trained parameter is updated in the backward pass, no gradients kept."""
        last = self.nodes[-1] if self.nodes else None
        return last is not None and last.op == CODE["sgd"] and len(last.attrs) > 4 and last.attrs[4] == 1

    @property
    def pool(self) -> Pool:
        """The board's pool for this model (poet.plan.cost.memory): tables, weights, gradients, optimizer
        state, batch."""
        ps = range(len(self.param_elems))
        # the stream buffer as the firmware sizes it (firmware/core/ops/quant.c, conv.c, linear.c): conv2d_q's
        # and conv2d_i8's a1 C, a5 kernel, a6 geometry, a7 weight; linear's a1 in, a3 weight; a weight-only
        # int8 or split conv2d's and conv2d_bwd's a4 O too
        convs, w8 = (CODE["conv2d_q"], CODE["conv2d_i8"]), (CODE["conv2d"], CODE["conv2d_bwd"])

        def window(a: tuple[int, ...]) -> tuple[int, int, int, int]:
            return a[1], (a[6] >> 16) + 1, a[5] & 0xFF, a[5] >> 8 & 0xFF

        stream = max([stream_row(*window(n.attrs)) for n in self.nodes if n.op in convs and self.aux(n.attrs[7])]
                     + [n.attrs[1] for n in self.nodes if n.op == CODE["linear"] and self.aux(n.attrs[3])]
                     + [w8_conv_block(*window(n.attrs)) for n in self.nodes
                        if n.op in w8 and len(n.attrs) > 7 and n.attrs[7] >= 0
                        and (self.i8(n.attrs[7]) or n.attrs[7] in self.rests)]
                     # a depthwise conv that may run in place (a9's mark): one output channel, of a0 B x a4 O, and
                     # the channel's weights a read makes after it (conv2d_q's int8 from aux storage; conv2d's fp32)
                     + [self._in_place_plane(n) for n in self.nodes
                        if n.op in (*convs[:1], *w8) and marked_in_place(OP_BY_CODE[n.op].name, n.attrs)], default=0)
        x_int8 = any(n.op == CODE["input"] and len(n.attrs) > 1 and n.attrs[1] == 1 for n in self.nodes)
        return Pool.of(self.param_elems, [self.trained(p) for p in ps], self.optimizer, self.batch, self.x_elems,
                       len(self.nodes), [self.moved(p) for p in ps], [self.i8(p) for p in ps], self.in_backward,
                       [self.aux(p) for p in ps], stream, x_int8)

    def _in_place_plane(self, n: BlobNode) -> int:
        """memory.in_place_plane of a blob node: what its channel at a time takes of the stream buffer."""
        plane, kk = n.bytes // (n.attrs[0] * n.attrs[4]), (n.attrs[5] & 0xFF) * (n.attrs[5] >> 8 & 0xFF)
        if n.op == CODE["conv2d_q"]:
            return (plane + 3) // 4 * 4 + kk if self.aux(n.attrs[7]) else plane
        return plane + 4 * kk

    def x_scale(self, weights: Sequence[np.ndarray]) -> float | None:
        """The scale its input is staged int8 with (encode_batch's x_scale), read from its weights; None
        for an fp32 input."""
        staged = next((n for n in self.nodes if n.op == CODE["input"] and len(n.attrs) > 2 and n.attrs[1] == 1), None)
        return None if staged is None else float(np.asarray(weights[staged.attrs[2]]).reshape(-1)[0])

    @property
    def param_bytes(self) -> int:
        """The trained parameters and moved statistics: the weights blob, in the board's RAM."""
        return self.pool.params

    @property
    def frozen_bytes(self) -> int:
        """The frozen parameters and statistics: the frozen weights blob, in the board's flash."""
        return self.pool.flash.frozen

    @property
    def aux_at(self) -> int:
        """Where the aux weights start on the board's aux storage: past the swap area, sector-aligned
        (firmware/core/model.c aux_at)."""
        return -(-sum(swap_slot(n.bytes) for n in self.nodes) // AUX_ALIGN) * AUX_ALIGN

    @property
    def aux_bytes(self) -> int:
        """The frozen int8 weights on aux storage: the aux weights blob."""
        return self.pool.flash.aux

    @property
    def rests(self) -> dict[int, tuple[int, int]]:
        """Each conv weight stored split (trained in part, TrainingGraph.stored) -> its frozen rest's parameter
        index (conv2d's a9 bits 0-15, - 1) and the rows the whole is cut in: its output channels (the share is each
        one's first input channels), or 1 for a depthwise conv (whose share is its first channels)."""
        out = {}
        for n in self.nodes:
            if n.op == CODE["conv2d"] and len(n.attrs) > 9 and n.attrs[9] & 0xFFFF > 0:
                depthwise = n.attrs[1] == n.attrs[4] == (n.attrs[6] >> 16) + 1
                out[n.attrs[7]] = ((n.attrs[9] & 0xFFFF) - 1, 1 if depthwise else n.attrs[4])
        return out

    def _table(self, params: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Every parameter (the graph's order) as the parameter table holds it: a weight stored split as its
        share, its rest at the rest's index (past the graph's parameters)."""
        rests = self.rests
        if len(params) != len(self.param_elems) - len(rests):
            raise ValueError(f"{len(params)} parameters, the parameter table has {len(self.param_elems)} "
                             f"({len(rests)} of them the rests of weights stored split)")
        out = [np.asarray(p, dtype=np.float32).reshape(-1) for p in params]
        out += [np.zeros(0, np.float32)] * len(rests)
        for p, (r, rows) in rests.items():
            whole = out[p].reshape(rows, -1)
            cut = self.param_elems[p] // rows
            out[p], out[r] = whole[:, :cut].reshape(-1), whole[:, cut:].reshape(-1)
        return out

    def split_weights(self, params: Sequence[np.ndarray]) -> tuple[bytes, bytes, bytes]:
        """Every parameter (the graph's order) as the three blobs the board takes: (weights, frozen weights,
        aux weights). A frozen tensor stored int8 is quantised here, once (poet.graph.quantise)."""
        params = self._table(params)
        ram = [p for i, p in enumerate(params) if not self.frozen(i)]
        flash = b"".join(encode_i8(p) if self.i8(i) else encode_weights([p])
                         for i, p in enumerate(params) if self.frozen(i) and not self.aux(i))
        aux = b"".join(encode_i8(p) for i, p in enumerate(params) if self.aux(i))
        return encode_weights(ram), flash, aux

    def join_weights(self, weights: bytes, frozen: bytes, aux: bytes = b"") -> list[np.ndarray]:
        """The three blobs back as every parameter, flat, in the graph's order (int8 ones dequantised: the
        values the board computes with; a weight stored split whole again)."""
        n = len(self.param_elems)
        ram = iter(decode_weights(weights, [self.param_elems[i] for i in range(n) if not self.frozen(i)]))
        for blob, want, what in ((frozen, self.frozen_bytes, "frozen"), (aux, self.aux_bytes, "aux")):
            if len(blob) != want:
                raise ValueError(f"{what} weights are {len(blob)} bytes, the parameter table needs {want}")
        out, off = [], {False: 0, True: 0}
        for i in range(n):
            if not self.frozen(i):
                out.append(next(ram))
                continue
            n, on_aux = self.param_elems[i], self.aux(i)
            size = i8_bytes(n) if self.i8(i) else F32 * n
            chunk = (aux if on_aux else frozen)[off[on_aux]:off[on_aux] + size]
            out.append(decode_i8(chunk, n) if self.i8(i) else decode_weights(chunk, [n])[0])
            off[on_aux] += size
        rests = self.rests
        for p, (r, rows) in rests.items():  # a weight stored split: whole again
            out[p] = np.concatenate([out[p].reshape(rows, -1), out[r].reshape(rows, -1)], axis=1).reshape(-1)
        return out[:len(out) - len(rests)]

    @property
    def grad_bytes(self) -> int:
        return self.pool.grads

    @property
    def opt_state_bytes(self) -> int:
        """The optimizer state blob."""
        return self.pool.optimizer_state

    @property
    def batch_bytes(self) -> int:
        return self.pool.staging

    def pool_free(self, pool_bytes: int) -> int:
        """Arena bytes left in the board's pool after params, grads, optimizer state and the batch."""
        return self.pool.arena(pool_bytes)


def encode_weights(params: list[np.ndarray]) -> bytes:
    """Parameters in PyTorch layout, concatenated in param-table order as little-endian fp32."""
    return b"".join(np.ascontiguousarray(p, dtype="<f4").tobytes() for p in params)


def decode_weights(data: bytes, param_elems: list[int]) -> list[np.ndarray]:
    """Flat fp32 arrays, one per parameter; the caller reshapes (the blob carries no shapes)."""
    if len(data) != F32 * sum(param_elems):
        raise ValueError(f"weights are {len(data)} bytes, the parameter table needs {F32 * sum(param_elems)}")
    flat = np.frombuffer(data, dtype="<f4").astype(np.float32)
    out, off = [], 0
    for n in param_elems:
        out.append(flat[off:off + n].copy())
        off += n
    return out


def encode_batch(x: np.ndarray, labels: np.ndarray, x_scale: float | None = None) -> bytes:
    """The staged batch: every input as fp32, or, given the input's fixed scale (an input staged int8:
    memory.staged_input_scale), quantised with it as the model's quantize node would (the bytes padded
    to a word); then one i32 class label per sample."""
    if x_scale is None:
        xb = np.ascontiguousarray(x, dtype="<f4").tobytes()
    else:
        xb = quantise(np.asarray(x, np.float32), np.float32(x_scale)).tobytes()
        xb += bytes(-len(xb) % 4)
    return xb + np.ascontiguousarray(labels, dtype="<i4").tobytes()
