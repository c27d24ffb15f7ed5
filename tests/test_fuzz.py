"""The libFuzzer harnesses of firmware/fuzz/ (schedule validator, model parser, serial protocol, the device
API's init and restore).

Fast: every seed in corpus/ and every crash ever found in crashes/ replays through its harness under
ASan and UBSan without a report: crashes/ is the regression suite of fixed bugs. Slow (`-m slow`, CI's
second step): each harness fuzzes for POET_FUZZ_SECONDS (default 20 s); a crash fails the test and is
copied into crashes/<harness>/, to be fixed and committed with its fix.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import needs_tools
from fwhelpers import native_link
from poet.device import firmware
from poet.device.protocol import MODEL, DeviceError
from poet.ops import CODE
from poet.plan.lowering.modelblob import KIND_INPUT, KIND_OPTIMIZER, BlobNode, ModelBlob, f32_bits

FIRMWARE = Path(__file__).resolve().parents[1] / "firmware"
FUZZ = FIRMWARE / "fuzz"
# harness -> -max_len: the largest input the firmware would hand it (a mode byte plus a 2 KiB
# schedule buffer; the 4 KiB model buffer; a few uploads of the small nets fuzz_port's pool holds; a bundle
# of up to 32 KiB and the first bytes of a store, fuzz_device.c's limits)
HARNESSES = {"schedule": 1 + 2048, "model": 4096, "protocol": 8192, "device": 4 + 32768 + 8192}

pytestmark = needs_tools("clang", "make")


def rss_limit() -> list[str]:
    """libFuzzer's memory limits, 2 GiB of the harness's own: Linux keeps a process's peak RSS across fork and
    exec, so a harness started from a pytest process that once held 3 GiB (a torch model, QEMU runs) would
    report out-of-memory on its first input against the default -rss_limit_mb=2048."""
    inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KiB on Linux
    return [f"-rss_limit_mb={inherited + 2048}", "-malloc_limit_mb=2048"]


def build(name: str) -> Path:
    proc = firmware.run_make(f"fuzz-{name}")
    assert proc.returncode == 0, f"make fuzz-{name} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return FIRMWARE / "build" / "fuzz" / f"fuzz-{name}"


def inputs(name: str) -> list[Path]:
    return sorted(p for d in ("corpus", "crashes") for p in (FUZZ / d / name).glob("*") if p.is_file())


@pytest.mark.parametrize("name", HARNESSES)
def test_corpus_and_crashes_replay(name: str) -> None:
    exe = build(name)
    files = inputs(name)
    assert any(p.parent.parent.name == "corpus" for p in files), "no seeds: run firmware/fuzz/make_seeds.py"
    # files as arguments: libFuzzer runs each once and stops at the first sanitizer report
    proc = subprocess.run([str(exe), *rss_limit(), *map(str, files)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"fuzz-{name} fails on a corpus or crash input:\n{proc.stderr[-4000:]}"


def test_pool_layout_cannot_wrap(tmp_path: Path) -> None:
    """Found reviewing the protocol while fuzzing it (no fuzz input can show it: exploiting it takes
    a 1 GiB weights upload): 2^28 parameters trained with Adam need params + grads + two state words
    = 4 GiB + 8 bytes of pool, a sum that wrapped to 16 bytes in 32 bits and passed the fit check,
    after which the weights upload would have written 1 GiB from the pool's start."""
    adam = (2, f32_bits(0.9), f32_bits(0.999), f32_bits(1e-8))
    blob = ModelBlob(batch=1, x_elems=1, param_elems=[(1 << 28) - 1, 1],
                     nodes=[BlobNode(CODE["input"], KIND_INPUT, (), 4, (1,)),
                            BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, adam)])
    with native_link(tmp_path, "linux-asan") as link:
        with pytest.raises(DeviceError) as e:
            link.upload(MODEL, blob.encode())
    assert e.value.name == "TOO_BIG"


@pytest.mark.slow
def test_bounded_fuzz_run(tmp_path: Path) -> None:
    """All harnesses at once for the same wall time, each on a scratch copy of its corpus."""
    seconds = int(os.environ.get("POET_FUZZ_SECONDS", "20"))
    runs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for name, max_len in HARNESSES.items():
        exe = build(name)
        corpus, artifacts = tmp_path / name / "corpus", tmp_path / name / "artifacts"
        shutil.copytree(FUZZ / "corpus" / name, corpus)
        artifacts.mkdir()
        cmd = [str(exe), str(corpus), f"-max_total_time={seconds}", f"-max_len={max_len}", "-timeout=20",
               *rss_limit(), "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
        log = (tmp_path / f"{name}.log").open("w")
        runs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True), artifacts)
    failed = []
    for name, (proc, artifacts) in runs.items():
        proc.wait(timeout=seconds + 300)
        found = sorted(artifacts.iterdir())
        if proc.returncode != 0 or found:
            keep = FUZZ / "crashes" / name
            keep.mkdir(parents=True, exist_ok=True)
            for f in found:
                shutil.copy(f, keep / f.name)
            tail = (tmp_path / f"{name}.log").read_text().splitlines()[-30:]
            failed.append(f"fuzz-{name} (exit {proc.returncode}), inputs kept in {keep}:\n" + "\n".join(tail))
    assert not failed, "\n\n".join(failed)
