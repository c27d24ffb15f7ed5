"""Every peripheral address, register offset, access width, field value and interrupt number the board ports use
is the chip vendor's: nrfx (nRF52840), Microchip's SAM D21 CMSIS pack (MKR1000), ESP-IDF (ESP32-C3) and Arm's
CMSIS core, read once into tests/data/vendor_registers/*.json by tools/vendor_registers.py at recorded commits.

The port's side is what its compiler makes of each macro under each image's flags (tests/portregs.py), so a
wrong base, offset, shift or #if branch shows here as a number that differs from the vendor's; a #define nobody
sorted into register, value or other fails too, as does a call that addresses something the vendor's table
lacks. No board is needed: these addresses are otherwise only ever checked by running on one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import portregs
import pytest
from conftest import needs_tools
from portregs import ESP32C3_LINKER, FIRMWARE, PORTS, VENDOR_DIR, Port, check, linker_symbols, vendor

TOOLS = {"nrf52840": "arm-none-eabi-gcc", "mkr1000": "arm-none-eabi-gcc", "esp32c3": "riscv64-unknown-elf-gcc"}


def _port(name: str) -> Port:
    return PORTS[name]


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_tools(TOOLS[n])) for n in sorted(PORTS)])
def test_every_constant_is_the_vendors(name: str) -> None:
    problems = check(_port(name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chip", ["nrf52840", "samd21g18a", "esp32c3"])
def test_the_tables_name_their_sources(chip: str) -> None:
    doc = json.loads((VENDOR_DIR / f"{chip}.json").read_text())
    assert "tools/vendor_registers.py" in doc["how"]
    for src in doc["sources"].values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", src["repo"]) and re.fullmatch(r"[0-9a-f]{40}", src["commit"]), src
        assert src["files"], src
    tags = set(doc["sources"])
    for section in ("bases", "registers", "values"):
        assert doc[section] and all(entry[-1] in tags for entry in doc[section].values()), section


def test_the_esp32c3_linker_script_s_rom_addresses_are_the_roms() -> None:
    """The ROM functions port.c calls are linked at the addresses ESP-IDF's esp32c3.rom.ld gives them, and nv
    storage is mapped where the data bus's flash window starts."""
    v = vendor("esp32c3")
    script = FIRMWARE / "ports" / "esp32c3" / "linker.ld"
    ours = linker_symbols(script)
    provided = set(re.findall(r"PROVIDE\(\s*(\w+)", script.read_text()))
    assert provided <= set(ESP32C3_LINKER), f"unchecked ROM symbols: {provided - set(ESP32C3_LINKER)}"
    for name, vendor_name in ESP32C3_LINKER.items():
        want = v.values[vendor_name]
        assert ours[name] == want, f"{name} = 0x{ours[name]:X}, {vendor_name} = 0x{want:X}"


SHARED = ["ports/shared/cm_reset.h", "ports/shared/rx_ring.h", "ports/shared/nv_erased.h", "ports/shared/pool.c",
          "ports/shared/sd_pager.c", "ports/shared/sd_pager.h", "drivers/sd_spi.c", "drivers/sd_spi.h",
          "drivers/millis.c", "drivers/millis.h", "drivers/nor_pager.c", "drivers/nor_pager.h"]


def test_the_shared_sources_the_boards_link_address_no_peripheral() -> None:
    """The check above reads each port's own files; what the board images link from ports/shared and drivers
    must then hold no register address of its own (they reach hardware only through the port's functions)."""
    windows = [w for p in PORTS.values() for w in p.windows]
    for rel in SHARED:
        text = portregs.strip_comments((FIRMWARE / rel).read_text())
        for lit in re.findall(r"\b0[xX]([0-9A-Fa-f]+)", text):
            assert not any(lo <= int(lit, 16) < hi for lo, hi in windows), f"{rel}: 0x{lit} is a peripheral address"
        assert not re.search(r"\bvolatile\b.*\*\s*\)\s*0[xX]", text), f"{rel} dereferences an address"


