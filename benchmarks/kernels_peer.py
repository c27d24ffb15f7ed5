"""poet's kernels beside their reference loops, CMSIS-DSP, CMSIS-NN and AIfES, on the emulated cores.

Usage: .venv/bin/python benchmarks/kernels_peer.py [--cores m4 m0 rv32] [--no-peers]
           [--cmsis-dsp DIR] [--cmsis-nn DIR] [--cmsis-core DIR] [--aifes DIR]

Builds firmware/bench/'s image for each core (`make -C firmware bench-m4`, `bench-m0`, `bench-rv32`),
runs it under QEMU with -icount shift=0 and prints multiply-adds per instruction for each kernel and
shape (emulated instructions, not cycles: docs/benchmarks.md, "Kernels", says what they leave out).

The peer libraries are built into the Cortex-M4F image only, from pinned sources, never vendored here:
CMSIS-DSP from its PyPI sdist (version and SHA-256 below); CMSIS-NN, the CMSIS-Core headers it needs
(CMSIS_6) and AIfES for Arduino from the GitHub commits below. Each is looked for in the directory given
(a source tree, or a git repository holding the commit, which is then exported), then in
~/.cache/poet/peers, then downloaded; a source tree that is not the pinned one (its files' SHA-256
differs) is measured with a note saying so. Where a library cannot be had, its column is left out and a
line says why.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from poet.device import kernel_bench

CACHE = Path.home() / ".cache" / "poet" / "peers"

CMSIS_DSP_VERSION = "1.10.3"
CMSIS_DSP_URL = ("https://files.pythonhosted.org/packages/2c/ec/0decbb48985d2eb98739a9bbf4ba090278cc492a7c1a5d5b"
                 "907e8baf67b5/cmsisdsp-1.10.3.tar.gz")
CMSIS_DSP_SHA256 = "307d32298faa7c58db912851027fce35f886fec7eb1a27c4b309ce1a97f47519"


@dataclass(frozen=True)
class Pinned:
    """A peer's sources at one GitHub commit: the folder the image is built from and its files' SHA-256."""

    title: str
    repo: str  # owner/name on GitHub
    commit: str
    folder: str  # inside the repository: what the image's make variable points at
    hashed: tuple[str, ...]  # folders under `folder` whose files tree_sha256 covers
    tree_sha256: str

    @property
    def label(self) -> str:
        return f"{self.title} {self.commit[:7]}"


CMSIS_NN = Pinned("CMSIS-NN", "ARM-software/CMSIS-NN", "99f736a63036613032f9b70de36b493bcd7802d4", ".",
                  ("Include", "Source"), "bb14e9b2a0d39faadcca621fb3c4db641364557496ce1374b3328a334779c30b")
CMSIS_CORE = Pinned("CMSIS-Core (CMSIS_6)", "ARM-software/CMSIS_6", "7f62ddc8ab8e9af22039912b8f9f46a9290f49ba",
                    "CMSIS/Core/Include", (".",),
                    "36dbc8870bd603c3692b281fc0ead9eeb841da8797d0466c2c297698e17ccdf4")
AIFES = Pinned("AIfES 2.2.0", "Fraunhofer-IMS/AIfES_for_Arduino", "07a438213f67e8f9d0271417a9f16be97f1597d2", "src",
               (".",), "81e87ff99ceffc3f0b654a13ed22f92f8b604aef6be7a4ad55f2d437268f0647")


class Unavailable(Exception):
    """A peer's sources cannot be had here; the message says why and what to pass instead."""


