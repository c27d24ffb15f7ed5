"""Flash and static RAM of the qemu-m4 (nRF52840 stand-in) firmware, from arm-none-eabi-size / nm.

Usage: .venv/bin/python benchmarks/firmware_footprint.py   (builds firmware/build/qemu-m4 first)

A last table puts the linked qemu-m4 image beside the real nRF52840 images (SD and QSPI pagers,
built but not run here), the qemu-m0 one (MKR1000 stand-in, Cortex-M0+ soft float), the real MKR1000
one (SD pager, built but not run here; of its 256 KiB of flash the bootloader keeps 8 KiB), the
qemu-rv32 one (ESP32-C3 stand-in, rv32imc soft float) and the linux-aarch64 one (RPi 4 / Jetson,
static) against the memories of the boards they stand in for (datasheet sizes).

Targets (issue "The C training runtime"): runtime and all kernels <= 64 KB flash; interpreter
state <= 4 KB plus <= 8 bytes per tensor. Flash is text + data per object file; static RAM is
every .bss/.data symbol, grouped by what it is for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "firmware" / "build" / "qemu-m4"
sys.path.insert(0, str(ROOT / "host"))

from poet.device.firmware import TARGETS  # noqa: E402


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout


def main() -> None:
    run("make", "-C", "firmware", "qemu-m4")
    elf = BUILD / "poet.elf"
    print("| object | text B | data B | bss B |")
    print("|---|---|---|---|")
    objs = sorted(BUILD.rglob("*.o"))
    for line in run("arm-none-eabi-size", *map(str, objs)).splitlines()[1:]:
        text, data, bss, _, _, name = line.split()
        print(f"| {Path(name).relative_to(BUILD)} | {int(text):,} | {int(data):,} | {int(bss):,} |")
    text, data, bss = (int(v) for v in run("arm-none-eabi-size", str(elf)).splitlines()[1].split()[:3])
    print(f"| **poet.elf (linked, with libc/libm)** | **{text:,}** | **{data:,}** | **{bss:,}** |")
    print(f"\nflash (text + data): {text + data:,} B = {(text + data) / 1024:.1f} KiB of the 64 KiB target\n")

    print("| static RAM symbol | bytes | what |")
    print("|---|---|---|")
    what = {"pool": "arena + parameters + gradients + batch (the --ram budget's pool)",
            "model": "model header, parameter offsets, per-node aux offsets (nodes are read from the blob in place)",
            "model_blob": "model blob as uploaded", "schedule_blob": "schedule as uploaded",
            "trace": "trace ring (one record per instruction)", "rx": "serial receive frame", "tx": "serial send frame"}
    symbols = []
    for line in run("arm-none-eabi-nm", "--size-sort", "-S", str(elf)).splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2].lower() in ("b", "d"):
            symbols.append((int(parts[1], 16), parts[3]))
    for size, name in sorted(symbols, reverse=True)[:12]:
        print(f"| {name} | {size:,} | {what.get(name, '')} |")
    header = (ROOT / "firmware" / "core" / "model.h").read_text()
    per = dict(re.findall(r"#define POET_TABLE_(PARAM|NODE)_BYTES (\d+)u", header))
    model = dict((n, s) for s, n in symbols).get("model", 0)
    print(f"\ninterpreter state: model header {model:,} B static, then in the pool, sized by the model: "
          f"{per.get('NODE', '?')} B per node and {per.get('PARAM', '?')} B per parameter (node records and "
          "frozen weights are read in place from flash)")

    print("\n| image | board | text B | data B | bss + stack B | flash used | RAM used |")
    print("|---|---|---|---|---|---|---|")
    # flash and RAM of each board: datasheet (nRF52840 PS v1.7; SAM D21 DS40001882 sec. 2; ESP32-C3
    # Series Datasheet "Internal Memory": 400 KB SRAM less the 16 KB flash cache). The aarch64 image
    # runs under Linux on a board with GBs (RPi 4 / Jetson): no percentages there.
    for target, board, size_tool, flash, ram in (
            ("qemu-m4", "nrf52840", "arm-none-eabi-size", 1 << 20, 256 << 10),
            ("nrf52840", "nrf52840 (SD pager)", "arm-none-eabi-size", 1 << 20, 256 << 10),
            ("nrf52840-qspi", "nrf52840 (QSPI pager)", "arm-none-eabi-size", 1 << 20, 256 << 10),
            ("qemu-m0", "mkr1000", "arm-none-eabi-size", 256 << 10, 32 << 10),
            ("mkr1000", "mkr1000 (SD pager)", "arm-none-eabi-size", 256 << 10, 32 << 10),
            ("qemu-rv32", "esp32c3", "riscv64-unknown-elf-size", 4 << 20, 384 << 10),
            ("esp32c3", "esp32c3 (SRAM image, SD pager)", "riscv64-unknown-elf-size", 4 << 20, 384 << 10),
            ("linux-aarch64", "rpi4 / jetson", "aarch64-linux-gnu-size", 0, 0)):
        if shutil.which(size_tool) is None:
            print(f"| {target} | {board} | {size_tool} not installed (`make setup`) | | | | |")
            continue
        run("make", "-C", "firmware", target)
        out = run(size_tool, str(ROOT / "firmware" / TARGETS[target].image))
        text, data, bss = (int(v) for v in out.splitlines()[1].split()[:3])
        # The esp32c3 image runs from SRAM (the ROM loads code and data there): its code is RAM too.
        ram_used = data + bss + (text if target == "esp32c3" else 0)
        used = (f"{(text + data) / flash:.0%} of {flash >> 10} KiB | {ram_used / ram:.0%} of {ram >> 10} KiB"
                if flash else "- | -")
        print(f"| {target} | {board} | {text:,} | {data:,} | {bss:,} | {used} |")


if __name__ == "__main__":
    main()
