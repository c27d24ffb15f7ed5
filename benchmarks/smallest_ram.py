"""The smallest --ram at which poet fine-tunes each zoo model, per --train mode, on the small boards.

For every zoo model (batch 1) and train mode: trace the training step, lay out the board's memory
(plan/memory.py: what RAM holds, what flash holds), find the smallest activation arena any plan
meeting a 3x-one-pass deadline needs (the POET MILP, `min_arena_budget`), plan at that --ram, and
print the table docs/benchmarks.md keeps: smallest --ram, energy and time per step of that plan
(modelled from the shipped profile; ops it lacks are estimated), and where the bytes live. A row
whose fixed part or frozen weights do not fit the board says which. Where the fp32 frozen weights
do not fit the board's flash, the frozen layers with the largest weights run in int8 with their
weights stored int8 (precision.flash_fit, as `poet solve` does). Planning only: no board runs.

    python benchmarks/smallest_ram.py [--boards nrf52840 mkr1000 esp32c3] [--models ...]
"""

from __future__ import annotations

import argparse
import time

from poet.boards import load_board
from poet.errors import PoetError, UsageError
from poet.graph.tracer import traced
from poet.models.zoo import ZOO, ModelChoice
from poet.plan.costs import load_profile
from poet.plan.memory import pool_for
from poet.plan.pipeline import plan_step
from poet.plan.precision import apply_storage, costed_storage, flash_fit, int8_storable
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.units import format_size

MODES = ("all", "last:1", "bias+last:1")
DEADLINE = 3.0  # x one plain pass, `poet solve`'s default


def row(board_name: str, model: str, mode: str) -> str:
    board = load_board(board_name)
    prof = load_profile(board.name)
    static = int(prof["runtime_static_bytes"])
    _, g = traced(ModelChoice(model, 1, train=mode))
    head = f"| {model} | {mode} |"
    try:
        int8 = flash_fit(g, board.model_flash_bytes, board.name)
    except UsageError:
        total = pool_for(apply_storage(g, {}, {n.id for n in g.nodes if n.kind == "forward"
                                               and n.attrs.get("w", -1) in int8_storable(g)})).flash.total
        return (f"{head} - | - | - | flash: needs {format_size(total)} with every storable frozen weight int8, of "
                f"{format_size(board.model_flash_bytes)} |")
    g = apply_storage(g, {}, set(int8))
    pool = pool_for(g)
    flash = pool.flash
    where = (f"RAM {format_size(static + pool.fixed)} fixed + arena; flash {format_size(flash.total)} "
             f"(frozen {format_size(flash.frozen)}" + (f", {len(int8)} layers' weights int8)" if int8 else ")"))
    fixed = static + pool.fixed
    if fixed >= board.ram_bytes:
        return f"{head} - | - | - | RAM: fixed part {format_size(fixed)} > {format_size(board.ram_bytes)} |"
    cg = costed_storage(g, board, prof, estimate=True)
    deadline = DEADLINE * cg.one_pass_s
    try:
        arena = min_arena_budget(cg, deadline, time_limit_s=60.0)
    except PoetError as e:
        return f"{head} - | - | - | {e} |"
    if arena is None:
        return f"{head} - | - | - | no plan meets the deadline |"
    ram = fixed + arena
    if ram > board.ram_bytes:
        return f"{head} {format_size(ram)} (> board) | - | - | {where} |"
    try:  # the smallest budget's own plan; placing tensors may need a little more (fragmentation)
        p = plan_step(g, cg, board, ram, static, deadline, progress=lambda _m: None, time_limit_s=60.0)
    except PoetError:
        p = plan_step(g, cg, board, min(board.ram_bytes, ram + ram // 20), static, deadline,
                      progress=lambda _m: None, time_limit_s=60.0)
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
