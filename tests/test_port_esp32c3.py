"""The ESP32-C3 image (bare metal, loaded into SRAM by the chip's ROM bootloader) builds, fits, and is an esptool
image the ROM can boot.

No ESP32-C3 board is attached and QEMU has no ESP32-C3 machine, so these are static checks of the linked ELF and of
build/esp32c3/poet.bin (made by `esptool elf2image`): the memory it uses against the chip's SRAM and what the ROM
keeps for itself (ESP32-C3 TRM "System and Memory"; ESP-IDF's esp32c3 bootloader.ld, "ROM static data usage"), the
image header and segments parsed here byte by byte and read back by `esptool image-info`, rv32imc code without F/D
instructions, and the trap vector table, serial link driver, watchdog set-up and SD pager linked in. Both images
are checked: `esp32c3` (the link on UART0, for boards with a USB-UART bridge) and `esp32c3-usb` (the link on the
chip's USB-Serial/JTAG controller).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import needs_tools
from elfinfo import symbols, tool
from poet.device import firmware

pytestmark = needs_tools("make", "riscv64-unknown-elf-gcc")

# SRAM1 (384 KB) seen on the data bus and, 0x700000 higher, on the instruction bus; SRAM0 below it (16 KB at
# 0x4037C000) is the instruction cache (TRM "System and Memory").
DRAM = (0x3FC80000, 0x3FCE0000)
IRAM = (0x40380000, 0x403E0000)
I_D_OFFSET = 0x700000
ROM_LOADER_STACK = 0x3FCDC710   # the ROM bootloader's stack, 0x3FCDC710-0x3FCDE710: no loaded byte may reach it
ROM_DATA = 0x3FCDE710           # ROM .bss/.data up to 0x3FCE0000: nothing of ours at all
USABLE_BYTES = ROM_DATA - DRAM[0]  # 386832
MARGIN_BYTES = 4096             # left free between our stack's top and the ROM's data
ESP_IMAGE_MAGIC = 0xE9
ESP32C3_CHIP_ID = 5             # esptool's IMAGE_CHIP_ID for the ESP32-C3
CHECKSUM_SEED = 0xEF
# The peripheral each image's serial link drives, as the upper 20 bits `lui` loads: UART0 at 0x60000000,
# USB_SERIAL_JTAG at 0x60043000 (ESP-IDF reg_base.h; tests/test_port_registers.py checks the port's addresses).
LINK_BASE = {"esp32c3": 0x60000, "esp32c3-usb": 0x60043}


@dataclass(frozen=True)
class Segment:
    addr: int
    data: bytes


@dataclass(frozen=True)
class Image:
    magic: int
    flash_mode: int
    flash_size_freq: int
    entry: int
    chip_id: int
    hash_appended: int
    segments: tuple[Segment, ...]
    checksum: int
    computed_checksum: int
    digest: bytes
    computed_digest: bytes




def _sram_offset(addr: int) -> int:
    """Where an IRAM or DRAM address lands in SRAM1, so that the two views can be compared."""
    return addr - (I_D_OFFSET if addr >= IRAM[0] else 0) - DRAM[0]


def _parse_image(raw: bytes) -> Image:
    """The esptool image format (esptool's bin_image.py, the ESP-IDF "App Image Format" page): an 8-byte header,
    a 16-byte extended header, segments of (u32 load address, u32 length, data), a checksum byte ending a 16-byte
    aligned block, then a SHA-256 of everything before it when hash_appended is set."""
    magic, n_segments, flash_mode, flash_size_freq, entry = struct.unpack_from("<BBBBI", raw, 0)
    chip_id = struct.unpack_from("<H", raw, 12)[0]
    hash_appended = raw[23]
    pos, segments, checksum = 24, [], CHECKSUM_SEED
    for _ in range(n_segments):
        addr, length = struct.unpack_from("<II", raw, pos)
        data = raw[pos + 8:pos + 8 + length]
        segments.append(Segment(addr, data))
        for b in data:
            checksum ^= b
        pos += 8 + length
    pos += 15 - pos % 16
    end = pos + 1
    return Image(magic, flash_mode, flash_size_freq, entry, chip_id, hash_appended, tuple(segments),
                 raw[pos], checksum, raw[end:end + 32], hashlib.sha256(raw[:end]).digest())


def _need_esptool() -> None:
    if importlib.util.find_spec("esptool") is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI is missing esptool: `pip install -e '.[dev]'` should have installed it")
        pytest.skip("esptool not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module", params=sorted(LINK_BASE))
def elf(request: pytest.FixtureRequest) -> Path:
    return firmware.build(request.param)


@pytest.fixture(scope="module")
def image_bin(elf: Path) -> Path:
    _need_esptool()
    path = elf.with_name("poet.bin")
    assert path.exists() and path.stat().st_mtime >= elf.stat().st_mtime, "make esp32c3 did not make poet.bin"
    return path


@pytest.fixture(scope="module")
def image(image_bin: Path) -> Image:
    return _parse_image(image_bin.read_bytes())


def test_fits_sram_outside_rom_regions(elf: Path) -> None:
    syms = symbols_rv(elf)
    text, data, bss = (int(v) for v in tool("riscv64-unknown-elf-size", str(elf)).splitlines()[1].split()[:3])
    assert syms["__iram_start"] == IRAM[0], "code starts at the first SRAM1 byte after the cache"
    assert syms["__iram_end"] - I_D_OFFSET <= syms["__dram_load_start"], "data overlaps the code's SRAM"
    assert syms["__dram_load_end"] <= ROM_LOADER_STACK, "a loaded byte reaches the ROM loader's stack"
    # Code, data, .bss (with the pool) and the stack, all in SRAM1 below the ROM's data, with the margin.
    used = syms["__stack_top"] - DRAM[0]
    assert used == pytest.approx(text + data + bss, abs=64), "size and the layout disagree"
    assert used <= USABLE_BYTES - MARGIN_BYTES, f"{used} B used of {USABLE_BYTES}, margin under {MARGIN_BYTES}"
    assert syms["pool"] >= syms["__dram_load_end"] and syms["__stack_top"] <= ROM_DATA


def test_image_header_and_segments(elf: Path, image: Image) -> None:
    syms = symbols_rv(elf)
    entry = int(tool("riscv64-unknown-elf-readelf", "-h", str(elf)).split("Entry point address:")[1].split()[0], 16)
    assert image.magic == ESP_IMAGE_MAGIC
    assert image.chip_id == ESP32C3_CHIP_ID
    assert image.flash_mode == 2 and image.flash_size_freq == 0x2F, "DIO, 4 MB, 80 MHz (esptool's header codes)"
    assert image.entry == entry == syms["_start"]
    assert image.checksum == image.computed_checksum
    assert image.hash_appended == 1 and image.digest == image.computed_digest
    spans = []
    for seg in image.segments:
        start, end = seg.addr, seg.addr + len(seg.data)
        assert DRAM[0] <= start and end <= DRAM[1] or IRAM[0] <= start and end <= IRAM[1], hex(start)
        spans.append((_sram_offset(start), _sram_offset(end)))
    spans.sort()
    assert spans[-1][1] <= ROM_LOADER_STACK - DRAM[0], "a segment reaches the ROM loader's stack or data"
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"segments overlap in SRAM: {spans}"
    # What the ROM loads is exactly the ELF's code, constants and initialised data (size's text + data).
    text, data = (int(v) for v in tool("riscv64-unknown-elf-size", str(elf)).splitlines()[1].split()[:2])
    assert sum(len(s.data) for s in image.segments) == text + data


def test_esptool_image_info(elf: Path, image_bin: Path) -> None:
    def info(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "esptool", "--chip", "esp32c3", command, str(image_bin)],
                              capture_output=True, text=True)

    proc = info("image-info")  # esptool 5; 4.x calls it image_info
    if proc.returncode != 0:
        proc = info("image_info")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    entry = re.search(r"Entry point:\s*(?:0x)?([0-9a-fA-F]+)", out)
    assert entry and int(entry.group(1), 16) == symbols_rv(elf)["_start"], out
    assert re.search(r"Chip ID:\s*5\b", out), out
    assert re.search(r"Checksum:.*\(valid\)", out) and re.search(r"Validation hash:.*\(valid\)", out), out
    rows = re.findall(r"^\s*\d+\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+(.*)$", out, re.M)  # esptool 5
    rows += re.findall(r"Segment \d+: len 0x([0-9a-f]+) load 0x([0-9a-f]+) file_offs 0x[0-9a-f]+ \[(.*)\]", out)
    assert rows, out
    for length, load, types in rows:
        start, end = int(load, 16), int(load, 16) + int(length, 16)
        kind = "IRAM" if start >= IRAM[0] else "DRAM"
        assert kind in types, f"segment at {load}: {types}"
        assert _sram_offset(end) <= ROM_LOADER_STACK - DRAM[0], f"segment at {load} reaches the ROM's region"


def test_rv32imc_without_float_instructions(elf: Path) -> None:
    arch = re.search(r'Tag_RISCV_arch: "([^"]+)"', tool("riscv64-unknown-elf-readelf", "-A", str(elf)))
    assert arch and arch.group(1).startswith("rv32i"), arch
    # "rv32i2p1_m2p0_c2p0_zicsr2p0_zmmul1p0": the base, then one extension (name + version) per field.
    exts = {m.group() for e in arch.group(1).split("_")[1:] if (m := re.match(r"[a-z]+", e))}
    assert {"m", "c"} <= exts and not exts & {"f", "d", "q", "zfinx", "zdinx"}, arch.group(1)
    disasm = tool("riscv64-unknown-elf-objdump", "-d", "-j", ".text", str(elf))
    insns = [fields[2].split()[0] for line in disasm.splitlines() if len(fields := line.split("\t")) >= 3]
    assert len(insns) > 1000
    floats = sorted({i for i in insns if i.startswith("f") and not i.startswith("fence")})
    assert not floats, f"F/D instructions: {floats}"
    assert not re.search(r"\b(fcsr|frm|fflags)\b", disasm), "FPU CSR access"


def test_vectors_startup_and_drivers_linked(elf: Path) -> None:
    syms = symbols_rv(elf)
    table = syms["poet_vector_table"]
    assert table % 256 == 0 and IRAM[0] <= table < IRAM[1], "mtvec base: 256-byte aligned, in IRAM"
    disasm = tool("riscv64-unknown-elf-objdump", "-d", "--start-address", hex(table),
                   "--stop-address", hex(table + 128), str(elf))
    slots = re.findall(r"^\s*[0-9a-f]+:\s+([0-9a-f]+)\s+j\s+\S+\s+<(\w+)>", disasm, re.M)
    assert len(slots) == 32 and all(len(op) == 8 and target == "trap_handler" for op, target in slots), disasm
    start = tool("riscv64-unknown-elf-objdump", "-d", "--start-address", hex(syms["_start"]),
                  "--stop-address", hex(syms["_start"] + 64), str(elf))
    assert "mtvec" in start and "<c3_early_init>" in start, "_start sets mtvec and stops the watchdogs first"
    for name in ("trap_handler", "c3_early_init", "port_getc", "port_write", "port_ticks", "poet_run",
                 "port_pager_open", "port_pager_read", "port_pager_write", "sd_init", "sd_pager_read",
                 "sd_pager_write"):
        assert name in syms, name
    # The link's peripheral (UART0 or USB_SERIAL_JTAG) is what port_write and port_getc touch, and only it.
    target = elf.parent.name
    for fn in ("port_write", "port_getc"):
        body = tool("riscv64-unknown-elf-objdump", "-d", f"--disassemble={fn}", str(elf))
        bases = {int(b, 16) for b in re.findall(r"lui\s+\w+,(0x600[0-9a-f]{2})\b", body)}
        assert bases == {LINK_BASE[target]}, f"{target}: {fn} addresses {sorted(map(hex, bases))}"


def symbols_rv(elf: Path) -> dict[str, int]:
    return symbols(elf, "riscv64-unknown-elf-nm")


def test_sd_paging_model_is_what_the_bit_banged_loop_allows(elf: Path) -> None:
    """The SD card is clocked by sd_xchg's GPIO loop, not by GP-SPI2, so boards/esp32c3.yaml's paging rates are an
    estimate from that loop: never above one instruction a cycle at the board's clock over the loop's instructions
    per bit. The loop is the span between sd_xchg's backward branches; of it, each bit skips at most the two
    spi_delay calls and one of the set/clear paths (4 instructions)."""
    from poet.boards import load_board

    board = load_board("esp32c3")
    dis = tool("riscv64-unknown-elf-objdump", "-d", "--no-show-raw-insn", "--disassemble=sd_xchg", str(elf))
    insns = [(int(a, 16), rest) for a, rest in re.findall(r"^\s*([0-9a-f]+):\s+(\S.*)$", dis, re.M)]
    backward = [(at, int(m.group(1), 16)) for at, text in insns
                if (m := re.search(r"\b([0-9a-f]{8}) <sd_xchg\+", text)) and int(m.group(1), 16) < at]
    assert backward, dis
    lo, hi = min(t for _, t in backward), max(at for at, _ in backward)
    per_bit = sum(lo <= at <= hi for at, _ in insns) - 4
    assert per_bit >= 12, dis
    storage = board.storage
    assert storage["source"] == "estimated"
    for rate in (storage["read_bytes_per_s"], storage["write_bytes_per_s"]):
        assert rate * 8 * per_bit <= board.clock_hz, f"{rate} B/s needs under {per_bit} instructions a bit"
