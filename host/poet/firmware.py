"""Build firmware images with the repository's Makefile (make is incremental, so this is cheap)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from poet.errors import PoetError

FIRMWARE_DIR = Path(__file__).resolve().parents[2] / "firmware"
TARGETS = {
    "qemu-m4": Path("build/qemu-m4/poet.elf"),
    "linux": Path("build/linux/poet"),
    "linux-asan": Path("build/linux-asan/poet"),
    "linux-big": Path("build/linux-big/poet"),
    "validate": Path("build/linux/validate"),
}
TOOLCHAINS = {"qemu-m4": "arm-none-eabi-gcc"}


class BuildError(PoetError):
    pass


def build(target: str, quiet: bool = True) -> Path:
    """Run `make -C firmware <target>` and return the image path."""
    if target not in TARGETS:
        raise BuildError(f"unknown firmware target {target!r}; known: {', '.join(TARGETS)}")
    for tool in ("make", TOOLCHAINS.get(target, "cc")):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} not found: run `make setup` to install the firmware toolchain")
    proc = subprocess.run(["make", "-C", str(FIRMWARE_DIR), target], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise BuildError(f"firmware build for {target} failed:\n" + "\n".join(tail))
    if not quiet:
        print(f"firmware image: firmware/{TARGETS[target]} ({target}, built by make, incremental)", flush=True)
    return FIRMWARE_DIR / TARGETS[target]
