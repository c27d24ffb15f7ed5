"""A board end to end over its serial port: HELLO, a profile of a model's ops, three SGD steps checked against
PyTorch, and paging through the board's SD card (measured, and inside a training step whose weights must equal
keep-all's bit for bit).

With a board attached and flashed (`poet flash --board B --port P`), these run on it:

    POET_PORT=/dev/ttyACM0 POET_BOARD=nrf52840 .venv/bin/pytest -m hw tests/test_hw_boards.py -v

POET_BOARD is nrf52840, mkr1000 or esp32c3; the board needs an SD card (its pins: the port's README). Without
POET_PORT the `hw` case skips. The same test functions also run on each board's emulated stand-in (QEMU with
the stand-in's image; pages go to its swap file, numbers are `emulated`), so they are exercised on every run
without a board (a few seconds each).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import data_batches, needs_tools, run_steps
from poet.boards import load_board
from poet.device import firmware
from poet.device.connect import Device, open_device
from poet.device.profile import profile_graphs, profile_paging
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.plan.cost.costs import costed, uncosted
from poet.plan.cost.memory import budget_for
from poet.plan.lowering.lower import Lowered, lower
from poet.plan.pipeline import plan_step
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.types import Plan
from test_runtime_ops import _frugal_plan
from torch import nn

BOARDS = ("nrf52840", "mkr1000", "esp32c3")
STEPS = 3
LR = 0.1
BATCH = 8
# The tick rate each board's firmware reports (its port.c): TIMER1 at 16 MHz, the MKR1000's DFLL at
# 1464 x 32768 Hz, the C3's SYSTIMER at 16 MHz. Stand-ins report their emulator's timer (boards/*.yaml).
TICK_HZ = {"nrf52840": 16_000_000, "mkr1000": 47_972_352, "esp32c3": 16_000_000}
STAND_IN_TOOLS = {"nrf52840": ("qemu-system-arm", "arm-none-eabi-gcc"),
                  "mkr1000": ("qemu-system-arm", "arm-none-eabi-gcc"),
                  "esp32c3": ("qemu-system-riscv32", "riscv64-unknown-elf-gcc")}


def _cases() -> list[Any]:
    cases = [pytest.param(("emulated", b), id=f"emulated-{b}", marks=needs_tools(*STAND_IN_TOOLS[b])) for b in BOARDS]
    cases.append(pytest.param(("hw", os.environ.get("POET_BOARD", "")), id="hw", marks=pytest.mark.hw))
    return cases


@pytest.fixture(scope="module", params=_cases())
def device(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Device]:
    kind, name = request.param
    port = None
    if kind == "hw":
        port = os.environ.get("POET_PORT")
        if not port:
            pytest.skip("no board: set POET_PORT (its serial port) and POET_BOARD (nrf52840, mkr1000 or esp32c3)")
        if name not in BOARDS:
            pytest.fail(f"POET_BOARD={name!r}: set it to the attached board, one of {', '.join(BOARDS)}")
    with open_device(load_board(name), port, workdir=tmp_path_factory.mktemp(f"{kind}-{name}"), quiet=True) as dev:
        yield dev


def _small_mlp() -> nn.Module:
    """An MLP small enough for the MKR1000's 32 KB (1754 parameters, batch 8) with three hidden layers, so that
    a plan has activations to page."""
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(
        fc1=nn.Linear(64, 16), relu1=nn.ReLU(), fc2=nn.Linear(16, 16), relu2=nn.ReLU(),
        fc3=nn.Linear(16, 16), relu3=nn.ReLU(), fc4=nn.Linear(16, 10)))


@dataclass
class Measured:
    graph: TrainingGraph
    w0: list[np.ndarray]
    profile: dict[str, Any]


@pytest.fixture(scope="module")
def measured(device: Device) -> Measured:
    """The small MLP's ops profiled on this board (one run each), as `poet profile` does."""
    model = _small_mlp()
    g = trace(model, "mlp-digits-16", (64,), 10, BATCH)
    w0 = weights_of(model)
    return Measured(g, w0, profile_graphs(device, [(g, w0)], repeats=1, progress=lambda _m: None))


def test_hello(device: Device) -> None:
    h, board = device.hello, device.board
    assert h.board == board.name
    assert h.fw_version == firmware.source_version(), f"the board runs firmware {h.fw_version}: reflash it"
    assert (h.ram_bytes, h.nv_bytes) == (board.ram_bytes, board.model_flash_bytes), \
        "nv 0 on an ESP32-C3: its flash mapping failed the start-up check (ports/esp32c3/README.md)"
    assert 0 < h.static_bytes < h.ram_bytes and 0 < h.pool_bytes < h.ram_bytes
    assert h.tick_hz == (board.emulator["timer_hz"] if device.emulated else TICK_HZ[board.name])


