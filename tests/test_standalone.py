"""The device that trains itself, on the emulated nRF52840 (the real M4F image of the standalone
example, firmware/examples/standalone, under QEMU): cnn-digits pretrained on digits 0-4 collects digits
5-9, fine-tunes bias+last:1 for 3 epochs with no host, and its weights equal the host-driven protocol
image's over the same batches bit for bit; its accuracy computed with predict equals the host's
evaluation of those weights; a restart restores; power cuts at seeded points leave a whole save."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import needs_tools
from poet.boards import load_board
from poet.device import firmware
from poet.device.connect import open_device
from poet.device.emulator import qemu_binary
from poet.export.bundle import Bundle, make_bundle
from poet.export.order import epoch_order
from poet.export.sources import bundle_c, bundle_h
from poet.graph.reference import accuracy, train_steps, weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import parse_optimizer, with_optimizer
from poet.models.datasets import digits_split
from poet.models.zoo import ModelChoice
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import forward_lowered, lower, model_blob
from poet.plan.lowering.modelblob import ModelBlob
from poet.plan.strategies.checkpoint_all import keep_all
from poet.run.finish import to_model

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc", "make")
BATCH, LR, EPOCHS, N_TRAIN, CUT = 16, 0.05, 3, 96, 77


# the stand-ins: their QEMU machine and CPU, the standalone target, the board the host drives, the
# example's flags
M4 = ("mps2-an386", "cortex-m4", "qemu-m4", "nrf52840", "")
M0 = ("mps2-an385", "cortex-m3", "qemu-m0", "mkr1000", " -DPOET_APP_X_FLOATS=256u")  # 32 KB of RAM
RV = ("virt", "rv32,a=false,f=false,d=false", "qemu-rv32", "esp32c3", "")


class App:
    """The standalone example built for one bundle, run in fresh working directories: on the nRF52840,
    cnn-digits pretrained on 0-4 fine-tuning bias+last:1 with Adam on 5-9; on the MKR1000's M0+ and the
    ESP32-C3's RISC-V, mlp-digits training all its layers with SGD at batch 4 (on the M0+ with no
    snapshot: its 32 KB hold none)."""

    def __init__(self, tmp: Path, stand_in: tuple[str, str, str, str, str] = M4) -> None:
        self.machine, self.cpu, target, self.board, flags = stand_in
        torch.manual_seed(0)
        xtr, ytr, xte, yte = digits_split()
        if target == "qemu-m4":
            self.batch, self.n_train = BATCH, N_TRAIN
            model, g = traced(ModelChoice("cnn-digits", batch=BATCH, seed=0, train="bias+last:1"))
            old = ytr < 5
            x_old, y_old = xtr[old].reshape((-1, *g.input_shape)), ytr[old]
            order = np.random.default_rng(0).permutation(len(y_old))
            train_steps(model, [(x_old[order[i:i + BATCH]], y_old[order[i:i + BATCH]])
                                for i in range(0, len(order) - BATCH + 1, BATCH)], 0.1)  # pretrained on 0-4
            self.g, new, test = with_optimizer(g, parse_optimizer("adam")), ytr >= 5, yte >= 5
        else:
            self.batch, self.n_train = 4, 32
            model, g = traced(ModelChoice("mlp-digits", batch=4, seed=0))
            self.g, new, test = with_optimizer(g, parse_optimizer("sgd")), ytr >= 0, yte >= 0
        self.model = model
        self.x = xtr[new][:self.n_train].reshape((-1, *g.input_shape)).astype(np.float32)
        self.y = ytr[new][:self.n_train].astype(np.int32)
        self.xte = xte[test].reshape((-1, *g.input_shape)).astype(np.float32)
        self.yte = yte[test].astype(np.int32)
        self.w0 = weights_of(model)
        self.blob = model_blob(self.g)
        self.sched = lower(keep_all(uncosted(self.g)), self.g).schedule
        bundle = make_bundle(self.blob, self.w0, self.sched, forward_lowered(self.blob).schedule, LR,
                             snapshot=target != "qemu-m0")
        data = bundle.encode()
        export = tmp / "export"
        export.mkdir()
        (export / "bundle.c").write_text(bundle_c(data))
        (export / "bundle.h").write_text(bundle_h(bundle.pool_bytes, len(data)))
        build = tmp / "build"
        subprocess.run(["make", "-C", str(firmware.FIRMWARE_DIR), f"standalone-{target}", f"EXPORT={export}",
                        f"STANDALONE_BUILD={build}", f"APP_FLAGS=-DPOET_APP_EPOCHS={EPOCHS}u{flags}"],
                       check=True, capture_output=True)
        self.elf, self.tmp, self.runs = build / target / "app.elf", tmp, 0
        self.qemu = (["qemu-system-riscv32", "-bios", "none"] if target == "qemu-rv32" else [qemu_binary()])
        self.map = (build / target / "app.map").read_text()

    def folder(self) -> Path:
        self.runs += 1
        wd = self.tmp / f"board{self.runs}"
        wd.mkdir()
        rec = b"".join(struct.pack("<i", int(y)) + np.ascontiguousarray(x, "<f4").tobytes()
                       for x, y in zip(self.x, self.y, strict=True))
        (wd / "sensor.bin").write_bytes(rec)
        (wd / "test.bin").write_bytes(b"".join(struct.pack("<i", int(y)) + np.ascontiguousarray(x, "<f4").tobytes()
                                               for x, y in zip(self.xte, self.yte, strict=True)))
        return wd

    def run(self, wd: Path, cut: int | None = None) -> tuple[int, str]:
        """Boot the board once: its exit code (77: the power was cut) and what it printed."""
        (wd / "poet-cut.txt").unlink(missing_ok=True)
        if cut is not None:
            (wd / "poet-cut.txt").write_text(str(cut))
        proc = subprocess.run([*self.qemu, "-M", self.machine, "-cpu", self.cpu, "-nographic", "-monitor",
                               "none", "-serial", "none", "-icount", "shift=0", "-semihosting-config",
                               "enable=on,target=native", "-kernel", str(self.elf)],
                              cwd=wd, capture_output=True, timeout=600)
        return proc.returncode, (proc.stdout + proc.stderr).decode(errors="replace")

    def host_driven(self, wd: Path) -> bytes:
        """The same epochs driven from the host over the protocol image on the same emulated board."""
        with open_device(load_board(self.board), workdir=wd, quiet=True) as dev:
            dev.load_model(self.g, self.w0)
            dev.load_schedule(self.sched.encode())
            for epoch in range(EPOCHS):
                order = epoch_order(self.n_train, 0, epoch)
                for i in range(0, self.n_train - self.batch + 1, self.batch):
                    dev.step(self.x[order[i:i + self.batch]], self.y[order[i:i + self.batch]], LR)
            weights = dev.read_weights(self.g)
        return self.blob.split_weights(weights)[0]

    def host_accuracy(self, trained: bytes) -> float:
        flat = np.frombuffer(trained, "<f4")
        weights, at = [], 0
        for i, w in enumerate(self.w0):
            if self.blob.frozen(i):
                weights.append(np.asarray(w))
            else:
                weights.append(flat[at:at + w.size].reshape(w.shape).copy())
                at += w.size
        to_model(self.model, self.g, weights)
        self.model.eval()
        return accuracy(self.model, self.xte, self.yte)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> App:
    return App(tmp_path_factory.mktemp("standalone"))


@pytest.fixture(scope="module")
def app_m0(tmp_path_factory: pytest.TempPathFactory) -> App:
    return App(tmp_path_factory.mktemp("standalone-m0"), M0)


@pytest.fixture(scope="module")
def app_rv(tmp_path_factory: pytest.TempPathFactory) -> App:
    if shutil.which("qemu-system-riscv32") is None or shutil.which("riscv64-unknown-elf-gcc") is None:
        pytest.skip("needs qemu-system-riscv32 and riscv64-unknown-elf-gcc")
    return App(tmp_path_factory.mktemp("standalone-rv"), RV)


def _accuracy(log: str) -> tuple[int, int]:
    m = re.search(r"accuracy on the device: (\d+)/(\d+)", log)
    assert m, log
    return int(m[1]), int(m[2])


@pytest.mark.parametrize("which", ["app", "app_m0", "app_rv"], ids=["nrf52840-m4f", "mkr1000-m0plus", "esp32c3-rv32"])
def test_standalone_training_equals_host_driven(which: str, request: pytest.FixtureRequest) -> None:
    app: App = request.getfixturevalue(which)
    wd = app.folder()
    code, log = app.run(wd)
    assert code == 0, log
    assert f"collected {app.n_train} samples" in log and log.count("saved step") == EPOCHS
    trained = (wd / "weights.bin").read_bytes()
    assert trained == app.host_driven(app.tmp / "host")
    assert trained != app.blob.split_weights(app.w0)[0]
    right, total = _accuracy(log)
    assert total == len(app.yte)
    assert right == round(app.host_accuracy(trained) * total)
    # a restart: restores the last save, trains no more, and predicts the same
    code, again = app.run(wd)
    assert code == 0 and f"restored the save after step {EPOCHS * (app.n_train // app.batch)}" in again
    assert "epoch" not in again and _accuracy(again) == (right, total)
    assert (wd / "weights.bin").read_bytes() == trained
    # no protocol server in the image: the device API and the board support only
    assert "poet_run" not in app.map and "poet_handle_frame" not in app.map


def _saves(log: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"saved step (\d+), weights (\d+)", log)]


@pytest.mark.slow
def test_power_cuts_leave_a_whole_save(app: App) -> None:
    """24 seeded cuts (the stand-in's power switch: the emulator stops dead after N bytes reach its
    flash), during collection, training and saves: after the restart the restored state is one whole
    earlier save, and once collection was whole, training ends at the uninterrupted weights."""
    wd = app.folder()
    code, log = app.run(wd)
    assert code == 0
    saves, final = _saves(log), (wd / "weights.bin").read_bytes()
    record = 8 + 4 * int(np.prod(app.g.input_shape))
    collect = N_TRAIN * record
    # a save (core/device_state.c) erases its slot, then writes the payload (the step count, the weights,
    # Adam's step counter and two words per weight) and its 32-byte header
    payload = 4 + 3 * len(app.blob.split_weights(app.w0)[0]) + 4
    per_save = -(-(32 + payload) // 4096) * 4096 + payload + 32
    rng = np.random.default_rng(2026)
    cuts = sorted({int(c) for c in rng.integers(collect, collect + EPOCHS * per_save + 4096, 20)} |
                  {collect + per_save, 100, collect - 5, collect})
    assert len(cuts) >= 20
    whole_saves = set(saves)
    for cut in cuts:
        board = app.folder()
        code, log = app.run(board, cut)
        assert code in (0, CUT), log
        code, log = app.run(board)
        assert code == 0, log
        restored = re.search(r"restored the save after step (\d+), weights (\d+)", log)
        if restored:
            assert (int(restored[1]), int(restored[2])) in whole_saves, f"cut after {cut} bytes: {log}"
        if cut >= collect:
            assert (board / "weights.bin").read_bytes() == final, f"cut after {cut} bytes"


@pytest.mark.slow
def test_mobilenetv2_last2_standalone_equals_poet_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MobileNetV2-0.35 fine-tuning its last two layers at 256 KB, its frozen prefix in static int8 in
    flash (481 KiB of bundle), exported and run standalone on the emulated nRF52840 for an epoch of 16
    samples, ends at the weights `poet train --order device` reaches driving the protocol image, bit for bit."""
    from conftest import run
    from poet.models.datasets import load_dataset
    from poet.run.folder import read_back
    from test_export import _workspace

    monkeypatch.chdir(tmp_path)
    _workspace(tmp_path / "workspace", monkeypatch)
    options = ["--board", "nrf52840", "--ram", "256k", "--model", "mobilenetv2-cifar-0.35", "--batch", "1",
               "--train", "last:2", "--data-limit", "16", "--lr", "0.01"]
    export = tmp_path / "export"
    assert run(["export", *options, "-o", str(export)]) == 0
    bundle = Bundle.decode((export / "bundle.bin").read_bytes())
    assert len(bundle.frozen) > 400 * 1024  # the int8 prefix, read in place from flash
    build = tmp_path / "build"
    subprocess.run(["make", "-C", str(firmware.FIRMWARE_DIR), "standalone-qemu-m4", f"EXPORT={export}",
                    f"STANDALONE_BUILD={build}", "APP_FLAGS=-DPOET_APP_EPOCHS=1u -DPOET_APP_X_FLOATS=3072u"],
                   check=True, capture_output=True)
    model, g = traced(ModelChoice("mobilenetv2-cifar-0.35", batch=1, seed=0, train="last:2"))
    data = load_dataset("digits", limit=16).fitted(tuple(g.input_shape), g.classes, g.model)
    board = tmp_path / "board"
    board.mkdir()
    rec = lambda xs, ys: b"".join(struct.pack("<i", int(y)) + np.ascontiguousarray(x, "<f4").tobytes()  # noqa: E731
                                  for x, y in zip(xs, ys, strict=True))
    (board / "sensor.bin").write_bytes(rec(data.x_train, data.y_train))
    (board / "test.bin").write_bytes(rec(data.x_test[:2], data.y_test[:2]))
    proc = subprocess.run([qemu_binary(), "-M", "mps2-an386", "-cpu", "cortex-m4", "-nographic", "-monitor", "none",
                           "-serial", "none", "-icount", "shift=0", "-semihosting-config", "enable=on,target=native",
                           "-kernel", str(build / "qemu-m4" / "app.elf")], cwd=board, capture_output=True,
                          timeout=3600)
    log = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 0 and "saved step 16" in log and "accuracy on the device" in log, log
    assert run(["train", *options, "--epochs", "1", "--order", "device", "--run-dir", str(tmp_path / "run")]) == 0
    blob = ModelBlob.decode(bundle.model)
    host = blob.split_weights([np.ravel(w) for w in read_back(tmp_path / "run", g)])[0]
    assert (board / "weights.bin").read_bytes() == host
    assert host != bundle.weights
