"""`poet flash`: build a board's firmware and put it on the board, or boot its emulated stand-in.

One function per flasher returns the exact command lines (tested as data); `run_commands`
runs them with the tools' own output streaming through. Which flasher a board takes is the
`flasher:` of boards/<board>.yaml: nrfutil (DFU), bossac (after the 1200-baud touch), esptool,
or linux (ssh/scp); which image it writes is the board's `firmware_target`, or one of its
`flash_variants` when the port's USB ID says which board of the kind it is (`flash_target`).
Without a port, "flashing" builds the stand-in's image and boots it: the image is good when its
HELLO names the board.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from poet.boards import Board
from poet.device import firmware, serialports
from poet.device.ssh import REMOTE_DIR, SshTarget, parse_ssh, runtime_over_ssh
from poet.errors import PoetError, UsageError
from poet.progress import Say

NRFUTIL_URL = "https://www.nordicsemi.com/Products/Development-tools/nRF-Util"
MISSING: dict[str, str] = {
    "nrfutil": f"nrfutil not found: install it from {NRFUTIL_URL} (the PyPI nrfutil needs Python <= 3.10)",
    "bossac": "bossac not found: install BOSSA 1.9 or later (Debian: `apt-get install bossa-cli`)",
    "esptool": "esptool not found: install it into poet's environment (`.venv/bin/pip install esptool`)",
    "arm-none-eabi-objcopy": "arm-none-eabi-objcopy not found: run `make setup` to install the firmware toolchains",
    "ssh": "ssh not found: install an OpenSSH client (Debian: `apt-get install openssh-client`)",
    "scp": "scp not found: install an OpenSSH client (Debian: `apt-get install openssh-client`)",
}
ESPTOOL_BAUD = "460800"
NRF_DFU_BAUD = "115200"
SAMBA_IDS = [(0x2341, 0x004E)]   # the MKR1000's SAM-BA bootloader (boards/mkr1000.yaml)
SAMD_APP_OFFSET = "0x2000"       # the Arduino SAMD bootloader takes the first 8 KB of flash


class ToolMissing(PoetError):
    pass


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ToolMissing(MISSING.get(tool, f"{tool} not found"))
    return path


def _output(cmd: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


# ---------------------------------------------------------------- nrf52840: nrfutil DFU

LEGACY, NRF5SDK = "legacy", "nrf5sdk-tools"


def nrfutil_flavour() -> str:
    """nrfutil <= 6 (PyPI) has `pkg` and `dfu` at the top; nRF Util 7+ has them under the
    installable `nrf5sdk-tools` command."""
    exe = require("nrfutil")
    _, out = _output([exe, "--version"])
    m = re.search(r"(\d+)\.\d+", out)
    if m and int(m.group(1)) < 7:
        return LEGACY
    if _output([exe, "nrf5sdk-tools", "--help"])[0] == 0:
        return NRF5SDK
    version = m.group(0) if m else "(unknown version)"
    raise ToolMissing(f"nrfutil {version} has no nrf5sdk-tools command: run `nrfutil install nrf5sdk-tools`")


def nrfutil_commands(elf: Path, port: str, flavour: str) -> list[list[str]]:
    """ELF -> Intel hex -> DFU package (application only, no SoftDevice: --sd-req 0x00) -> USB CDC DFU."""
    hexfile, package = elf.with_suffix(".hex"), elf.with_suffix(".zip")
    objcopy = ["arm-none-eabi-objcopy", "-O", "ihex", str(elf), str(hexfile)]
    pkg = ["pkg", "generate", "--hw-version", "52", "--sd-req", "0x00", "--application-version", "1",
           "--application", str(hexfile), str(package)]
    if flavour == LEGACY:
        return [objcopy, ["nrfutil", *pkg],
                ["nrfutil", "dfu", "usb-serial", "-pkg", str(package), "-p", port, "-b", NRF_DFU_BAUD]]
    return [objcopy, ["nrfutil", "nrf5sdk-tools", *pkg],
            ["nrfutil", "nrf5sdk-tools", "dfu", "usb-serial", "--package", str(package), "--port", port,
             "--baud-rate", NRF_DFU_BAUD]]


# ---------------------------------------------------------------- mkr1000: bossac

def bossac_commands(image: Path, port: str) -> list[list[str]]:
    """BOSSA 1.9: -U the port is USB CDC, --offset past the bootloader, erase + write + verify, -R reset."""
    return [["bossac", "-i", "-d", f"--port={port}", "-U", f"--offset={SAMD_APP_OFFSET}", "-e", "-w", "-v",
             str(image), "-R"]]


def check_bossac() -> None:
    """BOSSA before 1.9 (the Arduino IDE's 1.7 fork) has no --offset and would write over the bootloader."""
    _, out = _output([require("bossac"), "--help"])
    if "--offset" not in out:
        raise ToolMissing("bossac on PATH is older than 1.9 (no --offset): install BOSSA 1.9 or later "
                          "(Debian: `apt-get install bossa-cli`)")


# ---------------------------------------------------------------- esp32c3: esptool

def esptool_major() -> int:
    try:
        version = importlib.metadata.version("esptool")
    except importlib.metadata.PackageNotFoundError:
        raise ToolMissing(MISSING["esptool"]) from None
    return int(version.split(".")[0])


# The image header's flash settings: the same as `make esp32c3` writes (C3_IMAGE_FLAGS in
# firmware/ports/esp32c3/port.mk; a test keeps the two equal), short options that esptool 4 and 5 share.
ESP32C3_IMAGE_FLAGS = ["-fm", "dio", "-ff", "80m", "-fs", "4MB"]


def esptool_commands(elf: Path, port: str, major: int, python: str = sys.executable) -> list[list[str]]:
    """ELF -> ESP image at offset 0 (the ROM loads it); esptool 5 spells its commands with dashes."""
    image = elf.with_suffix(".bin")
    write = "write-flash" if major >= 5 else "write_flash"
    esptool = [python, "-m", "esptool", "--chip", "esp32c3"]
    return [[*esptool, "elf2image", *ESP32C3_IMAGE_FLAGS, "-o", str(image), str(elf)],
            [*esptool, "-p", port, "-b", ESPTOOL_BAUD, write, "0x0", str(image)]]


# ---------------------------------------------------------------- rpi4 / jetson: ssh (poet.ssh)



def linux_commands(target: SshTarget, image: Path | None, build_on_target: bool = False,
                   firmware_dir: Path = firmware.FIRMWARE_DIR) -> list[list[str]]:
    """Copy the cross build, or copy the sources and build the native runtime on the board."""
    if not build_on_target:
        assert image is not None
        return [target.ssh("mkdir", "-p", REMOTE_DIR), target.scp([str(image)], f"{REMOTE_DIR}/poet")]
    src = f"{REMOTE_DIR}/src"
    sources = [str(firmware_dir / p) for p in ("Makefile", "core", "drivers", "ports")]
    return [target.ssh("mkdir", "-p", src),
            target.scp(["-r", *sources], f"{src}/"),
            target.ssh("make", "-C", src, "linux"),
            target.ssh("cp", f"{src}/build/linux/poet", f"{REMOTE_DIR}/poet")]


# ---------------------------------------------------------------- running

def tool_name(cmd: list[str]) -> str:
    return cmd[2] if len(cmd) > 2 and cmd[1] == "-m" else Path(cmd[0]).name


def require_all(cmds: list[list[str]]) -> None:
    for cmd in cmds:
        require(cmd[0])


def show(cmd: list[str]) -> str:
    return "$ " + shlex.join(cmd)


def run_commands(cmds: list[list[str]], say: Say) -> None:
    """Run each command with its output going straight to ours (progress bars included); stop at
    the first failure with one line naming the tool and its exit status."""
    require_all(cmds)
    for cmd in cmds:
        say(show(cmd))
        try:
            status = subprocess.run(cmd).returncode
        except OSError as exc:
            raise PoetError(f"cannot run {tool_name(cmd)}: {exc}") from exc
        if status != 0:
            raise PoetError(f"{tool_name(cmd)} failed with exit status {status} (its output is above)")


# ---------------------------------------------------------------- emulated stand-in

def emulated_commands(board: Board) -> list[list[str]]:
    """What booting the stand-in runs: the image's build, then QEMU or the runtime as a process."""
    from poet.device import emulator

    target = board.emulator_target
    image = firmware.FIRMWARE_DIR / firmware.TARGETS[target].image
    make = ["make", "-C", str(firmware.FIRMWARE_DIR), target]
    if board.emulator.get("kind") == "process":
        return [make, [*firmware.TARGETS[target].runner, str(image), board.name, *firmware.runtime_args(board)]]
    boot = emulator.qemu_command(image, 0, emulator.QemuSpec.from_board(board.emulator))
    return [make, [a.replace("127.0.0.1:0,", "127.0.0.1:<free port>,") for a in boot]]


def stand_in(board: Board) -> str:
    if board.emulator.get("kind") == "process":
        runner = firmware.TARGETS[board.emulator_target].runner
        return f"process: the {board.emulator_target} runtime" + (f" under {' '.join(runner)}" if runner else "")
    return f"QEMU {board.emulator.get('machine', '-')} ({board.emulator_target} image)"


def flash_emulated(board: Board, say: Say) -> str:
    """Build the stand-in's image, boot it, and check its HELLO names the board; returns that name."""
    from poet.device.connect import open_device

    say(f"[flash] {board.name}, emulated: building the stand-in's image and booting it; stand-in: {stand_in(board)}")
    with tempfile.TemporaryDirectory(prefix="poet-flash-") as wd, \
            open_device(board, None, workdir=Path(wd), quiet=True) as dev:
        hello = dev.hello
    if hello.board != board.name:
        raise PoetError(f"the {board.emulator_target} image booted but says it is {hello.board!r}, not {board.name!r}")
    image = firmware.TARGETS[board.emulator_target].image
    say(f"flashed (emulated): firmware/{image} booted; HELLO: board {hello.board}, firmware {hello.fw_version}, "
        f"RAM {hello.ram_bytes} B (pool {hello.pool_bytes} B)")
    return hello.board


# ---------------------------------------------------------------- the command

def flash_target(board: Board, port: str, list_ports: Callable[[], list[serialports.PortInfo]] = serialports.attached,
                 ) -> tuple[str, str | None]:
    """The image to write through `port`, and what picked it: the board file's `flash_variants` name an image
    per USB ID of the port a board is flashed through (the nRF52840 Dongle's bootloader, an ESP32-C3's own
    USB), since those boards need other pins than the board's default image; any other port, or one whose ID
    cannot be read, gets `firmware_target`."""
    variants = board.raw.get("flash_variants") or []
    if not variants:
        return board.firmware_target, None
    try:
        here = [p for p in list_ports() if p.device == port]
    except Exception:  # listing ports is a courtesy here; the default image is the answer without it
        return board.firmware_target, None
    for p in here:
        for v in variants:
            if p.vid is not None and (p.vid, p.pid) == (int(v["usb"][0]), int(v["usb"][1])):
                return str(v["target"]), f"{port} is {v['board']} ({p.vid:04x}:{p.pid:04x})"
    return board.firmware_target, None


def _variant(board: Board, port: str, say: Say) -> str:
    target, why = flash_target(board, port)
    if why:
        say(f"[flash] {why}: writing the {target} image")
    return target


def _build(target: str, dry_run: bool) -> Path:
    """The real board's image: built by make, or only named for a dry run."""
    if dry_run:
        return firmware.FIRMWARE_DIR / firmware.TARGETS[target].image
    try:
        return firmware.build(target, quiet=False)
    except firmware.BuildError as exc:
        if "No rule to make target" in str(exc):
            raise PoetError(f"the {target} firmware port is not in this tree yet (make has no target {target}): "
                            f"boot the emulated stand-in with --emulate meanwhile") from exc
        raise


def flash(board: Board, port: str | None, say: Say, dry_run: bool = False, build_on_target: bool = False) -> None:
    flasher = str(board.raw.get("flasher", ""))
    if build_on_target and flasher != "linux":
        raise UsageError(f"--build-on-target is for Linux boards (rpi4, jetson), not {board.name}")
    if port is None:
        if build_on_target:
            raise UsageError("--build-on-target needs --port ssh://user@host of the board")
        _hint_attached(board, say)
        if dry_run:
            for cmd in emulated_commands(board):
                say(show(cmd))
            say("# then HELLO over its serial line must name the board")
            return
        flash_emulated(board, say)
        return
    if flasher == "linux":
        _flash_linux(board, port, say, dry_run, build_on_target)
        return
    if port.startswith("ssh://"):
        raise UsageError(f"--port {port}: {board.name} is flashed over a serial port, not ssh")
    if not dry_run:
        serialports.check_port(port)
        _check_identity(board, port)
    if flasher == "nrfutil":
        _flash_nrfutil(board, port, say, dry_run)
    elif flasher == "bossac":
        _flash_bossac(board, port, say, dry_run)
    elif flasher == "esptool":
        _flash_esptool(board, port, say, dry_run)
    else:
        raise UsageError(f"boards/{board.name}.yaml names no flasher poet knows ({flasher or 'none'}); "
                         f"known: nrfutil, bossac, esptool, linux")


def _tool_or_note(probe: Callable[[], object], default: object, dry_run: bool, say: Say) -> object:
    """Find the installed tool's flavour; a dry run goes on with the current release's and says why."""
    try:
        return probe()
    except ToolMissing as exc:
        if not dry_run:
            raise
        say(f"# note: {exc}; showing the commands of its current release")
        return default


def _run_or_show(cmds: list[list[str]], say: Say, dry_run: bool) -> None:
    if dry_run:
        for cmd in cmds:
            say(show(cmd))
    else:
        run_commands(cmds, say)


def _flash_nrfutil(board: Board, port: str, say: Say, dry_run: bool) -> None:
    _note_jlink(port, say)
    flavour = str(_tool_or_note(nrfutil_flavour, NRF5SDK, dry_run, say))
    if not dry_run:
        require("arm-none-eabi-objcopy")
    elf = _build(_variant(board, port, say), dry_run)
    _run_or_show(nrfutil_commands(elf, port, flavour), say, dry_run)
    if not dry_run:
        say(f"flashed {board.name} on {port} (nrfutil DFU); the board runs poet now")


def _flash_bossac(board: Board, port: str, say: Say, dry_run: bool) -> None:
    _tool_or_note(check_bossac, None, dry_run, say)
    image = _build(board.firmware_target, dry_run).with_suffix(".bin")
    if not dry_run and not image.is_file():
        raise PoetError(f"the {board.firmware_target} build made no {image.name} for bossac (firmware/ports/"
                        f"{board.firmware_target}/port.mk should write it beside the ELF)")
    if dry_run:
        say(f"# 1200-baud touch on {port}: the board restarts in its SAM-BA bootloader, maybe under another name")
        _run_or_show(bossac_commands(image, port), say, True)
        return
    say(f"[flash] 1200-baud touch on {port}: restarting {board.name} in its bootloader")
    serialports.touch_1200(port)
    boot_port = serialports.wait_for_bootloader(port, SAMBA_IDS)
    if boot_port != port:
        say(f"[flash] the bootloader is on {boot_port}")
    time.sleep(0.5)   # udev gives the new device node its group and mode a moment after it appears
    run_commands(bossac_commands(image, boot_port), say)
    say(f"flashed {board.name} on {boot_port} (bossac); the board runs poet now")


def _flash_esptool(board: Board, port: str, say: Say, dry_run: bool) -> None:
    major = int(str(_tool_or_note(esptool_major, 5, dry_run, say)))
    elf = _build(_variant(board, port, say), dry_run)
    _run_or_show(esptool_commands(elf, port, major), say, dry_run)
    if not dry_run:
        say(f"flashed {board.name} on {port} (esptool); the board runs poet now")


def _flash_linux(board: Board, port: str, say: Say, dry_run: bool, build_on_target: bool) -> None:
    if not port.startswith("ssh://"):
        raise UsageError(f"--port {port}: {board.name} is flashed over ssh: --port ssh://user@host[:port]")
    target = parse_ssh(port)
    image = None if build_on_target else _build(board.firmware_target, dry_run)
    cmds = linux_commands(target, image, build_on_target)
    _run_or_show(cmds, say, dry_run)
    if dry_run:
        say(f"# then the link is: {shlex.join(runtime_over_ssh(port, board.name, firmware.runtime_args(board)))}")
        return
    from poet.device.connect import open_device

    with open_device(board, port, quiet=True) as dev:
        hello = dev.hello
    say(f"flashed {board.name} at {target.dest}: ~/{REMOTE_DIR}/poet answers HELLO as board {hello.board}, "
        f"firmware {hello.fw_version}")


def _hint_attached(board: Board, say: Say) -> None:
    """No --port: the stand-in is used; if the real board seems attached, say how to flash it instead."""
    try:
        ports = serialports.match_ports(serialports.attached(), [board])
    except Exception:  # listing ports is a courtesy here; never fail the emulated path on it
        return
    for p in ports:
        if board.name in p.boards:
            say(f"note: a {board.name} seems attached on {p.device} ({p.product}): "
                f"`poet flash --board {board.name} --port {p.device}` flashes it")


def _note_jlink(port: str, say: Say) -> None:
    """A DK's J-Link virtual COM port reaches the nRF52840's UART, not a USB DFU bootloader."""
    try:
        jlink = any(p.device == port and p.vid == 0x1366 for p in serialports.attached())
    except Exception:  # a courtesy note: never fail the flash on listing ports
        return
    if jlink:
        say(f"note: {port} is a J-Link (nRF52840 DK): USB DFU needs the bootloader on the nRF USB port; over "
            f"J-Link use nrfjprog (firmware/ports/nrf52840/README.md)")


def _check_identity(board: Board, port: str) -> None:
    """Refuse a port whose USB ID says it is another board (a bridge or an unknown ID may be anything)."""
    from poet.boards import board_names, load_board

    here = [p for p in serialports.attached() if p.device == port]
    for m in serialports.match_ports(here, [load_board(n) for n in board_names()]):
        if m.boards and board.name not in m.boards:
            raise UsageError(f"{port} looks like {m.verdict} ({m.product}, {m.usb_id}), not {board.name}: "
                             f"pass the right --board or --port (`poet boards` shows what is attached)")
