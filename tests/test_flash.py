"""`poet flash`: every flasher's exact command line, the checks before a port is touched (missing,
busy, tool missing), the 1200-baud touch on a real pty, and the emulated path for real."""

import os
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import serial
from conftest import needs_tools
from poet.boards import load_board
from poet.device import flash, serialports
from poet.errors import PoetError
from serial.tools.list_ports_common import ListPortInfo

ELF = Path("/fw/build/nrf52840/poet.elf")


def poet(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poet", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def one_line_error(r: subprocess.CompletedProcess, status: int, *words: str) -> None:
    assert r.returncode == status, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poet: ") and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def fake_tool(bindir: Path, name: str, script: str) -> Path:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def pty_port():
    """A pseudo-terminal: its slave is a real tty device node that pyserial opens like a USB port."""
    master, slave = os.openpty()
    yield os.ttyname(slave), slave
    os.close(master)
    os.close(slave)


# ---------------------------------------------------------------- nrfutil

def test_nrfutil_commands_new_and_legacy():
    hexfile, zipfile = "/fw/build/nrf52840/poet.hex", "/fw/build/nrf52840/poet.zip"
    objcopy = ["arm-none-eabi-objcopy", "-O", "ihex", str(ELF), hexfile]
    pkg = ["pkg", "generate", "--hw-version", "52", "--sd-req", "0x00", "--application-version", "1",
           "--application", hexfile, zipfile]
    assert flash.nrfutil_commands(ELF, "/dev/ttyACM0", flash.NRF5SDK) == [
        objcopy,
        ["nrfutil", "nrf5sdk-tools", *pkg],
        ["nrfutil", "nrf5sdk-tools", "dfu", "usb-serial", "--package", zipfile, "--port", "/dev/ttyACM0",
         "--baud-rate", "115200"],
    ]
    assert flash.nrfutil_commands(ELF, "/dev/ttyACM0", flash.LEGACY) == [
        objcopy,
        ["nrfutil", *pkg],
        ["nrfutil", "dfu", "usb-serial", "-pkg", zipfile, "-p", "/dev/ttyACM0", "-b", "115200"],
    ]


def test_nrfutil_flavour_is_read_from_the_installed_tool(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bindir))
    fake_tool(bindir, "nrfutil", 'echo "nrfutil version 6.1.7"\n')
    assert flash.nrfutil_flavour() == flash.LEGACY
    fake_tool(bindir, "nrfutil", '[ "$1" = --version ] && echo "nrfutil 7.13.0 (abc 2024-06-01)"; exit 0\n')
    assert flash.nrfutil_flavour() == flash.NRF5SDK
    fake_tool(bindir, "nrfutil", '[ "$1" = --version ] && { echo "nrfutil 7.13.0"; exit 0; }\n'
              'echo "error: unrecognized subcommand" >&2; exit 2\n')
    with pytest.raises(flash.ToolMissing, match=r"nrfutil 7.13 has no nrf5sdk-tools command: run "
                                                r"`nrfutil install nrf5sdk-tools`"):
        flash.nrfutil_flavour()


def test_nrfutil_missing(monkeypatch):
    monkeypatch.setattr(flash.shutil, "which", lambda _tool: None)
    with pytest.raises(flash.ToolMissing) as exc:
        flash.nrfutil_flavour()
    assert str(exc.value) == ("nrfutil not found: install it from "
                              "https://www.nordicsemi.com/Products/Development-tools/nRF-Util "
                              "(the PyPI nrfutil needs Python <= 3.10)")