# ---------------------------------------------------------------- the check catches what it is for

def _mutated(tmp_path: Path, port: Port, fname: str, old: str, new: str) -> dict[str, Path]:
    src = FIRMWARE / "ports" / port.name / fname
    text = src.read_text()
    assert old in text, old
    out = tmp_path / fname
    out.write_text(text.replace(old, new, 1))
    return {fname: out}


@needs_tools("arm-none-eabi-gcc")
def test_a_wrong_peripheral_base_is_caught(tmp_path: Path) -> None:
    port = _port("nrf52840")
    problems = check(port, _mutated(tmp_path, port, "port.c", "#define UARTE 0x40002000u", "#define UARTE 0x40003000u"))
    assert any("UARTE_PSEL_TXD = 0x4000350C, the vendor's UARTE0.PSEL.TXD is at 0x4000250C" in p for p in problems), \
        problems
    assert any(p.startswith("port.c (nrf52840): UARTE = 0x40003000") for p in problems), problems


@needs_tools("arm-none-eabi-gcc")
def test_a_wrong_offset_or_field_is_caught(tmp_path: Path) -> None:
    port = _port("nrf52840")
    problems = check(port, _mutated(tmp_path, port, "port.c", "REG(UARTE + 0x50Cu)", "REG(UARTE + 0x508u)"))
    assert any("UARTE_PSEL_TXD = 0x40002508, the vendor's UARTE0.PSEL.TXD is at 0x4000250C" in p for p in problems)
    # the finding of issue 22: UART's 115200 value in a UARTE register
    problems = check(port, _mutated(tmp_path, port, "port.c", "0x01D60000u", "0x01D7E000u"))
    assert any("UARTE_BAUD_VALUE = 0x1D7E000, the vendor's UARTE_BAUDRATE_BAUDRATE_Baud115200 = 0x1D60000" in p
               for p in problems), problems


@needs_tools("arm-none-eabi-gcc")
def test_a_wrong_access_width_is_caught(tmp_path: Path) -> None:
    port = _port("mkr1000")
    problems = check(port, _mutated(tmp_path, port, "port.c", "#define SYSCTRL_DFLLCTRL REG16(",
                                    "#define SYSCTRL_DFLLCTRL REG32("))
    assert any("SYSCTRL_DFLLCTRL is a 32-bit access, the vendor's SYSCTRL_DFLLCTRL is 16-bit" in p for p in problems), \
        problems


@needs_tools("riscv64-unknown-elf-gcc")
def test_an_address_not_in_the_table_is_caught(tmp_path: Path) -> None:
    """A new register macro nobody sorted, and a call that lands between the vendor's registers, both fail."""
    port = _port("esp32c3")
    problems = check(port, _mutated(tmp_path, port, "port.c", "#define GPIO_IN REG(GPIO + 0x3Cu)",
                                    "#define GPIO_IN REG(GPIO + 0x3Cu)\n#define GPIO_NEW REG(GPIO + 0x3FCu)"))
    assert any("GPIO_NEW is neither a register" in p for p in problems), problems
    problems = check(port, _mutated(tmp_path, port, "port.c", "gpio_output(POET_MARK_PIN, 0);",
                                    "gpio_output(POET_MARK_PIN, 0);\n    IO_MUX_GPIO(40u) = 0;"))
    assert any("IO_MUX_GPIO(40u) addresses 0x600090A4, which is no register" in p for p in problems), problems


@needs_tools("arm-none-eabi-gcc")
def test_a_register_hidden_among_the_others_is_caught(tmp_path: Path) -> None:
    port = _port("nrf52840")
    problems = check(port, _mutated(tmp_path, port, "port.c", "#define MX_JEDEC_ID 0x1728C2u",
                                    "#define MX_JEDEC_ID REG(0x40002000u)"))
    assert any("MX_JEDEC_ID (REG(0x40002000u)) addresses hardware but is listed as other" in p for p in problems), \
        problems
