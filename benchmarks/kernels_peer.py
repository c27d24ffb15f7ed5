"""poet's kernels beside their reference loops and CMSIS-DSP, on the emulated cores.

Usage: .venv/bin/python benchmarks/kernels_peer.py [--cores m4 m0 rv32] [--cmsis-dsp DIR] [--no-peers]

Builds firmware/bench/'s image for each core (`make -C firmware bench-m4`, `bench-m0`, `bench-rv32`),
runs it under QEMU with -icount shift=0 and prints multiply-adds per instruction for each kernel and
shape (emulated instructions, not cycles: docs/benchmarks.md, "Kernels", says what they leave out).
CMSIS-DSP, on the Cortex-M4F only, is built
from the sources in its PyPI sdist, pinned below by version and SHA-256 and kept in
~/.cache/poet/peers (or --cmsis-dsp DIR, an unpacked copy); where it cannot be had, its column is
left out and a line says why. CMSIS-NN and AIfES are not in this image yet.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tarfile
import urllib.request
from pathlib import Path

from poet.device import kernel_bench

CMSIS_DSP_VERSION = "1.10.3"
CMSIS_DSP_URL = ("https://files.pythonhosted.org/packages/2c/ec/0decbb48985d2eb98739a9bbf4ba090278cc492a7c1a5d5b"
                 "907e8baf67b5/cmsisdsp-1.10.3.tar.gz")
CMSIS_DSP_SHA256 = "307d32298faa7c58db912851027fce35f886fec7eb1a27c4b309ce1a97f47519"
CACHE = Path.home() / ".cache" / "poet" / "peers"


def cmsis_dsp() -> Path:
    """The unpacked CMSIS-DSP sources of the pinned sdist, downloaded once."""
    root = CACHE / f"cmsisdsp-{CMSIS_DSP_VERSION}"
    if (root / "Include" / "arm_math.h").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"cmsisdsp-{CMSIS_DSP_VERSION}.tar.gz"
    if not tarball.exists():
        with urllib.request.urlopen(CMSIS_DSP_URL, timeout=60) as r:
            data = r.read()
        if hashlib.sha256(data).hexdigest() != CMSIS_DSP_SHA256:
            raise ValueError(f"{CMSIS_DSP_URL} does not have the pinned SHA-256")
        tarball.write_bytes(data)
    with tarfile.open(tarball) as tar:
        tar.extractall(CACHE, filter="data")
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cmsis-dsp", type=Path, help="an unpacked CMSIS-DSP source tree (default: the pinned sdist)")
    ap.add_argument("--no-peers", action="store_true", help="poet and its reference loops only")
    ap.add_argument("--cores", nargs="+", choices=sorted(kernel_bench.CORES), default=["m4", "m0", "rv32"],
                    help="emulated cores to run on (default all three)")
    args = ap.parse_args()
    peer: Path | None = None
    if not args.no_peers:
        try:
            peer = args.cmsis_dsp.resolve() if args.cmsis_dsp else cmsis_dsp()
        except (OSError, ValueError, tarfile.TarError) as exc:
            print(f"CMSIS-DSP {CMSIS_DSP_VERSION}: not available ({exc}); its column is left out")
    print("CMSIS-NN, AIfES: not in this image yet")
    for core in args.cores:
        try:
            rows = kernel_bench.run(peer if core == "m4" else None, core)
        except kernel_bench.BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        _table(kernel_bench.CORES[core], rows, peer is not None and core == "m4")
    return 0


def _table(core: kernel_bench.Core, rows: list[kernel_bench.KernelTiming], with_peer: bool) -> None:
    def cell(t: kernel_bench.KernelTiming, which: str) -> str:
        v = t.per_instr(which)
        return "-" if v is None else f"{v:.3f}"

    print(f"\n{core.what}, -icount shift=0: multiply-adds per emulated instruction, one call each\n")
    print(f"| kernel | shape | MACs | reference | poet | CMSIS-DSP {CMSIS_DSP_VERSION if with_peer else ''} "
          "| poet / reference | poet / CMSIS-DSP |")
    print("|---|---|---|---|---|---|---|---|")
    for t in rows:
        vs_peer = f"{t.peer / t.poet:.2f}x" if t.peer else "-"
        shape = " ".join(f"{k}={v}" for k, v in t.shape.items())
        print(f"| {t.kernel} | {shape} | {t.macs:,} | {cell(t, 'reference')} | "
              f"{cell(t, 'poet')} | {cell(t, 'peer')} | {t.reference / t.poet:.2f}x | {vs_peer} |")


if __name__ == "__main__":
    sys.exit(main())
