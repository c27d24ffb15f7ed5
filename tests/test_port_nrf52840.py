"""The nRF52840 images (the DK's with the SD-over-SPI pager and with the QSPI-flash pager, the Dongle's) build,
fit and are laid out for the chip.

Nothing here emulates an nRF52, so these are static checks of the linked ELF files: sizes against the
issue's targets and the chip's memories (nRF52840 PS v1.7: 1 MB flash, 256 KB RAM), the vector table
at the application's start address (0x1000, after the MBR), the UARTE0 handler in IRQ 2's slot, the
pager each image was built with linked in (and the other one not), hard-float Cortex-M4 code.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import needs_tools
from elfinfo import symbols, tool
from poet.device import firmware

pytestmark = needs_tools("make", "arm-none-eabi-gcc")
APP_START = 0x1000          # linker.ld: after the MBR page (nRF5 SDK pca10059 mbr layout)
APP_END = 0xE0000           # the Open USB Bootloader's first page on the Dongle
RAM_BYTES = 256 * 1024      # datasheet
FLASH_TARGET = 64 * 1024    # issue "The C training runtime": runtime + kernels <= 64 KB flash
UARTE0_IRQ = 2              # PS: peripheral ID = IRQ number; UARTE0 is ID 2
IMAGES = {
    "nrf52840": ({"sd_init", "sd_pager_read", "sd_pager_write"}, {"nor_pager_read", "nor_pager_write"}),
    "nrf52840-qspi": ({"nor_pager_read", "nor_pager_write", "qspi_erase", "qspi_program"}, {"sd_init"}),
    "nrf52840-dongle": ({"sd_init", "sd_pager_read", "sd_pager_write"}, {"nor_pager_read", "nor_pager_write"}),
}
UICR = 0x10001000           # PS "UICR"; REGOUT0 at +0x304 (tests/test_port_registers.py checks the offsets)




@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, firmware.build(request.param)


def test_fits_flash_target_and_ram(image: tuple[str, Path]) -> None:
    _, elf = image
    text, data, bss = (int(v) for v in tool("arm-none-eabi-size", str(elf)).splitlines()[1].split()[:3])
    assert text + data <= FLASH_TARGET, f"flash {text + data} B over the 64 KiB target"
    # bss includes the stack and the pool; the MBR keeps the first 8 bytes of RAM.
    assert data + bss <= RAM_BYTES - 8, f"RAM {data + bss} B over 256 KiB"
    syms = symbols(elf)
    assert syms["__stack_top"] <= 0x20000000 + RAM_BYTES


def test_vector_table_at_application_start(image: tuple[str, Path], tmp_path: Path) -> None:
    _, elf = image
    syms = symbols(elf)
    assert syms["poet_vectors"] == APP_START
    raw = tmp_path / "text.bin"
    tool("arm-none-eabi-objcopy", "-O", "binary", "-j", ".text", str(elf), str(raw))
    vectors = struct.unpack("<64I", raw.read_bytes()[:256])
    entry = int(tool("arm-none-eabi-readelf", "-h", str(elf)).split("Entry point address:")[1].split()[0], 16)
    assert vectors[0] == syms["__stack_top"], "initial SP"
    assert vectors[1] == syms["Reset_Handler"] | 1 == entry, "reset vector (Thumb bit set)"
    assert vectors[16 + UARTE0_IRQ] == syms["UARTE0_UART0_IRQHandler"] | 1
    others = {v for i, v in enumerate(vectors[16:]) if i != UARTE0_IRQ}
    assert others == {syms["Default_Handler"] | 1}, "every other IRQ goes to the default handler"
    # Everything loadable sits between the MBR and the bootloader.
    for line in tool("arm-none-eabi-readelf", "-l", "-W", str(elf)).splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD" and int(fields[5], 16) and int(fields[3], 16) < 0x20000000:
            start, size = int(fields[3], 16), int(fields[5], 16)
            assert APP_START <= start and start + size <= APP_END, line


def test_drivers_linked(image: tuple[str, Path]) -> None:
    name, elf = image
    syms = symbols(elf)
    wanted, unwanted = IMAGES[name]
    assert wanted <= syms.keys(), f"missing {wanted - syms.keys()}"
    assert not unwanted & syms.keys(), f"{name} links the other pager: {unwanted & syms.keys()}"
    for s in ("port_pager_open", "port_pager_read", "port_pager_write", "port_getc", "port_write", "poet_run"):
        assert s in syms


def test_hard_float_cortex_m4(image: tuple[str, Path]) -> None:
    _, elf = image
    attrs = tool("arm-none-eabi-readelf", "-A", str(elf))
    assert "Tag_CPU_arch: v7E-M" in attrs, attrs
    assert "Tag_FP_arch: VFPv4-D16" in attrs and "Tag_ABI_HardFP_use: SP only" in attrs, attrs  # fpv4-sp-d16
    assert "Tag_ABI_VFP_args: VFP registers" in attrs, attrs                                   # hard-float ABI


def test_flash_region_is_the_stand_ins_and_the_board_files(image: tuple[str, Path]) -> None:
    """The model and frozen weights go to the same flash addresses on the board as on its QEMU
    stand-in, of the size the planner takes from boards/nrf52840.yaml."""
    from poet.boards import load_board

    board = symbols(image[1])
    stand_in = symbols(firmware.build("qemu-m4"))
    region = (board["__nv_start"], board["__nv_end"])
    assert region == (stand_in["__nv_start"], stand_in["__nv_end"]) == (0x20000, 0xE0000)
    assert region[1] - region[0] == load_board("nrf52840").model_flash_bytes


def test_only_the_dongle_image_writes_regout0(image: tuple[str, Path]) -> None:
    """The Dongle's image raises its GPIO supply to 3.0 V (UICR.REGOUT0, then a reset) before anything else;
    the DK's images, whose boards supply VDD directly, never touch UICR."""
    name, elf = image
    main = tool("arm-none-eabi-objdump", "-d", "--disassemble=main", str(elf))
    touches_uicr = f"0x{UICR:08x}" in main or f"0x{UICR:x}" in main
    assert touches_uicr == (name == "nrf52840-dongle"), main[-2000:]
