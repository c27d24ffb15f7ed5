"""Features once, as the planner prices it (issue 48): per model and --train mode on the nRF52840 at 256 KB,
batch 1, the step in epoch 1 and from epoch 2, and a 10-epoch run, without and with the kept features.

Modelled from the shipped profile and the board's storage model (the SD card's datasheet figures): the
whole step as `poet solve` plans it; with a cut, epoch 1 adds the write of the kept tensor and later epochs
read it and run the suffix's plan (plan/features.py). cnn-digits `bias+last:1` trains its first layer's
bias, so nothing before it is frozen: nothing to keep.

    .venv/bin/python benchmarks/features_once.py [--epochs 10] [--samples 100]
"""

from __future__ import annotations

import argparse

from poet.boards import load_board
from poet.graph.tracer import traced
from poet.models.zoo import ModelChoice
from poet.plan.features import features_once
from poet.plan.request import plan_for
from poet.plan.transform import rewrites
from poet.settings import PlanRequest
from poet.units import format_size

CASES = [("resnet18-cifar", "last:1", 1), ("mobilenetv2-cifar-0.35", "last:2", 1), ("mlperf-vww", "last:1", 1),
         ("mlperf-ic", "last:3", 1), ("cnn-digits", "bias+last:1", 16)]


def _ms(s: float) -> str:
    return f"{s * 1e3:,.1f} ms" if s < 10 else f"{s:,.1f} s"


def _mj(j: float) -> str:
    return f"{j * 1e3:,.2f} mJ"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--samples", type=int, default=100, help="samples in the training set (default 100)")
    args = ap.parse_args()
    board = load_board("nrf52840")
    print(f"| model, mode | kept tensor | step, epoch 1 | step, epoch 2+ | {args.epochs} epochs of {args.samples} "
          f"samples, before | after | epoch 2+ cheaper |")
    print("|---|---|---|---|---|---|---|")
    for name, train, batch in CASES:
        request = PlanRequest(ram=(200 if name == "cnn-digits" else 256) * 1024, deadline="3x")
        _, g = traced(ModelChoice(name, batch=batch, train=train))
        prof = rewrites.profile_for(board, request, lambda _m: None)
        whole = plan_for(g, board, request, say=lambda _l: None)
        best, _ = features_once(whole, board, prof, request, int(prof["runtime_static_bytes"]), args.epochs,
                                say=lambda _l: None)
        steps = -(-args.samples // batch)
        before_j, before_s = args.epochs * whole.plan.energy_j * steps, args.epochs * whole.plan.time_s * steps
        after = best.run(args.epochs, steps)
        kept = (f"{best.cut.name} ({format_size(best.cut.sample_bytes)} a sample)" if best.cut else "none")
        ratio = whole.plan.energy_j / best.later.energy_j
        print(f"| {name} `{train}` (batch {batch}) | {kept} | {_mj(best.first.energy_j)}, {_ms(best.first.time_s)} | "
              f"{_mj(best.later.energy_j)}, {_ms(best.later.time_s)} | {_mj(before_j)}, {_ms(before_s)} | "
              f"{_mj(after.energy_j)}, {_ms(after.time_s)} | {ratio:,.1f}x |", flush=True)


if __name__ == "__main__":
    main()
