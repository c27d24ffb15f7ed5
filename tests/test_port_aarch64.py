"""The Raspberry Pi 4 / Jetson cross build (linux-aarch64) runs zoo models like the native runtime.

The image is a static AArch64 Linux executable, run here under qemu-user. The same checks as
test_runtime_ops: a few SGD steps under keep-all and under POET plans below the keep-all peak (or, for a
model with none, a plan that pages and recomputes anyway) give bit-identical weights and losses, within
1e-5 (relative) of PyTorch.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import needs_tools
from poet.device import firmware
from test_runtime_ops import _check

pytestmark = needs_tools("make", "aarch64-linux-gnu-gcc", "qemu-aarch64")
TARGET = "linux-aarch64"


def test_image_is_a_static_aarch64_executable() -> None:
    image = firmware.build(TARGET)
    header = subprocess.run(["aarch64-linux-gnu-readelf", "-h", "-l", str(image)], check=True,
                            capture_output=True, text=True).stdout
    assert "ELF64" in header and "AArch64" in header
    assert "INTERP" not in header, "linked dynamically: qemu-aarch64 would need the target's sysroot"


@pytest.mark.parametrize("name,batch", [("mlp-digits", 4), ("cnn-digits", 4)])
def test_zoo_model_trains_like_pytorch_under_qemu_user(tmp_path: Path, name: str, batch: int) -> None:
    _check(tmp_path, name, batch, target=TARGET)
