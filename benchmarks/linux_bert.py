"""Fine-tuning BERT on the Linux boards: `poet train --board rpi4` of BERT-tiny (every layer) and of
BERT-base (its last two layers), each at a --ram below what keeping every activation needs, so the plan
recomputes or pages; one row per run for docs/benchmarks.md ("Fine-tuning BERT on the Linux boards").

Usage: .venv/bin/python benchmarks/linux_bert.py [--models bert-tiny,bert-base] [--where qemu,native]

Two stand-ins of the board run the same runtime source: `qemu` is what `poet train --board rpi4` starts
with no board attached (the linux-aarch64 cross build under qemu-aarch64, its pool --ram); `native` is
the x86-64 build (firmware/build/linux/poet) started by hand on a pseudo-terminal with that pool and
1 GiB of nv storage, which `poet train --port` then drives as it would a board on a serial line. The
time per step is the runtime's own clock around the step (trace.json step_ticks: this host's wall
clock, neither stand-in is the board's speed), the median over the run's steps; the plan's time is the
board's, modelled from the profile. After the run, PyTorch takes the same steps on the host and the
largest relative difference of a trained tensor is shown.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from poet.boards import load_board  # noqa: E402
from poet.device import firmware  # noqa: E402
from poet.graph.reference import state_tensors, train_steps, weights_of  # noqa: E402
from poet.graph.tracer import traced  # noqa: E402
from poet.models.datasets import load_dataset  # noqa: E402
from poet.models.zoo import ModelChoice  # noqa: E402
from poet.plan.transform.rewrites import Rewrites  # noqa: E402
from poet.run.folder import read_back  # noqa: E402
from poet.units import format_size, parse_size  # noqa: E402

LR = 0.05


@dataclass(frozen=True)
class Case:
    model: str
    train: str
    ram: str
    steps: int
    data: str  # "digits" (read as 64 tokens), or "tokens": random ids in a folder made here


CASES = [Case("bert-tiny", "all", "5.5m", 3, "digits"), Case("bert-base", "last:2", "5.4m", 2, "tokens")]


def token_folder(where: Path, n: int, seq: int, vocab: int) -> Path:
    """n training samples (and one test sample) of random token ids, as `--data DIR` reads them."""
    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, k in (("train", n), ("test", 1)):
        np.save(where / f"{split}_x.npy", rng.integers(0, vocab, (k, seq)))
        np.save(where / f"{split}_y.npy", rng.integers(0, 10, k))
    return where


@contextlib.contextmanager
def native_runtime(workdir: Path, ram: int, nv: int) -> Iterator[str]:
    """The x86-64 runtime serving the rpi4's protocol on a new pty, with the pool and nv storage given."""
    proc = subprocess.Popen([str(firmware.build("linux")), "rpi4", "--pty", "--pool", str(ram), "--nv", str(nv)],
                            cwd=workdir, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


def command(case: Case, data: str, run_dir: Path, port: str | None) -> list[str]:
    return ["poet", "train", "--board", "rpi4", "--model", case.model, "--train", case.train, "--batch", "1",
            "--ram", case.ram, "--data", data, "--data-limit", str(case.steps), "--epochs", "1", "--lr", str(LR),
            "--run-dir", str(run_dir), *(["--port", port] if port else [])]


def vs_pytorch(case: Case, data: str, run_dir: Path, plan: dict) -> float:
    """The largest relative difference of a trained tensor, board against PyTorch's same steps."""
    model, g = traced(ModelChoice(case.model, batch=1, train=case.train))
    g, _ = Rewrites.from_json(plan).apply(g)  # the graph the run's schedule ran on
    names = [n for n, _ in state_tensors(model)]
    batches = load_dataset(data, case.steps).fitted(tuple(g.input_shape), g.classes, g.model, g.loss, g.vocab)
    train_steps(model, batches.epoch_batches(1, 0, 0), LR, frozen=g.frozen, graph=g)
    host = dict(zip(names, weights_of(model), strict=True))
    board = dict(zip(names, read_back(run_dir, g), strict=True))
    return max(float(np.linalg.norm(board[n] - host[n]) / np.linalg.norm(host[n])) for n in names
               if n not in g.frozen)


def run(case: Case, where: str, work: Path) -> str:
    run_dir = work / f"{case.model}-{where}"
    data = case.data
    if data == "tokens":
        _, g = traced(ModelChoice(case.model, batch=1, train=case.train))
        data = str(token_folder(work / "tokens" / case.model, case.steps, g.input_shape[0], g.vocab or 1))
    env = dict(os.environ, POET_WORKSPACE=str(work / "ws"))
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        port = None
        if where == "native":
            port = stack.enter_context(native_runtime(work, parse_size(case.ram), load_board("rpi4").model_flash_bytes))
        cmd = command(case, data, run_dir, port)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        return f"| {case.model} | {case.train} | {case.ram} | failed: {proc.stderr.strip()[-200:]} |"
    plan = json.loads((run_dir / "plan.json").read_text())
    trace = json.loads((run_dir / "trace.json").read_text())
    per_step = float(np.median([s["step_ticks"] for s in trace["steps"]])) / trace["tick_hz"]
    keep_all = plan["ram_bytes"] - plan["arena_budget"] + plan["keep_all_peak"]
    stand_in = "qemu-aarch64 (linux-aarch64)" if where == "qemu" else "native x86-64 (linux, on a pty)"
    shown = " ".join(command(case, "DIR" if case.data == "tokens" else data, Path("RUN"), "PTY" if port else None))
    return (f"| {case.model} | {case.train} | {case.ram} | {format_size(keep_all)} | {plan['strategy']}: "
            f"{plan['recomputes']} recomputes, {plan['page_ins']} page-ins | {plan['time_s']:.3f} s | "
            f"{per_step:.3f} s | {stand_in} | {vs_pytorch(case, data, run_dir, plan):.1e} | {wall:.0f} s | "
            f"`{shown}` |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(c.model for c in CASES))
    ap.add_argument("--where", default="qemu,native", help="qemu, native or both (comma-separated)")
    args = ap.parse_args()
    cases = [c for c in CASES if c.model in args.models.split(",")]
    print("| model | --train | --ram | keep-all needs | plan | plan's time per step (the board, modelled) | "
          "time per step here | where it ran | vs PyTorch (max rel.) | whole run | command |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="poet-bert-") as tmp:
        for case in cases:
            for where in args.where.split(","):
                print(run(case, where, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
