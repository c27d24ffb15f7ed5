"""`poet export`: the folder a device that trains itself is built from (issue 47; docs/spec.md section 7).
Its bundle holds what a host-driven `poet train` of the same options uploads, its C array is the
bundle's bytes, its build makes libpoet.a, and a refusal leaves nothing behind."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import REPO, refused, run
from poet.export.bundle import Bundle
from poet.export.sources import runtime_files

FIRMWARE = REPO / "firmware"
# cnn-digits fine-tuning its biases and last layer from given weights, with momentum: frozen weights in
# flash, trained ones in RAM, optimizer state, a plan that must fit 200k
OPTIONS = ["--model", "cnn-digits", "--train", "bias+last:1", "--ram", "200k", "--optimizer", "momentum:0.9",
           "--lr", "0.05", "--data-limit", "64"]


def _workspace(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace of its own (plans, runs) under root, with the shipped nrf52840 profile."""
    (root / "profiles").mkdir(parents=True)
    (root / "runs").mkdir()
    shutil.copyfile(REPO / "profiles" / "nrf52840.yaml", root / "profiles" / "nrf52840.yaml")
    monkeypatch.setenv("POET_WORKSPACE", str(root))
    return root


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return _workspace(tmp_path / "workspace", monkeypatch)


def _c_bytes(text: str) -> bytes:
    """The bytes bundle.c's initializer spells."""
    body = text[text.index("poet_bundle_data = {{"):text.index("}};")]
    return bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body))


