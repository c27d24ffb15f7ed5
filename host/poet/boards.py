"""What a board is (boards/<name>.yaml): core, clock, memories, power and storage models, emulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from poet.errors import UsageError
from poet.paths import REPO_ROOT

BOARDS_DIR = REPO_ROOT / "boards"


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    clock_hz: float
    ram_bytes: int
    flash_bytes: int
    model_flash_bytes: int    # the firmware's flash for the model blob and frozen weights (its nv region)
    firmware_target: str      # the image for the real board (firmware/ports/<target>)
    cpu_active_w: float
    cpi: float
    storage: dict[str, Any]
    emulator: dict[str, Any]
    raw: dict[str, Any]

    @property
    def linux(self) -> bool:
        """A Linux board (rpi4, jetson): its runtime is a process whose pool and nv storage are sized when it
        starts (firmware.runtime_args), not a firmware image with a static pool."""
        return self.raw.get("flasher") == "linux"

    @property
    def aux_bytes(self) -> int | None:
        """The firmware's area of the aux storage (swap slots, then streamed weights); None: a file, unbounded."""
        n = self.storage.get("bytes")
        return int(n) if n is not None else None

    @property
    def emulator_target(self) -> str:
        """The image of the emulated stand-in (QEMU or a process), when no board is attached."""
        return str(self.emulator.get("target", self.firmware_target))

    def compute_time_s(self, ticks: int, tick_hz: float) -> float:
        """Board time of an op measured in emulator timer ticks.

        Under `-icount shift=0` QEMU retires one instruction per virtual ns, so
        ticks / tick_hz seconds of virtual time are that many instructions; at the
        board's CPI and clock they take instructions * cpi / clock_hz (emulated).
        """
        instructions = ticks / tick_hz * 1e9 / float(self.emulator.get("virtual_ns_per_instruction", 1))
        return instructions * self.cpi / self.clock_hz

    def compute_energy_j(self, time_s: float) -> float:
        return time_s * self.cpu_active_w

    def page_cost(self, nbytes: int, direction: str) -> tuple[float, float]:
        """(seconds, joules) to move nbytes to (`out`) or from (`in`) aux storage; CPU waits on the bus."""
        s = self.storage
        rate, power = (s["write_bytes_per_s"], s["write_w"]) if direction == "out" else (
            s["read_bytes_per_s"], s["read_w"])
        t = float(s["latency_s"]) + nbytes / float(rate)
        return t, t * (float(power) + self.cpu_active_w)


def board_names() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.yaml"))


def load_board(name: str) -> Board:
    path = BOARDS_DIR / f"{name}.yaml"
    if not path.exists():
        raise UsageError(f"unknown board {name!r}; known boards: {', '.join(board_names()) or 'none'}")
    raw = yaml.safe_load(path.read_text())
    return Board(
        name=raw["name"],
        description=raw.get("description", ""),
        clock_hz=float(raw["clock_hz"]),
        ram_bytes=int(raw["ram_bytes"]),
        flash_bytes=int(raw["flash_bytes"]),
        model_flash_bytes=int(raw["model_flash_bytes"]),
        firmware_target=raw["firmware_target"],
        cpu_active_w=float(raw["power"]["cpu_active_w"]),
        cpi=float(raw["power"].get("cpi", 1.0)),
        storage=raw["aux_storage"],
        emulator=raw.get("emulator", {}),
        raw=raw,
    )
