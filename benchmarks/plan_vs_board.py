"""What the plan predicts a training step costs against what the emulated nRF52840 then measures, for the
fine-tuning modes issue 48 names: cnn-digits `bias+last:1` on the transfer-learning data (its own settings:
batch 16, --ram 200k, benchmarks/transfer_digits.py), and at --ram 256k, batch 1, MLPerf Tiny's ResNet-8
(mlperf-ic) `last:3` and VWW (mlperf-vww) `last:1`, MobileNetV2-0.35 `last:2` and ResNet-18 `last:1`.

Each runs `poet train` for one epoch of a few steps on the emulated board (the real firmware image in QEMU;
times are emulated instructions at 64 MHz, energy that time x the datasheet's active power, paging and SD
reads the board file's storage model, as the planner costs them) and prints, per step, the plan's time and
energy (plan.json), the board's (its trace, every tick of every step), their errors, and how many of the
planned graph's op shapes the profile lacks (their costs estimated, each named in a note by `poet solve`).

Usage: .venv/bin/python benchmarks/plan_vs_board.py [--only mlperf-vww ...] [--profile FILE]
Writes its runs under workspace/plan-vs-board/ (the plans are cached in workspace/runs/plans/).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from poet.boards import load_board
from poet.cli import main as poet
from poet.graph.tracer import traced
from poet.models.zoo import ModelChoice
from poet.paths import workspace
from poet.plan.cost.costs import costed, load_profile
from poet.run.plans import run_graph

BOARD = "nrf52840"
R = TypeVar("R")


@dataclass(frozen=True)
class Case:
    model: str
    train: str
    batch: int
    ram: str
    steps: int  # one epoch of this many steps (--data-limit steps x batch)
    transfer: bool = False  # cnn-digits pretrained on digits 0-4, fine-tuned on 5-9 (transfer_digits.py)


CASES = (
    Case("cnn-digits", "bias+last:1", 16, "200k", 8, transfer=True),
    Case("mlperf-ic", "last:3", 1, "256k", 3),
    Case("mlperf-vww", "last:1", 1, "256k", 3),
    Case("mobilenetv2-cifar-0.35", "last:2", 1, "256k", 2),
    Case("resnet18-cifar", "last:1", 1, "256k", 1),  # about a minute of QEMU a step
)


@dataclass(frozen=True)
class Row:
    case: Case
    plan_s: float
    plan_j: float
    board_s: float
    board_j: float
    estimated: int  # op shapes of the planned graph the profile lacks

    @property
    def time_error(self) -> float:
        return (self.plan_s - self.board_s) / self.board_s

    @property
    def energy_error(self) -> float:
        return (self.plan_j - self.board_j) / self.board_j


def _transfer_inputs(base: Path) -> list[str]:
    """transfer_digits.py's pretrained weights and digits 5-9 folder, made as it makes them."""
    import numpy as np
    from poet.models.datasets import digits_split
    from transfer_digits import _pretrain  # beside this script

    data = base / "digits-5-9"
    data.mkdir(parents=True, exist_ok=True)
    pre = base / "pretrained.pt"
    _pretrain(pre, 10)
    xtr, ytr, _, _ = digits_split()
    np.save(data / "train_x.npy", xtr[ytr >= 5])
    np.save(data / "train_y.npy", ytr[ytr >= 5])
    return ["--weights", str(pre), "--data", str(data), "--lr", "0.1"]


def train(case: Case, run: Path, epochs: int, *extra: str) -> None:
    """`poet train` of `epochs` epochs of case.steps steps on the emulated board, into the folder `run`."""
    if run.exists():
        shutil.rmtree(run)
    inputs = _transfer_inputs(run.parent / "transfer") if case.transfer else []
    argv = ["train", "--board", BOARD, "--emulate", "--model", case.model, "--train", case.train, "--batch",
            str(case.batch), "--ram", case.ram, "--epochs", str(epochs), "--data-limit", str(case.steps * case.batch),
            "--run-dir", str(run), *inputs, *extra]
    print("$ poet " + " ".join(argv), file=sys.stderr, flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = poet(argv)
    if status != 0:
        sys.exit(f"poet train failed ({status}):\n{out.getvalue()[-3000:]}")


def rows_of(cases: list[Case], run_case: Callable[[Case], R], table: Callable[[list[R]], str]) -> list[R]:
    """Each case's row, its table line on stderr as it comes."""
    rows = []
    for c in cases:
        rows.append(run_case(c))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    return rows


def run_case(case: Case, base: Path, profile: Path | None) -> Row:
    """One epoch of case.steps steps on the emulated board; the plan's and the board's step."""
    run = base / f"{case.model}-{case.train.replace(':', '')}"
    train(case, run, 1, *(["--profile", str(profile)] if profile else []))
    plan = json.loads((run / "plan.json").read_text())
    state = json.loads((run / "state.json").read_text())
    steps = state["global_step"]
    board_j = sum(e["energy_j"] for e in state["history"]) / steps
    board_s = sum(e["time_s"] for e in state["history"]) / steps
    return Row(case, plan["time_s"], plan["energy_j"], board_s, board_j, _estimated(case, plan, profile))


def _estimated(case: Case, plan: dict, profile: Path | None) -> int:
    """How many op shapes of the graph the plan ran the profile lacks."""
    _, g = traced(ModelChoice(case.model, batch=case.batch, train=case.train))
    ran, _ = run_graph(g, plan)
    lacking: list[str] = []
    costed(ran, load_board(BOARD), load_profile(BOARD, profile), estimate=True, note=lacking.append)
    return max(0, len(lacking) - 1)  # the note's heading line, then one line per op shape


def table(rows: list[Row]) -> str:
    lines = ["| model, mode (batch, --ram) | steps | plan ms/step | board ms/step | time error | plan mJ/step "
             "| board mJ/step | energy error | op shapes estimated |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.case
        lines.append(f"| {c.model} `{c.train}` ({c.batch}, {c.ram}) | {c.steps} | {r.plan_s * 1e3:,.2f} | "
                     f"{r.board_s * 1e3:,.2f} | {r.time_error:+.2%} | {r.plan_j * 1e3:,.4f} | {r.board_j * 1e3:,.4f} | "
                     f"{r.energy_error:+.2%} | {r.estimated} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="models to run (default: all five)")
    ap.add_argument("--profile", type=Path, help="op-cost profile (default: the planner's, as poet train reads it)")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or c.model in args.only]
    base = workspace() / "plan-vs-board"
    base.mkdir(parents=True, exist_ok=True)
    rows = rows_of(cases, lambda c: run_case(c, base, args.profile), table)
    print(f"plan vs the emulated {BOARD} (QEMU, firmware image; time = emulated instructions at the board's clock, "
          f"energy = time x datasheet active power + the board file's storage model for paging and SD reads):")
    print(table(rows))


if __name__ == "__main__":
    main()
