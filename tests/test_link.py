"""The serial protocol's error paths on the native runtime, and the emulator wrapper's guarantees."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from fwhelpers import init_params, keep_all, make_batches, mlp, native_link
from poet.device import emulator
from poet.device.framing import encode_frame
from poet.device.link import Link, LinkTimeout
from poet.device.protocol import BATCH, MODEL, NAK, PROTO, SCHEDULE, WEIGHTS, DeviceError
from poet.plan.lowering.modelblob import encode_batch, encode_weights

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def code_of(exc: pytest.ExceptionInfo[DeviceError]) -> str:
    return exc.value.name


def test_hello_native(tmp_path: Path) -> None:
    with native_link(tmp_path) as link:
        h = link.hello()
    from poet.device.firmware import source_version

    assert (h.proto, h.fw_version, h.board, h.tick_hz) == (PROTO, source_version(), "linux", 1_000_000_000)
    assert source_version() == "2.2"  # 2.2: SMLAD int8 and depthwise kernels; 2.1: tiled dense and conv kernels
    assert h.pool_bytes > 0 and h.loaded == frozenset() and h.steps_done == 0


# the error paths under ASan + UBSan too: they are where bounds checks matter
@pytest.mark.parametrize("target", ["linux", "linux-asan"])
def test_order_and_state_errors(tmp_path: Path, target: str) -> None:
    net = mlp()
    params = init_params(net, 0)
    (x, y), = make_batches(net, 1, 0)
    with native_link(tmp_path, target) as link:
        with pytest.raises(DeviceError) as e:
            link.upload(WEIGHTS, encode_weights(params))
        assert code_of(e) == "ORDER"
        with pytest.raises(DeviceError) as e:
            link.step(0.1)
        assert code_of(e) == "ORDER"
        bad = bytearray(net.blob.encode())
        bad[16 + 4 * len(net.blob.param_elems) + 12] ^= 4  # node 0's output bytes
        with pytest.raises(DeviceError) as e:
            link.upload(MODEL, bytes(bad))
        assert code_of(e) == "MODEL" and e.value.detail == 0
        nv = link.hello().nv_bytes  # the model lives in nv storage: that bounds the blob
        with pytest.raises(DeviceError) as e:
            link.upload(MODEL, bytes(nv + 1))  # refused at BEGIN, before any data is sent
        assert code_of(e) == "TOO_BIG" and e.value.detail == nv
        link.upload(MODEL, net.blob.encode())
        with pytest.raises(DeviceError) as e:
            link.upload(WEIGHTS, encode_weights(params) + bytes(4))
        assert code_of(e) == "TOO_BIG"
        link.upload(WEIGHTS, encode_weights(params))
        with pytest.raises(DeviceError) as e:
            link.upload(BATCH, encode_batch(x, np.full_like(y, net.classes)))
        assert code_of(e) == "RANGE"
        link.upload(BATCH, encode_batch(x, y))
        with pytest.raises(DeviceError) as e:
            link.step(0.1)
        assert code_of(e) == "NO_SCHEDULE"
        link.upload(SCHEDULE, keep_all(net.blob).encode())
        assert np.isfinite(link.step(0.1).loss)
        with pytest.raises(DeviceError) as e:
            link.read_weights(net.blob.param_bytes + 4)
        assert code_of(e) == "RANGE"
        # a new model invalidates the schedule bound to the old one
        link.upload(MODEL, net.blob.encode())
        with pytest.raises(DeviceError):
            link.step(0.1)


@pytest.mark.parametrize("target", ["linux", "linux-asan"])
def test_garbage_and_unknown_messages(tmp_path: Path, target: str) -> None:
    with native_link(tmp_path, target) as link:
        frame = bytearray(encode_frame(0x01, 7))
        frame[-2] ^= 1  # bad CRC: dropped, and answered by a NAK so the host need not wait
        link.port.write(b"\x00\x05\xff\xff" + bytes(frame) + b"\x03\x01")  # junk, a bad frame, a cut one
        link.port.write(b"\xff" * 1500 + b"\x00")  # longer than any packet: dropped at its end
        naks = []
        while len(naks) < 2:  # junk + the bad frame run together into one; the cut one + the long run
            got = link._next_frame(time.monotonic() + 5.0, "the NAKs of two damaged frames")
            assert got is not None and got[:2] == (NAK, 0), got
            naks.append(got)
        msg, payload = link._exchange(0x7E, b"", "the ACK to an unknown message")  # type: ignore[misc]
        assert msg == 0x80 and struct.unpack("<HI", payload)[0] == 33
        assert link.hello().proto == PROTO
        assert link.stats.retransmissions == 0


def test_timeout_names_what_was_awaited(tmp_path: Path) -> None:
    class Silent:
        timeout = 0.01

        def read(self, n: int) -> bytes:
            return b""

        def write(self, data: bytes) -> int:
            return len(data)

    with pytest.raises(LinkTimeout, match="HELLO"):
        Link(Silent(), timeout_s=0.05).hello()


def test_emulator_reports_missing_qemu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(emulator.shutil, "which", lambda _name: None)
    with pytest.raises(emulator.EmulatorError, match="make setup"):
        with emulator.start_qemu(tmp_path / "poet.elf", tmp_path):
            pass


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_emulator_always_stops_qemu(tmp_path: Path) -> None:
    from poet.device import firmware

    elf = firmware.build("qemu-m4")
    with pytest.raises(KeyboardInterrupt):
        with emulator.start_qemu(elf, tmp_path) as q:
            proc = q.process
            assert q.url.startswith("socket://127.0.0.1:") and q.workdir == tmp_path
            raise KeyboardInterrupt
    assert proc.poll() is not None


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_emulator_takes_another_port_when_its_port_is_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A port found free can be taken before QEMU binds it (parallel tests did): QEMU then exits, and
    the emulator starts again on a fresh port instead of failing the run."""
    import socket

    from poet.device import firmware

    elf = firmware.build("qemu-m4")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken, fresh = held.getsockname()[1], emulator._free_port
        ports = iter([taken])
        monkeypatch.setattr(emulator, "_free_port", lambda: next(ports, None) or fresh())
        with emulator.start_qemu(elf, tmp_path) as q:
            assert q.port != taken and q.process.poll() is None


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None,
                    reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_qemu_uart_survives_a_full_receive_ring(tmp_path: Path) -> None:
    """Requests sent while the board is busy overflow its 512-byte receive ring.

    The ISR then leaves a byte in the UART and QEMU holds back the rest; the firmware
    must still pick that byte up (the UART raises no new interrupt for it) or the link
    hangs for good. HELLOs pipelined behind a STEP arrive while the board trains.
    """
    import serial
    from poet.device import firmware
    from poet.device.protocol import HELLO, HELLO_REPLY, STEP, TRACE
    from poet.graph.reference import weights_of
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import uncosted
    from poet.plan.lowering.lower import lower, model_blob
    from poet.plan.strategies.checkpoint_all import keep_all as keep_all_plan

    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, 16)
    n = 300  # 300 x 8 request bytes, far beyond the ring
    with emulator.start_qemu(firmware.build("qemu-m4"), tmp_path) as q:
        ser = serial.serial_for_url(q.url, timeout=1.0)
        try:
            link = Link(ser, timeout_s=10.0)
            link.upload(MODEL, model_blob(g).encode())
            link.upload(WEIGHTS, encode_weights(weights_of(model)))
            link.upload(SCHEDULE, lower(keep_all_plan(uncosted(g)), g).schedule.encode())
            link.upload(BATCH, encode_batch(np.zeros((16, 1, 8, 8), np.float32), np.zeros(16, np.int64)))
            ser.write(encode_frame(STEP, 200, struct.pack("<fH", 0.0, 60))
                      + b"".join(encode_frame(HELLO, 1 + i % 199) for i in range(n)))
            replies = []
            while len(replies) < n:
                got = link._next_frame(time.monotonic() + 10.0, "the STEP's reply and the pipelined HELLOs")
                assert got is not None, f"{len(replies)} of {n} pipelined HELLOs answered"
                if got[0] == HELLO_REPLY:
                    replies.append(got)
                else:
                    assert got[0] in (0x80, TRACE, 0x85)  # the STEP's ACK, trace and DONE
            # consecutive HELLOs with different seqs are each answered, with their seq
            assert [seq for _, seq, _ in replies] == [1 + i % 199 for i in range(n)]
            assert all(p[:2] == struct.pack("<H", PROTO) for _, _, p in replies)
        finally:
            ser.close()