@needs_tools("make", "arm-none-eabi-gcc", "arm-none-eabi-objcopy")
def test_nrf52840_flash_runs_objcopy_and_nrfutil_on_the_port(pty_port, tmp_path):
    """The real path to a port (a pty), with nrfutil replaced by a script that records its arguments."""
    name, _ = pty_port
    log = tmp_path / "nrfutil.log"
    fake_tool(tmp_path / "bin", "nrfutil", f'[ "$1" = --version ] && {{ echo "nrfutil 7.13.0"; exit 0; }}\n'
              f'echo "$@" >> {log}\n')
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    r = poet("flash", "--board", "nrf52840", "--port", name, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    elf = flash.firmware.FIRMWARE_DIR / "build/nrf52840/poet.elf"
    want = flash.nrfutil_commands(elf, name, flash.NRF5SDK)
    assert log.read_text().splitlines() == ["nrf5sdk-tools --help"] + [" ".join(c[1:]) for c in want[1:]]
    assert [x for x in r.stdout.splitlines() if x.startswith("$ ")] == [flash.show(c) for c in want]
    assert elf.with_suffix(".hex").read_text().startswith(":")


# ---------------------------------------------------------------- bossac

def test_bossac_command():
    image = Path("/fw/build/mkr1000/poet.bin")
    assert flash.bossac_commands(image, "/dev/ttyACM1") == [
        ["bossac", "-i", "-d", "--port=/dev/ttyACM1", "-U", "--offset=0x2000", "-e", "-w", "-v",
         "/fw/build/mkr1000/poet.bin", "-R"]]


def test_bossac_missing_or_too_old(tmp_path, monkeypatch):
    monkeypatch.setattr(flash.shutil, "which", lambda _tool: None)
    with pytest.raises(flash.ToolMissing, match=r"^bossac not found: install BOSSA 1.9 or later \(Debian: "
                                                r"`apt-get install bossa-cli`\)$"):
        flash.check_bossac()
    monkeypatch.undo()
    bindir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bindir))
    fake_tool(bindir, "bossac", 'echo "Basic Open Source SAM-BA Application (BOSSA) Version 1.7.0"\n'
              'echo "  -e, --erase  erase the entire flash"\n')
    with pytest.raises(flash.ToolMissing, match="older than 1.9 \\(no --offset\\)"):
        flash.check_bossac()
    fake_tool(bindir, "bossac", 'echo "  -o, --offset=OFFSET   start erase/write/read/verify operation at flash"\n')
    flash.check_bossac()


def test_1200_baud_touch_sets_1200_on_the_port_and_closes_it(pty_port):
    name, slave = pty_port
    before = termios.tcgetattr(slave)
    assert before[4] != termios.B1200
    serialports.touch_1200(name)
    attrs = termios.tcgetattr(slave)   # the pty keeps the line settings the touch left
    assert attrs[4] == attrs[5] == termios.B1200   # ispeed, ospeed
    with serial.Serial(name, exclusive=True):   # closed again: nothing holds it
        pass


def _port(device: str, vid: int | None = None, pid: int | None = None) -> ListPortInfo:
    p = ListPortInfo(device, skip_link_detection=True)
    p.vid, p.pid = vid, pid
    return p


def test_wait_for_bootloader_follows_the_board_to_its_new_port():
    app, gone, boot = [_port("/dev/ttyACM0", 0x2341, 0x804E)], [], [_port("/dev/ttyACM1", 0x2341, 0x004E)]
    seen = iter([app, app, gone, boot])
    assert serialports.wait_for_bootloader("/dev/ttyACM0", flash.SAMBA_IDS, list_ports=lambda: next(seen),
                                           sleep=lambda _s: None) == "/dev/ttyACM1"
    # same name, back with the sketch's PID after having left: that is the port to use
    seen = iter([app, gone, app])
    assert serialports.wait_for_bootloader("/dev/ttyACM0", flash.SAMBA_IDS, list_ports=lambda: next(seen),
                                           sleep=lambda _s: None) == "/dev/ttyACM0"


def test_wait_for_bootloader_times_out_with_what_to_do():
    now = [0.0]

    def tick(s: float) -> None:
        now[0] += s

    with pytest.raises(PoetError, match=r"^the board on /dev/ttyACM0 did not come back in its bootloader within "
                                        r"3 s: double-tap its reset button"):
        serialports.wait_for_bootloader("/dev/ttyACM0", flash.SAMBA_IDS, timeout_s=3,
                                        list_ports=lambda: [_port("/dev/ttyACM0", 0x2341, 0x804E)],
                                        sleep=tick, clock=lambda: now[0])


# ---------------------------------------------------------------- esptool

def test_esptool_commands_v4_and_v5():
    elf = Path("/fw/build/esp32c3/poet.elf")
    py = "/venv/bin/python"
    elf2image = [py, "-m", "esptool", "--chip", "esp32c3", "elf2image", "-fm", "dio", "-ff", "80m", "-fs", "4MB",
                 "-o", "/fw/build/esp32c3/poet.bin", "/fw/build/esp32c3/poet.elf"]
    write = [py, "-m", "esptool", "--chip", "esp32c3", "-p", "/dev/ttyACM0", "-b", "460800"]
    assert flash.esptool_commands(elf, "/dev/ttyACM0", 5, python=py) == [
        elf2image, [*write, "write-flash", "0x0", "/fw/build/esp32c3/poet.bin"]]
    assert flash.esptool_commands(elf, "/dev/ttyACM0", 4, python=py) == [
        elf2image, [*write, "write_flash", "0x0", "/fw/build/esp32c3/poet.bin"]]


