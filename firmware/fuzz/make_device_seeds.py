"""Write fuzz-device's seed corpus (firmware/fuzz/corpus/device/) from real bundles and real saves.

    .venv/bin/python firmware/fuzz/make_device_seeds.py

Each seed is what fuzz_device.c reads: u32 bundle length (with both CRC fix-up bits), a bundle (the small
hand-built nets of tests/fwhelpers.py, keep-all and frugal schedules, SGD and Adam), then the first bytes of
a store: erased, one save, two saves, and a save cut short, each made by the device API itself
(firmware/tests/device_main.c).
The directory is rewritten, not added to. Separate from make_seeds.py, which rewrites the other corpora.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "host"))
sys.path.insert(0, str(REPO / "tests"))

import fwhelpers  # noqa: E402
from poet.device import firmware  # noqa: E402
from poet.export.bundle import make_bundle  # noqa: E402
from poet.plan.lowering.lower import forward_lowered  # noqa: E402
from poet.plan.lowering.modelblob import KIND_OPTIMIZER, f32_bits  # noqa: E402

STORE = 32 * 1024  # fuzz_device.c's STORE_BYTES


def _adam(blob):  # type: ignore[no-untyped-def]
    """The same net with Adam: the optimizer node's a0..a3."""
    nodes = [replace(n, attrs=(2, f32_bits(0.9), f32_bits(0.999), f32_bits(1e-8)))
             if n.kind == KIND_OPTIMIZER else n for n in blob.nodes]
    return replace(blob, nodes=nodes)


def _session(bundle: bytes, steps: int, saves: int, cut: int | None, wd: Path, net: fwhelpers.Net) -> bytes:
    """The store after `steps` steps with a save after each of the last `saves` (the last one cut after
    `cut` bytes when given)."""
    (wd / "b.bin").write_bytes(bundle)
    store = wd / "s.bin"
    store.unlink(missing_ok=True)
    req = bytearray()
    for k, (x, y) in enumerate(fwhelpers.make_batches(net, steps, seed=5)):
        req += b"S" + np.ascontiguousarray(x, "<f4").tobytes() + np.ascontiguousarray(y, "<i4").tobytes()
        if k >= steps - saves:
            if cut is not None and k == steps - 1:
                req += b"K" + struct.pack("<I", cut)
            req += b"V"
    subprocess.run([str(firmware.build("device-run")), str(wd / "b.bin"), str(store)], input=bytes(req),
                   capture_output=True, timeout=120)
    return store.read_bytes()[:STORE]


def main() -> None:
    out = HERE / "corpus" / "device"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for net in (fwhelpers.mlp(), fwhelpers.cnn()):
            for blob in (net.blob, _adam(net.blob)):
                params = fwhelpers.init_params(net, seed=1)
                for sched in (fwhelpers.keep_all(blob), fwhelpers.frugal(blob)):
                    bundle = make_bundle(blob, params, sched, forward_lowered(blob).schedule, 0.05).encode()
                    stores = [b"", _session(bundle, 2, 1, None, Path(tmp), net),
                              _session(bundle, 3, 2, None, Path(tmp), net),
                              _session(bundle, 3, 2, 5000, Path(tmp), net)]
                    for store in stores:
                        # the top bits: the harness fixes the CRCs up after a mutation (fuzz_device.c)
                        seed = struct.pack("<I", len(bundle) | 0xC0000000) + bundle + store.rstrip(b"\xff")
                        (out / hashlib.sha1(seed).hexdigest()[:16]).write_bytes(seed)
                        n += 1
    print(f"{n} seeds in {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
