"""Serial ports attached now, which board each one is, and the checks before a flasher touches one.

Matching is a pure function over pyserial's `ListPortInfo` records (or anything with `.device`,
`.vid`, `.pid`, `.description`), so tests pass made-up ports; only `attached()` asks the OS.
A board is recognised by the USB VID:PID lists in boards/<board>.yaml plus the few IDs below
that the YAMLs do not carry; a USB-serial bridge chip matches no board by itself.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import serial
import serial.tools.list_ports

from poet.boards import Board
from poet.errors import PoetError, UsageError

# What a VID:PID is, for the table. The board of an ID comes from boards/*.yaml; an entry here
# with a board adds that ID to the board (the nRF52840 Dongle's Open Bootloader enumerates as
# 1915:521f, which nrf52840.yaml does not list because the runtime itself never does).
PRODUCTS: dict[tuple[int, int], tuple[str, str | None]] = {
    (0x1915, 0xC00A): ("Nordic nRF52840 (USB CDC)", "nrf52840"),
    (0x1915, 0x521F): ("nRF52840 Dongle, Open Bootloader (DFU)", "nrf52840"),
    (0x1366, 0x1051): ("SEGGER J-Link OB (nRF52840 DK)", "nrf52840"),
    (0x2341, 0x805A): ("Arduino Nano 33 BLE", "nrf52840"),
    (0x2341, 0x804E): ("Arduino MKR1000", "mkr1000"),
    (0x2341, 0x004E): ("Arduino MKR1000, SAM-BA bootloader", "mkr1000"),
    (0x303A, 0x1001): ("ESP32-C3 USB-Serial/JTAG", "esp32c3"),
    (0x0955, 0x7020): ("NVIDIA Jetson USB device port", "jetson"),
}

# Bridge chips: the board behind one is whatever is wired to its pins.
BRIDGES: dict[tuple[int, int], str] = {
    (0x0403, 0x6001): "FTDI FT232R",
    (0x0403, 0x6015): "FTDI FT231X",
    (0x10C4, 0xEA60): "Silicon Labs CP210x",
    (0x1A86, 0x7523): "WCH CH340",
    (0x067B, 0x2303): "Prolific PL2303",
}
BRIDGE_NOTE = "USB-serial bridge (any board wired to it)"

ARDUINO_VID = 0x2341


class PortInfo(Protocol):
    device: str
    vid: int | None
    pid: int | None
    description: str


@dataclass(frozen=True)
class PortMatch:
    device: str
    usb_id: str                 # "1915:521f", or "-" for a port without USB identity
    product: str
    boards: tuple[str, ...]     # the boards this ID belongs to; empty for a bridge or an unknown device
    bridge: bool

    @property
    def verdict(self) -> str:
        if self.boards:
            return ", ".join(self.boards)
        return BRIDGE_NOTE if self.bridge else "no known board"


def board_ids(boards: Iterable[Board]) -> dict[tuple[int, int], list[str]]:
    """(vid, pid) -> board names, from each board's `usb` list and the extra IDs in PRODUCTS."""
    ids: dict[tuple[int, int], list[str]] = {}
    for b in boards:
        for vid, pid in b.raw.get("usb") or []:
            ids.setdefault((int(vid), int(pid)), []).append(b.name)
    for key, (_, name) in PRODUCTS.items():
        if name and name not in ids.get(key, []):
            ids.setdefault(key, []).append(name)
    return ids


def match_ports(ports: Iterable[PortInfo], boards: Iterable[Board]) -> list[PortMatch]:
    ids = board_ids(boards)
    out = []
    for p in sorted(ports, key=lambda q: q.device):
        if p.vid is None or p.pid is None:
            described = p.description and p.description != "n/a"  # pyserial's word for "nothing known"
            out.append(PortMatch(p.device, "-", p.description if described else "no USB identity (a built-in UART?)",
                                 (), False))
            continue
        key = (p.vid, p.pid)
        product = PRODUCTS[key][0] if key in PRODUCTS else BRIDGES.get(key, p.description or "unknown device")
        out.append(PortMatch(p.device, f"{p.vid:04x}:{p.pid:04x}", product, tuple(sorted(ids.get(key, []))),
                             key in BRIDGES))
    return out