def test_image_flags_are_the_ports():
    """flash.py's elf2image must make the same image as `make esp32c3` (the port's C3_IMAGE_FLAGS)."""
    port_mk = flash.firmware.FIRMWARE_DIR / "ports/esp32c3/port.mk"
    if not port_mk.exists():
        pytest.skip("no esp32c3 port in this tree")
    line = next(x for x in port_mk.read_text().splitlines() if x.startswith("C3_IMAGE_FLAGS"))
    assert line.split(":=")[1].split() == flash.ESP32C3_IMAGE_FLAGS


# ---------------------------------------------------------------- which image: flash_variants

def _port(device: str, vid: int | None, pid: int | None) -> ListPortInfo:
    p = ListPortInfo(device)
    p.vid, p.pid = vid, pid
    return p


@pytest.mark.parametrize("board,usb,target", [
    ("nrf52840", (0x1915, 0x521F), "nrf52840-dongle"),   # the Dongle's Open USB Bootloader
    ("nrf52840", (0x1366, 0x1051), "nrf52840"),          # a DK's J-Link: the DK's image
    ("nrf52840", (None, None), "nrf52840"),               # no USB identity (a pty, a built-in UART)
    ("esp32c3", (0x303A, 0x1001), "esp32c3-usb"),         # the C3's own USB-Serial/JTAG
    ("esp32c3", (0x10C4, 0xEA60), "esp32c3"),             # a DevKit's CP2102N bridge on UART0
    ("mkr1000", (0x2341, 0x804E), "mkr1000"),             # no variants: the board's image
])
def test_the_port_s_usb_id_picks_the_image(board, usb, target):
    b = load_board(board)
    got, why = flash.flash_target(b, "/dev/ttyX", lambda: [_port("/dev/ttyX", *usb), _port("/dev/other", 1, 2)])
    assert got == target
    assert (why is not None) == (target != b.firmware_target)
    assert got in flash.firmware.TARGETS


def test_an_unlisted_port_or_a_failing_listing_gets_the_default_image():
    b = load_board("esp32c3")
    assert flash.flash_target(b, "/dev/ttyX", lambda: [_port("/dev/other", 0x303A, 0x1001)]) == ("esp32c3", None)

    def broken() -> list:
        raise OSError("no sysfs")

    assert flash.flash_target(b, "/dev/ttyX", broken) == ("esp32c3", None)


def test_every_flash_variant_is_a_firmware_target():
    from poet.boards import board_names

    for name in board_names():
        for v in load_board(name).raw.get("flash_variants") or []:
            assert v["target"] in flash.firmware.TARGETS, (name, v)
            assert len(v["usb"]) == 2 and v["board"], (name, v)


def test_esptool_missing(monkeypatch):
    def absent(name: str) -> str:
        raise flash.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(flash.importlib.metadata, "version", absent)
    with pytest.raises(flash.ToolMissing, match=r"^esptool not found: install it into poet's environment"):
        flash.esptool_major()


