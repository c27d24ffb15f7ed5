"""The one memory model: what `--ram` holds on the board, what is left for activations, and what
lives in flash.

`--ram` is everything the training step may hold in the board's RAM (DESIGN.md
"Memory"): the firmware's own static RAM (stack, serial and trace buffers, the
schedule buffer), then the runtime's pool: the model's tables (a few bytes per node
and parameter), the trained parameters, their gradients (none where the backward pass
applies the update as it makes each gradient element), optimizer state, the
staged batch, and the activation arena. The planner plans the arena with what is
left; the firmware lays out its pool in the same order (docs/spec.md 6) and must
grant exactly this arena, since the peak it reports is compared with the planner's
byte for byte. The model blob (node table) and the frozen parameters are not in
RAM: they live in the board's flash (the firmware's nv region), read in place, or, when
flash cannot hold them, the largest static-int8 convolution weights live on the aux storage
(the SD card) past the swap area and stream through a small pool region, the stream buffer,
a few output channels per read (poet.plan.transform.placement). The staged batch is the step's input
tensor: the forward pass reads it where it lies, so the input takes no arena bytes (arena_bytes) and no
plan keeps, pages or frees a copy of it. The planner, the CLI and the model blob take every one of these
sizes from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poet.errors import UsageError
from poet.graph.dtypes import F32, I32
from poet.graph.quantise import i8_bytes
from poet.graph.training_graph import STREAMING, conv_window
from poet.ops import OPS
from poet.units import format_size

if TYPE_CHECKING:
    from poet.graph.training_graph import GraphNode, TrainingGraph

POOL_ALIGN = 8  # the firmware aligns each pool region to 8 bytes
OPTIMIZER_WORDS = {"sgd": 0, "momentum": 1, "adam": 2}  # state floats per trained element
# the model's tables in the pool (firmware/core/model.h POET_TABLE_*): per parameter its offset; per
# node its swap offset, arena offset and the schedule validator's flags
TABLE_PARAM_BYTES = 4
TABLE_NODE_BYTES = 9
NV_PAGE = 4096  # each upload into flash starts on this boundary (firmware/core/protocol.h POET_NV_PAGE)
MODEL_HEADER_BYTES = 16  # the model blob: header, a u32 per parameter, a record per node (docs/spec.md 2)
MODEL_NODE_BYTES = 56
AUX_ALIGN = 512  # the aux weights start on the sector after the swap area (firmware/core/model.c aux_at)


def _align(n: int, to: int = POOL_ALIGN) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class Flash:
    """What a model keeps in the board's flash (the firmware's nv region), read in place."""

    model_blob: int  # the node table (docs/spec.md 2)
    frozen: int  # the frozen parameters and statistics, fp32 or int8 (the frozen weights blob)
    aux: int = 0  # not in flash either: the int8 weights streamed from aux storage (the aux weights blob)

    @property
    def total(self) -> int:
        """Both, the frozen weights starting on the next flash page after the model (firmware/core/protocol.c)."""
        return _align(self.model_blob, NV_PAGE) + self.frozen


@dataclass(frozen=True)
class Pool:
    """The runtime's pool before the activation arena, region by region, each as the firmware sizes it."""

    tables: int  # the model's per-node and per-parameter tables
    params: int  # the trained parameters, then the running statistics the forward moves: the weights blob
    grads: int  # their gradients
    optimizer_state: int
    staging: int  # the batch the host uploads before each step
    flash: Flash  # not in the pool: what the model keeps in flash instead
    in_backward: bool = False  # the trained parameters are updated in the backward pass: no gradients
    stream: int = 0  # the stream buffer: the largest output row of a streamed weight, or w8 conv block (stream_bytes)

    @classmethod
    def of(cls, param_elems: Sequence[int], trained: Sequence[bool], optimizer: str, batch: int,
           x_elems: int, n_nodes: int, moved: Sequence[bool] | None = None,
           int8: Sequence[bool] | None = None, in_backward: bool = False, aux: Sequence[bool] | None = None,
           stream: int = 0, x_int8: bool = False) -> Pool:
        """From what a model is: its parameters' element counts (upload order), which are trained and
        which, untrained, the forward pass moves (`moved`: kept in RAM too), which frozen ones are
        stored int8 (`int8`) and of those which on aux storage (`aux`), the optimizer's name, the batch
        and its input elements, its node count, whether it updates in backward
        (TrainingGraph.updates_in_backward: then no gradients), its stream buffer (stream_row) and
        whether its input is staged int8 (x_int8: a static-int8 first layer; staged_input_scale)."""
        trained_bytes = F32 * sum(n for n, t in zip(param_elems, trained, strict=True) if t)
        moved = moved or [False] * len(param_elems)
        int8 = int8 or [False] * len(param_elems)
        state_bytes = F32 * sum(n for n, s in zip(param_elems, moved, strict=True) if s)
        aux = aux or [False] * len(param_elems)
        frozen = sum(i8_bytes(n) if q else F32 * n
                     for n, t, s, q, a in zip(param_elems, trained, moved, int8, aux, strict=True)
                     if not (t or s or a))
        on_aux = sum(i8_bytes(n) for n, a in zip(param_elems, aux, strict=True) if a)
        words = OPTIMIZER_WORDS[optimizer]
        # a u32 step counter and `words` floats per trained element (docs/spec.md 6); plain SGD keeps nothing
        state = I32 + words * trained_bytes if words else 0
        blob = MODEL_HEADER_BYTES + 4 * len(param_elems) + MODEL_NODE_BYTES * n_nodes
        return cls(tables=TABLE_PARAM_BYTES * len(param_elems) + TABLE_NODE_BYTES * n_nodes,
                   params=trained_bytes + state_bytes, grads=0 if in_backward else trained_bytes,
                   # the inputs, fp32 or int8 padded to a word, then an i32 label each
                   optimizer_state=state, staging=_align(x_elems if x_int8 else F32 * x_elems, I32) + I32 * batch,
                   flash=Flash(model_blob=blob, frozen=frozen, aux=on_aux), in_backward=in_backward,
                   stream=stream)

    @property
    def fixed(self) -> int:
        """The pool before the arena, each region 8-aligned (firmware/core/protocol.c)."""
        return sum(_align(b) for b in (self.tables, self.params, self.grads, self.optimizer_state, self.staging,
                                       self.stream))

    @property
    def snapshot(self) -> int:
        """The device API's copy of the trained and state parameters and the optimizer state, taken before
        each step to undo one that diverges (docs/spec.md section 7)."""
        return _align(self.params) + _align(self.optimizer_state)

    def arena(self, pool_bytes: int) -> int:
        """What a pool of `pool_bytes` leaves for the activation arena."""
        return pool_bytes - self.fixed


