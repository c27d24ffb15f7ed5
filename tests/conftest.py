import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "benchmarks" / "poet-reference"


def have_qemu_toolchain() -> bool:
    return bool(shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc"))


needs_qemu = pytest.mark.skipif(not have_qemu_toolchain(), reason="qemu-system-arm / arm-none-eabi-gcc missing")


def needs_tools(*tools: str) -> pytest.MarkDecorator:
    """Skip when a toolchain is missing on a developer's machine; under CI (`CI` set), where
    `make setup` installed everything, a missing tool is an install bug and must fail, not skip."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing and os.environ.get("CI"):
        raise RuntimeError(f"CI is missing {', '.join(missing)}: `make setup` should have installed it")
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed (run `make setup`)")
