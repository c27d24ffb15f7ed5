"""The host end of the serial protocol (docs/spec.md section 6; its numbers and records are in protocol.py).

Works over anything with read(n) / write(b): a pyserial port (a real board, or
QEMU's `socket://127.0.0.1:PORT`), or `ProcessPort` around the native Linux
runtime's stdin/stdout.

Stop-and-wait with retransmission: every request carries a sequence number and
every reply echoes it. A request that gets no reply in time is sent again,
unchanged; the board recognises the repeat and answers it again without doing
the work twice (a STEP's trace and DONE are replayed, not recomputed). The
retransmission timer follows the measured round trip (Jacobson/Karels, as TCP),
and frames shrink while the line loses them and grow back while it does not, so
a noisy cable costs time, not data.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import serial

from poet.device.framing import FrameReader, encode_frame
from poet.device.protocol import (
    ACK,
    AUX,
    BEGIN_BLOB,
    BLOB_NAMES,
    CHUNK,
    DATA,
    DONE,
    END_BLOB,
    FEATURES,
    FROZEN,
    HELLO,
    HELLO_REPLY,
    KEEP,
    LINK_MEANINGS,
    LOADED_BITS,
    MODEL,
    NAK,
    OUT_OF_RANGE,
    P1_HELLO_FRAME_BYTES,
    P1_SYNC,
    PAGER_FAILED,
    PROTO,
    READ,
    STAGE,
    STEP,
    TRACE,
    TRACE_KINDS,
    TRACE_PER_FRAME_MAX,
    TRACE_RECORD_BYTES,
    VERIFY,
    WEIGHTS,
    DeviceError,
    Hello,
    StepResult,
    TraceRecord,
    protocol_1_hello_reply,
    status_name,
    unwrapped,
)
from poet.errors import PoetError
from poet.files import open_in_folder
from poet.plan.lowering.schedule import MEANINGS as SCHEDULE_MEANINGS
from poet.progress import bar, sent_bytes

if TYPE_CHECKING:
    import numpy as np

    from poet.plan.lowering.modelblob import ModelBlob

CHUNK_MAX = 1000  # payload bytes per CHUNK / READ / trace frame on a clean line
CHUNK_MIN = 32  # the smallest data part a lossy line is tried with


class LinkError(PoetError):
    """The device did not answer, or answered with something unreadable."""


class LinkTimeout(LinkError):
    pass


class LinkClosed(LinkError):
    """The other end went away: cable unplugged, board reset, emulator stopped."""


class ProtocolMismatch(LinkError):
    """The board runs poet's firmware of another protocol version, `proto`: older than PROTO, flashing
    this poet's firmware is the cure; newer, updating poet is (flashing would downgrade the board)."""

    def __init__(self, message: str, proto: int) -> None:
        super().__init__(message)
        self.proto = proto


class NotPoet(LinkTimeout):
    """No valid HELLO reply, in this protocol or protocol 1: whatever is on the port (another board,
    a modem, poet's board in its bootloader or running other firmware) is not known to be poet's,
    so nothing may be flashed onto it unasked. A LinkTimeout too: that is how the silence shows."""

    def __init__(self, waited_s: float, got_bytes: int, port: str | None = None, board: str | None = None) -> None:
        self.waited_s, self.got_bytes = waited_s, got_bytes
        on = f" on {port}" if port else ""
        heard = f"it sent {got_bytes} bytes, no poet frame among them" if got_bytes else "it sent nothing"
        which = f"the {board}" if board else "the board"
        flash = f"poet flash --board {board or 'BOARD'}" + (f" --port {port}" if port else "")
        super().__init__(f"the device{on} does not speak poet's protocol (no valid HELLO reply in {waited_s:.0f} s; "
                         f"{heard}): is it {which}, and does it run poet's firmware? If it is {which}, "
                         f"`{flash}` puts poet's firmware on it, replacing what it runs now")


