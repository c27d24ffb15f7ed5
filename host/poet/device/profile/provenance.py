"""Where a profile's numbers come from, and each op's time and energy with that provenance.

Measured on a board: ticks of its own timer. Emulated: instructions (QEMU's -icount ticks) at the
board file's CPI and clock. A Linux board's qemu-user stand-in runs at this computer's speed, so its
ops are timed from a documented compute rate (SEEDS) and the stand-in's ticks kept beside it. Energy
is always time x the board file's cpu_active_w (datasheet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poet.boards import Board


@dataclass(frozen=True)
class Seed:
    """A real Linux board's compute speed from a document, for when only its qemu-user stand-in ran."""
    source: str          # poet-paper | datasheet
    flop_per_s: float
    cite: str
    paper_paging: tuple[tuple[str, float], ...] = ()  # the POET reference's own paging constants, for comparison

    def time_s(self, w: int) -> float:
        return w / self.flop_per_s

    def describe(self) -> str:
        return f"{self.source}: {self.flop_per_s / 1e9:g} GFLOP/s ({self.cite}); energy = time x the board file's " \
               f"cpu_active_w (datasheet)"


SEEDS: dict[str, Seed] = {
    # POET reference implementation (Patil et al., ICML 2022; github.com/ShishirPatil/poet,
    # poet/chipsets.py, RPi["FLOPS"] = 2e9). Its RPi FLOPS_PER_WATT (1.6283e9 / (13.53 x 3)) would
    # mean ~50 W at that rate, so energy comes from boards/rpi4.yaml's power instead.
    "rpi4": Seed("poet-paper", 2e9, "POET reference poet/chipsets.py RPi FLOPS",
                 (("read_latency_s", 0.00509561e-3), ("read_bytes_per_s", 45.5e6),      # chipsets.py RPi PAGEIN_*
                  ("write_latency_s", 0.0185314e-3), ("write_bytes_per_s", 24.5e6))),   # PAGEOUT_* (with caching)
    # The reference gives the Jetson TX2 no FLOP rate (JetsonTX2 has power and paging only), so:
    # the Jetson Nano's 1.43 GHz A57 (module data sheet) at one scalar FLOP per cycle, the
    # assumption chipsets.py states for the RPi; the runtime's kernels are scalar C on one core.
    "jetson": Seed("datasheet", 1.43e9, "Jetson Nano module data sheet 1.43 GHz x 1 FLOP/cycle, the POET "
                   "reference's per-cycle assumption",
                   (("read_latency_s", 0.00054), ("read_bytes_per_s", 108.5e6),  # chipsets.py JetsonTX2 (a TX2,
                    ("write_latency_s", 0.002396), ("write_bytes_per_s", 94.37e6))),  # not the Nano: eMMC alike)
}


def is_linux(board: Board) -> bool:
    return board.emulator.get("kind") == "process"


def compute_section(board: Board, emulated: bool) -> dict[str, Any]:
    """Which numbers the planner uses for compute, and why."""
    if not emulated:
        return {"used": "measured", "why": "ticks of the board's own timer, time = ticks / tick_hz"}
    if is_linux(board):
        return {"used": SEEDS[board.name].source,
                "why": "the stand-in runs under qemu-user, whose ticks are this computer's wall clock, not the "
                       "board's: the planner uses time_s from " + SEEDS[board.name].describe() + "; the stand-in's "
                       "ticks are kept as stand_in_time_s"}
    return {"used": "emulated",
            "why": f"ticks -> instructions (-icount shift=0: 1 per virtual ns) x CPI {board.cpi} / "
                   f"{board.clock_hz / 1e6:g} MHz (emulated); energy = time x {board.cpu_active_w} W (datasheet)"}


def datasheet_paging(board: Board, reason: str) -> dict[str, Any]:
    s = board.storage
    return {"used": "datasheet", "reason": reason,
            **{k: s[k] for k in ("kind", "read_bytes_per_s", "write_bytes_per_s", "latency_s", "read_w", "write_w",
                                 "source")}}


def op_times(board: Board, device: Any, ticks: float, w: int) -> dict[str, Any]:
    """An op's time and energy as the planner reads them, with where they come from."""
    if not device.emulated:
        t = ticks / device.hello.tick_hz
        return {"time_s": t, "energy_j": board.compute_energy_j(t), "time_provenance": "measured"}
    if is_linux(board):
        t = SEEDS[board.name].time_s(w)
        return {"stand_in_time_s": ticks / device.hello.tick_hz, "time_s": t, "energy_j": board.compute_energy_j(t),
                "time_provenance": SEEDS[board.name].source}
    t = board.compute_time_s(int(ticks), device.hello.tick_hz)
    return {"time_s": t, "energy_j": board.compute_energy_j(t), "time_provenance": "emulated"}


def provenance_of(board: Board, device: Any) -> str:
    if device.emulated and is_linux(board):
        return "emulated (qemu-user wall clock: not the board's speed)"
    return str(device.provenance)


def board_seconds(board: Board, device: Any, ticks: float) -> float:
    """Ticks as board seconds: instructions at the board's CPI and clock on an emulator, the board's
    timer otherwise (the Linux stand-in's are this computer's wall clock, and labelled so)."""
    if device.emulated and not is_linux(board):
        return board.compute_time_s(int(round(ticks)), device.hello.tick_hz)
    return ticks / device.hello.tick_hz
