"""The ESP32-C3 stand-in (qemu-rv32: rv32imc, soft float, on QEMU virt) trains like PyTorch.

The real firmware image behind poet.device.open_device, as for the nRF52840: HELLO names the board
and its memories, a few SGD steps under keep-all and under a plan that pages through the
semihosting pager (POET's for mlp-digits, a frugal one for cnn-digits, which has none below keep-all)
give bit-identical weights and losses, as close to float64 PyTorch's as float32 PyTorch's are
(poet.graph.agreement). The image is a 32-bit RISC-V ELF without a single F/D instruction (the C3 has
no FPU).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import data_batches, needs_tools, run_steps
from poet.boards import load_board
from poet.device import firmware
from poet.device.connect import Device, open_device
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import costed, load_profile, uncosted
from poet.plan.lowering.lower import lower
from poet.plan.strategies import plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.types import Plan
from test_runtime_ops import _frugal_plan

pytestmark = needs_tools("make", "riscv64-unknown-elf-gcc", "qemu-system-riscv32")
STEPS = 3
LR = 0.1


@pytest.fixture(scope="module")
def qemu_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("qemu-rv32")


@pytest.fixture(scope="module")
def device(qemu_dir: Path) -> Iterator[Device]:
    with open_device(load_board("esp32c3"), None, workdir=qemu_dir, quiet=True) as dev:
        yield dev


def test_hello_reports_the_esp32c3(device: Device) -> None:
    board = device.board
    assert device.hello.board == "esp32c3"
    assert (device.hello.ram_bytes, device.hello.nv_bytes) == (board.ram_bytes, board.model_flash_bytes)
    assert device.hello.tick_hz == board.emulator["timer_hz"]
    assert 0 < device.hello.pool_bytes < device.hello.ram_bytes


def test_image_is_rv32_without_float_instructions() -> None:
    image = firmware.build("qemu-rv32")
    header = subprocess.run(["riscv64-unknown-elf-readelf", "-h", "-A", str(image)], check=True,
                            capture_output=True, text=True).stdout
    assert "ELF32" in header and "RISC-V" in header and "soft-float ABI" in header
    arch = next(line for line in header.splitlines() if "Tag_RISCV_arch" in line)
    assert "_f" not in arch and "_d" not in arch, arch
    listing = subprocess.run(["riscv64-unknown-elf-objdump", "-d", "--no-show-raw-insn", str(image)], check=True,
                             capture_output=True, text=True).stdout
    # Every F/D mnemonic starts with f (flw, fadd.s, fcvt.w.d, fmv.x.w, ...), and no integer one does
    # except fence; the emulated CPU has F and D switched off too, so any that slipped through traps.
    mnemonics = set(re.findall(r"^\s*[0-9a-f]+:\s+([a-z][\w.]*)", listing, re.MULTILINE))
    assert {"add", "mul", "lw"} <= mnemonics, "objdump listing not understood"
    assert not {m for m in mnemonics if m.startswith("f") and not m.startswith("fence")}


def _paging_plan(device: Device, g, how: str) -> Plan:  # type: ignore[no-untyped-def]
    """how "poet": POET's plan a quarter of the way from the smallest feasible arena to keep-all's peak,
    costed with the ESP32-C3's profile, which pages (to its flash) and recomputes at a deadline of 2x one pass.
    how "frugal": a plan that pages and recomputes whatever the budget (test_runtime_ops._Frugal), for a
    model with no plan below keep-all (a small CNN: its peak is one backward op's inputs and output)."""
    cg = costed(g, device.board, load_profile(device.board.name), estimate=True)
    full = keep_all(cg).peak_bytes
    if how == "frugal":
        plan = _frugal_plan(cg)
        assert plan.page_outs > 0 and plan.recomputes > 0 and plan.peak_bytes <= full
        return plan
    deadline = 2 * cg.one_pass_s
    smallest = min_arena_budget(cg, deadline)
    assert smallest is not None
    plan = plan_with("poet", cg, smallest + (full - smallest) // 4, deadline, time_limit_s=5.0)
    assert plan.status in ("optimal", "feasible")
    assert plan.page_outs > 0, "the budget must force paging"
    assert plan.peak_bytes < full
    return plan


@pytest.mark.parametrize("name,batch,how", [("mlp-digits", 16, "poet"), ("cnn-digits", 4, "frugal")],
                         ids=["mlp-digits-16", "cnn-digits-4"])
def test_trains_like_pytorch_and_paging_changes_nothing(device: Device, qemu_dir: Path, name: str,
                                                        batch: int, how: str) -> None:
    model, spec = get_model(name)
    g = trace(model, name, spec.input_shape, spec.classes, batch)
    w0 = weights_of(model)
    data = data_batches(g, STEPS)
    results = []
    for plan in (keep_all(uncosted(g)), _paging_plan(device, g, how)):
        losses = run_steps(device, g, w0, lower(plan, g).schedule.encode(), data, LR, None, lambda _m: None,
                           expect_peak=plan.peak_bytes)
        results.append((losses, device.read_weights(g)))
    (full_losses, full), (paged_losses, paged) = results
    assert paged_losses == full_losses
    for a, b in zip(paged, full, strict=True):
        assert np.array_equal(a, b)
    assert (qemu_dir / "poet-swap.bin").stat().st_size > 0, "the plan paged, so the semihosting swap file has data"

    # as close to float64 PyTorch's same steps as float32 PyTorch is (poet.graph.agreement)
    agreed = reference(model, data, LR).agree(full, full_losses, names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
    assert not np.array_equal(w0[0], full[0])  # training did move the weights