def write_card(card: Path, at: int, data: bytes) -> None:
    """Write bytes onto an SD card image at a byte offset of the firmware's area, as a card reader would
    (an emulated board's card is a file: its pager's poet-swap.bin)."""
    fd = open_in_folder(card, "the emulated SD card")  # a link planted in a run folder must not be written through
    with os.fdopen(fd, "r+b") as f:
        f.seek(at)
        f.write(data)


class PortLike(Protocol):
    def read(self, n: int) -> bytes: ...

    def write(self, data: bytes) -> int | None: ...


class ProcessPort:
    """read/write over a child process's stdout/stdin, with a timeout like pyserial's."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float = 1.0) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.timeout = timeout
        self._out = proc.stdout.fileno()

    def read(self, n: int) -> bytes:
        """What is there, up to n bytes, waiting at most `timeout` for the first."""
        ready, _, _ = select.select([self._out], [], [], self.timeout)
        if not ready:
            return b""
        data = os.read(self._out, n)
        if not data:
            raise LinkClosed(f"the runtime's output closed (process exit status {self.proc.poll()})")
        return data

    def write(self, data: bytes) -> int:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise LinkClosed(f"the runtime's input closed (process exit status {self.proc.poll()})") from exc
        return len(data)

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


BUSY = object()  # a reply handler's answer: the board accepted the request and is working on it


class _Resend(Exception):
    """A reply arrived incomplete (trace frames were lost): send the request again now."""


@dataclass
class LinkStats:
    requests: int = 0
    retransmissions: int = 0
    bad_frames: int = 0
    stale_frames: int = 0  # replies to an earlier request (its retransmission was answered twice)
    bytes_in: int = 0  # everything read, frames or not (what a device that is not poet's sent)


class Link:
    """One request at a time; every wait has a deadline and names what it waited for."""

    def __init__(self, port_like: PortLike, timeout_s: float = 10.0, rto_s: float = 0.5) -> None:
        self.port = port_like
        self.timeout_s = timeout_s  # silence after which the board is given up
        if hasattr(port_like, "timeout"):
            port_like.timeout = 0.01  # type: ignore[attr-defined]  # our own deadlines decide; poll often
        self._reader = FrameReader()
        self._pending: list[tuple[int, int, bytes]] = []
        self._seq = 0
        self._rto = rto_s
        self._srtt: float | None = None
        self._rttvar = 0.0
        self.aux_uploaded: tuple[int | None, bytes] = (None, b"")  # (model hash, aux weights) load_model sent
        self.part = CHUNK_MAX  # payload bytes per CHUNK / READ / trace frame, adapted to the line
        self._clean = 0
        self._work_s: float | None = None  # how long the last STEP kept the board busy (wall time)
        self.stats = LinkStats()

    # ---- frames ----------------------------------------------------------------------
    def _read_some(self) -> bytes:
        waiting = getattr(self.port, "in_waiting", None)
        try:
            if isinstance(waiting, int) and waiting > 0:
                data = self.port.read(waiting) or b""
            else:
                data = self.port.read(1 if waiting is not None else 4096) or b""
            self.stats.bytes_in += len(data)
            return data
        except LinkError:
            raise
        except (OSError, serial.SerialException) as exc:
            raise LinkClosed(f"the board closed the link ({exc})") from exc

    def _next_frame(self, until: float, what: str) -> tuple[int, int, bytes] | None:
        """The next good frame; a damaged one arriving first is reported as a NAK (seq 0) of our
        own, since the reply we wait for may be what was damaged."""
        bad = self._reader.bad_frames
        while not self._pending:
            if self._reader.bad_frames != bad:
                self.stats.bad_frames = self._reader.bad_frames
                return NAK, 0, b""
            if time.monotonic() >= until:
                return None
            try:
                data = self._read_some()
            except LinkClosed as exc:
                raise LinkClosed(f"{exc} while waiting for {what}: it was unplugged, reset or stopped") from exc
            if data:
                self._pending += self._reader.feed(data)
                self.stats.bad_frames = self._reader.bad_frames
        return self._pending.pop(0)

    def _write(self, frame: bytes) -> None:
        try:
            self.port.write(frame)
        except LinkError:
            raise
        except (OSError, serial.SerialException) as exc:
            raise LinkClosed(f"the board closed the link ({exc}): it was unplugged, reset or stopped") from exc

    def _rtt_sample(self, rtt: float) -> None:
        """Jacobson/Karels (RFC 6298): smoothed round trip and its variation set the timer."""
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self._rto = min(2.0, max(0.005, self._srtt + 4 * self._rttvar))

    def _exchange(self, msg_type: int, payload: bytes | Callable[[], bytes], what: str,
                  handle: Callable[[int, bytes], object] | None = None, work_s: float | None = None) -> object:
        """Send a request until it is answered. Without `handle` the first reply is the answer;
        with it, every reply goes to `handle` until it returns something other than None.

        A board that has accepted the request (BUSY) and is working on it cannot answer until it is
        done: its silence is given up only after timeout_s plus twice the longer of the work it is
        expected to take (`work_s`) and the work it took last time.

        `payload` may be a function of self.part: a retransmission then asks it again, so data
        that did not get through goes in smaller frames (the same seq: the board either never saw
        the first try, or answers it again; docs/spec.md section 6 says why both are safe)."""
        self._seq = self._seq % 255 + 1
        make = payload if callable(payload) else None
        frame = encode_frame(msg_type, self._seq, make() if make else payload)  # type: ignore[arg-type]
        self.stats.requests += 1
        self._pending.clear()  # whatever arrived before this request answers an earlier one
        rto = self._rto
        busy_wait = 2 * self._work_s if self._work_s else 1.0
        silent_since = time.monotonic()
        busy_since: float | None = None  # when the board said it started working on the request
        first = True
        while True:
            sent = time.monotonic()
            self._write(frame)
            # a board at work answers when the work is done; otherwise answers come within the RTO
            until = sent + (busy_wait if busy_since is not None else rto)
            resend_now = False
            while not resend_now:
                got = self._next_frame(until, what)
                if got is None:
                    break
                t, seq, p = got
                if t == NAK and seq == 0:  # a frame was damaged on the way: resend at once
                    if busy_since is None:
                        resend_now = True
                        self._lossy()
                    continue
                if seq != self._seq:
                    self.stats.stale_frames += 1
                    continue
                now = silent_since = time.monotonic()
                if first:  # Karn: only an unambiguous exchange measures the round trip
                    self._rtt_sample(now - sent)
                    first = False
                if handle is None:
                    self._answered()
                    return t, p
                try:
                    out = handle(t, p)
                except _Resend:
                    resend_now = True
                    self._lossy()  # frames were lost: ask for smaller ones
                    continue
                if out is BUSY:
                    busy_since = now
                    until = now + busy_wait
                    continue
                if busy_since is not None:  # the work is done: how long it took says how long to wait next time
                    self._work_s = now - busy_since if self._work_s is None else \
                        0.75 * self._work_s + 0.25 * (now - busy_since)
                    busy_since = None
                if out is not None:
                    self._answered()
                    return out
                until = now + rto  # the rest of the reply follows at once
            limit = self.timeout_s
            if busy_since is not None:
                limit += 2 * max(work_s or 0.0, self._work_s or 0.0)
            if time.monotonic() - silent_since > limit:
                raise LinkTimeout(f"timed out after {limit:g} s waiting for {what} from the device "
                                  f"(sent {self.stats.retransmissions and 'with retries' or 'once'}; is the "
                                  "firmware running and the port right?)")
            first = False
            self.stats.retransmissions += 1
            if not resend_now:  # silence: the frame or its whole reply was lost; back off
                if busy_since is not None:  # a working board is silent: nothing says frames are lost
                    busy_wait = min(self.timeout_s / 2, busy_wait * 2)
                else:
                    self._lossy()
                rto = min(2.0, rto * 2)
            if make is not None:
                frame = encode_frame(msg_type, self._seq, make())

    def _lossy(self) -> None:
        self.part = max(CHUNK_MIN, self.part // 2)
        self._clean = 0

    def _answered(self) -> None:
        self._clean += 1
        if self._clean >= 8 and self.part < CHUNK_MAX:
            self.part = min(CHUNK_MAX, self.part * 2)
            self._clean = 0

    def _expect(self, want: int, payload_of: tuple[int, bytes], what: str) -> bytes:
        msg_type, payload = payload_of
        if msg_type == want:
            return payload
        if msg_type == ACK and len(payload) == 6:
            status, detail = struct.unpack("<HI", payload)
            raise self._error(status, detail, what)
        raise LinkError(f"expected {what}, got message type 0x{msg_type:02x}")

    def _request(self, msg_type: int, payload: bytes | Callable[[], bytes], want: int, what: str) -> bytes:
        reply = self._exchange(msg_type, payload, what)
        assert isinstance(reply, tuple)
        return self._expect(want, reply, what)

    def _ack(self, msg_type: int, payload: bytes | Callable[[], bytes], what: str) -> int:
        status, detail = struct.unpack("<HI", self._request(msg_type, payload, ACK, what))
        if status:
            raise self._error(status, detail, what)
        return int(detail)

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
        """The board's HELLO reply. Raises ProtocolMismatch for poet's firmware of another protocol
        version and NotPoet for a device that gives no valid reply in either."""
        start = time.monotonic()
        try:
            p = self._request(HELLO, b"", HELLO_REPLY, "the HELLO reply")
        except LinkTimeout:
            if self._answers_protocol_1():
                raise ProtocolMismatch(f"the firmware on the board speaks protocol 1, this poet speaks {PROTO}: "
                                       "update the firmware with `poet flash --board BOARD`", 1) from None
            raise NotPoet(time.monotonic() - start, self.stats.bytes_in) from None
        (proto,) = struct.unpack_from("<H", p)
        if proto != PROTO:
            side = "the firmware with `poet flash --board BOARD`" if proto < PROTO else "poet on this computer"
            raise ProtocolMismatch(f"the firmware on the board speaks protocol {proto}, this poet speaks {PROTO}: "
                                   f"update {side}", proto)
        if len(p) < 41:
            raise LinkError(f"the HELLO reply is {len(p)} bytes, protocol {PROTO} sends 41")
        _, major, minor, tick_hz, ram, pool, nv = struct.unpack_from("<HBBIIII", p)
        board = p[20:36].split(b"\0", 1)[0].decode("ascii", "replace")
        flags, steps = p[36], struct.unpack_from("<I", p, 37)[0]
        loaded = frozenset(n for bit, n in enumerate(LOADED_BITS) if flags >> bit & 1)
        return Hello(proto, f"{major}.{minor}", tick_hz, ram, pool, nv, board, loaded, steps)

    def _answers_protocol_1(self) -> bool:
        """Does the board answer a protocol-1 HELLO? Then its firmware is poet's, older than us.

        Only a whole, CRC-checked protocol-1 HELLO reply counts: noise from a device that is not
        poet's holds 0xA5 0x81 often enough (once in 64 KiB of random bytes), and taking it for a
        board would have poet flash someone else's device."""
        head = bytes([HELLO, 0, 0])
        self._write(bytes([P1_SYNC]) + head + struct.pack("<I", zlib.crc32(head)))
        deadline = time.monotonic() + 1.0
        seen = bytearray()
        while time.monotonic() < deadline:
            seen += self._read_some()
            if protocol_1_hello_reply(bytes(seen)):
                return True
            # a frame starting further back would be whole and was looked at: a chatty device costs no memory
            del seen[:max(0, len(seen) - (P1_HELLO_FRAME_BYTES - 1))]
        return False

    def upload(self, blob_id: int, data: bytes, progress: Callable[[int, int], None] | None = None) -> None:
        """BEGIN, CHUNKs, END; raises DeviceError with the device's verdict (e.g. schedule validation)."""
        name = BLOB_NAMES.get(blob_id, f"blob {blob_id}")
        self._ack(BEGIN_BLOB, struct.pack("<BI", blob_id, len(data)), f"the {name} upload (BEGIN, {len(data)} bytes)")
        off = 0
        while off < len(data):
            sent = [0]

            def chunk(off: int = off, sent: list[int] = sent) -> bytes:
                part = data[off:off + self.part]
                sent[0] = len(part)
                return struct.pack("<BI", blob_id, off) + part

            self._ack(CHUNK, chunk, f"the {name} chunk at byte {off}")
            off += sent[0]  # what the last try carried (the board may hold more: a later chunk rewrites it)
            if progress is not None:
                progress(off, len(data))
        self._ack(END_BLOB, bytes([blob_id]), f"the {name} upload (END)")

    def step(self, lr: float, work_s: float | None = None) -> StepResult:
        """One training step; every trace record arrives exactly once (lost ones are asked again).
        `work_s`: how long the step is expected to take (the plan's time), so a long one is waited for."""
        records: dict[int, TraceRecord] = {}

        def handle(t: int, p: bytes) -> StepResult | None:
            if t == TRACE:
                for off in range(0, len(p) - len(p) % TRACE_RECORD_BYTES, TRACE_RECORD_BYTES):
                    instr, node, kind, op, _, ticks, nbytes = struct.unpack_from("<HHBBHII", p, off)
                    kname = TRACE_KINDS[kind] if kind < len(TRACE_KINDS) else f"kind{kind}"
                    records[instr] = TraceRecord(instr, node, kname, op, ticks, nbytes)
                return None
            if t == DONE:
                status, loss, live, extent, n_records, ticks = struct.unpack("<HfIIHI", p)
                if status:
                    raise self._error(status, 0xFFFFFFFF, "the training step")
                if len(records) < n_records:
                    raise _Resend()  # trace frames were lost: the board replays the whole step's result
                if set(records) != set(range(n_records)):
                    raise LinkError(f"the device reported {n_records} trace records but sent others")
                recs = [records[i] for i in range(n_records)]
                return StepResult(loss, live, extent, unwrapped(ticks, sum(r.ticks for r in recs)), recs)
            if t == ACK and len(p) == 6:
                status, detail = struct.unpack("<HI", p)
                if status:
                    raise self._error(status, detail, "the training step")
                return BUSY  # accepted: the step runs now
            raise LinkError(f"expected TRACE or DONE, got message type 0x{t:02x}")

        def request() -> bytes:  # a replay may ask for smaller trace frames
            return struct.pack("<fH", lr, max(1, min(TRACE_PER_FRAME_MAX, self.part // TRACE_RECORD_BYTES)))

        out = self._exchange(STEP, request, "the STEP's TRACE/DONE", handle, work_s)
        assert isinstance(out, StepResult)
        return out

    def keep_features(self, node: int, offset: int) -> None:
        """Arm the next STEP to write node's output (the batch's, its arena bytes) to the board's aux storage
        at `offset`, right after the step computes it (FEATURES KEEP, docs/spec.md section 6). The offset
        must lie past the swap area and aux weights of every model the cache is to outlive."""
        self._ack(FEATURES, struct.pack("<BHI", KEEP, node, offset), f"keeping node {node}'s features at {offset}")

    def stage_features(self, offsets: Sequence[int], labels: Sequence[int]) -> None:
        """Arm the next STEP to read its batch from the feature cache: sample r's features from aux offset
        offsets[r] into row r of the staging region, with label labels[r] (FEATURES STAGE, in as many
        requests as the frame size needs; the board refuses a count other than the model's batch)."""
        if len(offsets) != len(labels):
            raise ValueError(f"{len(offsets)} offsets for {len(labels)} labels")
        count = len(offsets)
        first = 0
        while True:
            sent = [0]

            def request(first: int = first, sent: list[int] = sent) -> bytes:
                n = min(count - first, max(1, (self.part - 5) // 8))
                sent[0] = n
                return struct.pack("<BHH", STAGE, count, first) + b"".join(
                    struct.pack("<Ii", offsets[i], labels[i]) for i in range(first, first + n))

            self._ack(FEATURES, request, f"staging samples {first}.. of the batch from the feature cache")
            first += sent[0]
            if first >= count:
                return

    def read_weights(self, n_bytes: int) -> bytes:
        return self.read_blob(WEIGHTS, n_bytes)

    def load_model(self, blob: ModelBlob, params: Sequence[np.ndarray], card: Path | None = None,
                   bars: bool = False) -> None:
        """Upload a model and every parameter: the model blob and the frozen ones to the board's flash,
        the streamed ones to its aux storage (unless it holds them already: VERIFY), the trained ones
        to its RAM. `card`: an emulated board's SD card image, written first as a card reader would.
        bars: a bar over the bytes sent, on stderr when it is a terminal (poet.progress)."""
        weights, frozen, aux = blob.split_weights(params)
        model = blob.encode()
        # drawn only after a second: a small model's upload is over before a bar would say anything
        with bar(len(model) + len(frozen) + len(weights), "upload", shown=bars, unit="B", unit_scale=True,
                 unit_divisor=1024, delay=1.0) as sent:
            self.upload(MODEL, model, sent_bytes(sent))
            if frozen:
                self.upload(FROZEN, frozen, sent_bytes(sent))
            if aux:
                if card is not None:
                    write_card(card, blob.aux_at, aux)
                if not self.verify_aux(aux):
                    sent.total += len(aux)  # counted only once the card is known to lack them
                    self.upload(AUX, aux, sent_bytes(sent))
            self.aux_uploaded = (blob.hash(), aux)
            self.upload(WEIGHTS, weights, sent_bytes(sent))

    def verify_aux(self, aux: bytes) -> bool:
        """Whether the board's aux storage already holds these aux weights (it CRC-32s its copy); then they
        count as uploaded. A card that holds something else, or too little, says no."""
        try:
            self._ack(VERIFY, struct.pack("<BI", AUX, zlib.crc32(aux)), "the aux weights' check (VERIFY)")
        except DeviceError as exc:
            if exc.code in (PAGER_FAILED, OUT_OF_RANGE):
                return False
            raise
        return True

    def read_params(self, blob: ModelBlob) -> list[np.ndarray]:
        """Every parameter, flat, in param-table order: the trained ones as the board has them now. Weights
        on aux storage are the bytes this link uploaded (megabytes, which no step writes: the board's
        page-outs stay below them, firmware/core/model.c aux_at), not read back over serial."""
        frozen = self.read_blob(FROZEN, blob.frozen_bytes) if blob.frozen_bytes else b""
        aux = b""
        if blob.aux_bytes:
            h, aux = self.aux_uploaded
            if h != blob.hash():
                raise LinkError("the model's aux weights were not uploaded over this link: load the model first")
        return blob.join_weights(self.read_blob(WEIGHTS, blob.param_bytes), frozen, aux)

    def read_blob(self, blob_id: int, n_bytes: int) -> bytes:
        """Read back the weights, the frozen weights or the optimizer state (a step counter, then the state floats)."""
        name = BLOB_NAMES.get(blob_id, f"blob {blob_id}")
        out = bytearray()
        while len(out) < n_bytes:
            asked = [0]  # the most any try of this request asked for

            def read(off: int = len(out), asked: list[int] = asked) -> bytes:
                n = min(self.part, n_bytes - off)
                asked[0] = max(asked[0], n)
                return struct.pack("<BIH", blob_id, off, n)

            part = self._request(READ, read, DATA, f"{name} bytes from {len(out)}")
            # any try's reply is good: they all read from the same offset (a late answer to a
            # larger first try carries more)
            if not 0 < len(part) <= asked[0]:
                raise LinkError(f"asked for at most {asked[0]} {name} bytes at {len(out)}, got {len(part)}")
            out += part
        return bytes(out)

    def close(self) -> None:
        close = getattr(self.port, "close", None)
        if close is not None:
            close()