def tree_sha256(root: Path, folders: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for sub in folders:
        for f in sorted(p for p in (root / sub).rglob("*") if p.is_file()):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def pinned_sources(pin: Pinned, given: Path | None) -> Path:
    """The folder of `pin`'s sources to build from: from `given` (a source tree or a git repository), the
    cache, or GitHub."""
    cached = CACHE / f"{pin.repo.replace('/', '+')}-{pin.commit[:12]}"
    if given is not None:
        given = given.expanduser().resolve()
        if ((given / "HEAD").is_file() and (given / "objects").is_dir()) or (given / ".git").exists():
            return _export(pin, given, cached)
        folder = given / pin.folder if (given / pin.folder).is_dir() else given
        if not folder.is_dir():
            raise Unavailable(f"{given} is not a directory")
        if tree_sha256(folder, pin.hashed) != pin.tree_sha256:
            print(f"note: {folder} is not {pin.label}'s sources (their SHA-256 differs); measured anyway")
        return folder
    if (cached / pin.folder).is_dir():
        return cached / pin.folder
    url = f"https://codeload.github.com/{pin.repo}/tar.gz/{pin.commit}"
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as exc:
        raise Unavailable(f"cannot download {url} ({exc})") from exc
    tmp = cached.with_suffix(".part")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp, filter="data")
    top = next(tmp.iterdir())  # GitHub's archives hold one folder, <name>-<commit>
    return _settle(pin, top, cached, tmp)


