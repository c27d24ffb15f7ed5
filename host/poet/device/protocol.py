"""What the serial protocol says (docs/spec.md section 6): message, blob and status numbers, the records a
reply carries (HELLO's, a step's trace and DONE), what each status means, and how a board of protocol 1
answers HELLO. The host end that speaks it, stop-and-wait over a port, is link.py."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from poet.errors import PoetError
from poet.plan.lowering.schedule import ERRORS as SCHEDULE_ERRORS

MODEL = 1
WEIGHTS = 2
SCHEDULE = 3
BATCH = 4
OPT_STATE = 5
FROZEN = 6
AUX = 7
BLOB_NAMES = {MODEL: "model", WEIGHTS: "weights", SCHEDULE: "schedule", BATCH: "batch",
              OPT_STATE: "optimizer state", FROZEN: "frozen weights", AUX: "aux weights"}
# HELLO's loaded flags, bit by bit
LOADED_BITS = ("model", "weights", "batch", "schedule", "frozen weights", "aux weights")

PROTO = 4  # the protocol this host speaks; HELLO's first field is the board's
TRACE_RECORD_BYTES = 16
TRACE_PER_FRAME_MAX = 60

HELLO, BEGIN_BLOB, CHUNK, END_BLOB, STEP, READ, VERIFY, FEATURES = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08
KEEP, STAGE = 1, 2  # FEATURES' modes: write a node's output to the feature cache, or stage a batch from it
PAGER_FAILED, OUT_OF_RANGE = 38, 39  # LINK_ERRORS' PAGER and RANGE
ACK, HELLO_REPLY, DATA, DONE, TRACE, NAK = 0x80, 0x81, 0x84, 0x85, 0x86, 0x8F

LINK_ERRORS: dict[int, str] = {
    32: "FRAME", 33: "UNKNOWN_MSG", 34: "TOO_BIG", 35: "ORDER", 36: "MODEL",
    37: "NO_SCHEDULE", 38: "PAGER", 39: "RANGE",
}
STATUS_NAMES: dict[int, str] = {0: "OK", **SCHEDULE_ERRORS, **LINK_ERRORS}

TRACE_KINDS = ("forward", "backward", "recompute", "page_in", "page_out", "optimizer", "free", "cache_write",
               "cache_read")
CACHE_KINDS = ("cache_write", "cache_read")  # the feature cache's records (FEATURES), priced as paging is


class DeviceError(PoetError):
    """The device answered with a non-zero status."""

    def __init__(self, status: int, detail: int, message: str) -> None:
        # PoetError.status is the CLI's exit status (1: the work failed); the device's code is .code
        super().__init__(message, status=1)
        self.code = status
        self.detail = detail

    @property
    def name(self) -> str:
        return STATUS_NAMES.get(self.code, f"status {self.code}")


@dataclass(frozen=True)
class Hello:
    proto: int
    fw_version: str
    tick_hz: int
    ram_bytes: int
    pool_bytes: int
    nv_bytes: int  # the flash the firmware keeps the model blob and frozen weights in
    board: str
    loaded: frozenset[str] = frozenset()  # blobs the board holds now (LOADED_BITS)
    steps_done: int = 0  # steps run since the weights were loaded

    @property
    def static_bytes(self) -> int:
        """RAM the firmware keeps for itself (code data, buffers, stack): not available to plans."""
        return self.ram_bytes - self.pool_bytes


@dataclass(frozen=True)
class TraceRecord:
    instr: int
    node: int
    kind: str
    op: int
    ticks: int
    bytes: int


TICK_WRAP = 1 << 32  # the board's tick counter is 32 bits (port.h)


def unwrapped(step_ticks: int, covered: int) -> int:
    """A step's ticks from DONE's 32-bit count: a counter wraps within a long step (the Linux runtime's
    1 GHz one every 4.29 s: a BERT-base step), so the step took the count plus as many whole wraps as its
    records' ticks, `covered`, need. Exact while each op, and what lies between the ops, is shorter than
    a wrap (each record's ticks are one op's, and within a wrap themselves)."""
    return step_ticks + max(0, -(-(covered - step_ticks) // TICK_WRAP)) * TICK_WRAP


@dataclass
class StepResult:
    loss: float
    peak_live_bytes: int
    peak_extent_bytes: int
    step_ticks: int
    records: list[TraceRecord] = field(default_factory=list)


LINK_MEANINGS: dict[int, str] = {
    32: "a malformed request", 33: "a request or blob this firmware does not know: update the firmware",
    34: "it does not fit the board's flash, buffers or pool: use a smaller model, batch or plan",
    35: "requests out of order (e.g. weights before the model)", 36: "the model blob is invalid",
    37: "no valid schedule is loaded", 38: "the board's aux storage (flash/SD) failed",
    39: "a size or value out of range",
}

P1_SYNC = 0xA5  # protocol 1's frame: 0xA5, u8 type, u16 length, payload, u32 crc32 of type, length, payload

P1_HELLO_REPLY_BYTES = 36  # u16 proto, u8 major, u8 minor, 4 x u32 (tick_hz, ram, pool, flash), char[16] board

P1_HELLO_FRAME_BYTES = 4 + P1_HELLO_REPLY_BYTES + 4


def protocol_1_hello_reply(data: bytes) -> bool:
    """Whether `data` holds a whole protocol-1 HELLO reply frame, anywhere in it, whose CRC is right
    and whose payload is that of a protocol-1 board (protocol field 1, the reply's size)."""
    i = data.find(bytes([P1_SYNC, HELLO_REPLY]))
    while i >= 0:
        end = i + P1_HELLO_FRAME_BYTES
        if end <= len(data):
            (length,) = struct.unpack_from("<H", data, i + 2)
            body = data[i + 1:i + 4 + P1_HELLO_REPLY_BYTES]
            if length == P1_HELLO_REPLY_BYTES and struct.unpack_from("<H", data, i + 4)[0] == 1 \
                    and zlib.crc32(body) == struct.unpack_from("<I", data, end - 4)[0]:
                return True
        i = data.find(bytes([P1_SYNC, HELLO_REPLY]), i + 1)
    return False


def status_name(status: int) -> str:
    return STATUS_NAMES.get(status, f"status {status}")
