"""What a board is (boards/<name>.yaml): core, clock, memories, power and storage models, emulator."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poet.errors import UsageError
from poet.files import load_yaml, read_text
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
    def schedule_bytes(self) -> int:
        """The longest schedule the firmware holds (its POET_SCHEDULE_BLOB_MAX buffer): `schedule_bytes` in the
        board file, else the core's 4 KiB, or for a Linux board every schedule the format can state."""
        from poet.plan.lowering.schedule import SCHEDULE_BLOB_MAX, SCHEDULE_FORMAT_MAX

        n = self.raw.get("schedule_bytes")
        return int(n) if n is not None else SCHEDULE_FORMAT_MAX if self.linux else SCHEDULE_BLOB_MAX

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


# What a board can be, far beyond any that exists (the ranges of plan.costs for a profile): a number
# outside is a typo that would reach the planner as a cost of 1e308 or a division by 1e-300
CLOCK_HZ = (1e3, 1e11)
BYTES_BELOW = 2**48
BANDWIDTH = (1.0, 1e12)
POWER_MAX = 1e3
LATENCY_MAX = 60.0
CPI_MAX = 1e3


class _Fields:
    """One section of a board file, naming the file and the field in every complaint."""

    def __init__(self, path: Path, where: str, raw: Any) -> None:
        self.path, self.where = path, where
        if not isinstance(raw, dict):
            raise self.bad(f"{where or 'the file'} is {_kind(raw)}, not a mapping")
        self.raw = raw

    def bad(self, why: str) -> UsageError:
        return UsageError(f"board file {self.path}: {why} (see boards/nrf52840.yaml for the fields)")

    def get(self, key: str, required: bool) -> Any:
        if key not in self.raw or self.raw[key] is None:
            if required:
                raise self.bad(f"no {self._name(key)}")
            return None
        return self.raw[key]

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def number(self, key: str, lo: float, hi: float, required: bool = True, whole: bool = False) -> Any:
        v = self.get(key, required)
        if v is None:
            return None
        ok = isinstance(v, int) if whole else isinstance(v, int | float)
        if isinstance(v, bool) or not ok or not (math.isfinite(float(v)) and lo <= v <= hi):
            kind = "a whole number" if whole else "a number"
            raise self.bad(f"{self._name(key)} is {str(v)[:30]!r}; must be {kind} from {lo:g} to {hi:g}")
        return v

    def text(self, key: str, required: bool = True, choices: tuple[str, ...] = ()) -> str | None:
        v = self.get(key, required)
        if v is None:
            return None
        if not isinstance(v, str) or not v.isprintable() or not v.strip() or (choices and v not in choices):
            want = f"one of {', '.join(choices)}" if choices else "a line of text"
            raise self.bad(f"{self._name(key)} is {str(v)[:40]!r}; must be {want}")
        return v

    def section(self, key: str, required: bool = True) -> _Fields | None:
        v = self.get(key, required)
        return None if v is None else _Fields(self.path, self._name(key), v)


def _kind(v: Any) -> str:
    return {list: "a list", str: "text", type(None): "empty"}.get(type(v), type(v).__name__)


def load_board(name: str) -> Board:
    path = BOARDS_DIR / f"{name}.yaml"
    if name not in board_names():  # and not "../elsewhere": a board is one of boards/
        raise UsageError(f"unknown board {name!r}; known boards: {', '.join(board_names()) or 'none'}")
    raw = load_yaml(read_text(path, "board file"), f"board file {path}")
    return _board(path, raw)


def _board(path: Path, raw: Any) -> Board:
    """The board in a parsed board file, every field poet reads checked: one line naming the field."""
    top = _Fields(path, "", raw)
    name = top.text("name")
    if name != path.stem:
        raise top.bad(f"name is {name!r}, but the file is {path.name}: they must agree")
    top.text("description", required=False)
    top.text("core", required=False)
    top.text("flasher", required=False)
    clock_hz = top.number("clock_hz", *CLOCK_HZ)
    ram = top.number("ram_bytes", 1, BYTES_BELOW - 1, whole=True)
    flash_bytes = top.number("flash_bytes", 0, BYTES_BELOW - 1, whole=True)
    model_flash = top.number("model_flash_bytes", 0, BYTES_BELOW - 1, whole=True)
    top.number("schedule_bytes", 64, BYTES_BELOW - 1, required=False, whole=True)
    target = top.text("firmware_target")
    power = top.section("power")
    assert power is not None
    cpu_w = power.number("cpu_active_w", 0, POWER_MAX)
    cpi = power.number("cpi", 1e-3, CPI_MAX, required=False)
    storage = top.section("aux_storage")
    assert storage is not None
    storage.text("kind")
    storage.number("bytes", 0, BYTES_BELOW - 1, required=False, whole=True)
    for key in ("read_bytes_per_s", "write_bytes_per_s"):
        storage.number(key, *BANDWIDTH)
    storage.number("latency_s", 0, LATENCY_MAX)
    for key in ("read_w", "write_w"):
        storage.number(key, 0, POWER_MAX)
    emulator = top.section("emulator", required=False)
    if emulator is not None:
        for key in ("target", "binary", "machine", "cpu", "kind"):
            emulator.text(key, required=False)
        emulator.number("timer_hz", 1, CLOCK_HZ[1], required=False)
        emulator.number("virtual_ns_per_instruction", 1e-3, 1e6, required=False)
        extra = emulator.get("extra_args", False)
        if extra is not None and not (isinstance(extra, list) and all(isinstance(a, str) for a in extra)):
            raise emulator.bad(f"emulator.extra_args is {str(extra)[:40]!r}; must be a list of arguments")
    usb = top.get("usb", False)
    if usb is not None and not (isinstance(usb, list) and all(_usb_id(u) for u in usb)):
        raise top.bad(f"usb is {str(usb)[:60]!r}; must be a list of [VID, PID] pairs, each 0 to 0xFFFF")
    variants = top.get("flash_variants", False)
    if variants is not None:
        if not isinstance(variants, list):
            raise top.bad(f"flash_variants is {_kind(variants)}; must be a list")
        for k, v in enumerate(variants):
            variant = _Fields(path, f"flash_variants[{k}]", v)
            if not _usb_id(variant.get("usb", True)):
                raise variant.bad(f"flash_variants[{k}].usb is {str(v['usb'])[:40]!r}; must be a [VID, PID] pair")
            variant.text("target")
            variant.text("board", required=False)
    return Board(
        name=name,
        description=raw.get("description") or "",
        clock_hz=float(clock_hz),
        ram_bytes=ram,
        flash_bytes=flash_bytes,
        model_flash_bytes=model_flash,
        firmware_target=target,
        cpu_active_w=float(cpu_w),
        cpi=float(cpi if cpi is not None else 1.0),
        storage=raw["aux_storage"],
        emulator=raw.get("emulator") or {},
        raw=raw,
    )


def _usb_id(v: Any) -> bool:
    return (isinstance(v, list) and len(v) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 0xFFFF for x in v))
