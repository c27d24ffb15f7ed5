"""Overhead of the op-level instrumentation on a training step, per zoo model.

Usage: .venv/bin/python benchmarks/instrument_overhead.py [--repeats N]
Prints the median wall time of one SGD step (batch 16) plain, under Instrumented
with no hooks, and with the OpTimer tool attached.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from poet.graph.instrument import Instrumented, OpTimer
from poet.models.zoo import get_model

MODELS = ["mlp-digits", "cnn-digits", "lenet", "resnet18-cifar"]


def _inputs(spec, batch: int):  # type: ignore[no-untyped-def]
    if spec.input_dtype == "int64":
        return torch.randint(0, 100, (batch, *spec.input_shape))
    return torch.randn(batch, *spec.input_shape)


def _median_step_s(model, x, y, repeats: int, wrap) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    times, ops = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        with wrap() as ins:
            F.cross_entropy(model(x), y).backward()
        times.append(time.perf_counter() - t0)
        ops = len(ins.events) if ins is not None else 0
    return statistics.median(times), ops


class _Plain:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    print("| model | ops/step | plain ms | instrumented ms | + OpTimer ms | overhead |")
    print("|---|---|---|---|---|---|")
    for name in MODELS:
        model, spec = get_model(name)
        x, y = _inputs(spec, 16), torch.randint(0, spec.classes, (16,))
        plain, _ = _median_step_s(model, x, y, args.repeats, _Plain)
        inst, ops = _median_step_s(model, x, y, args.repeats, lambda m=model: Instrumented(m))

        def timed(m=model):  # type: ignore[no-untyped-def]
            ins = Instrumented(m)
            OpTimer(ins)
            return ins

        tim, _ = _median_step_s(model, x, y, args.repeats, timed)
        print(f"| {name} | {ops} | {plain * 1e3:.2f} | {inst * 1e3:.2f} | {tim * 1e3:.2f} | "
              f"{inst / plain:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
