"""The Arduino MKR1000 image (ATSAMD21G18A) builds, fits and is laid out for the SAM-BA bootloader.

Nothing here emulates a SAM D21, so these are static checks of the linked ELF and of poet.bin (what
bossac writes at 0x2000): sizes against the chip's memories (SAM D21 DS40001882 sec. 2: 256 KB flash,
of which the bootloader keeps 8 KB, and 32 KB RAM with room left for the stack), the vector table at
0x2000 with the SERCOM5 UART handler in IRQ 14's slot, ARMv6-M code only (the check of
tests/test_port_m0.py, on this image), the SD pager linked, and the RAM budget equal to the qemu-m0
stand-in's so plans made on the stand-in fit the board.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
import test_port_m0
from conftest import needs_tools
from elfinfo import symbols, tool
from poet.device import firmware

pytestmark = needs_tools("make", "arm-none-eabi-gcc")
APP_START = 0x2000           # after Arduino's 8 KB SAM-BA bootloader (linker.ld)
FLASH_BYTES = 256 * 1024     # datasheet
RAM_START = 0x20000000
RAM_BYTES = 32 * 1024        # datasheet
MIN_STACK = 1536             # linker.ld, as qemu-m0's
SERCOM5_IRQ = 14             # DS40001882 table 11-3
N_IRQ = 28                   # samd21g18a.h PERIPH_COUNT_IRQn (tests/test_port_registers.py)
PORTS = firmware.FIRMWARE_DIR / "ports"




@pytest.fixture(scope="module")
def elf() -> Path:
    return firmware.build("mkr1000")


def test_fits_the_samd21(elf: Path) -> None:
    text, data, bss = (int(v) for v in tool("arm-none-eabi-size", str(elf)).splitlines()[1].split()[:3])
    # bss counts the NOLOAD stack section too, so this is every byte of RAM the image claims
    assert data + bss <= RAM_BYTES
    assert text + data <= FLASH_BYTES - APP_START, "flash holds the code and .data's initial values"
    sections = tool("arm-none-eabi-size", "-A", str(elf))
    stack = next(int(line.split()[1]) for line in sections.splitlines() if line.startswith(".stack"))
    assert stack >= MIN_STACK  # the link fails before this could
    assert symbols(elf)["__stack_top"] == RAM_START + RAM_BYTES


def test_vector_table_at_0x2000(elf: Path, tmp_path: Path) -> None:
    syms = symbols(elf)
    assert syms["poet_vectors"] == APP_START
    raw = tmp_path / "text.bin"
    tool("arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(elf), str(raw))
    vectors = struct.unpack(f"<{16 + N_IRQ}I", raw.read_bytes()[:4 * (16 + N_IRQ)])
    entry = int(tool("arm-none-eabi-readelf", "-h", str(elf)).split("Entry point address:")[1].split()[0], 16)
    assert vectors[0] == syms["__stack_top"], "initial SP"
    assert vectors[1] == syms["Reset_Handler"] | 1 == entry, "reset vector (Thumb bit set)"
    assert vectors[16 + SERCOM5_IRQ] == syms["SERCOM5_Handler"] | 1
    others = {v for i, v in enumerate(vectors[16:]) if i != SERCOM5_IRQ}
    assert others == {syms["Default_Handler"] | 1}, "every other IRQ goes to the default handler"
    # Everything loadable into flash sits between the bootloader and the end of flash.
    for line in tool("arm-none-eabi-readelf", "-l", "-W", str(elf)).splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD" and int(fields[5], 16):
            start, size = int(fields[3], 16), int(fields[5], 16)  # physical (load) address
            assert APP_START <= start and start + size <= FLASH_BYTES, line


def test_bin_is_what_the_bootloader_starts(elf: Path) -> None:
    image = elf.with_suffix(".bin").read_bytes()
    syms = symbols(elf)
    sp, reset = struct.unpack_from("<II", image)
    # The bootloader stays put when this word reads 0xFFFFFFFF, else loads it into MSP.
    assert RAM_START < sp <= RAM_START + RAM_BYTES and sp % 8 == 0
    assert reset == syms["Reset_Handler"] | 1
    text, data = (int(v) for v in tool("arm-none-eabi-size", str(elf)).splitlines()[1].split()[:2])
    assert len(image) == text + data, "the .bin is .text followed by .data's load image, nothing else"
    assert APP_START + len(image) <= FLASH_BYTES
    assert b"mkr1000\0" in image  # HELLO's board name


def test_image_is_armv6m_only(elf: Path) -> None:
    test_port_m0.test_image_is_armv6m_only(elf)


def test_pager_and_serial_linked(elf: Path) -> None:
    syms = symbols(elf)
    wanted = {"sd_init", "sd_pager_read", "sd_pager_write", "sector_buf", "SERCOM5_Handler", "poet_run",
              "port_pager_open", "port_getc", "port_write", "port_ticks"}
    assert wanted <= syms.keys(), f"missing {wanted - syms.keys()}"
    # No semihosting (the stand-in's pager and exit): on a board without a debugger, bkpt faults.
    dis = tool("arm-none-eabi-objdump", "-d", str(elf))
    assert not re.search(r"\tbkpt\b", dis)


def test_ram_budget_is_the_stand_ins() -> None:
    def limits(port: str) -> dict[str, str]:
        text = (PORTS / port / "port.mk").read_text()
        return dict(re.findall(r"-D(POET_SCHEDULE_BLOB_MAX|POOL_BYTES)=(\w+)", text))

    m0, mkr = limits("qemu-m0"), limits("mkr1000")
    assert len(mkr) == 2 and mkr == m0


def test_flash_region_is_the_stand_ins_and_the_board_files(elf: Path) -> None:
    """The model and frozen weights go to the same flash addresses on the board as on its QEMU
    stand-in, of the size the planner takes from boards/mkr1000.yaml."""
    from poet.boards import load_board

    board, stand_in = symbols(elf), symbols(firmware.build("qemu-m0"))
    region = (board["__nv_start"], board["__nv_end"])
    assert region == (stand_in["__nv_start"], stand_in["__nv_end"]) == (0x18000, 0x40000)
    assert region[1] - region[0] == load_board("mkr1000").model_flash_bytes
