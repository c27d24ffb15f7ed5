"""Features once on the emulated nRF52840 (issue 48): a 10-epoch `poet train` of each fine-tuning mode
plan_vs_board.py runs, where the planner decides whether to keep a frozen prefix's output after epoch 1,
and what a step then costs in epoch 1 and from epoch 2, planned and on the board.

Each case runs `poet train --epochs 10` on a few samples (the real firmware image in QEMU; time is
emulated instructions at 64 MHz, energy that time x the datasheet's active power plus the board file's
storage model for the card's reads and writes, as the planner costs them). Per step it prints the plan's
cost of epoch 1 (the whole step and the write of the kept tensor) and of epoch 2 on (its read and the
suffix), the board's (its trace, every tick), and the run before and after: "before" is ten epochs of the
whole step, the board's epoch-1 step less its cache writes (the same schedule, without KEEP).

Usage: .venv/bin/python benchmarks/features_emulated.py [--only mlperf-vww ...] [--epochs 10] [--reuse]
Writes its runs under workspace/features-emulated/ (the plans are cached in workspace/runs/plans/).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from plan_vs_board import BOARD, CASES, Case, rows_of, train  # beside this script
from poet.boards import load_board
from poet.energy.accounting import charges
from poet.energy.tracefile import Trace
from poet.paths import workspace
from poet.units import format_size


@dataclass(frozen=True)
class Row:
    case: Case
    kept: str
    plan: tuple[tuple[float, float], tuple[float, float]]  # (J, s) a step: epoch 1, epoch 2 on
    board: tuple[tuple[float, float], tuple[float, float]]
    whole: tuple[float, float]  # the board's epoch-1 step less its cache writes
    epochs: int

    def run(self, which: str) -> float:
        """The run's joules: `before` every epoch the whole step; `after` as the board ran it."""
        n = self.case.steps
        if which == "before":
            return self.epochs * n * self.whole[0]
        return n * self.board[0][0] + (self.epochs - 1) * n * self.board[1][0]


def run_case(case: Case, base: Path, epochs: int, reuse: bool = False) -> Row:
    run = base / f"{case.model}-{case.train.replace(':', '')}"
    if not (reuse and _finished(run, epochs)):
        train(case, run, epochs)
    plan = json.loads((run / "plan.json").read_text())
    hist = json.loads((run / "state.json").read_text())["history"]
    n = case.steps
    board = ((hist[0]["energy_j"] / n, hist[0]["time_s"] / n),
             (sum(h["energy_j"] for h in hist[1:]) / (n * (epochs - 1)), sum(h["time_s"] for h in hist[1:]) /
              (n * (epochs - 1))))
    feats = plan.get("features")
    if feats:
        planned = ((feats["first"][0], feats["first"][1]), (feats["later"][0], feats["later"][1]))
        kept = f"{feats['name']} ({format_size(feats['sample_bytes'])} a sample)"
    else:
        planned = ((plan["energy_j"], plan["time_s"]),) * 2
        kept = "none"
    tr = Trace.load(run / "trace.json")
    first = [c for c in charges(tr, load_board(BOARD)) if c.step < n and c.kind != "cache"]
    whole = (sum(c.energy_j for c in first) / n, sum(c.time_s for c in first) / n)
    return Row(case, kept, planned, board, whole, epochs)


def _finished(run: Path, epochs: int) -> bool:
    try:
        state = json.loads((run / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(state.get("complete")) and len(state.get("history", [])) == epochs


def _j(j: float) -> str:
    return f"{j * 1e3:,.4g} mJ" if j < 1 else f"{j:,.4g} J"


def _cost(j: float, s: float) -> str:
    t = f"{s * 1e3:,.2f} ms" if s < 10 else f"{s:,.1f} s"
    return f"{_j(j)}, {t}"


def table(rows: list[Row]) -> str:
    lines = [f"| model, mode (batch, --ram) | kept | step, epoch 1: plan / board | step, epoch 2+: plan / board | "
             f"worst error | {rows[0].epochs if rows else 10} epochs of the samples: before / after | epoch 2+ "
             "cheaper |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.case
        errs = [abs((p - b) / b) for ps, bs in zip(r.plan, r.board, strict=True) for p, b in zip(ps, bs, strict=True)]
        lines.append(f"| {c.model} `{c.train}` ({c.batch}, {c.ram}) | {r.kept} | {_cost(*r.plan[0])} / "
                     f"{_cost(*r.board[0])} | {_cost(*r.plan[1])} / {_cost(*r.board[1])} | {max(errs):.2%} | "
                     f"{_j(r.run('before'))} / {_j(r.run('after'))} | "
                     f"{r.whole[0] / r.board[1][0]:,.1f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="models to run (default: all five)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--reuse", action="store_true", help="read the runs a previous invocation finished, not run again")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or c.model in args.only]
    base = workspace() / "features-emulated"
    base.mkdir(parents=True, exist_ok=True)
    rows = rows_of(cases, lambda c: run_case(c, base, args.epochs, args.reuse), table)
    print(f"features once on the emulated {BOARD} (QEMU, firmware image; time = emulated instructions at the "
          "board's clock, energy = time x datasheet active power + the board file's storage model):")
    print(table(rows))


if __name__ == "__main__":
    main()
