"""`poet boards`: the known boards, and attached ports matched to boards by USB VID:PID.

Ports are pyserial's own ListPortInfo records, filled as comports() fills them on Linux."""

import pytest
from poet.boards import board_names, load_board
from poet.cli import main
from poet.device import serialports
from serial.tools.list_ports_common import ListPortInfo

BOARDS = [load_board(n) for n in board_names()]


def usb_port(device: str, vid: int | None, pid: int | None, product: str | None = None) -> ListPortInfo:
    p = ListPortInfo(device, skip_link_detection=True)
    p.vid, p.pid, p.product = vid, pid, product
    if vid is not None:
        p.apply_usb_info()   # description and hwid, as comports() does for a USB device
    return p


ATTACHED = [
    usb_port("/dev/ttyACM0", 0x1366, 0x1051, "J-Link"),
    usb_port("/dev/ttyACM1", 0x1915, 0x521F, "Open DFU Bootloader"),
    usb_port("/dev/ttyACM2", 0x1915, 0xC00A, "nRF52 USB CDC"),
    usb_port("/dev/ttyACM3", 0x2341, 0x805A, "Nano 33 BLE"),
    usb_port("/dev/ttyACM4", 0x2341, 0x804E, "Arduino MKR1000"),
    usb_port("/dev/ttyACM5", 0x303A, 0x1001, "USB JTAG/serial debug unit"),
    usb_port("/dev/ttyUSB0", 0x1A86, 0x7523, "USB Serial"),
    usb_port("/dev/ttyUSB1", 0x0BDA, 0x8153, "USB 10/100/1000 LAN"),
    usb_port("/dev/ttyS0", None, None),
]


def test_ports_match_boards_by_vid_pid():
    got = {m.device: (m.usb_id, m.verdict) for m in serialports.match_ports(ATTACHED, BOARDS)}
    assert got == {
        "/dev/ttyACM0": ("1366:1051", "nrf52840"),
        "/dev/ttyACM1": ("1915:521f", "nrf52840"),
        "/dev/ttyACM2": ("1915:c00a", "nrf52840"),
        "/dev/ttyACM3": ("2341:805a", "nrf52840"),
        "/dev/ttyACM4": ("2341:804e", "mkr1000"),
        "/dev/ttyACM5": ("303a:1001", "esp32c3"),
        "/dev/ttyUSB0": ("1a86:7523", "USB-serial bridge (any board wired to it)"),
        "/dev/ttyUSB1": ("0bda:8153", "no known board"),
        "/dev/ttyS0": ("-", "no known board"),
    }


@pytest.mark.parametrize("vid,pid,chip", [(0x0403, 0x6001, "FT232R"), (0x0403, 0x6015, "FT231X"),
                                          (0x10C4, 0xEA60, "CP210x"), (0x1A86, 0x7523, "CH340"),
                                          (0x067B, 0x2303, "PL2303")])
def test_bridges_match_no_board_by_themselves(vid, pid, chip):
    (m,) = serialports.match_ports([usb_port("/dev/ttyUSB0", vid, pid)], BOARDS)
    assert m.bridge and m.boards == () and chip in m.product


def test_the_yaml_usb_lists_are_what_matches():
    """A board's `usb` list decides; the product table only names IDs (and adds the Dongle's bootloader)."""
    ids = serialports.board_ids(BOARDS)
    for b in BOARDS:
        for vid, pid in b.raw.get("usb") or []:
            assert b.name in ids[(vid, pid)]
    assert ids[(0x1915, 0x521F)] == ["nrf52840"]


def run_boards(monkeypatch, capsys, ports) -> str:
    monkeypatch.setattr(serialports, "attached", lambda: list(ports))
    assert main(["boards"]) == 0
    return capsys.readouterr().out


def test_boards_lists_boards_and_matched_ports(monkeypatch, capsys):
    out = run_boards(monkeypatch, capsys, ATTACHED)
    lines = out.splitlines()
    row = next(line for line in lines if line.split()[:1] == ["nrf52840"])
    for cell in ("cortex-m4f", "256 KiB", "1 MiB", "nrfutil", "QEMU mps2-an386 (qemu-m4 image)", "Nordic nRF52840"):
        assert cell in row, row
    row = next(line for line in lines if line.split()[:1] == ["rpi4"])
    assert "2 GiB" in row and "1 GiB nv (RAM)" in row and "linux" in row
    assert "process: the linux-aarch64 runtime under qemu-aarch64" in row
    for name in board_names():
        assert any(line.split()[:1] == [name] for line in lines), name
    port_rows = {line.split()[0]: line for line in lines if line.strip().startswith("/dev/")}
    assert port_rows["/dev/ttyACM1"].split()[1:2] == ["1915:521f"]
    assert "nRF52840 Dongle, Open Bootloader (DFU)" in port_rows["/dev/ttyACM1"]
    assert port_rows["/dev/ttyACM4"].endswith("mkr1000")
    assert port_rows["/dev/ttyUSB0"].endswith("USB-serial bridge (any board wired to it)")
    assert "WCH CH340" in port_rows["/dev/ttyUSB0"]
    assert port_rows["/dev/ttyUSB1"].endswith("no known board")


def test_boards_with_nothing_attached_says_the_stand_in_is_used(monkeypatch, capsys):
    out = run_boards(monkeypatch, capsys, [])
    assert "no serial ports attached: every command uses the emulated stand-in above" in out
    assert "`poet flash --emulate`" in out