def test_profile_of_the_ops(device: Device, measured: Measured) -> None:
    prof = measured.profile
    assert (prof["board"], prof["source"]) == (device.board.name, device.provenance)
    linear = {k: v for k, v in prof["ops"].items() if k.startswith("linear(")}
    assert linear, sorted(prof["ops"])
    for key, op in prof["ops"].items():
        assert op["ticks"] > 0 and op["time_s"] > 0 and op["energy_j"] > 0, (key, op)
        assert op["provenance"] == device.provenance, (key, op)


def test_three_steps_match_pytorch(device: Device, measured: Measured) -> None:
    model, g = _small_mlp(), measured.graph
    data = data_batches(g, STEPS)
    plan = keep_all(uncosted(g))
    losses = run_steps(device, g, measured.w0, lower(plan, g).schedule.encode(), data, LR,
                       expect_peak=plan.peak_bytes)
    weights = device.read_weights(g)
    # as close to float64 PyTorch's same steps as float32 PyTorch is (poet.graph.agreement)
    agreed = reference(model, data, LR).agree(weights, losses, names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
    assert not np.array_equal(measured.w0[0], weights[0]), "training moved the weights"


# Boards on whose costs no optimal plan of the small MLP pages: the nRF52840's SD card pages slowly next to its
# compute, and the input is read in place (issue 48), so recomputing from it is always the cheaper way there
# (tests/test_planner.py::test_real_model_recomputes_and_pages). The others' optimal plans page.
RECOMPUTES_RATHER = {"nrf52840"}


def _paging_plan(device: Device, measured: Measured, prof: dict[str, Any]) -> tuple[Plan, Lowered]:
    """A plan for less RAM than keep-all's that pages, costed with this board's profile (on a board, its paging
    measured just before): POET's, or on a board in RECOMPUTES_RATHER, one that pages (and recomputes) anyway
    (test_runtime_ops._Frugal), at no more than keep-all's peak."""
    g, board = measured.graph, device.board
    cg = costed(g, board, prof)
    deadline = 50 * cg.one_pass_s
    full = keep_all(cg).peak_bytes
    if board.name in RECOMPUTES_RATHER:
        plan = _frugal_plan(cg)
        assert plan.page_outs > 0 and plan.page_ins > 0 and plan.peak_bytes <= full
        return plan, lower(plan, g)
    smallest = min_arena_budget(cg, deadline)
    assert smallest is not None and smallest < full
    fixed = budget_for(g, board.ram_bytes, device.runtime_static).fixed
    for arena in (smallest + (full - smallest) // 4, smallest):
        p = plan_step(g, cg, board, fixed + arena, device.runtime_static, deadline, progress=lambda _m: None)
        if p.lowered is not None and p.plan.page_outs > 0:
            return p.plan, p.lowered
    pytest.fail("no plan pages at the smallest arena: nothing here would reach the SD card")


def test_paging_to_the_sd_card(device: Device, measured: Measured, tmp_path: Path) -> None:
    """The pager measured (on a board: the SD card's throughput, which replaces the board file's model), then a
    step plan that pages out and in: every step's weights and losses equal keep-all's, bit for bit."""
    prof = dict(measured.profile)
    profile_paging(device, prof, progress=lambda _m: None)
    paging = prof["paging"]
    assert paging["fit"]["done"]
    if not device.emulated:
        assert paging["used"] == "measured", paging.get("reason")
        assert paging["read_bytes_per_s"] > 0 and paging["write_bytes_per_s"] > 0

    g = measured.graph
    plan, lowered = _paging_plan(device, measured, prof)
    data = data_batches(g, STEPS)
    device.load_model(g, measured.w0)
    device.load_schedule(lowered.schedule.encode(), planned_peak=plan.peak_bytes)
    paged_losses, kinds = [], set()
    for x, y in data:
        res = device.step(x, y, LR)
        paged_losses.append(res.loss)
        kinds |= {r.kind for r in res.records}
    paged = device.read_weights(g)
    assert {"page_out", "page_in"} <= kinds, kinds

    full = keep_all(uncosted(g))
    full_losses = run_steps(device, g, measured.w0, lower(full, g).schedule.encode(), data, LR,
                            expect_peak=full.peak_bytes)
    assert paged_losses == full_losses
    assert all(np.array_equal(a, b) for a, b in zip(paged, device.read_weights(g), strict=True))
    if device.emulated:
        assert device.card is not None and device.card.stat().st_size > 0, "the stand-in's card file holds the pages"
