"""Time to trace a training graph (`poet graph`) for every zoo model, and BERT-base end to end.

Usage: .venv/bin/python benchmarks/graph_trace.py
Prints, per model: the time to build the model, to trace its graph (shapes on meta
tensors), the node counts and activation bytes; then the wall time of the whole
`poet graph --model bert --layers 12 --hidden 768` command (target: under 10 s).
"""

from __future__ import annotations

import subprocess
import sys
import time

from poet.graph.tracer import trace
from poet.models.zoo import ZOO, get_model


def main() -> None:
    print(f"{'model':24s} {'build s':>8s} {'trace s':>8s} {'fwd':>5s} {'bwd':>5s} {'activations':>14s} "
          f"{'bwd keeps':>14s}")
    for name in ZOO:
        t0 = time.perf_counter()
        model, spec = get_model(name)
        t1 = time.perf_counter()
        g = trace(model, name, spec.input_shape, spec.classes, 16, spec.input_dtype)
        t2 = time.perf_counter()
        kinds = [n.kind for n in g.nodes]
        print(f"{name:24s} {t1 - t0:8.2f} {t2 - t1:8.2f} {kinds.count('forward'):5d} {kinds.count('backward'):5d} "
              f"{g.activation_bytes():14,d} {g.saved_bytes():14,d}")
    cmd = [sys.executable, "-m", "poet", "graph", "--model", "bert", "--layers", "12", "--hidden", "768"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    print(f"\n`poet graph --model bert --layers 12 --hidden 768` (batch 16): {time.perf_counter() - t0:.1f} s wall "
          f"(target < 10 s)")


if __name__ == "__main__":
    main()
