"""Interpreter overhead and kernel efficiency of the runtime on the emulated nRF52840 (QEMU mps2-an386).

Usage: .venv/bin/python benchmarks/runtime_overhead.py [--model cnn-digits] [--steps 3]

QEMU runs with -icount shift=0: one instruction per virtual nanosecond, so the 25 MHz timer
the firmware reads advances once per 40 instructions (emulated counts, not M4 cycles). The
runtime times every schedule instruction around its kernel call; what the step takes beyond
the sum of those is the interpreter's own work (decoding instructions, writing trace records,
bookkeeping): an upper bound on dispatch + tracing, printed as a share of the step. Tracing
alone is measured against the same image built with POET_TRACE=0 (qemu-m4-notrace): the
difference of the two step counts, and the bytes the trace adds to the link after each step.
MACs per executed instruction come from each linear/conv2d node's FLOPs (2 per MAC) and its ticks;
the whole step's, from all of them over every instruction of the step.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from poet.boards import load_board
from poet.device.connect import open_device
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.models.datasets import load_dataset
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import lower
from poet.plan.strategies.checkpoint_all import keep_all

INSTR_PER_TICK = 40  # 1 GHz virtual instruction clock (-icount shift=0) / 25 MHz timer


def run_steps(model_name: str, steps: int, targets: tuple[str, ...] = ("qemu-m4",)) -> tuple[TrainingGraph, dict]:
    """`steps` keep-all training steps of the model at batch 16 on each emulated nRF52840 image in targets."""
    model, spec = get_model(model_name)
    g = trace(model, model_name, spec.input_shape, spec.classes, 16)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    board = load_board("nrf52840")
    data = load_dataset("digits").fitted(tuple(g.input_shape), g.classes, g.model).epoch_batches(16, 0, 0)
    runs = {}
    for target in targets:
        stand_in = replace(board, emulator={**board.emulator, "target": target})
        with tempfile.TemporaryDirectory() as work, open_device(stand_in, None, workdir=Path(work), quiet=True) as dev:
            dev.load_model(g, weights_of(model))
            dev.load_schedule(sched)
            runs[target] = [dev.step(x, y, 0.01) for x, y in data[:steps]]
    return g, runs


def step_macs(g: TrainingGraph) -> float:
    """Every linear and conv2d multiply-add of a step, forward and backward."""
    return sum(n.flops / 2 for n in g.nodes if n.op in ("linear", "conv2d", "linear_bwd", "conv2d_bwd"))


def whole_step(model_name: str, steps: int = 3) -> tuple[float, float]:
    """(multiply-adds, median instructions) of one training step on the emulated M4F."""
    g, runs = run_steps(model_name, steps)
    return step_macs(g), float(np.median([r.step_ticks for r in runs["qemu-m4"]])) * INSTR_PER_TICK


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn-digits")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    g, runs = run_steps(args.model, args.steps, ("qemu-m4", "qemu-m4-notrace"))
    results = runs["qemu-m4"]
    bare = np.median([r.step_ticks for r in runs["qemu-m4-notrace"]])
    assert not runs["qemu-m4-notrace"][0].records, "the notrace image sent trace records"
    step = np.median([r.step_ticks for r in results])
    inside = np.median([sum(rec.ticks for rec in r.records) for r in results])
    n_instr = len(results[0].records)
    print(f"{args.model}, batch 16, keep-all schedule, {n_instr} instructions per step, median of {args.steps} steps")
    print("| step instructions | inside kernels and paging | interpreter + tracing | share |")
    print("|---|---|---|---|")
    print(f"| {step * INSTR_PER_TICK:,.0f} | {inside * INSTR_PER_TICK:,.0f} | "
          f"{(step - inside) * INSTR_PER_TICK:,.0f} | {100 * (step - inside) / step:.3f}% |")
    print()
    print("| step instructions, traced | untraced (POET_TRACE=0) | tracing | share | trace bytes sent after the step |")
    print("|---|---|---|---|---|")
    print(f"| {step * INSTR_PER_TICK:,.0f} | {bare * INSTR_PER_TICK:,.0f} | {(step - bare) * INSTR_PER_TICK:,.0f} | "
          f"{100 * (step - bare) / bare:.3f}% | {16 * n_instr:,} ({-(-n_instr // 60)} frames) |")
    print()
    macs: dict[str, list[float]] = defaultdict(list)
    total = 0.0
    for rec in results[-1].records:
        node = g.nodes[rec.node]
        if node.op in ("linear", "conv2d", "linear_bwd", "conv2d_bwd") and rec.ticks and rec.kind != "free":
            macs[node.op].append((node.flops / 2) / (rec.ticks * INSTR_PER_TICK))
            total += node.flops / 2
    print(f"whole step: {total:,.0f} multiply-adds (linear and conv2d, forward and backward) in "
          f"{step * INSTR_PER_TICK:,.0f} instructions: {total / (step * INSTR_PER_TICK):.3f} MACs per instruction")
    print()
    print("| kernel | nodes | MACs per executed instruction (median) |")
    print("|---|---|---|")
    for op in ("linear", "linear_bwd", "conv2d", "conv2d_bwd"):
        if macs[op]:
            print(f"| {op} | {len(macs[op])} | {np.median(macs[op]):.3f} |")


if __name__ == "__main__":
    main()
