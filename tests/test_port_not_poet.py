"""A port whose device is not poet's board (it sends noise, or nothing) is refused in one line that does
not call it poet's board: no "update the firmware", and `poet train` does not flash it. A board with
poet's older, protocol-1 firmware is still recognised, by a whole protocol-1 HELLO reply frame."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import select
import struct
import threading
import tty
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from poet.boards import load_board
from poet.cli import main
from poet.device.connect import open_device
from poet.device.framing import FrameReader, encode_frame
from poet.device.link import Link, LinkError, NotPoet, ProtocolMismatch
from poet.device.protocol import HELLO, HELLO_REPLY, PROTO, protocol_1_hello_reply

P1_HELLO = bytes([0xA5, 0x01, 0, 0]) + struct.pack("<I", zlib.crc32(bytes([0x01, 0, 0])))


def p1_frame(msg_type: int, payload: bytes) -> bytes:
    """A protocol-1 frame, as poet's firmware before protocol 2 sent it (git show 22d5082^:docs/spec.md)."""
    head = struct.pack("<BH", msg_type, len(payload))
    return b"\xa5" + head + payload + struct.pack("<I", zlib.crc32(head + payload))


def p1_hello_reply(proto: int = 1, board: bytes = b"rpi4") -> bytes:
    return p1_frame(HELLO_REPLY, struct.pack("<HBBIIII16s", proto, 0, 9, 1_000_000, 1 << 20, 1 << 19, 0, board))


def near_misses(rng: random.Random) -> bytes:
    """Bytes that look like a protocol-1 HELLO reply to a careless eye: the sync and type, a frame cut
    short, a right frame with one bit of its CRC wrong, a right frame claiming protocol 2."""
    good = bytearray(p1_hello_reply())
    bad_crc = bytearray(good)
    bad_crc[-1 - rng.randrange(4)] ^= 1 << rng.randrange(8)
    return b"".join(rng.sample([b"\xa5\x81", bytes(good[:rng.randrange(2, len(good))]), bytes(bad_crc),
                                p1_hello_reply(proto=2)], 4))


class Fake:
    """A device on a new pty: `talk(rng)` is what it sends unasked, now and then; `answer(heard)` what
    it sends back to everything it has heard so far (and clears it), if anything."""

    def __init__(self, talk: Callable[[random.Random], bytes] | None,
                 answer: Callable[[bytearray], bytes] | None = None, seed: int = 0) -> None:
        self.talk, self.answer, self.rng = talk, answer, random.Random(seed)
        self.sent = bytearray()
        self.stop = threading.Event()

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        master, slave = os.openpty()
        tty.setraw(slave)  # bytes as they are: no echo, no CR/LF translation, no ^C as a signal
        os.set_blocking(master, False)
        thread = threading.Thread(target=self._serve, args=(master,), daemon=True)
        thread.start()
        try:
            yield os.ttyname(slave)
        finally:
            self.stop.set()
            thread.join()
            os.close(master)
            os.close(slave)

    def _serve(self, master: int) -> None:
        heard = bytearray()
        while not self.stop.is_set():
            readable, _, _ = select.select([master], [], [], 0.005)
            if readable:
                with contextlib.suppress(OSError):
                    heard += os.read(master, 4096)
            out = b""
            if self.answer is not None:
                out += self.answer(heard)
            if self.talk is not None:
                out += self.talk(self.rng)
            if out:
                with contextlib.suppress(BlockingIOError):  # the port's buffer is full: drop it, as a UART would
                    self.sent += out[:os.write(master, out)]


def noise(rng: random.Random) -> bytes:
    """Random bytes, and now and then the start of a protocol-1 HELLO reply or something close to one."""
    out = rng.randbytes(rng.randrange(1, 96))
    return out + (near_misses(rng) if rng.random() < 0.2 else b"")


def p1_board(heard: bytearray) -> bytes:
    """poet's protocol-1 firmware: deaf to protocol 2's frames, answers a protocol-1 HELLO."""
    if P1_HELLO in heard:
        heard.clear()
        return p1_hello_reply()
    return b""


def newer_board(heard: bytearray) -> bytes:
    """poet's firmware of a protocol newer than this poet's: answers HELLO, in frames this poet reads."""
    whole = heard.rfind(0) + 1  # frames end in 0x00: what follows the last one is still arriving
    frames = FrameReader().feed(bytes(heard[:whole]))
    del heard[:whole]
    return b"".join(encode_frame(HELLO_REPLY, seq, struct.pack("<H", PROTO + 1) + bytes(39))
                    for msg_type, seq, _ in frames if msg_type == HELLO)


@pytest.fixture
def quick_link(monkeypatch: pytest.MonkeyPatch) -> None:
    """HELLO gives up after 1 s instead of 10: what is tested is what it says, not how long it waits."""
    import poet.device.connect

    monkeypatch.setattr(poet.device.connect, "Link", functools.partial(Link, timeout_s=1.0))


