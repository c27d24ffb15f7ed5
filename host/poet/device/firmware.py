"""Build firmware images with the repository's Makefile (make is incremental, so this is cheap).

One row per firmware target (firmware/ports/<port>/port.mk builds it): the image it makes, the
compiler it needs, and for hosted cross builds the command that runs the image here.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from poet.boards import Board
from poet.errors import PoetError

FIRMWARE_DIR = Path(__file__).resolve().parents[3] / "firmware"


@dataclass(frozen=True)
class Target:
    image: Path                  # relative to firmware/
    compiler: str                # the build needs it on PATH
    what: str
    runner: tuple[str, ...] = ()  # command prefix that runs a hosted image on this machine


TARGETS: dict[str, Target] = {
    "qemu-m4": Target(Path("build/qemu-m4/poet.elf"), "arm-none-eabi-gcc",
                      "nRF52840 stand-in: Cortex-M4F, hard float, on QEMU mps2-an386"),
    "qemu-m4-notrace": Target(Path("build/qemu-m4-notrace/poet.elf"), "arm-none-eabi-gcc",
                              "qemu-m4 recording no trace: the baseline for the cost of tracing"),
    "qemu-m0": Target(Path("build/qemu-m0/poet.elf"), "arm-none-eabi-gcc",
                      "MKR1000 stand-in: Cortex-M0+ code, soft float, on a QEMU MPS2 machine"),
    "nrf52840": Target(Path("build/nrf52840/poet.elf"), "arm-none-eabi-gcc",
                       "nRF52840 itself: its memory map, UARTE, QSPI/SD pager (built and size-checked here)"),
    "nrf52840-qspi": Target(Path("build/nrf52840-qspi/poet.elf"), "arm-none-eabi-gcc",
                            "nRF52840 with the DK's QSPI flash as the pager instead of an SD card"),
    "nrf52840-dongle": Target(Path("build/nrf52840-dongle/poet.elf"), "arm-none-eabi-gcc",
                              "nRF52840 Dongle: the nrf52840 image on the Dongle's edge pins, its GPIO at 3.0 V"),
    "mkr1000": Target(Path("build/mkr1000/poet.elf"), "arm-none-eabi-gcc",
                      "MKR1000 itself: SAMD21G18, SERCOM UART, SD pager (built and size-checked here)"),
    "esp32c3": Target(Path("build/esp32c3/poet.elf"), "riscv64-unknown-elf-gcc",
                      "ESP32-C3 itself: its memory map, the link on UART0 (a DevKit's USB-UART bridge), SD pager "
                      "(built, made into an esptool image and checked here)"),
    "esp32c3-usb": Target(Path("build/esp32c3-usb/poet.elf"), "riscv64-unknown-elf-gcc",
                          "ESP32-C3 with the link on its own USB-Serial/JTAG (boards wired to GPIO18/19)"),
    "qemu-rv32": Target(Path("build/qemu-rv32/poet.elf"), "riscv64-unknown-elf-gcc",
                        "ESP32-C3 stand-in: rv32imc + picolibc on QEMU virt"),
    "linux": Target(Path("build/linux/poet"), "cc", "native runtime (host; RPi 4 and Jetson build the same)"),
    "linux-asan": Target(Path("build/linux-asan/poet"), "cc", "native runtime under ASan + UBSan"),
    "linux-aarch64": Target(Path("build/linux-aarch64/poet"), "aarch64-linux-gnu-gcc",
                            "RPi 4 / Jetson cross build, run here under qemu-user",
                            runner=("qemu-aarch64",)),
    "validate": Target(Path("build/linux/validate"), "cc", "schedule validator harness"),
    "device-run": Target(Path("build/device-run/device_run"), "cc",
                         "the device API (core/poet.h) driven from a file, under ASan + UBSan"),
}


class BuildError(PoetError):
    pass


def source_version() -> str:
    """The firmware version these sources build (POET_FW_MAJOR.MINOR in core/protocol.h): what
    HELLO reports when the board runs this poet's firmware."""
    text = (FIRMWARE_DIR / "core" / "protocol.h").read_text()
    found = dict(re.findall(r"#define POET_FW_(MAJOR|MINOR) (\d+)", text))
    return f"{found['MAJOR']}.{found['MINOR']}"


def run_make(*args: str) -> subprocess.CompletedProcess[str]:
    """`make -C firmware ARGS`, one at a time: parallel test workers and concurrent poet commands
    share firmware/build, and two makes writing one object corrupt it."""
    lock_path = FIRMWARE_DIR / "build" / ".lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run(["make", "-C", str(FIRMWARE_DIR), *args], capture_output=True, text=True)


def build(target: str, quiet: bool = True) -> Path:
    """Run `make -C firmware <target>` and return the image path."""
    if target not in TARGETS:
        raise BuildError(f"unknown firmware target {target!r}; known: {', '.join(TARGETS)}")
    t = TARGETS[target]
    for tool in ("make", t.compiler):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} not found: run `make setup` to install the firmware toolchains")
    proc = run_make(target)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise BuildError(f"firmware build for {target} failed:\n" + "\n".join(tail))
    if not quiet:
        print(f"firmware image: firmware/{t.image} ({target}, built by make, incremental)", flush=True)
    return FIRMWARE_DIR / t.image


def runtime_args(board: Board, ram: int | None = None) -> list[str]:
    """How a Linux board's runtime is started (firmware/ports/linux/main.c): its pool is the request's --ram,
    all of it, since the Linux runtime keeps no other RAM of --ram (HELLO reports the pool as its RAM, so
    the firmware's static part is 0); with no request (flash, profile), all the board's ram_bytes. Its nv
    storage, where the model blob and the frozen weights live, is the board's model_flash_bytes. Both are
    mapped once at start-up and cost only the pages a run touches."""
    return ["--pool", str(ram if ram is not None else board.ram_bytes), "--nv", str(board.model_flash_bytes)]


def command(target: str) -> list[str]:
    """The command line that runs a hosted image here (the runner first, for cross builds)."""
    t = TARGETS[target]
    if t.runner and shutil.which(t.runner[0]) is None:
        raise BuildError(f"{t.runner[0]} not found: run `make setup` to install it")
    return [*t.runner, str(build(target))]
