"""The link survives a bad line: a proxy between host and the emulated nRF52840 drops, duplicates and
corrupts 1% of the bytes each way; a full profile and a 20-step run still complete, every trace
record arrives exactly once, and every value is the one a clean line gives."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import serial
from conftest import data_batches, needs_tools
from lossyproxy import LossyProxy
from poet.boards import load_board
from poet.device import emulator, firmware
from poet.device.connect import Device
from poet.device.link import Link
from poet.device.profile import profile_graphs
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import lower
from poet.plan.strategies.checkpoint_all import keep_all

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
STEPS = 20


@contextlib.contextmanager
def _board(workdir: Path, lossy: bool) -> Iterator[tuple[Device, LossyProxy | None]]:
    board = load_board("nrf52840")
    elf = firmware.build(board.emulator_target)
    with emulator.start_qemu(elf, workdir, spec=emulator.QemuSpec.from_board(board.emulator)) as q:
        proxy = None
        url = q.url
        if lossy:  # 1% of bytes damaged, a third each way of damage
            proxy = LossyProxy(("127.0.0.1", q.port), p_drop=1 / 300, p_dup=1 / 300, p_corrupt=1 / 300, seed=5)
            url = proxy.url
        ser = serial.serial_for_url(url, timeout=0.01)
        try:
            link = Link(ser, timeout_s=30.0)
            yield Device(link, link.hello(), board, emulated=True), proxy
        finally:
            ser.close()
            if proxy is not None:
                proxy.close()


def _session(dev: Device) -> tuple[dict, list, list[np.ndarray]]:
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, 16)
    w0 = weights_of(model)
    prof = profile_graphs(dev, [(g, w0)], repeats=3, progress=lambda _m: None)
    dev.load_model(g, w0)
    dev.load_schedule(lower(keep_all(uncosted(g)), g).schedule.encode())
    steps = [dev.step(x, y, 0.05) for x, y in data_batches(g, STEPS)]
    return prof, steps, dev.read_weights(g)


@pytest.mark.slow
def test_profile_and_training_survive_a_lossy_line(tmp_path: Path) -> None:
    with _board(tmp_path / "clean", lossy=False) as (dev, _):
        clean_prof, clean_steps, clean_w = _session(dev)
    with _board(tmp_path / "lossy", lossy=True) as (dev, proxy):
        prof, steps, weights = _session(dev)
        stats = dev.link.stats
    assert proxy is not None
    f = proxy.faults
    damaged = f.dropped + f.duplicated + f.corrupted
    assert 0.007 < damaged / (damaged + f.passed) < 0.013, f  # the line really was that bad
    assert stats.retransmissions > 0 and stats.bad_frames > 0
    assert prof["ops"].keys() == clean_prof["ops"].keys()
    for a, b in zip(steps, clean_steps, strict=True):
        # every record exactly once, in order, and the step computed the same values
        assert [r.instr for r in a.records] == list(range(len(b.records)))
        assert [(r.node, r.kind, r.op, r.bytes) for r in a.records] == \
            [(r.node, r.kind, r.op, r.bytes) for r in b.records]
        assert a.loss == b.loss and a.peak_live_bytes == b.peak_live_bytes
    assert all(np.array_equal(x, y) for x, y in zip(weights, clean_w, strict=True))
    print(f"\nlossy line: {f}; link: {stats}")