def attached() -> list[PortInfo]:
    """The serial ports the OS reports now (pyserial's comports)."""
    return list(serial.tools.list_ports.comports())


# ---------------------------------------------------------------- before a flasher opens a port

def check_port(port: str) -> None:
    """Refuse a port that is not there or that another program holds, in one line each."""
    if "://" in port:
        raise UsageError(f"--port {port}: a flasher needs a local serial device such as /dev/ttyACM0")
    if not os.path.exists(port):
        raise UsageError(f"no serial port {port}: run `poet boards` to see what is attached")
    ser = serial.Serial()
    ser.port = port
    ser.exclusive = True      # flock: fails if a serial monitor holds the port the same way
    ser.dtr = ser.rts = False  # do not pulse the lines ESP32-C3 and others read as reset / boot mode
    try:
        ser.open()
    except serial.SerialException as exc:
        raise port_error(port, exc) from exc
    ser.close()


def open_serial(port: str, baudrate: int = 115200, timeout: float = 1.0) -> serial.SerialBase:
    """Open a board's port for the link, held exclusively: a missing port, one another program holds
    and any other refusal end in one line each. URLs (socket://, rfc2217://) go to pyserial as they are."""
    try:
        if "://" in port:
            return serial.serial_for_url(port, baudrate=baudrate, timeout=timeout)
        if not os.path.exists(port):
            raise UsageError(f"no serial port {port}: run `poet boards` to see what is attached")
        ser = serial.Serial()
        ser.port, ser.baudrate, ser.timeout = port, baudrate, timeout
        ser.exclusive = True  # flock, so two poets (or a serial monitor) never share a board
        ser.open()
        return ser
    except serial.SerialException as exc:
        raise port_error(port, exc) from exc
    except ValueError as exc:
        raise UsageError(f"--port {port}: {exc}") from exc


def port_error(port: str, exc: serial.SerialException) -> PoetError:
    text = str(exc)
    code = exc.errno if isinstance(exc.errno, int) else None
    if code in (errno.EBUSY, errno.EAGAIN) or "busy" in text.lower() or "exclusively lock" in text:
        return PoetError(f"{port} is busy: another program (a serial monitor?) has it open")
    if code == errno.ENOENT:
        return UsageError(f"no serial port {port}: run `poet boards` to see what is attached")
    if code == errno.EACCES:
        return PoetError(f"no permission to open {port}: add yourself to the dialout group (then log in again)")
    return PoetError(f"cannot open {port}: {text}")


def touch_1200(port: str) -> None:
    """The Arduino "1200-baud touch": open at 1200 baud, drop DTR, close; the SAMD's USB stack
    then resets into the SAM-BA bootloader. DTR is set before opening because an explicit DTR
    ioctl after open fails on ports without modem lines (pyserial ignores that only inside open)."""
    ser = serial.Serial()
    ser.port = port
    ser.baudrate = 1200
    ser.dtr = False
    try:
        ser.open()
    except serial.SerialException as exc:
        raise port_error(port, exc) from exc
    ser.close()


def wait_for_bootloader(old_port: str, bootloader_ids: Sequence[tuple[int, int]], timeout_s: float = 10.0,
                        list_ports: Callable[[], list[PortInfo]] = attached,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic) -> str:
    """After the touch the board leaves USB and comes back, often under another name: return the
    port of its bootloader (one of `bootloader_ids`), or an Arduino port that appeared after the
    old one went away."""
    deadline = clock() + timeout_s
    gone = False
    while True:
        ports = list_ports()
        for p in ports:
            if (p.vid, p.pid) in bootloader_ids:
                return p.device
        gone = gone or all(p.device != old_port for p in ports)
        if gone:
            back = [p.device for p in ports if p.vid == ARDUINO_VID]
            if back:
                return back[0]
        if clock() >= deadline:
            raise PoetError(f"the board on {old_port} did not come back in its bootloader within {timeout_s:g} s: "
                            f"double-tap its reset button, then pass the port it shows up on (`poet boards`)")
        sleep(0.2)