def test_installed_esptool_takes_our_spelling():
    """The installed esptool (dev extra) accepts the write command we chose for its major version."""
    try:
        major = flash.esptool_major()
    except flash.ToolMissing:
        pytest.skip("esptool not installed")
    write = flash.esptool_commands(Path("x.elf"), "/dev/null", major)[1][-3]
    r = subprocess.run([sys.executable, "-m", "esptool", write, "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "Deprecated" not in r.stdout + r.stderr, r.stdout + r.stderr


# ---------------------------------------------------------------- Linux boards over ssh

def test_linux_commands_cross_build_and_build_on_target():
    t = flash.parse_ssh("ssh://pi@raspberrypi.local:2222")
    assert t == flash.SshTarget("raspberrypi.local", "pi", 2222)
    assert flash.linux_commands(t, Path("/fw/build/linux-aarch64/poet")) == [
        ["ssh", "-p", "2222", "pi@raspberrypi.local", "mkdir", "-p", ".poet"],
        ["scp", "-P", "2222", "/fw/build/linux-aarch64/poet", "pi@raspberrypi.local:.poet/poet"]]
    t = flash.parse_ssh("ssh://nvidia@jetson")
    assert flash.linux_commands(t, None, build_on_target=True, firmware_dir=Path("/fw")) == [
        ["ssh", "nvidia@jetson", "mkdir", "-p", ".poet/src"],
        ["scp", "-r", "/fw/Makefile", "/fw/core", "/fw/drivers", "/fw/ports", "nvidia@jetson:.poet/src/"],
        ["ssh", "nvidia@jetson", "make", "-C", ".poet/src", "linux"],
        ["ssh", "nvidia@jetson", "cp", ".poet/src/build/linux/poet", ".poet/poet"]]
    assert flash.runtime_over_ssh("ssh://pi@rpi:2222", "rpi4") == [
        "ssh", "-T", "-o", "BatchMode=yes", "-p", "2222", "pi@rpi", ".poet/poet", "rpi4"]


@pytest.mark.parametrize("url", ["ssh://", "ssh://pi@host/some/dir", "ssh://pi@host:port", "http://pi@host"])
def test_bad_ssh_url(url):
    with pytest.raises(PoetError, match=r"a Linux board is reached as ssh://user@host\[:port\]"):
        flash.parse_ssh(url)


FAKE_SSH = """# ssh stand-in: runs the remote command in $FAKE_HOME on this machine
while [ $# -gt 0 ]; do case "$1" in -p|-o) shift 2;; -T) shift;; *) break;; esac; done
shift
cd "$FAKE_HOME" && exec sh -c "$*"
"""
FAKE_SCP = """# scp stand-in: copies into $FAKE_HOME
while [ $# -gt 0 ]; do case "$1" in -P) shift 2;; -r) shift;; *) break;; esac; done
for last; do :; done
n=$#; i=1
for a; do [ $i -lt $n ] && cp -r "$a" "$FAKE_HOME/${last#*:}"; i=$((i+1)); done
exit 0
"""


@needs_tools("make", "cc")
def test_build_on_target_over_ssh_then_the_link_says_hello(tmp_path):
    """The whole --build-on-target path with only ssh and scp replaced by local stand-ins: the sources
    are copied, the runtime is built "there", and poet's ssh link gets the board's HELLO."""
    bindir, home = tmp_path / "bin", tmp_path / "home"
    home.mkdir()
    fake_tool(bindir, "ssh", FAKE_SSH)
    fake_tool(bindir, "scp", FAKE_SCP)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", FAKE_HOME=str(home))
    r = poet("flash", "--board", "rpi4", "--port", "ssh://pi@rpi:2222", "--build-on-target", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "$ ssh -p 2222 pi@rpi make -C .poet/src linux" in r.stdout
    assert "flashed rpi4 at pi@rpi: ~/.poet/poet answers HELLO as board rpi4" in r.stdout
    assert (home / ".poet" / "poet").is_file()


def test_a_failing_tool_is_one_line_with_its_status(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    fake_tool(bindir, "scp", "echo 'scp: Connection refused' >&2; exit 255\n")
    fake_tool(bindir, "ssh", "exit 0\n")
    monkeypatch.setenv("PATH", str(bindir))
    said: list[str] = []
    cmds = flash.linux_commands(flash.parse_ssh("ssh://pi@rpi"), Path("/x/poet"))
    with pytest.raises(PoetError, match=r"^scp failed with exit status 255 \(its output is above\)$"):
        flash.run_commands(cmds, said.append)
    assert said == ["$ ssh pi@rpi mkdir -p .poet", "$ scp /x/poet pi@rpi:.poet/poet"]


def test_missing_tool_stops_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    said: list[str] = []
    with pytest.raises(PoetError, match=r"^ssh not found: install an OpenSSH client"):
        flash.run_commands(flash.linux_commands(flash.parse_ssh("ssh://pi@rpi"), Path("/x/poet")), said.append)
    assert said == []


# ---------------------------------------------------------------- the port checks, through the CLI

def test_no_such_port():
    one_line_error(poet("flash", "--board", "nrf52840", "--port", "/dev/ttyACM97"), 2,
                   "no serial port /dev/ttyACM97: run `poet boards` to see what is attached")


def test_busy_port_for_real(pty_port):
    """A serial monitor holding the port (pyserial exclusive=True: flock) makes the flasher refuse it."""
    name, _ = pty_port
    with serial.Serial(name, exclusive=True):
        with pytest.raises(PoetError) as exc:
            serialports.check_port(name)
        assert str(exc.value) == f"{name} is busy: another program (a serial monitor?) has it open"
        one_line_error(poet("flash", "--board", "esp32c3", "--port", name), 1,
                       f"{name} is busy: another program (a serial monitor?) has it open")
    serialports.check_port(name)   # free again


def test_a_port_that_is_another_board_is_refused(pty_port, monkeypatch):
    name, _ = pty_port
    esp = ListPortInfo(name, skip_link_detection=True)
    esp.vid, esp.pid = 0x303A, 0x1001
    monkeypatch.setattr(serialports, "attached", lambda: [esp])
    with pytest.raises(PoetError) as exc:
        flash.flash(load_board("nrf52840"), name, print)
    assert str(exc.value) == (f"{name} looks like esp32c3 (ESP32-C3 USB-Serial/JTAG, 303a:1001), not nrf52840: "
                              f"pass the right --board or --port (`poet boards` shows what is attached)")


def test_ebusy_from_open_is_the_busy_line():
    exc = serial.SerialException(16, "could not open port /dev/ttyACM0: [Errno 16] Device or resource busy")
    assert str(serialports.port_error("/dev/ttyACM0", exc)) == (
        "/dev/ttyACM0 is busy: another program (a serial monitor?) has it open")


def test_flasher_missing_through_the_cli(pty_port, tmp_path):
    name, _ = pty_port
    env = dict(os.environ, PATH=str(tmp_path))
    one_line_error(poet("flash", "--board", "nrf52840", "--port", name, env=env), 1,
                   "nrfutil not found: install it from https://www.nordicsemi.com/Products/Development-tools/nRF-Util")
    one_line_error(poet("flash", "--board", "mkr1000", "--port", name, env=env), 1, "bossac not found")


@pytest.mark.parametrize("args,words", [
    (["--board", "rpi4", "--port", "/dev/ttyUSB0"], ["rpi4 is flashed over ssh: --port ssh://user@host[:port]"]),
    (["--board", "esp32c3", "--port", "ssh://pi@host"], ["esp32c3 is flashed over a serial port, not ssh"]),
    (["--board", "nrf52840", "--port", "socket://localhost:1"], ["needs a local serial device"]),
    (["--board", "esp32c3", "--build-on-target"], ["--build-on-target is for Linux boards"]),
    (["--board", "rpi4", "--build-on-target"], ["--build-on-target needs --port ssh://user@host"]),
    (["--port", "/dev/ttyACM0", "--emulate"], ["not allowed with argument --port"]),
    (["--board", "nrf9999"], ["unknown board 'nrf9999'"]),
])
def test_bad_flash_arguments(args, words, capsys):
    """In-process (main() is what the console script runs) to spare a Python start per case."""
    from poet.cli import main

    try:
        status = main(["flash", *args])
    except SystemExit as exc:   # argparse's own refusals
        status = int(exc.code or 0)
    err = capsys.readouterr().err
    one_line_error(subprocess.CompletedProcess([], status, "", err), 2, *words)


def test_dry_run_prints_the_exact_commands(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))   # no nrfutil, whatever the machine has
    r = poet("flash", "--board", "nrf52840", "--port", "/dev/ttyACM0", "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    elf = flash.firmware.FIRMWARE_DIR / "build/nrf52840/poet.elf"
    want = [flash.show(c) for c in flash.nrfutil_commands(elf, "/dev/ttyACM0", flash.NRF5SDK)]
    assert r.stdout.splitlines()[1:] == want
    assert r.stdout.startswith("# note: nrfutil not found")


# ---------------------------------------------------------------- emulated: for real

@pytest.mark.parametrize("board", [
    pytest.param("nrf52840", marks=needs_tools("qemu-system-arm", "arm-none-eabi-gcc")),
    pytest.param("esp32c3", marks=needs_tools("qemu-system-riscv32", "riscv64-unknown-elf-gcc")),
    pytest.param("rpi4", marks=needs_tools("qemu-aarch64", "aarch64-linux-gnu-gcc")),
])
def test_flash_emulated_boots_the_image(board):
    r = poet("flash", "--board", board, "--emulate")
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("flashed (emulated): firmware/build/") and f"HELLO: board {board}, firmware " in last, \
        r.stdout
