"""Run the firmware image on QEMU, reachable as a pyserial `socket://` URL.

QEMU is a child we must never leak: it is stopped on every exit path, Ctrl-C
included, and dies with poet when poet itself is killed (poet.children). The
serial port is a TCP server so the host connects only once QEMU is ready
(wait=on holds the guest until then).

QEMU's working directory may be a run's folder, which may come from someone else: what is written
there by name (qemu.log, and poet-swap.bin, which the firmware opens by semihosting as its SD card)
is opened by poet first without following a link, so a link planted there is refused, not written
through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from poet.device.children import spawn
from poet.errors import PoetError
from poet.files import open_in_folder

LOG_FILE = "qemu.log"
SWAP_FILE = "poet-swap.bin"  # the stand-ins' pager file (firmware/ports/shared/semihost_pager.c; device.connect)


@dataclass(frozen=True)
class QemuSpec:
    """Which QEMU runs a board's stand-in: from the `emulator:` section of boards/<board>.yaml."""
    binary: str = "qemu-system-arm"
    machine: str = "mps2-an386"
    cpu: str = "cortex-m4"
    extra_args: tuple[str, ...] = ()   # e.g. `-bios none` for a RISC-V virt machine

    @classmethod
    def from_board(cls, emulator: dict[str, object]) -> QemuSpec:
        d = cls()
        extra = emulator.get("extra_args", ())
        return cls(binary=str(emulator.get("binary", d.binary)), machine=str(emulator.get("machine", d.machine)),
                   cpu=str(emulator.get("cpu", d.cpu)),
                   extra_args=tuple(str(a) for a in extra) if isinstance(extra, list | tuple) else ())


NRF52840 = QemuSpec()


class EmulatorError(PoetError, RuntimeError):
    """QEMU is missing or did not come up."""


@dataclass(frozen=True)
class Emulator:
    url: str
    workdir: Path
    port: int
    process: subprocess.Popen[bytes]


PORT_ATTEMPTS = 4  # tries of a fresh port when QEMU cannot bind the one it was given


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def qemu_binary(spec: QemuSpec = NRF52840) -> str:
    """The QEMU to run: the spec's binary on PATH unless POET_QEMU names another (for the Arm ones)."""
    if spec.binary == "qemu-system-arm":
        return os.environ.get("POET_QEMU", spec.binary)
    return spec.binary


def qemu_command(elf_path: Path, port: int, spec: QemuSpec = NRF52840) -> list[str]:
    """The exact command line; -icount shift=0 makes the tick counts deterministic."""
    return [qemu_binary(spec), "-M", spec.machine, "-cpu", spec.cpu, *spec.extra_args,
            "-nographic", "-monitor", "none",
            "-icount", "shift=0", "-semihosting-config", "enable=on,target=native",
            "-kernel", str(elf_path),
            "-serial", f"tcp:127.0.0.1:{port},server=on,wait=on,nodelay=on"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def start_qemu(elf_path: Path | str, workdir: Path | str | None = None,
               startup_timeout_s: float = 10.0, spec: QemuSpec = NRF52840) -> Iterator[Emulator]:
    """Yield a running QEMU whose UART0 listens on `.url`; the swap file lands in `.workdir`."""
    binary = qemu_binary(spec)
    if shutil.which(binary) is None:
        raise EmulatorError(f"{binary} not found: run `make setup` (or set POET_QEMU to its path)")
    elf = Path(elf_path).resolve()
    if not elf.is_file():
        raise EmulatorError(f"firmware image {elf} does not exist: build it with `make -C firmware <target>`")
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="poet-qemu-"))
        wd = Path(workdir)
        wd.mkdir(parents=True, exist_ok=True)
        log = stack.enter_context(os.fdopen(open_in_folder(wd / LOG_FILE, "QEMU's log"), "w+b"))
        # the firmware opens its card image by name, through whatever is there: made (or checked) here as
        # a regular file of its own, and kept as it is (a card keeps its sectors)
        os.close(open_in_folder(wd / SWAP_FILE, "the emulated SD card"))
        for attempt in range(PORT_ATTEMPTS):
            port = _free_port()
            log.seek(0)
            log.truncate()
            proc = spawn(qemu_command(elf, port, spec), cwd=wd, stdin=subprocess.DEVNULL,
                         stdout=log, stderr=subprocess.STDOUT)
            stack.callback(_stop, proc)
            try:
                _wait_listening(proc, port, startup_timeout_s, log, binary)
                break
            except EmulatorError as e:
                # The free port is only free when asked: another process (or our own bind probe) may
                # hold it at the instant QEMU binds it. Another port then, not a failure.
                if "could not connect serial device" not in str(e) or attempt == PORT_ATTEMPTS - 1:
                    raise
        yield Emulator(f"socket://127.0.0.1:{port}", wd, port, proc)


def _listens(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a listening TCP socket on `port` (Linux: /proc); None where /proc
    cannot say."""
    try:
        table = Path("/proc/net/tcp").read_text().splitlines()[1:]
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    # fields: sl local_address rem_address st ... inode (10th); st 0A is LISTEN
    inodes = {f[9] for f in (line.split() for line in table) if f[1].endswith(f":{port:04X}") and f[3] == "0A"}
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes:
                return True
        except OSError:
            continue
    return False


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout_s: float, log,  # type: ignore[no-untyped-def]
                    binary: str) -> None:
    """Poll until QEMU's serial server exists. We never connect: the first connection is the guest's
    one serial line, so it belongs to the Link. On Linux the socket must be QEMU's own (another
    process may hold the port); elsewhere a bind probe says the port is taken."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            out = log.read().decode(errors="replace").strip()
            raise EmulatorError(f"{binary} exited with status {proc.returncode}: {out[-500:]}")
        owned = _listens(proc.pid, port)
        if owned:
            return
        if owned is None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    return  # the port is taken: QEMU is listening
        time.sleep(0.02)
    raise EmulatorError(f"{binary} did not open its serial port {port} within {timeout_s:g} s")
