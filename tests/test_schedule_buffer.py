"""Each microcontroller board file's `schedule_bytes` is its firmware image's schedule buffer, and a plan whose
schedule is longer is refused on the host in one line, before any board is touched (the board would refuse its
upload TOO_BIG: EfficientNet-B0's 823 instructions did, on the emulated ESP32-C3)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import needs_tools
from elfinfo import tool
from poet.boards import load_board
from poet.device import firmware
from poet.errors import UsageError
from poet.graph.tracer import traced
from poet.models.zoo import ModelChoice
from poet.plan.cost.costs import costed, load_profile
from poet.plan.lowering.schedule import SCHEDULE_FORMAT_MAX
from poet.plan.request import solve_request
from poet.settings import PlanRequest

NM = {"nrf52840": "arm-none-eabi-nm", "mkr1000": "arm-none-eabi-nm", "esp32c3": "riscv64-unknown-elf-nm"}


@pytest.mark.parametrize("name", [pytest.param(b, marks=needs_tools("make", nm.replace("-nm", "-gcc")))
                                  for b, nm in sorted(NM.items())])
def test_a_board_files_schedule_bytes_is_its_images_buffer(name: str) -> None:
    board = load_board(name)
    elf = firmware.build(board.firmware_target)
    sizes = {p[3]: int(p[1], 16) for p in (line.split() for line in tool(NM[name], "-S", str(elf)).splitlines())
             if len(p) == 4}
    assert sizes["schedule_blob"] == board.schedule_bytes


def test_linux_boards_take_every_schedule_the_format_states() -> None:
    assert load_board("rpi4").schedule_bytes == SCHEDULE_FORMAT_MAX


def test_a_schedule_longer_than_the_boards_buffer_is_refused_in_one_line(tmp_path: Path) -> None:
    board = load_board("nrf52840")
    prof = load_profile("nrf52840")
    _, g = traced(ModelChoice("mlp-digits", 4))
    request = PlanRequest(ram=200_000, deadline="3x", strategy="checkpoint-all")
    cg = costed(g, board, prof, estimate=True)
    p = solve_request(request, g, cg, board, int(prof["runtime_static_bytes"]), 3 * cg.one_pass_s, lambda _m: None,
                      out=tmp_path / "s.poet", prof=prof)
    assert p.lowered is not None
    n = len(p.lowered.schedule.encode())
    short = replace(board, raw={**board.raw, "schedule_bytes": n - 1})
    with pytest.raises(UsageError, match=rf"^the schedule is {n:,} B \(\d+ instructions\), and the nrf52840 "
                                         rf"firmware holds schedules of at most {n - 1:,} B") as e:
        solve_request(request, g, cg, short, int(prof["runtime_static_bytes"]), 3 * cg.one_pass_s, lambda _m: None,
                      out=tmp_path / "t.poet", prof=prof)
    assert not (tmp_path / "t.poet").exists()  # nothing written for a board that would refuse it
    assert "\n" not in str(e.value)