def test_the_folder_holds_the_bundle_its_c_array_and_a_runtime_that_builds(ws: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = ws.parent / "out"
    assert run(["export", "--model", "mlp-digits", "--ram", "80k", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "per step" in said and "per epoch (89 steps of 16)" in said and "pool" in said
    names = {p.name for p in out.iterdir()}
    assert names == {"bundle.bin", "bundle.c", "bundle.h", "runtime", "Makefile", "CMakeLists.txt", "README.md",
                     "export.json"}  # no card.img: nothing streams from an SD card
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.")]  # no temporary left
    data = (out / "bundle.bin").read_bytes()
    bundle = Bundle.decode(data)
    assert bundle.encode() == data
    assert _c_bytes((out / "bundle.c").read_text()) == data
    header = (out / "bundle.h").read_text()
    assert f"#define POET_BUNDLE_POOL_BYTES {bundle.pool_bytes}u" in header
    assert f"#define POET_BUNDLE_BYTES {len(data)}u" in header
    meta = json.loads((out / "export.json").read_text())
    assert (meta["model"], meta["board"], meta["ram"], meta["train"]) == ("mlp-digits", "nrf52840", 80 * 1024, "all")
    assert meta["bundle_bytes"] == len(data) and meta["pool_bytes"] == bundle.pool_bytes
    assert meta["plan"]["time_s"] > 0 and meta["plan"]["energy_j"] > 0 and meta["plan"]["peak_bytes"] > 0
    # the runtime is the core on disk less the protocol server; the reference kernels come only as included
    copied = {str(p.relative_to(out / "runtime")) for p in (out / "runtime").rglob("*") if p.is_file()}
    compiled, every = runtime_files()
    assert copied == {str(p) for p in every}
    assert "core/protocol.c" not in copied and "core/protocol.h" not in copied
    assert {"core/device.c", "core/interp.c", "core/ops/ops.c", "core/kernels/dense.c"} <= copied
    makefile = (out / "Makefile").read_text()
    assert "reference/" not in makefile and all(f"runtime/{c}" in makefile for c in compiled)
    assert all(f"runtime/{c}" in (out / "CMakeLists.txt").read_text() for c in compiled)
    if not ((FIRMWARE / "core" / "poet.h").exists() and (FIRMWARE / "core" / "device.c").exists()):
        pytest.skip("firmware/core/poet.h or device.c is not written yet: the build is not tried")
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("make or cc not installed")
    built = subprocess.run(["make", "-C", str(out), "-j2"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (out / "libpoet.a").stat().st_size > 0


class _Stop(BaseException):  # not an Exception: main() would make it one line
    """Ends the recorded `poet train` once it has uploaded everything a step needs."""


@dataclasses.dataclass
class _RecordingLink:
    """What `poet train` sends a board: the model blob's bytes, the weights blobs, the schedule."""

    sent: dict[str, bytes] = dataclasses.field(default_factory=dict)

    def load_model(self, blob: Any, weights: list[Any], card: Any, bars: bool = False) -> None:
        self.sent["model"] = blob.encode()
        self.sent["weights"], self.sent["frozen"], self.sent["aux"] = blob.split_weights(weights)

    def upload(self, kind: int, data: bytes, *_: Any) -> None:
        from poet.device.protocol import SCHEDULE

        assert kind == SCHEDULE
        self.sent["train"] = data
        raise _Stop


def _firmware_hello() -> Any:
    """The HELLO the nRF52840's stand-in (qemu-m4) answers, from its sources: its RAM and its pool. The
    export plans with the profile's static RAM instead: if the two differed, the plans would."""
    from poet.device.protocol import Hello

    ram = int(re.search(r"port_ram_bytes\(void\) \{ return (\d+)u", (FIRMWARE / "ports" / "qemu-m4" / "port.c")
                        .read_text()).group(1))  # type: ignore[union-attr]
    pool = int(re.search(r"-DPOOL_BYTES=(\d+)u", (FIRMWARE / "ports" / "qemu-m4" / "port.mk")
                         .read_text()).group(1))  # type: ignore[union-attr]
    return Hello(proto=0, fw_version="test", tick_hz=25_000_000, ram_bytes=ram, pool_bytes=pool, nv_bytes=786432,
                 board="nrf52840")


def test_the_bundle_is_what_poet_train_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Train (against a board that records what it is sent) and export, each in a workspace of its own, so
    neither reuses the other's plan: model, frozen and initial weights, and training schedule agree."""
    import poet.train
    from poet.boards import load_board
    from poet.device.connect import Device
    from poet.models.zoo import get_model

    monkeypatch.chdir(tmp_path)
    pretrained = tmp_path / "pretrained.pt"
    model, _ = get_model("cnn-digits", seed=7)  # not --seed's weights: --weights must be what both start from
    torch.save(model.state_dict(), pretrained)
    options = [*OPTIONS, "--weights", str(pretrained)]
    link = _RecordingLink()

    @contextlib.contextmanager
    def recording_board(board: Any, port: Any = None, **_: Any) -> Iterator[Device]:
        yield Device(link=link, hello=_firmware_hello(), board=load_board("nrf52840"), emulated=True)  # type: ignore[arg-type]

    monkeypatch.setattr(poet.train, "open_device", recording_board)
    _workspace(tmp_path / "train-ws", monkeypatch)
    with pytest.raises(_Stop):
        run(["train", *options, "--epochs", "1", "--run-dir", str(tmp_path / "run")])
    _workspace(tmp_path / "export-ws", monkeypatch)
    assert run(["export", *options, "-o", str(tmp_path / "out")]) == 0
    bundle = Bundle.decode((tmp_path / "out" / "bundle.bin").read_bytes())
    assert link.sent["aux"] == b""
    assert len(link.sent["frozen"]) > 0 and len(link.sent["weights"]) > 0
    for part in ("model", "frozen", "weights", "train"):
        assert getattr(bundle, part) == link.sent[part], part
    assert bundle.lr == pytest.approx(0.05) and bundle.forward


def test_an_existing_folder_with_files_is_refused_and_kept(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ws.parent / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    refused(capsys, ["export", "--model", "mlp-digits", "--ram", "80k", "-o", str(out)], 2, "not empty")
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


def test_a_ram_too_small_is_refused_and_leaves_no_folder(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ws.parent / "deep" / "out"
    refused(capsys, ["export", "--model", "mlp-digits", "--ram", "8k", "-o", str(out)], 2, "--ram")
    assert not (ws.parent / "deep").exists()


def test_a_bundle_over_the_board_s_flash_is_refused(ws: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import poet.export.export as ex
    from poet.boards import load_board

    small = dataclasses.replace(load_board("nrf52840"), model_flash_bytes=8192)  # the node table fits, not the rest
    monkeypatch.setattr(ex, "load_board", lambda _name: small)
    out = ws.parent / "out"
    line = refused(capsys, ["export", "--model", "mlp-digits", "--ram", "80k", "-o", str(out)], 2,
                   "8192 B of flash", "model_flash_bytes")
    assert "bundle" in line and not out.exists()


def test_a_forward_schedule_over_the_arena_is_refused(ws: Path) -> None:
    """The forward pass must fit the arena the training plan was given."""
    import poet.export.export as ex
    from poet.boards import load_board
    from poet.errors import UsageError
    from poet.plan.lowering.schedule import FORWARD, Schedule
    from poet.settings import PlanRequest, RunConfig

    cfg = RunConfig(plan=PlanRequest(ram=256 * 1024))
    forward = Schedule(n_nodes=1, model_hash=0, arena_bytes=4096, flags=FORWARD)
    bundle = Bundle(b"", b"", b"", b"", b"", 0.1, 1000)
    with pytest.raises(UsageError, match=r"the forward schedule needs 4096 B of arena, the pool at --ram 256.0 KiB "
                                         r"leaves 4000 B"):
        ex._check_fits(cfg, load_board("nrf52840"), {"arena_budget": 4000}, forward, bundle, b"")
