"""The schedule blob (PSCH, docs/spec.md section 5) and its validator.

`validate` is the Python twin of firmware/core/schedule.c: same checks, same
order, same (status, detail). The host runs it before uploading, so a bad plan is
reported with the instruction at fault instead of a bare error code from the
board, and the differential tests hold the two implementations to each other.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from poet.ops import BY_CODE
from poet.plan.lowering.modelblob import KIND_FORWARD, KIND_LOSS, ModelBlob, marked_in_place

MAGIC = b"PSCH"
VERSION = 1
HEADER_BYTES = 24
INSTR_BYTES = 8
CRC_BYTES = 4
SCHEDULE_BLOB_MAX = 4096  # the firmware's static schedule buffer (2048 on the Cortex-M0+ images: Board.schedule_bytes)
# the longest schedule the format can state: 65,535 instructions (a u16 count), its header and CRC
SCHEDULE_FORMAT_MAX = HEADER_BYTES + INSTR_BYTES * 65535 + CRC_BYTES
NO_DETAIL = 0xFFFFFFFF
FORWARD = 0x01  # header flag: a forward schedule (predict), firmware/core/schedule.h POET_SCHED_FORWARD

COMPUTE = 1
RECOMPUTE = 2
PAGE_OUT = 3
PAGE_IN = 4
FREE = 5
IN_PLACE = 0x01  # an instruction's flags byte: a compute or recompute made over its dep 0, which leaves with it

OK = 0
SHORT, MAGIC_ERR, VERSION_ERR, CRC, LENGTH, HASH, NODES, ARENA = 1, 2, 3, 4, 5, 6, 7, 8
OPCODE, NODE_RANGE, BOUNDS, OVERLAP, NOT_RESIDENT, NOT_PAGED = 9, 10, 11, 12, 13, 14
DOUBLE_ALLOC, NOT_LIVE, RECOMPUTE_ERR, ORDER, LEAK, OUTPUT = 15, 16, 17, 18, 19, 20

ERRORS: dict[int, str] = {
    1: "SHORT", 2: "MAGIC", 3: "VERSION", 4: "CRC", 5: "LENGTH", 6: "HASH", 7: "NODES",
    8: "ARENA", 9: "OPCODE", 10: "NODE_RANGE", 11: "BOUNDS", 12: "OVERLAP",
    13: "NOT_RESIDENT", 14: "NOT_PAGED", 15: "DOUBLE_ALLOC", 16: "NOT_LIVE",
    17: "RECOMPUTE", 18: "ORDER", 19: "LEAK", 20: "OUTPUT",
}

# What each refusal means for the user, and what to do (the host prints it with the code).
MEANINGS: dict[int, str] = {
    1: "the schedule is shorter than its header: the upload was cut short",
    2: "not a poet schedule (bad magic)",
    3: "a schedule format this firmware does not speak: rebuild the schedule or update the firmware",
    4: "the schedule's CRC-32 does not match its bytes: it was damaged on disk or on the way",
    5: "the schedule's length does not match its instruction count",
    6: "the schedule was made for another model (graph hash differs): plan again for this model",
    7: "the schedule has a different node count than the loaded model",
    8: "the schedule's arena is larger than the board's pool has left after parameters, gradients, "
       "optimizer state and batch: plan with a smaller --ram",
    9: "an instruction has an unknown opcode",
    10: "an instruction names a node the model does not have",
    11: "an instruction places a tensor outside the arena (or misaligned)",
    12: "an instruction places a tensor over one that is still live (or, in place, not over its dep 0, or over "
        "one its op cannot overwrite)",
    13: "a compute reads a tensor that is not resident",
    14: "a page-in of a tensor that was never paged out",
    15: "a tensor is allocated twice",
    16: "a page-out or free of a tensor that is not resident",
    17: "a recompute of a node that cannot be recomputed (backward, input, or not yet computed)",
    18: "the nodes are not computed in order, or not all of them",
    19: "a tensor is still resident at the end of the step",
    20: "a forward schedule ends without the model's output resident",
}

_HEADER = struct.Struct("<4sBBHQIHH")
_INSTR = struct.Struct("<BBHI")


@dataclass(frozen=True)
class Instr:
    """One instruction: what happens to which node's tensor, at which arena offset."""

    op: int
    node: int
    offset: int = 0
    flags: int = 0  # IN_PLACE on a compute or recompute


@dataclass
class Schedule:
    """A plan lowered to instructions, bound to one model by its hash."""

    n_nodes: int
    model_hash: int
    arena_bytes: int
    instrs: list[Instr] = field(default_factory=list)
    flags: int = 0  # FORWARD: the forward pass in evaluation mode, ending on the output (predict)

    def encode(self) -> bytes:
        body = bytearray(_HEADER.pack(MAGIC, VERSION, self.flags, self.n_nodes, self.model_hash,
                                      self.arena_bytes, len(self.instrs), 0))
        for ins in self.instrs:
            body += _INSTR.pack(ins.op, ins.flags, ins.node, ins.offset)
        return bytes(body) + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Schedule:
        """Parse without judging the plan; use `validate` for that."""
        if len(data) < HEADER_BYTES + CRC_BYTES:
            raise ValueError(f"schedule is {len(data)} bytes, shorter than header and CRC")
        magic, version, flags, n_nodes, model_hash, arena, n_instr, _ = _HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"not a version-{VERSION} PSCH schedule (magic {magic!r}, version {version})")
        if len(data) != HEADER_BYTES + INSTR_BYTES * n_instr + CRC_BYTES:
            raise ValueError(f"schedule is {len(data)} bytes, its header says {n_instr} instructions")
        if zlib.crc32(data[:-CRC_BYTES]) != struct.unpack_from("<I", data, len(data) - CRC_BYTES)[0]:
            raise ValueError("schedule CRC-32 mismatch: the file is damaged")
        instrs = []
        for k in range(n_instr):
            op, flags, node, offset = _INSTR.unpack_from(data, HEADER_BYTES + INSTR_BYTES * k)
            instrs.append(Instr(op, node, offset, flags))
        return cls(n_nodes, model_hash, arena, instrs, flags)