def pool_for(g: TrainingGraph) -> Pool:
    """The pool a training graph needs on the board (the model blob lowered from it asks the same)."""
    t = g.stored
    return Pool.of([p.elems for p in t], [p.trained for p in t], g.optimizer["name"], g.batch, g.x_elems,
                   len(g.nodes), [p.moved for p in t], [p.int8 for p in t], g.updates_in_backward,
                   [p.aux for p in t], stream_bytes(g), staged_input_scale(g) is not None)


def stream_bytes(g: TrainingGraph) -> int:
    """The pool's stream buffer (firmware/core/model.h stream_bytes): the largest of a streamed weight's output
    rows (node_stream_row), the block of output channels made fp32 of a conv whose weight is stored int8
    (weight-only) or split (trained in part, TrainingGraph.stored) (w8_conv_block), and an output channel of a
    depthwise conv that may run in place (in_place_plane)."""
    split = {g.params[i][0] for i in g.rests}
    return max([node_stream_row(n.op, n.attrs) for n in g.nodes if n.op in STREAMING and n.attrs.get("stream")]
               + [w8_conv_block(n.attrs["C"], n.attrs["groups"], *conv_window(n.attrs)[:2])
                  for n in g.nodes if n.op in ("conv2d", "conv2d_bwd")
                  and (n.attrs.get("w8") or g.params[n.attrs["w"]][0] in split)]
               + [in_place_plane(n) for n in g.nodes if n.op in ("conv2d_q", "conv2d", "conv2d_bwd")
                  and n.attrs.get("inplace")], default=0)