def test_a_protocol_1_hello_reply_is_a_whole_checked_frame() -> None:
    rng = random.Random(7)
    reply = p1_hello_reply()
    assert protocol_1_hello_reply(reply)
    assert protocol_1_hello_reply(rng.randbytes(100) + b"\xa5\x81" + reply + rng.randbytes(3))
    for cut in range(len(reply)):
        assert not protocol_1_hello_reply(reply[:cut])
    for i in range(1, len(reply)):  # one bit wrong anywhere but the sync byte
        for bit in (0, 7):
            damaged = bytearray(reply)
            damaged[i] ^= 1 << bit
            assert not protocol_1_hello_reply(bytes(damaged)), (i, bit)
    assert not protocol_1_hello_reply(p1_hello_reply(proto=2))
    assert not protocol_1_hello_reply(p1_frame(HELLO_REPLY, b"\x01\x00"))  # too short for a HELLO reply
    # noise holds 0xA5 0x81 about once in 64 KiB; this holds it often, and near misses besides
    junk = b"".join(noise(rng) for _ in range(20_000))
    assert junk.count(b"\xa5\x81") > 1000 and not protocol_1_hello_reply(junk)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _not_poet_words(line: str, port: str, board: str) -> None:
    assert f"the device on {port} does not speak poet's protocol (no valid HELLO reply in" in line, line
    assert f"`poet flash --board {board} --port {port}`" in line, line
    assert "update" not in line and "protocol 1" not in line, line


def test_noise_is_not_a_board_and_is_not_flashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The whole path at its real timeout: `poet train --port` on a device that sends random bytes, with
    protocol-1 look-alikes among them, refuses in one line, exit 1, and flashes nothing."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    import poet.device.flash

    flashed: list[str] = []
    monkeypatch.setattr(poet.device.flash, "flash", lambda b, port, say, **_kw: flashed.append(port))
    fake = Fake(noise, seed=1)
    with fake.serving() as port:
        code = main(["train", "--board", "rpi4", "--port", port, "--ram", "1m", "--epochs", "1",
                     "--data-limit", "16", "--run-dir", str(tmp_path / "run")])
    assert code == 1
    line = _one_line(capsys)
    _not_poet_words(line, port, "rpi4")
    assert "bytes, no poet frame among them" in line
    assert flashed == []
    assert fake.sent.count(b"\xa5\x81") > 0  # it did send what used to pass for a protocol-1 board


def test_profile_on_a_noisy_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], quick_link: None) -> None:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    with Fake(noise, seed=2).serving() as port:
        code = main(["profile", "--board", "rpi4", "--port", port, "--model", "mlp-digits"])
    assert code == 1
    _not_poet_words(_one_line(capsys), port, "rpi4")
    assert not list(tmp_path.rglob("*.yaml"))  # no profile started for it


@pytest.mark.parametrize("talk,heard", [(None, "it sent nothing"), (noise, "no poet frame among them")])
def test_open_device_on_a_port_that_is_not_poet(tmp_path: Path, quick_link: None,
                                                talk: Callable[[random.Random], bytes] | None, heard: str) -> None:
    with Fake(talk, seed=3).serving() as port:
        with pytest.raises(NotPoet) as caught, open_device(load_board("nrf52840"), port, quiet=True):
            pass
    assert not isinstance(caught.value, ProtocolMismatch) and caught.value.status == 1
    assert "\n" not in str(caught.value) and heard in str(caught.value)
    _not_poet_words(str(caught.value), port, "nrf52840")


def test_a_protocol_1_board_is_told_to_update(tmp_path: Path, quick_link: None) -> None:
    """poet's own older firmware: flashing is the cure, and the message says so."""
    with Fake(None, p1_board).serving() as port:
        with pytest.raises(ProtocolMismatch) as caught, open_device(load_board("rpi4"), port, quiet=True):
            pass
    assert not isinstance(caught.value, NotPoet) and caught.value.proto == 1
    assert str(caught.value) == (f"the firmware on the rpi4 on {port} speaks protocol 1, this poet speaks {PROTO}: "
                                 "update the firmware with `poet flash --board rpi4`")


def test_a_board_of_a_newer_protocol_is_not_downgraded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Its firmware is newer than this poet's: `poet train` says to update poet, and flashes nothing."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    import poet.device.flash

    flashed: list[str] = []
    monkeypatch.setattr(poet.device.flash, "flash", lambda b, port, say, **_kw: flashed.append(port))
    with Fake(None, newer_board).serving() as port:
        code = main(["train", "--board", "rpi4", "--port", port, "--ram", "1m", "--epochs", "1",
                     "--data-limit", "16", "--run-dir", str(tmp_path / "run")])
    assert code == 1
    assert _one_line(capsys) == (f"poet: the firmware on the rpi4 on {port} speaks protocol {PROTO + 1}, this poet "
                                 f"speaks {PROTO}: update poet on this computer")
    assert flashed == []


def test_the_emulated_board_not_answering_is_poet_s_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "is it the board?": the stand-in is poet's own, so a silent one is poet's fault."""
    import poet.device.connect

    def silent(*_a: object, **_kw: object) -> Link:
        raise NotPoet(10.2, 0)

    class Quiet:
        def __init__(self, _port: object) -> None:
            pass

        hello = silent

    monkeypatch.setattr(poet.device.connect, "Link", Quiet)
    monkeypatch.setattr(poet.device.connect.firmware, "command", lambda _target: ["cat"])
    with pytest.raises(LinkError) as caught, open_device(load_board("rpi4"), None, quiet=True):
        pass
    assert not isinstance(caught.value, NotPoet) and "a bug in poet" in str(caught.value)
    assert "poet flash" not in str(caught.value)


def test_what_a_chatty_device_sent_is_counted() -> None:
    """The message says how much came back, none of it poet's: all of it, the probe's second included."""
    sent = bytearray()

    class Chatty:
        timeout = 0.01

        def read(self, n: int) -> bytes:
            chunk = random.Random(len(sent)).randbytes(4096)
            sent.extend(chunk)
            return chunk

        def write(self, data: bytes) -> int:
            return len(data)

    with pytest.raises(NotPoet) as caught:
        Link(Chatty(), timeout_s=0.2).hello()
    assert caught.value.got_bytes == len(sent) > 0
    assert f"it sent {len(sent)} bytes, no poet frame among them" in str(caught.value)
