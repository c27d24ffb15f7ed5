"""The smallest --ram at which poet fine-tunes each zoo model, per --train mode, on the small boards.

For every zoo model (batch 1) and train mode: trace the training step, lay out the board's memory
(plan/memory.py: what RAM holds, what flash holds), find the smallest activation arena any plan
meeting a 3x-one-pass deadline needs (the POET MILP, `min_arena_budget`), plan at that --ram, and
print the table docs/benchmarks.md keeps: smallest --ram, energy and time per step of that plan
(modelled from the shipped profile; ops it lacks are estimated), and where the bytes live. A row
whose fixed part or frozen weights do not fit the board says which. Two ways are tried, as `poet
solve` tries them, and the smaller budget wins: fp32, with the frozen layers with the largest weights
in int8 where the fp32 ones do not fit the board's flash (precision.flash_fit); and the frozen prefix
in static int8 with the trained head fused (static_int8.rewrite). Where flash still cannot hold the
frozen weights, the largest int8 conv weights stream from the SD card (placement.place) and the
plan pays their reads. Both update in backward where the graph allows (no gradients kept). Planning
only: no board runs.

    python benchmarks/smallest_ram.py [--boards nrf52840 mkr1000 esp32c3] [--models ...]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from poet.boards import Board, load_board
from poet.errors import PoetError, UsageError
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import ZOO, ModelChoice
from poet.plan.costs import load_profile
from poet.plan.memory import pool_for
from poet.plan.pipeline import plan_step
from poet.plan.placement import place
from poet.plan.precision import apply_storage, costed_storage, flash_fit
from poet.plan.static_int8 import rewrite
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.units import format_size

MODES = ("all", "last:1", "last:2", "bias+last:1")
DEADLINE = 3.0  # x one plain pass, `poet solve`'s default
TIME_LIMIT_S = 60.0


@dataclass
class Fit:
    """One way to run a mode on a board: its graph, its smallest --ram (None: none found) and why not."""

    label: str
    g: TrainingGraph | None
    ram: int | None = None
    why: str = ""


def smallest(board: Board, prof: dict, label: str, g: TrainingGraph) -> Fit:
    static = int(prof["runtime_static_bytes"])
    pool = pool_for(g)
    fixed = static + pool.fixed
    if pool.flash.total > board.model_flash_bytes:
        return Fit(label, None, why=f"flash: needs {format_size(pool.flash.total)}, of "
                                    f"{format_size(board.model_flash_bytes)}")
    if fixed >= board.ram_bytes:
        return Fit(label, None, why=f"RAM: fixed part {format_size(fixed)} > {format_size(board.ram_bytes)}")
    cg = costed_storage(g, board, prof, estimate=True)
    try:
        arena = min_arena_budget(cg, DEADLINE * cg.one_pass_s, time_limit_s=TIME_LIMIT_S)
    except PoetError as e:
        return Fit(label, None, why=str(e))
    if arena is None:
        return Fit(label, None, why="no plan meets the deadline")
    return Fit(label, g, fixed + arena)


def row(board_name: str, model: str, mode: str) -> str:
    """The fp32 graph (frozen weights int8 where flash needs it, precision.flash_fit) and the frozen prefix
    in static int8 (static_int8.rewrite, with the head fused), as `poet solve` plans them: the smaller
    --ram of the two."""
    board = load_board(board_name)
    prof = load_profile(board.name)
    static = int(prof["runtime_static_bytes"])
    head = f"| {model} | {mode} |"
    try:
        _, g = traced(ModelChoice(model, 1, train=mode))
    except PoetError as e:  # e.g. a batch norm that trains cannot see a batch of one
        return f"{head} - | - | - | {str(e).split(': ', 1)[-1][:120]} |"
    fits = []
    int8 = flash_fit(g, board.model_flash_bytes)
    try:
        fits.append(smallest(board, prof, f"fp32, {len(int8)} frozen weight(s) int8" if int8 else "fp32",
                             place(apply_storage(g, {}, set(int8)), board)))
    except UsageError:
        total = pool_for(apply_storage(g, {}, set(int8))).flash.total
        fits.append(Fit("fp32", None, why=f"flash: needs {format_size(total)} with every storable frozen weight "
                                          f"int8, of {format_size(board.model_flash_bytes)}"))
    prefix = rewrite(g)
    if prefix is not None:
        n_q = sum(1 for n in prefix.graph.nodes if n.op in ("conv2d_q", "add_q"))
        fused = " + fused head" if any(n.op == "bn_relu_mean" for n in prefix.graph.nodes) else ""
        label = f"int8 prefix ({n_q} layer{'s' if n_q != 1 else ''}){fused}"
        q = prefix.graph
        try:  # as poet solve: what is left fp32 int8 where flash needs it, then the largest int8 conv weights
            # on the SD card where flash still cannot hold them all (placement.place)
            fits.append(smallest(board, prof, label,
                                 place(apply_storage(q, {}, set(flash_fit(q, board.model_flash_bytes))), board)))
        except UsageError as e:
            fits.append(Fit(label, None, why=str(e)))
    found = sorted((f for f in fits if f.ram is not None), key=lambda f: f.ram or 0)
    if not found:
        return f"{head} - | - | - | " + "; ".join(f"{f.label}: {f.why}" for f in fits) + " |"
    best = found[0]
    assert best.g is not None and best.ram is not None
    pool = pool_for(best.g)
    sd = f"; SD {format_size(pool.flash.aux)} (streamed)" if pool.flash.aux else ""
    where = (f"{best.label}: RAM {format_size(static + pool.fixed)} fixed + arena; flash "
             f"{format_size(pool.flash.total)} (frozen {format_size(pool.flash.frozen)}){sd}")
    if best.ram > board.ram_bytes:
        return f"{head} {format_size(best.ram)} (> board) | - | - | {where} |"
    cg = costed_storage(best.g, board, prof, estimate=True)
    deadline = DEADLINE * cg.one_pass_s
    ram = best.ram
    try:  # the smallest budget's own plan; placing tensors may need a little more (fragmentation)
        p = plan_step(best.g, cg, board, ram, static, deadline, progress=lambda _m: None, time_limit_s=TIME_LIMIT_S)
    except PoetError:
        p = plan_step(best.g, cg, board, min(board.ram_bytes, ram + ram // 20), static, deadline,
                      progress=lambda _m: None, time_limit_s=TIME_LIMIT_S)
        ram = p.budget.ram_bytes
    return (f"{head} {format_size(ram)} | {p.plan.energy_j * 1e6:,.1f} uJ | {p.plan.time_s * 1e3:,.2f} ms | "
            f"{where} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--boards", nargs="+", default=["nrf52840", "mkr1000", "esp32c3"])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    args = ap.parse_args()
    for board in args.boards:
        b = load_board(board)
        print(f"\n### {board}: {format_size(b.ram_bytes)} RAM, {format_size(b.model_flash_bytes)} of flash for "
              "the model and frozen weights\n")
        print("| model (batch 1) | --train | smallest --ram | energy / step | time / step | where the bytes live |")
        print("|---|---|---|---|---|---|")
        for model in args.models:
            for mode in MODES:
                t0 = time.monotonic()
                line = row(board, model, mode)
                print(line, flush=True)
                if time.monotonic() - t0 > 120:
                    print(f"<!-- {model} {mode}: {time.monotonic() - t0:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
