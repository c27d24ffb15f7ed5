"""The firmware's fp32 kernels train like PyTorch: 3 SGD steps on the native runtime and on the
QEMU image, compared weight by weight; schedules that recompute and page train bit-identically."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import serial
import torch
from fwhelpers import (
    Net,
    cnn,
    frugal,
    init_params,
    keep_all,
    make_batches,
    mlp,
    native_link,
    predicted_peaks,
)
from poet.device import emulator, firmware
from poet.device.link import Link
from poet.device.protocol import BATCH, MODEL, PROTO, SCHEDULE, WEIGHTS, StepResult
from poet.plan.lowering.modelblob import decode_weights, encode_batch, encode_weights
from poet.plan.lowering.schedule import Schedule

LR = 0.1
STEPS = 3
REL_TOL = 1e-5

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def torch_twin(net: Net, params: list[np.ndarray]) -> torch.nn.Sequential:
    mods: list[torch.nn.Module] = []
    shape = net.in_shape
    for spec in net.layers:
        if spec[0] == "linear":
            mods.append(torch.nn.Linear(shape[0], spec[1]))
            shape = (spec[1],)
        elif spec[0] == "conv2d":
            C, H, W = shape
            mods.append(torch.nn.Conv2d(C, spec[1], spec[2], padding=spec[3]))
            shape = (spec[1], H + 2 * spec[3] - spec[2] + 1, W + 2 * spec[3] - spec[2] + 1)
        elif spec[0] == "relu":
            mods.append(torch.nn.ReLU())
        elif spec[0] == "maxpool2d":
            mods.append(torch.nn.MaxPool2d(2))
            shape = (shape[0], shape[1] // 2, shape[2] // 2)
        elif spec[0] == "flatten":
            mods.append(torch.nn.Flatten())
            shape = (int(np.prod(shape)),)
    model = torch.nn.Sequential(*mods)
    with torch.no_grad():
        for p, v in zip(model.parameters(), params, strict=True):
            p.copy_(torch.from_numpy(v))
    return model


def torch_train(net: Net, params: list[np.ndarray], batches) -> tuple[list[np.ndarray], list[float]]:
    torch.manual_seed(0)
    model = torch_twin(net, params)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return [p.detach().numpy().reshape(-1).copy() for p in model.parameters()], losses


def device_train(link: Link, net: Net, sched: Schedule, params, batches) -> tuple[list[np.ndarray], list[StepResult]]:
    assert link.hello().proto == PROTO
    link.upload(MODEL, net.blob.encode())
    link.upload(WEIGHTS, encode_weights(params))
    link.upload(SCHEDULE, sched.encode())
    results = []
    for x, y in batches:
        link.upload(BATCH, encode_batch(x, y))
        results.append(link.step(LR))
    got = decode_weights(link.read_weights(net.blob.param_bytes), net.blob.param_elems)
    return got, results


def assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        rel = float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-30))
        assert rel <= REL_TOL, f"param {k}: relative error {rel:.3g} > {REL_TOL}"


def check_step_results(net: Net, sched: Schedule, results: list[StepResult], torch_losses: list[float]) -> None:
    peak, extent = predicted_peaks(net.blob, sched)
    for r, want in zip(results, torch_losses, strict=True):
        assert r.loss == pytest.approx(want, rel=REL_TOL)
        assert r.peak_live_bytes == peak
        assert r.peak_extent_bytes == extent
        assert len(r.records) == len(sched.instrs)
        assert [rec.instr for rec in r.records] == list(range(len(sched.instrs)))
        assert [rec.node for rec in r.records] == [i.node for i in sched.instrs]


NETS = {"mlp": mlp, "cnn": cnn}


@pytest.mark.parametrize("name", NETS)
@pytest.mark.parametrize("target", ["linux", "linux-asan"])
def test_native_matches_pytorch(name: str, target: str, tmp_path: Path) -> None:
    net = NETS[name]()
    params = init_params(net, seed=1)
    batches = make_batches(net, STEPS, seed=2)
    want, losses = torch_train(net, params, batches)
    sched = keep_all(net.blob)
    with native_link(tmp_path, target) as link:
        got, results = device_train(link, net, sched, params, batches)
    assert_close(got, want)
    check_step_results(net, sched, results, losses)
    # training moved the weights: a no-op firmware cannot pass
    assert any(np.max(np.abs(g - p.reshape(-1))) > 1e-3 for g, p in zip(got, params, strict=True))


@pytest.mark.parametrize("name", NETS)
def test_recompute_and_paging_bit_identical(name: str, tmp_path: Path) -> None:
    net = NETS[name]()
    params = init_params(net, seed=3)
    batches = make_batches(net, STEPS, seed=4)
    ref_sched, sched = keep_all(net.blob), frugal(net.blob)
    kinds = {i.op for i in sched.instrs}
    assert {2, 3, 4} <= kinds, "the frugal schedule must recompute, page out and page in"
    with native_link(tmp_path, "linux") as link:
        ref, ref_results = device_train(link, net, ref_sched, params, batches)
        got, results = device_train(link, net, sched, params, batches)
    for g, r in zip(got, ref, strict=True):
        assert g.tobytes() == r.tobytes()
    assert [r.loss for r in results] == [r.loss for r in ref_results]
    peak, extent = predicted_peaks(net.blob, sched)
    assert results[0].peak_live_bytes == peak < ref_results[0].peak_live_bytes
    assert results[0].peak_extent_bytes == extent
    kinds_seen = {rec.kind for rec in results[0].records}
    assert {"forward", "backward", "recompute", "page_in", "page_out", "free", "optimizer"} <= kinds_seen
    page = [rec for rec in results[0].records if rec.kind in ("page_in", "page_out")]
    assert all(rec.bytes == net.blob.nodes[rec.node].bytes for rec in page)
    assert (tmp_path / "poet-swap.bin").stat().st_size > 0


def _qemu_available() -> bool:
    return shutil.which("qemu-system-arm") is not None and shutil.which("arm-none-eabi-gcc") is not None


@pytest.mark.skipif(not _qemu_available(), reason="needs qemu-system-arm and arm-none-eabi-gcc")
def test_qemu_matches_pytorch_and_native(tmp_path: Path) -> None:
    elf = firmware.build("qemu-m4")
    for name, make in NETS.items():
        net = make()
        params = init_params(net, seed=5)
        batches = make_batches(net, STEPS, seed=6)
        want, losses = torch_train(net, params, batches)
        for sched in (keep_all(net.blob), frugal(net.blob)):
            wd = tmp_path / f"{name}-{len(sched.instrs)}"
            with emulator.start_qemu(elf, wd) as q:
                ser = serial.serial_for_url(q.url, timeout=0.5)
                try:
                    link = Link(ser, timeout_s=20.0)
                    hello = link.hello()
                    assert (hello.board, hello.ram_bytes, hello.nv_bytes) == ("nrf52840", 262144, 0xE0000 - 0x20000)
                    assert hello.tick_hz == 25_000_000 and hello.pool_bytes >= 200 * 1024
                    got, results = device_train(link, net, sched, params, batches)
                finally:
                    ser.close()
            assert_close(got, want)
            check_step_results(net, sched, results, losses)
            assert all(r.step_ticks > 0 for r in results)
            assert sum(rec.ticks for rec in results[0].records) <= results[0].step_ticks
