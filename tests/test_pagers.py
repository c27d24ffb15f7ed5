"""The aux-storage pager drivers, natively against C models of the devices.

firmware/drivers/sd_spi.c (SD card in SPI mode, raw sectors) runs against firmware/tests/sd_card_model.c,
a byte-level model of a card written from the SD Physical Layer Simplified Specification's SPI chapter;
firmware/drivers/nor_pager.c (the nRF52840 QSPI flash pager) runs against a NOR flash model that refuses
unaligned DMA and can only clear bits between erases. Both test programs are built with ASan + UBSan by
`make -C firmware sd-spi-test nor-pager-test` and print one line per failed check, then PASS or FAIL.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import needs_tools

pytestmark = needs_tools("make", "cc")
FIRMWARE = Path(__file__).resolve().parents[1] / "firmware"


def _run(target: str, binary: str) -> str:
    subprocess.run(["make", "-C", str(FIRMWARE), target], check=True, capture_output=True, text=True)
    proc = subprocess.run([str(FIRMWARE / "build" / "drivers-test" / binary)], capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


@pytest.mark.parametrize("target,binary,min_checks", [
    ("sd-spi-test", "sd_spi_test", 400),
    ("nor-pager-test", "nor_pager_test", 200),
])
def test_driver_against_device_model(target: str, binary: str, min_checks: int) -> None:
    out = _run(target, binary)
    m = re.search(rf"{binary}: (\d+) checks, (\d+) failed", out)
    assert m, out
    checks, failed = int(m.group(1)), int(m.group(2))
    assert failed == 0, out
    # A test program that stopped checking early (a case compiled out, a loop skipped) must not pass.
    assert checks >= min_checks, out
    assert out.rstrip().endswith("PASS"), out
    assert "FAIL" not in out, out
