"""The Cortex-M0+ port (qemu-m0): the MKR1000 stand-in, soft float, in the SAMD21's 32 KB of RAM.

QEMU 7.2 runs the image on mps2-an385's Cortex-M3 (its MPS2 machines refuse `-cpu cortex-m0`), so
that the code is ARMv6-M only is checked here, on the image, rather than by the emulator.
"""

from __future__ import annotations

import re
import subprocess
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import data_batches, needs_tools, run_steps
from poet.boards import load_board
from poet.device import firmware
from poet.device.connect import Device, open_device
from poet.device.profile import profile_graphs
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.plan.cost.costs import costed, uncosted
from poet.plan.cost.memory import budget_for
from poet.plan.lowering.lower import lower
from poet.plan.pipeline import plan_step
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from torch import nn

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
RAM_BYTES = 32768       # SAMD21G18A, datasheet
FLASH_BYTES = 262144    # SAMD21G18A, datasheet
STEPS = 3
LR = 0.1
Batch = tuple[np.ndarray, np.ndarray]

# The only 32-bit instructions ARMv6-M has (ARMv6-M ARM, A5.3); every other one is 16-bit Thumb.
# cbz/cbnz and IT are 16-bit but ARMv7-M only.
V6M_WIDE = {"bl", "mrs", "msr", "dmb", "dsb", "isb"}
V7M_NARROW = re.compile(r"^(cbn?z|it[te]{0,3})(\.n)?$")
INSN = re.compile(r"^\s*[0-9a-f]+:\t([0-9a-f]{4})( [0-9a-f]{4})?\s*\t(\S+)")


@pytest.fixture(scope="module")
def elf() -> Path:
    return firmware.build("qemu-m0")


@pytest.fixture(scope="module")
def mkr1000(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Device]:
    with open_device(load_board("mkr1000"), None, workdir=tmp_path_factory.mktemp("qemu-m0"), quiet=True) as dev:
        yield dev


def test_image_fits_the_mkr1000(elf: Path) -> None:
    out = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(v) for v in out.splitlines()[1].split()[:3])
    # bss counts the NOLOAD stack section too, so this is every byte of RAM the image claims
    assert data + bss <= RAM_BYTES
    assert text + data <= FLASH_BYTES  # flash holds the code and .data's initial values
    sections = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True,
                              check=True).stdout
    stack = next(int(line.split()[1]) for line in sections.splitlines() if line.startswith(".stack"))
    assert stack >= 1536  # linker.ld's MIN_STACK; the link fails before this could


def test_image_is_armv6m_only(elf: Path) -> None:
    # The linker merges the objects' build attributes (ours, newlib's, libgcc's) to the highest
    # architecture any of them needs: v6S-M means no input object was built for v7-M or an FPU.
    attrs = subprocess.run(["arm-none-eabi-readelf", "-A", str(elf)], capture_output=True, text=True,
                           check=True).stdout
    assert "Tag_CPU_arch: v6S-M" in attrs and "Tag_THUMB_ISA_use: Thumb-1" in attrs
    assert "Tag_FP_arch" not in attrs
    # and the disassembly, instruction by instruction (data in .text shows as .word, skipped)
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    bad, n = [], 0
    for line in dis.splitlines():
        m = INSN.match(line)
        if not m or m.group(3).startswith("."):
            continue
        n += 1
        op = m.group(3)
        wide = m.group(2) is not None
        if (wide and op.split(".")[0] not in V6M_WIDE) or V7M_NARROW.match(op) or op.startswith("v") \
                or op in ("sdiv", "udiv"):
            bad.append(line.strip())
    assert n > 5000, "the disassembly was not parsed"
    assert not bad, f"{len(bad)} instructions outside ARMv6-M, e.g. {bad[:5]}"


def test_hello_reports_the_mkr1000(mkr1000: Device) -> None:
    h = mkr1000.hello
    assert (h.board, h.ram_bytes, h.nv_bytes) == ("mkr1000", RAM_BYTES, load_board("mkr1000").model_flash_bytes)
    assert 16384 <= h.pool_bytes < RAM_BYTES