def w8_conv_block(channels: int, groups: int, kh: int, kw: int) -> int:
    """The bytes of the output channel a conv whose weight is not stored whole in fp32 (weight-only int8, or
    split) makes fp32 at the least (firmware/core/ops/conv.c blocks): its fp32 row. A larger buffer (another
    node's) holds several, which the conv then makes together; the widest conv makes one at a time, forgoing
    its kernel's blocks of four (mcunet-5fps's 576-channel pointwise convs: 2.3 KiB, not 9 KiB)."""
    return F32 * stream_row(channels, groups, kh, kw)


def staged_input_scale(g: TrainingGraph) -> int | None:
    """The scale parameter of an input staged int8 (the host quantises each batch with it), or None
    for fp32 inputs."""
    staged = next((n for n in g.nodes if n.op == "input"), None)
    return staged.attrs["scale"] if staged is not None and staged.attrs.get("i8") else None


def stream_row(channels: int, groups: int, kh: int, kw: int) -> int:
    """One output channel's int8 weights of a conv: what a streamed conv's buffer holds at least."""
    return channels // groups * kh * kw


def conv_stream_row(conv: dict[str, int]) -> int:
    """stream_row of a conv node (its attrs)."""
    return stream_row(conv["C"], conv["groups"], *conv_window(conv)[:2])


def node_stream_row(op: str, attrs: dict[str, int]) -> int:
    """The bytes of one output row of a streaming node's int8 weight: a conv's output channel, a linear's
    output feature (its `in` weights)."""
    return attrs["in"] if op == "linear" else conv_stream_row(attrs)


def node_rows(op: str, attrs: dict[str, int]) -> int:
    """A streaming node's output rows: a conv's output channels, a linear's output features."""
    return attrs["out"] if op == "linear" else attrs["O"]


def stream_reads(out_channels: int, row: int, stream: int) -> list[int]:
    """The aux-storage reads of a conv streaming `out_channels` rows of `row` bytes through a buffer of
    `stream` bytes, in bytes each: its weight's scale, then as many whole rows per read as the buffer
    holds (firmware/core/ops/quant.c conv2d_q_streamed)."""
    per = stream // row
    return [F32] + [min(per, out_channels - o) * row for o in range(0, out_channels, per)]


