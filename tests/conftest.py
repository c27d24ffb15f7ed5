import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "benchmarks" / "poet-reference"


def have_qemu_toolchain() -> bool:
    return bool(shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc"))


needs_qemu = pytest.mark.skipif(not have_qemu_toolchain(), reason="qemu-system-arm / arm-none-eabi-gcc missing")