def _small_mlp() -> nn.Module:
    # mlp-digits with 16-wide hidden layers: its 4522 parameters (18 KB, and as much again for the
    # gradients) do not fit 32 KB; this one's 1754 (7 KB) do, with room for a batch of 8 and its
    # activations. Three hidden layers, so recompute and paging have something to save.
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, 16), relu1=nn.ReLU(), fc2=nn.Linear(16, 16), relu2=nn.ReLU(),
        fc3=nn.Linear(16, 16), relu3=nn.ReLU(), fc4=nn.Linear(16, 10)))


def _train(dev: Device, g: TrainingGraph, w0: list[np.ndarray], schedule: bytes, data: list[Batch],
           peak: int | None) -> tuple[list[float], list[np.ndarray]]:
    losses = run_steps(dev, g, w0, schedule, data, LR, None, lambda _m: None, expect_peak=peak)
    return losses, dev.read_weights(g)


def test_training_on_the_mkr1000(mkr1000: Device, tmp_path: Path) -> None:
    model = _small_mlp()
    g = trace(model, "mlp-digits-16", (64,), 10, 8)
    w0 = weights_of(model)
    data = data_batches(g, STEPS)

    # There is no stored mkr1000 profile: measure this graph's ops on the emulated board (one run).
    cg = costed(g, mkr1000.board, profile_graphs(mkr1000, [(g, w0)], repeats=1, progress=lambda _m: None))
    deadline = 50 * cg.one_pass_s
    full = keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, deadline)
    assert smallest is not None and smallest < full
    fixed = budget_for(g, mkr1000.board.ram_bytes, mkr1000.runtime_static).fixed
    assert fixed + full <= RAM_BYTES, "keep-all must fit the board, or there is nothing to compare with"
    p = plan_step(g, cg, mkr1000.board, fixed + smallest + (full - smallest) // 4, mkr1000.runtime_static,
                  deadline, progress=lambda _m: None)
    assert p.lowered is not None
    assert p.plan.recomputes + p.plan.page_outs > 0, "the budget must force recompute or paging"
    assert p.plan.peak_bytes < p.keep_all_peak

    ka = keep_all(uncosted(g))
    ka_schedule = lower(ka, g).schedule.encode()
    tight_losses, tight = _train(mkr1000, g, w0, p.lowered.schedule.encode(), data, p.plan.peak_bytes)
    full_losses, kept = _train(mkr1000, g, w0, ka_schedule, data, ka.peak_bytes)
    # recompute and paging (semihosting pager) change nothing
    assert tight_losses == full_losses
    assert all(np.array_equal(a, b) for a, b in zip(tight, kept, strict=True))

    # The M4F build (hard float) gives the same bits here. Basic float ops are correctly rounded
    # in both, and -std=c99 keeps GCC from contracting ours into FMAs; but newlib's hard-float
    # multilib was built with contraction, so its __ieee754_expf/logf use vfma and the soft-float
    # ones cannot. On the host, fdlibm's expf with and without FMA differ in 1 ulp for about 0.003 %
    # of the inputs in [-20, 0], so equality is a property of these inputs, not a guarantee: a new
    # model or data set may need a 1-ulp tolerance here (never between the two plans above).
    with open_device(load_board("nrf52840"), None, workdir=tmp_path, quiet=True) as m4:
        m4_losses, m4_weights = _train(m4, g, w0, ka_schedule, data, ka.peak_bytes)
    assert m4_losses == full_losses
    assert all(np.array_equal(a, b) for a, b in zip(m4_weights, kept, strict=True))

    # as close to float64 PyTorch's same steps as float32 PyTorch is (poet.graph.agreement)
    agreed = reference(model, data, LR).agree(kept, full_losses, names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
    assert not np.array_equal(w0[0], kept[0])  # training did move the weights