def streamed_reads(g: TrainingGraph) -> dict[int, list[int]]:
    """Each node that streams its weight from aux storage (poet.plan.transform.placement), by id: its reads' bytes."""
    stream = pool_for(g).stream
    out = {}
    for n in g.nodes:
        if n.op in STREAMING and n.attrs.get("stream"):
            rows, row = node_rows(n.op, n.attrs), node_stream_row(n.op, n.attrs)
            if n.op == "conv2d_q" and n.attrs.get("inplace"):
                # the rows after its plane (quant.c conv2d_q_by_channel), read again for each sample unless one
                # read holds them all
                B = n.shape[0]
                reads = stream_reads(rows, row, stream - _align(n.bytes // (B * n.shape[1]), 4))
                out[n.id] = reads[:1] + (reads[1:] if len(reads) == 2 else reads[1:] * B)
            else:
                out[n.id] = stream_reads(rows, row, stream)
    return out


def arena_bytes(n: GraphNode) -> int:
    """The bytes node n takes in the activation arena when a plan makes it resident: its output's, but none
    for the input, whose tensor is the staged batch itself (the pool's staging region, in the fixed part),
    read in place for the whole step: never copied, paged, freed or recomputed (docs/spec.md section 1)."""
    return 0 if n.kind == "input" else n.bytes


def in_place(g: TrainingGraph, n: GraphNode) -> bool:
    """Whether node n's output may take the place of its dep 0 (docs/spec.md 1, "In place"): its op's kernel
    makes each output element from the same element of its inputs (poet.ops Op.inplace), dep 0 is an arena tensor
    at least as large (never the staged input) and no other dep of n is dep 0. The firmware checks the same of a
    schedule's in-place computes (firmware/core/schedule.c)."""
    if not OPS[n.op].inplace or not n.deps or n.deps.count(n.deps[0]) > 1:
        return False
    if n.op in ("conv2d_q", "conv2d", "conv2d_bwd") and not n.attrs.get("inplace"):
        return False  # a depthwise one marked so (static_int8; poet.plan.transform.in_place_convs)
    return 0 < arena_bytes(n) <= arena_bytes(g.nodes[n.deps[0]])


def in_place_plane(n: GraphNode) -> int:
    """The bytes of one output channel of a depthwise conv that may run in place (a conv2d_q, an fp32 conv2d or
    conv2d_bwd marked so): the pool's stream buffer holds it (firmware ops/quant.c, ops/conv.c make a channel there,
    then copy it over the input channels already read); after it an fp32 one's channel of fp32 weights (made there
    from a weight stored int8, w8) or a conv2d_q's rows of int8 weights read from aux storage."""
    B, C = n.shape[0], n.shape[1]
    kh, kw = conv_window(n.attrs)[:2]
    if n.op == "conv2d_q":  # one channel's int8 weights after it, word-aligned, where it streams them
        return _align(n.bytes // (B * C), 4) + kh * kw if n.attrs.get("stream") else n.bytes // (B * C)
    return n.bytes // (B * C) + F32 * kh * kw


def op_floor(g: TrainingGraph, n: GraphNode) -> int:
    """The arena bytes computing node n needs at least: its inputs and its output, or its inputs alone when it
    may run in place (in_place: made in dep 0's bytes where dep 0 leaves after it)."""
    deps = sum(arena_bytes(g.nodes[d]) for d in set(n.deps))
    return deps + (0 if in_place(g, n) else arena_bytes(n))


def swap_slot(nbytes: int) -> int:
    """A node's slot in the swap area: its bytes rounded up to 4, so every slot starts 4-aligned (an int8
    tensor of 7x7 elements takes 52), as the pager's DMA and the kernels reading a paged-in tensor want
    (firmware/core/model.c swap_off)."""
    return _align(nbytes, 4)


def swap_bytes(g: TrainingGraph) -> int:
    """The swap area on aux storage: a slot for every node's output (firmware/core/model.c swap_off)."""
    return sum(swap_slot(n.bytes) for n in g.nodes)


def aux_area_bytes(g: TrainingGraph) -> int:
    """What a model needs of the board's aux storage: the swap area, then (sector-aligned) its aux weights."""
    aux = pool_for(g).flash.aux
    swap = swap_bytes(g)
    return _align(swap, AUX_ALIGN) + aux if aux else swap


def costed_fixed_bytes(param_bytes: int) -> int:
    """The fixed part of --ram for a costed graph file, which states only its trained parameters' bytes:
    those parameters and their gradients (no firmware, optimizer state or batch is known of it)."""
    return 2 * param_bytes


@dataclass(frozen=True)
class MemoryBudget:
    ram_bytes: int
    runtime_static: int
    pool: Pool
    flash_bytes: int | None = None  # the board's flash for the model and frozen weights; None: not checked

    @property
    def fixed(self) -> int:
        return self.runtime_static + self.pool.fixed

    @property
    def arena(self) -> int:
        return self.pool.arena(self.ram_bytes - self.runtime_static)

    def lines(self) -> list[tuple[str, int]]:
        """What --ram holds, region by region."""
        p = self.pool
        return [("firmware static (stack, buffers, trace ring)", self.runtime_static),
                ("model tables (per node and parameter)", p.tables),
                ("trained parameters, moved statistics", p.params),
                ("gradients (none: updated in backward)" if p.in_backward else "gradients", p.grads),
                ("optimizer state", p.optimizer_state), ("staged batch", p.staging),
                *([("weight stream buffer (one SD read)", p.stream)] if p.stream else []),
                ("activation arena", self.arena)]

    def flash_lines(self) -> list[tuple[str, int]]:
        """What lives in flash instead, read in place."""
        f = self.pool.flash
        return [("model blob (node table)", f.model_blob), ("frozen parameters and statistics", f.frozen)]

    def aux_lines(self) -> list[tuple[str, int]]:
        """What lives on the aux storage (the SD card) besides the swap area: streamed int8 weights."""
        f = self.pool.flash
        return [("frozen int8 weights, streamed a few channels per read", f.aux)] if f.aux else []

    def table(self) -> str:
        rows = [f"  RAM   {label:<44} {format_size(n):>11}" for label, n in self.lines()]
        rows.append(f"  RAM   {'total (--ram)':<44} {format_size(self.ram_bytes):>11}")
        rows += [f"  flash {label:<44} {format_size(n):>11}" for label, n in self.flash_lines()]
        of = f" of {format_size(self.flash_bytes)}" if self.flash_bytes is not None else ""
        rows.append(f"  flash {'total (page-aligned)':<44} {format_size(self.pool.flash.total):>11}{of}")
        rows += [f"  SD    {label:<44} {format_size(n):>11}" for label, n in self.aux_lines()]
        return "\n".join(rows)


def check_ram(ram_bytes: int, board_ram_bytes: int, board: str) -> int:
    """Refuse a --ram over the board's ram_bytes: on a Linux board, what its runtime may have of the board's
    memory (the yaml says what Linux keeps, and which memory variant it is)."""
    if ram_bytes > board_ram_bytes:
        raise UsageError(f"--ram {format_size(ram_bytes)} is more than {board} has ({format_size(board_ram_bytes)}: "
                         f"ram_bytes in boards/{board}.yaml)")
    return ram_bytes


def check_flash(pool: Pool, flash_bytes: int, board: str) -> None:
    """Refuse a model whose node table and frozen weights do not fit the board's flash for them."""
    f = pool.flash
    if f.total > flash_bytes:
        raise UsageError(f"the model blob ({format_size(f.model_blob)}) and frozen weights ({format_size(f.frozen)}) "
                         f"need {format_size(f.total)} of flash; {board}'s firmware leaves {format_size(flash_bytes)} "
                         "for them: stream the largest frozen weights from the SD card (poet.plan.transform.placement) "
                         "or choose a smaller model")


def budget_for(graph: TrainingGraph, ram_bytes: int, runtime_static: int,
               flash_bytes: int | None = None, board: str = "the board") -> MemoryBudget:
    """Split --ram; refuse a budget that cannot even hold the fixed part, and, given the board's flash
    for them (`flash_bytes`), a model whose frozen weights do not fit it."""
    b = MemoryBudget(ram_bytes=ram_bytes, runtime_static=runtime_static, pool=pool_for(graph),
                     flash_bytes=flash_bytes)
    if flash_bytes is not None:
        check_flash(b.pool, flash_bytes, board)
    if b.arena <= 0:
        raise UsageError(f"--ram {format_size(ram_bytes)} is below the fixed part "
                         f"{format_size(b.fixed)} (firmware {format_size(runtime_static)}, model tables, trained "
                         f"parameters, gradients, optimizer state, batch) before any activation; raise --ram")
    return b