def _export(pin: Pinned, repo: Path, cached: Path) -> Path:
    git = ["git", f"--git-dir={repo / '.git' if (repo / '.git').exists() else repo}"]
    if subprocess.run([*git, "cat-file", "-e", f"{pin.commit}^{{commit}}"], capture_output=True).returncode:
        raise Unavailable(f"the git repository {repo} does not hold commit {pin.commit}")
    tmp = cached.with_suffix(".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    archive = subprocess.run([*git, "archive", pin.commit, pin.folder], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, filter="data")
    return _settle(pin, tmp, cached, tmp)


def _settle(pin: Pinned, top: Path, cached: Path, tmp: Path) -> Path:
    """Check the unpacked sources against the pin and move them into the cache."""
    if tree_sha256(top / pin.folder, pin.hashed) != pin.tree_sha256:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Unavailable(f"the sources of {pin.repo}@{pin.commit[:7]} do not have the pinned SHA-256")
    shutil.rmtree(cached, ignore_errors=True)
    top.rename(cached)
    shutil.rmtree(tmp, ignore_errors=True)
    return cached / pin.folder


def cmsis_dsp() -> Path:
    """The unpacked CMSIS-DSP sources of the pinned sdist, downloaded once."""
    root = CACHE / f"cmsisdsp-{CMSIS_DSP_VERSION}"
    if (root / "Include" / "arm_math.h").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"cmsisdsp-{CMSIS_DSP_VERSION}.tar.gz"
    if not tarball.exists():
        try:
            with urllib.request.urlopen(CMSIS_DSP_URL, timeout=60) as r:
                data = r.read()
        except OSError as exc:
            raise Unavailable(f"cannot download {CMSIS_DSP_URL} ({exc})") from exc
        if hashlib.sha256(data).hexdigest() != CMSIS_DSP_SHA256:
            raise Unavailable(f"{CMSIS_DSP_URL} does not have the pinned SHA-256")
        tarball.write_bytes(data)
    with tarfile.open(tarball) as tar:
        tar.extractall(CACHE, filter="data")
    return root


def peer_sources(args: argparse.Namespace) -> dict[str, tuple[Path, ...]]:
    """Every peer that can be had, as kernel_bench.run takes them; a line for each that cannot."""
    found: dict[str, tuple[Path, ...]] = {}
    try:
        found["cmsis_dsp"] = (args.cmsis_dsp.resolve() if args.cmsis_dsp else cmsis_dsp(),)
    except (OSError, tarfile.TarError, Unavailable) as exc:
        print(f"CMSIS-DSP {CMSIS_DSP_VERSION}: not available ({exc}); its column is left out")
    for name, pins, given, option in (("cmsis_nn", (CMSIS_NN, CMSIS_CORE), (args.cmsis_nn, args.cmsis_core),
                                       ("--cmsis-nn", "--cmsis-core")),
                                      ("aifes", (AIFES,), (args.aifes,), ("--aifes",))):
        try:
            found[name] = tuple(pinned_sources(p, g) for p, g in zip(pins, given, strict=True))
        except (OSError, tarfile.TarError, subprocess.CalledProcessError, Unavailable) as exc:
            what = " and ".join(f"{o} DIR (a checkout of {p.repo} at {p.commit[:7]})"
                                for p, o in zip(pins, option, strict=True))
            print(f"{' + '.join(p.label for p in pins)}: not available ({exc}); its column is left out. "
                  f"Pass {what}")
    return found


TITLES = {"cmsis_dsp": f"CMSIS-DSP {CMSIS_DSP_VERSION}", "cmsis_nn": CMSIS_NN.label, "aifes": AIFES.label}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cmsis-dsp", type=Path, help="an unpacked CMSIS-DSP source tree (default: the pinned sdist)")
    ap.add_argument("--cmsis-nn", type=Path, help=f"CMSIS-NN's sources or git repository ({CMSIS_NN.commit[:7]})")
    ap.add_argument("--cmsis-core", type=Path,
                    help=f"CMSIS_6's sources or git repository, for CMSIS-NN ({CMSIS_CORE.commit[:7]})")
    ap.add_argument("--aifes", type=Path, help=f"AIfES for Arduino's sources or git repository ({AIFES.commit[:7]})")
    ap.add_argument("--no-peers", action="store_true", help="poet and its reference loops only")
    ap.add_argument("--cores", nargs="+", choices=sorted(kernel_bench.CORES), default=["m4", "m0", "rv32"],
                    help="emulated cores to run on (default all three)")
    args = ap.parse_args()
    peers = {} if args.no_peers or "m4" not in args.cores else peer_sources(args)
    for core in args.cores:
        try:
            rows = kernel_bench.run(peers if core == "m4" else None, core)
        except kernel_bench.BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        _table(kernel_bench.CORES[core], [t for t in rows if t.poet],
               [p for p in kernel_bench.PEERS if core == "m4" and p in peers])
        _steps([t for t in rows if not t.poet])
    return 0


def _steps(rows: list[kernel_bench.KernelTiming]) -> None:
    """A peer's whole training step beside poet's (the firmware's, on the emulated nRF52840)."""
    if not rows:
        return
    from runtime_overhead import whole_step  # benchmarks/, beside this script

    print("\nA whole training step, batch 16, emulated M4F: the same multiply-adds (poet's count)\n")
    print("| model | multiply-adds | poet instructions | MACs/instr | peer | instructions | MACs/instr | poet / peer |")
    print("|---|---|---|---|---|---|---|---|")
    for t in rows:
        model = t.kernel.removeprefix("train_step_").replace("_", "-")
        macs, poet = whole_step(model)
        for peer, n in t.peers.items():
            print(f"| {model} | {macs:,.0f} | {poet:,.0f} | {macs / poet:.3f} | {TITLES[peer]} | {n:,} | "
                  f"{t.macs / n:.3f} | {n / poet:.2f}x |")


def _table(core: kernel_bench.Core, rows: list[kernel_bench.KernelTiming], peers: list[str]) -> None:
    def cell(t: kernel_bench.KernelTiming, which: str) -> str:
        v = t.per_instr(which)
        return "-" if v is None else f"{v:.3f}"

    print(f"\n{core.what}, -icount shift=0: multiply-adds per emulated instruction, one call each\n")
    head = ["kernel", "shape", "MACs", "reference", "poet", *(TITLES[p] for p in peers), "poet / reference"]
    if peers:
        head.append("poet / best peer")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for t in rows:
        shape = " ".join(f"{k}={v}" for k, v in t.shape.items())
        cells = [t.kernel, shape, f"{t.macs:,}", cell(t, "reference"), cell(t, "poet"), *(cell(t, p) for p in peers),
                 f"{t.reference / t.poet:.2f}x"]
        if peers:
            best = min(t.peers.items(), key=lambda kv: kv[1], default=None)
            cells.append(f"{best[1] / t.poet:.2f}x ({TITLES[best[0]].split()[0]})" if best else "-")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
