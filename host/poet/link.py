"""The host end of the serial protocol (docs/spec.md section 6).

Works over anything with read(n) / write(b): a pyserial port (a real board, or
QEMU's `socket://127.0.0.1:PORT`), or `ProcessPort` around the native Linux
runtime's stdin/stdout. The link keeps its own deadline per reply, so the
underlying port's read timeout only bounds how often we check it.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from poet.errors import PoetError
from poet.schedule import ERRORS as SCHEDULE_ERRORS
from poet.schedule import MEANINGS as SCHEDULE_MEANINGS

MODEL = 1
WEIGHTS = 2
SCHEDULE = 3
BATCH = 4
OPT_STATE = 5
BLOB_NAMES = {MODEL: "model", WEIGHTS: "weights", SCHEDULE: "schedule", BATCH: "batch",
              OPT_STATE: "optimizer state"}

SYNC = 0xA5
FRAME_MAX = 1024
CHUNK_MAX = 1000
TRACE_RECORD_BYTES = 16

HELLO, BEGIN_BLOB, CHUNK, END_BLOB, STEP, READ = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
ACK, HELLO_REPLY, DATA, DONE, TRACE = 0x80, 0x81, 0x84, 0x85, 0x86

LINK_ERRORS: dict[int, str] = {
    32: "FRAME", 33: "UNKNOWN_MSG", 34: "TOO_BIG", 35: "ORDER", 36: "MODEL",
    37: "NO_SCHEDULE", 38: "PAGER", 39: "RANGE",
}
STATUS_NAMES: dict[int, str] = {0: "OK", **SCHEDULE_ERRORS, **LINK_ERRORS}

TRACE_KINDS = ("forward", "backward", "recompute", "page_in", "page_out", "optimizer", "free")


class LinkError(PoetError):
    """The device did not answer, or answered with something unreadable."""


class LinkTimeout(LinkError):
    pass


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


class PortLike(Protocol):
    def read(self, n: int) -> bytes: ...

    def write(self, data: bytes) -> int | None: ...


@dataclass(frozen=True)
class Hello:
    proto: int
    fw_version: str
    tick_hz: int
    ram_bytes: int
    pool_bytes: int
    flash_bytes: int
    board: str

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


@dataclass
class StepResult:
    loss: float
    peak_live_bytes: int
    peak_extent_bytes: int
    step_ticks: int
    records: list[TraceRecord] = field(default_factory=list)


LINK_MEANINGS: dict[int, str] = {
    32: "a malformed request", 33: "a request or blob this firmware does not know: update the firmware",
    34: "it does not fit the board's buffers or pool: use a smaller model, batch or plan",
    35: "requests out of order (e.g. weights before the model)", 36: "the model blob is invalid",
    37: "no valid schedule is loaded", 38: "the board's aux storage (flash/SD) failed",
    39: "a size or value out of range",
}


def status_name(status: int) -> str:
    return STATUS_NAMES.get(status, f"status {status}")


def encode_frame(msg_type: int, payload: bytes = b"") -> bytes:
    if len(payload) > FRAME_MAX:
        raise ValueError(f"frame payload of {len(payload)} bytes exceeds {FRAME_MAX}")
    head = struct.pack("<BH", msg_type, len(payload))
    return bytes([SYNC]) + head + payload + struct.pack("<I", zlib.crc32(head + payload))


class ProcessPort:
    """read/write over a child process's stdout/stdin, with a timeout like pyserial's."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float = 1.0) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.timeout = timeout
        self._out = proc.stdout.fileno()

    def read(self, n: int) -> bytes:
        ready, _, _ = select.select([self._out], [], [], self.timeout)
        if not ready:
            return b""
        return os.read(self._out, n)

    def write(self, data: bytes) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return len(data)

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class Link:
    """One request, one reply; every wait has a deadline and names what it waited for."""

    def __init__(self, port_like: PortLike, timeout_s: float = 10.0) -> None:
        self.port = port_like
        self.timeout_s = timeout_s
        self._buf = bytearray()

    # ---- framing ---------------------------------------------------------------------
    def _send(self, msg_type: int, payload: bytes = b"") -> None:
        self.port.write(encode_frame(msg_type, payload))

    def _fill(self, n: int, deadline: float, what: str) -> None:
        while len(self._buf) < n:
            if time.monotonic() > deadline:
                raise LinkTimeout(f"timed out after {self.timeout_s:g} s waiting for {what} from the device "
                                  "(is the firmware running and the port right?)")
            chunk = self.port.read(max(1, n - len(self._buf)))
            if chunk is None:
                chunk = b""
            if not chunk:
                closed = getattr(self.port, "proc", None)
                if closed is not None and closed.poll() is not None:
                    raise LinkError(f"the device exited (status {closed.returncode}) while we waited for {what}")
                continue
            self._buf += chunk

    def _recv(self, what: str) -> tuple[int, bytes]:
        """Next valid frame; bad CRCs and over-long frames are skipped by hunting for the next sync."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._fill(1, deadline, what)
            if self._buf[0] != SYNC:
                del self._buf[0]
                continue
            self._fill(4, deadline, what)
            msg_type, length = struct.unpack_from("<BH", self._buf, 1)
            if length > FRAME_MAX:
                del self._buf[0]
                continue
            self._fill(8 + length, deadline, what)
            body = bytes(self._buf[1:4 + length])
            (crc,) = struct.unpack_from("<I", self._buf, 4 + length)
            if zlib.crc32(body) != crc:
                del self._buf[0]
                continue
            del self._buf[:8 + length]
            return msg_type, body[3:]

    def _expect(self, want: int, what: str) -> bytes:
        msg_type, payload = self._recv(what)
        if msg_type == want:
            return payload
        if msg_type == ACK and len(payload) == 6:
            status, detail = struct.unpack("<HI", payload)
            raise self._error(status, detail, what)
        raise LinkError(f"expected {what}, got message type 0x{msg_type:02x}")

    def _ack(self, what: str) -> int:
        status, detail = struct.unpack("<HI", self._expect(ACK, what))
        if status:
            raise self._error(status, detail, what)
        return detail

    @staticmethod
    def _error(status: int, detail: int, what: str) -> DeviceError:
        meaning = SCHEDULE_MEANINGS.get(status) or LINK_MEANINGS.get(status)
        if detail == 0xFFFFFFFF:
            where = ""
        elif status in SCHEDULE_MEANINGS:
            where = f" (at instruction {detail})"
        else:
            where = f" (detail {detail})"
        return DeviceError(status, detail, f"device refused {what}: {status_name(status)} (code {status})"
                                           + (f": {meaning}" if meaning else "") + where)

    # ---- requests --------------------------------------------------------------------
    def hello(self) -> Hello:
        self._send(HELLO)
        p = self._expect(HELLO_REPLY, "the HELLO reply")
        proto, major, minor, tick_hz, ram, pool, flash = struct.unpack_from("<HBBIIII", p)
        board = p[20:36].split(b"\0", 1)[0].decode("ascii", "replace")
        return Hello(proto, f"{major}.{minor}", tick_hz, ram, pool, flash, board)

    def upload(self, blob_id: int, data: bytes, progress: Callable[[int, int], None] | None = None) -> None:
        """BEGIN, CHUNKs, END; raises DeviceError with the device's verdict (e.g. schedule validation)."""
        name = BLOB_NAMES.get(blob_id, f"blob {blob_id}")
        self._send(BEGIN_BLOB, struct.pack("<BI", blob_id, len(data)))
        self._ack(f"the {name} upload (BEGIN, {len(data)} bytes)")
        for off in range(0, len(data), CHUNK_MAX):
            part = data[off:off + CHUNK_MAX]
            self._send(CHUNK, struct.pack("<BI", blob_id, off) + part)
            self._ack(f"the {name} chunk at byte {off}")
            if progress is not None:
                progress(off + len(part), len(data))
        self._send(END_BLOB, bytes([blob_id]))
        self._ack(f"the {name} upload (END)")

    def step(self, lr: float) -> StepResult:
        self._send(STEP, struct.pack("<f", lr))
        records: list[TraceRecord] = []
        while True:
            msg_type, p = self._recv("the STEP's TRACE/DONE")
            if msg_type == TRACE:
                for off in range(0, len(p) - len(p) % TRACE_RECORD_BYTES, TRACE_RECORD_BYTES):
                    instr, node, kind, op, _, ticks, nbytes = struct.unpack_from("<HHBBHII", p, off)
                    kname = TRACE_KINDS[kind] if kind < len(TRACE_KINDS) else f"kind{kind}"
                    records.append(TraceRecord(instr, node, kname, op, ticks, nbytes))
            elif msg_type == DONE:
                status, loss, live, extent, n_records, ticks = struct.unpack("<HfIIHI", p)
                if status:
                    raise self._error(status, 0xFFFFFFFF, "the training step")
                if n_records != len(records):
                    raise LinkError(f"the device reported {n_records} trace records but sent {len(records)}")
                return StepResult(loss, live, extent, ticks, records)
            elif msg_type == ACK and len(p) == 6:
                status, detail = struct.unpack("<HI", p)
                raise self._error(status, detail, "the training step")
            else:
                raise LinkError(f"expected TRACE or DONE, got message type 0x{msg_type:02x}")

    def read_weights(self, n_bytes: int) -> bytes:
        return self.read_blob(WEIGHTS, n_bytes)

    def read_blob(self, blob_id: int, n_bytes: int) -> bytes:
        """Read back the weights or the optimizer state (a step counter, then the state floats)."""
        name = BLOB_NAMES.get(blob_id, f"blob {blob_id}")
        out = bytearray()
        while len(out) < n_bytes:
            n = min(CHUNK_MAX, n_bytes - len(out))
            self._send(READ, struct.pack("<BIH", blob_id, len(out), n))
            part = self._expect(DATA, f"{name} bytes {len(out)}..{len(out) + n}")
            if len(part) != n:
                raise LinkError(f"asked for {n} {name} bytes at {len(out)}, got {len(part)}")
            out += part
        return bytes(out)

    def close(self) -> None:
        close = getattr(self.port, "close", None)
        if close is not None:
            close()
