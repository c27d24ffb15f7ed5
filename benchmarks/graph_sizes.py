"""Where the time and memory of `poet solve --graph` go as graphs grow: the numbers behind
poet.graphfile.MAX_NODES and MAX_FILE_BYTES.

Usage: .venv/bin/python benchmarks/graph_sizes.py [--nodes 1000,10000] [--shapes chain,dag]
                                                   [--timeout 900] [--out DIR]

Each graph is a training-shaped costed graph (the POET reference's schema): an input, a
forward pass, a loss and a backward pass in which every gradient reads the one before it and
the forward tensor it needs. `chain`: every forward node reads the one before it (revolve
applies); `dag`: it also reads the one before that (a residual stream; revolve does not).
Every phase runs in its own process (its peak RSS is its own) with a time limit; the budget
is half the keep-everything peak, the deadline 2x one plain pass.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

PHASES = ("read", "keep_all", "checkpoint-all", "sqrtn", "chen-greedy", "revolve", "dtr", "capuchin", "solve")


def write_graph(path: Path, n: int, shape: str) -> int:
    """A graph of about n nodes, streamed to `path` node by node; returns the node count."""
    f = max(1, (n - 3) // 2)
    costs = ', "compute_s": 0.001, "compute_j": 0.002, "page_in_s": 0.0001, "page_in_j": 0.0001, ' \
            '"page_out_s": 0.0001, "page_out_j": 0.0001}'
    count = 0
    with path.open("w") as fh:
        fh.write(f'{{"model": "{shape}{n}", "param_bytes": 0, "nodes": [\n')

        def node(kind: str, deps: list[int], nbytes: int) -> None:
            nonlocal count
            fh.write((",\n" if count else "") + f'{{"id": {count}, "name": "n{count}", "kind": "{kind}", '
                     f'"deps": {deps}, "bytes": {nbytes}' + costs)
            count += 1

        node("input", [], 1000)
        for k in range(1, f + 1):
            node("forward", [k - 1] if shape == "chain" or k < 2 else [k - 1, k - 2], 1000 + 10 * (k % 7))
        node("loss", [f], 4)
        node("backward", [f + 1, f], 1000)
        for k in range(f, 0, -1):
            node("backward", [count - 1, k - 1], 1000)
        fh.write("]}\n")
    return count


def run_phase(path: str, phase: str) -> dict[str, float | str]:
    """One phase in this process: its seconds, the process's peak RSS and what it found."""
    from poet.graph import file as graphfile
    from poet.graph.file import read_graph
    from poet.plan.strategies import named
    from poet.plan.strategies.base import Options
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.types import POET, CostedGraph

    if phase == "solve":  # the whole command as a user runs it, limits and all (cli imports torch: +200 MB)
        from poet import cli

        ram = str(_half_peak(path))
        t0 = time.perf_counter()
        out = f"exit {cli.main(['solve', '--graph', path, '--ram', ram, '--deadline', '2x'])}"
    else:
        graphfile.MAX_NODES = graphfile.MAX_FILE_BYTES = 10**12  # what a phase costs above the limits too
        t0 = time.perf_counter()
        cg = read_graph(path)
        assert isinstance(cg, CostedGraph)
        out = f"{len(cg)} nodes"
        if phase == "keep_all":
            t0 = time.perf_counter()
            out = f"peak {keep_all(cg).peak_bytes} B"
        elif phase != "read":
            peak = keep_all(cg).peak_bytes
            t0 = time.perf_counter()
            p = named(phase).plan(cg, peak // 2, 2 * cg.one_pass_s, POET, Options())
            out = f"{p.status} {p.note[:50]}"
    return {"s": time.perf_counter() - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "out": out}


def _half_peak(path: str) -> int:
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.types import CostedGraph

    return keep_all(CostedGraph.from_json(path)).peak_bytes // 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1000,10000,100000")
    ap.add_argument("--shapes", default="chain,dag")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per phase (default 900)")
    ap.add_argument("--out", default="/tmp/poet-graph-sizes", help="where the generated graphs go")
    ap.add_argument("--phase", nargs=2, metavar=("FILE", "PHASE"), help=argparse.SUPPRESS)  # the child
    args = ap.parse_args()
    if args.phase:
        sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - the solve's own lines
        res = run_phase(*args.phase)
        sys.stdout = sys.__stdout__
        print(json.dumps(res))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("| graph | nodes | file MB | phase | seconds | peak RSS MB | result |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for n in (int(x) for x in args.nodes.split(",")):
            path = out / f"{shape}{n}.json"
            count = write_graph(path, n, shape)
            mb = path.stat().st_size / 1e6
            for phase in args.phases.split(","):
                try:
                    r = subprocess.run([sys.executable, __file__, "--phase", str(path), phase], capture_output=True,
                                       text=True, timeout=args.timeout)
                    res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else \
                        {"s": float("nan"), "rss_mb": float("nan"), "out": r.stderr.strip().splitlines()[-1][:80]}
                    row = f"{res['s']:.3f} | {res['rss_mb']:.0f} | {res['out']}"
                except subprocess.TimeoutExpired:
                    row = f"> {args.timeout:.0f} | - | killed at the time limit"
                print(f"| {shape} | {count:,} | {mb:.1f} | {phase} | {row} |", flush=True)


if __name__ == "__main__":
    main()