def validate(data: bytes, model: ModelBlob | None, pool_free: int) -> tuple[int, int]:
    """(status, detail) exactly as the firmware answers END_BLOB for this schedule.

    detail is the failing instruction's index, or 0xFFFFFFFF for header and end checks.
    """
    if len(data) < HEADER_BYTES + CRC_BYTES:
        return SHORT, NO_DETAIL
    if data[:4] != MAGIC:
        return MAGIC_ERR, NO_DETAIL
    if data[4] != VERSION or data[5] & ~FORWARD:
        return VERSION_ERR, NO_DETAIL
    _, _, flags, n_nodes, model_hash, arena, n_instr, _ = _HEADER.unpack_from(data)
    if len(data) != HEADER_BYTES + INSTR_BYTES * n_instr + CRC_BYTES:
        return LENGTH, NO_DETAIL
    if zlib.crc32(data[:-CRC_BYTES]) != struct.unpack_from("<I", data, len(data) - CRC_BYTES)[0]:
        return CRC, NO_DETAIL
    if model is None or model_hash != model.hash():
        return HASH, NO_DETAIL
    if n_nodes != len(model.nodes):
        return NODES, NO_DETAIL
    if arena > pool_free:
        return ARENA, NO_DETAIL

    nodes = model.nodes
    # a forward schedule: the nodes before the first loss, ending with the loss's input resident
    limit, out = len(nodes), None
    if flags & FORWARD:
        limit = next((i for i, n in enumerate(nodes) if n.kind == KIND_LOSS), len(nodes))
        if limit == len(nodes):
            return ORDER, NO_DETAIL
        out = nodes[limit].deps[0]
    sizes = [n.arena_bytes for n in nodes]
    resident: dict[int, int] = {}  # node -> offset
    computed: set[int] = set()
    paged: set[int] = set()
    n_computes = 0
    for k in range(n_instr):
        op, flags, node, off = _INSTR.unpack_from(data, HEADER_BYTES + INSTR_BYTES * k)
        if not COMPUTE <= op <= FREE or flags & ~IN_PLACE or (flags and op not in (COMPUTE, RECOMPUTE)):
            return OPCODE, k
        if node >= n_nodes:
            return NODE_RANGE, k
        n = nodes[node]
        nb = sizes[node]
        # in place (spec section 1): an op that may overwrite its dep 0, at the dep's offset, a dep no larger than
        # it and read by no other slot; the dep leaves with this instruction
        over = None
        if flags:
            op_of = BY_CODE.get(n.op)
            if op_of is None or not op_of.inplace or not marked_in_place(op_of.name, n.attrs) or nb == 0 or not n.deps:
                return OVERLAP, k
            over = n.deps[0]
            if sizes[over] < nb or over not in resident or resident[over] != off or list(n.deps).count(over) > 1:
                return OVERLAP, k
        if op == COMPUTE and (node != n_computes or node >= limit):
            return ORDER, k
        if op == RECOMPUTE and (n.kind not in (KIND_FORWARD, KIND_LOSS) or node not in computed):
            return RECOMPUTE_ERR, k
        if op == PAGE_IN and node not in paged:
            return NOT_PAGED, k
        allocates = op in (COMPUTE, RECOMPUTE, PAGE_IN) and nb > 0
        if allocates:
            if node in resident:
                return DOUBLE_ALLOC, k
            # 4-aligned: the firmware's kernels read fp32 straight out of the arena
            if off % 4 or off + nb > arena:
                return BOUNDS, k
            for j, o in resident.items():
                if j != over and off < o + sizes[j] and o < off + nb:
                    return OVERLAP, k
        if op in (COMPUTE, RECOMPUTE):
            if any(sizes[d] > 0 and d not in resident for d in n.deps):
                return NOT_RESIDENT, k
        if op in (PAGE_OUT, FREE) and (node not in resident or nb == 0):
            return NOT_LIVE, k
        if op == COMPUTE:
            computed.add(node)
            n_computes += 1
        elif op == PAGE_OUT:
            paged.add(node)
        elif op == FREE:
            del resident[node]
        if over is not None:
            del resident[over]
        if allocates:
            resident[node] = off
    if n_computes != limit:
        return ORDER, NO_DETAIL
    if any(j != out for j in resident):
        return LEAK, NO_DETAIL
    if out is not None and sizes[out] and out not in resident:
        return OUTPUT, NO_DETAIL
    return OK, NO_DETAIL


def peak_live_bytes(data: bytes, model: ModelBlob) -> int:
    """The peak of resident bytes a board reports for this schedule (firmware/core/interp.c: a compute,
    recompute or page-in adds its tensor's arena bytes, a free takes them back, a compute in place swaps its dep's
    for its own): what the planner's peak must be, byte for byte. `data` must have passed `validate` against
    `model`."""
    live = peak = 0
    for ins in Schedule.decode(data).instrs:
        n_bytes = model.nodes[ins.node].arena_bytes
        if ins.op in (COMPUTE, RECOMPUTE, PAGE_IN):
            if ins.flags & IN_PLACE:
                live -= model.nodes[model.nodes[ins.node].deps[0]].arena_bytes
            live += n_bytes
            peak = max(peak, live)
        elif ins.op == FREE:
            live -= n_bytes
    return peak
