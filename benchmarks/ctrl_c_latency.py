"""How soon `poet solve` ends after a signal, wherever it is (issue 45): a table.

Usage: .venv/bin/python benchmarks/ctrl_c_latency.py [--repeats N] [--time-limit S]

The issue's instance: the POET reference's ResNet-18 on the nRF52840's costs (resnet18_cifar.m4) at
400k, 1.3x, 120 s, which races a second core. Each row starts `python -m poet solve` in a session of
its own, sends the signal once poet has said the row's line (the moment a phase begins), and times
until poet has exited; then how many of its processes (the race's second core) are left. The same
driver as tests/test_signals.py, which asserts what this measures without timing it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))
sys.path.insert(0, str(ROOT / "tests"))

from test_signals import RESNET18, Poet, solve_argv  # noqa: E402

# (what is running when the signal comes, the line poet has said by then, signal)
ROWS = [
    ("heuristics (first line)", "[solve]", signal.SIGINT),
    ("the racer's start", "a second core runs", signal.SIGINT),
    ("row relaxation, round 1", "lower bound", signal.SIGINT),
    ("row relaxation, round 2", "row relaxation, round 1", signal.SIGINT),
    ("row relaxation, round 4", "row relaxation, round 3", signal.SIGINT),
    ("the MILP", "highs: solving", signal.SIGINT),
    ("the MILP", "highs: solving", signal.SIGTERM),
    ("row relaxation, round 2", "row relaxation, round 1", signal.SIGHUP),
]


def measure(words: str, sig: int, limit_s: float) -> tuple[float, float, int, int]:
    """(seconds into the solve the signal was sent, seconds until poet exited, its status, processes left)."""
    poet = Poet(solve_argv(limit_s))
    t0 = time.monotonic()
    try:
        poet.wait_said(words, timeout=10 * limit_s)
        time.sleep(0.3)  # into the phase the line began; the table's verdict is the latency, not this
        sent = poet.kill(sig)
        rc = poet.proc.wait(10 * limit_s)
        latency = time.monotonic() - sent
        left = len(poet.left(timeout=5.0))
        return sent - t0, latency, rc, left
    finally:
        poet.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=120.0)
    args = ap.parse_args()
    if not RESNET18.exists():
        sys.exit(f"{RESNET18} is missing (the POET reference's instances)")
    print(f"`poet solve --graph {RESNET18.name} --semantics reference --ram 400k --deadline 1.3x "
          f"--time-limit {args.time_limit:g}`, {os.cpu_count()} cores; latency: signal sent to poet exited, "
          f"worst of {args.repeats}\n")
    print("| signal during | sent at | signal | exit status | latency | processes left |")
    print("|---|---|---|---|---|---|")
    for what, words, sig in ROWS:
        runs = [measure(words, sig, args.time_limit) for _ in range(args.repeats)]
        at = min(r[0] for r in runs)
        worst = max(r[1] for r in runs)
        codes = sorted({r[2] for r in runs})
        left = max(r[3] for r in runs)
        print(f"| {what} | {at:.1f} s | {signal.Signals(sig).name} | {', '.join(map(str, codes))} | {worst:.2f} s "
              f"| {left} |", flush=True)


if __name__ == "__main__":
    main()
