"""The kernel benchmark images (firmware/bench/): build one, run it on its emulated core, read its lines.

Each line is one kernel at one shape: its multiply-adds and the instructions one call takes, for poet's
kernel, its reference loop and, in an image built with peer libraries (Cortex-M4F only), each peer's that
has such a kernel. Under QEMU's
`-icount shift=0` these are instruction counts of the emulated core (not cycles: docs/benchmarks.md says
what they leave out), the same on every machine: a test may compare them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from poet.device.children import die_with_poet
from poet.device.emulator import qemu_binary
from poet.device.firmware import FIRMWARE_DIR, run_make

RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Core:
    """An emulated core the benchmark image is built for and run on."""

    name: str
    what: str  # for a table's title
    target: str  # make target; its image is build/<target>/kernels_bench.elf
    compiler: str
    qemu: tuple[str, ...]  # the QEMU binary, machine and CPU arguments


CORES = {
    "m4": Core("m4", "Cortex-M4F, QEMU mps2-an386", "bench-m4", "arm-none-eabi-gcc",
               ("qemu-system-arm", "-M", "mps2-an386")),
    "m0": Core("m0", "Cortex-M0+ build (soft float), QEMU mps2-an385", "bench-m0", "arm-none-eabi-gcc",
               ("qemu-system-arm", "-M", "mps2-an385")),
    "rv32": Core("rv32", "RV32IMC (soft float), QEMU virt", "bench-rv32", "riscv64-unknown-elf-gcc",
                 ("qemu-system-riscv32", "-M", "virt", "-cpu", "rv32,a=false,f=false,d=false", "-bios", "none")),
}


class BenchError(RuntimeError):
    """The image did not build or run; the message says what to do."""


@dataclass(frozen=True)
class KernelTiming:
    kernel: str
    shape: dict[str, int]  # B, in, out for the dense kernels; B, C, HW, O, k, groups for conv2d
    macs: int  # a convolution's counts its padding's taps too
    poet: int  # instructions per call
    reference: int
    peers: dict[str, int] = field(default_factory=dict)  # PEERS name -> instructions per call
    same_bits: bool = True  # poet's kernel gave its reference's outputs bit for bit, on this core's build

    def per_instr(self, which: str) -> float | None:
        """MACs per instruction of 'poet', 'reference' or a peer (None where that peer has no such kernel)."""
        n = self.peers.get(which) if which in PEERS else getattr(self, which)
        return None if not n else self.macs / n


# The peer libraries an M4F image can hold: name in the image's lines -> the make variables of its sources
# (firmware/bench/bench.mk says what each is built from and how).
PEERS = {"cmsis_dsp": ("CMSIS_DSP",), "cmsis_nn": ("CMSIS_NN", "CMSIS_CORE"), "aifes": ("AIFES",)}
_SUFFIX = {"cmsis_dsp": "-dsp", "cmsis_nn": "-nn", "aifes": "-aifes"}


def run(peers: dict[str, tuple[Path, ...]] | None = None, core: str = "m4") -> list[KernelTiming]:
    """Build the benchmark image for `core` (on the M4F with the given peer libraries beside poet's kernels:
    name -> its source directories, in the order of PEERS' make variables) and run it."""
    c = CORES[core]
    peers = peers or {}
    if peers and core != "m4":
        raise BenchError("the peer libraries are benchmarked on the Cortex-M4F only")
    qemu = qemu_binary() if c.qemu[0] == "qemu-system-arm" else c.qemu[0]
    for tool in ("make", c.compiler, qemu):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} not found: run `make setup` to install the firmware toolchains and QEMU")
    args = [c.target] + [f"{var}={d}" for name in PEERS if name in peers
                         for var, d in zip(PEERS[name], peers[name], strict=True)]
    proc = run_make(*args)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise BenchError("the kernel benchmark image did not build:\n" + "\n".join(tail))
    elf = FIRMWARE_DIR / "build" / (c.target + "".join(_SUFFIX[n] for n in PEERS if n in peers)) / "kernels_bench.elf"
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "bench.out"
        cmd = [qemu, *c.qemu[1:], "-nographic", "-monitor", "none", "-serial", "none",
               "-icount", "shift=0", "-chardev", f"file,id=sh,path={out}",
               "-semihosting-config", "enable=on,target=native,chardev=sh", "-kernel", str(elf)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                                  preexec_fn=die_with_poet())  # a killed poet's benchmark QEMU goes too
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"the kernel benchmark image did not finish in {RUN_TIMEOUT_S} s") from exc
        text = out.read_text() if out.exists() else ""
    if done.returncode != 0 or not text:
        raise BenchError(f"the kernel benchmark image exited with {done.returncode}: {done.stderr.strip()[-300:]}")
    return [_parse(line) for line in text.splitlines() if line.startswith(("poet ", "step "))]


def _parse(line: str) -> KernelTiming:
    """`poet KERNEL DIM=.. ... bits=same|DIFF macs=.. instr=.. ref_instr=.. [cmsis_dsp=..] [cmsis_nn=..] [aifes=..]`,
    or a peer's whole training step, `step MODEL B=.. macs=.. PEER=..` (poet's own is the firmware's:
    benchmarks/runtime_overhead.py): a KernelTiming named train_step_MODEL with poet and reference 0."""
    what, kernel, *fields = line.split()
    text = dict(f.split("=") for f in fields)
    if what == "step":
        kernel, text = f"train_step_{kernel}", {"bits": "same", "instr": "0", "ref_instr": "0", **text}
    same = text.pop("bits") == "same"
    v = {k: int(x) for k, x in text.items()}
    counts = {k: v.pop(k) for k in ("macs", "instr", "ref_instr")}
    peers = {k: v.pop(k) for k in PEERS if k in v}
    return KernelTiming(kernel, v, counts["macs"], counts["instr"], counts["ref_instr"], peers, same)
