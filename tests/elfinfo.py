"""Reading built firmware images in tests: tool output and the symbol table (addresses by name)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def tool(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def symbols(elf: Path, nm: str = "arm-none-eabi-nm") -> dict[str, int]:
    """Every defined symbol's address, from `nm` of the image's toolchain."""
    syms = {}
    for line in tool(nm, str(elf)).splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms
