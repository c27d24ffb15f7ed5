"""The smallest --ram at which poet fine-tunes each zoo model, per --train mode, on the small boards.

For every zoo model (batch 1 unless told) and train mode: trace the training step, lay out the board's
memory (plan/cost/memory.py: what RAM holds, what flash holds), find the smallest activation arena any plan
meeting a 3x-one-pass deadline needs (the POET MILP, `min_arena_budget`), plan at that --ram (or the
least --ram, to within 1 KiB, whose plan's tensors can be placed at offsets: fragmentation), and
print the table docs/benchmarks.md keeps: smallest --ram, energy and time per step of that plan
(modelled from the shipped profile; ops it lacks are estimated), and where the bytes live. A row
whose fixed part or frozen weights do not fit the board says which. Two ways are tried, as `poet
solve` tries them, and the smaller budget wins: fp32, with the frozen layers with the largest weights
in int8 where the fp32 ones do not fit the board's flash (precision.flash_fit); and the frozen prefix
in static int8 with the trained head fused (static_int8.rewrite). Where flash still cannot hold the
frozen weights, the largest int8 conv weights stream from the SD card and then the largest frozen
dense weights are stored int8, weight-only (placement.place), and the plan pays their reads. Both
update in backward where the graph allows (no gradients kept). Planning only: no board runs.

    python benchmarks/smallest_ram.py [--boards nrf52840 mkr1000 esp32c3] [--models ...]
    python benchmarks/smallest_ram.py --models mlperf-kws mlperf-ic mlperf-vww mlperf-ad \\
        --modes all last:1 last:2 last:3 bias bias+last:1 --batch 1 2 --batch-for mlperf-ad=2,4 \\
        --one-table --jobs 2

--modes: the --train modes (default: all last:1 last:2 bias+last:1). --batch: the batches every model
is planned at (default 1); --batch-for MODEL=N[,N...]: that model's instead (a model whose trained
batch norm cannot see a batch of one). --one-table: one table for every board, with the batch and the
lowered schedule's length against the most the board's images load (their schedule buffer,
POET_SCHEDULE_BLOB_MAX, read from firmware/core/schedule.h and firmware/ports/*/port.mk). --jobs:
rows planned in parallel processes, printed in order.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from poet.boards import Board, load_board
from poet.errors import PoetError, UsageError
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import ZOO, ModelChoice
from poet.plan.cost.costs import load_profile
from poet.plan.cost.memory import pool_for
from poet.plan.lowering.schedule import CRC_BYTES, HEADER_BYTES, INSTR_BYTES, SCHEDULE_BLOB_MAX
from poet.plan.pipeline import Planned, plan_step
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.transform.patches import choose
from poet.plan.transform.placement import place, w8_params
from poet.plan.transform.precision import apply_storage, costed_storage, flash_fit
from poet.plan.transform.static_int8 import rewrite
from poet.units import format_size

MODES = ("all", "last:1", "last:2", "bias+last:1")
DEADLINE = 3.0  # x one plain pass, `poet solve`'s default
TIME_LIMIT_S = 60.0
FIRMWARE = Path(__file__).resolve().parents[1] / "firmware"


@dataclass
class Fit:
    """One way to run a mode on a board: its graph, its smallest --ram (None: none found) and why not."""

    label: str
    g: TrainingGraph | None
    ram: int | None = None
    why: str = ""


@dataclass
class Row:
    """One model, batch and mode on one board: the smallest --ram's plan, or why there is none."""

    board: str
    model: str
    batch: int
    mode: str
    ram: str = "-"
    energy: str = "-"
    time: str = "-"
    schedule: str = "-"
    where: str = ""
    seconds: float = 0.0


def reason(e: BaseException) -> str:
    """One line saying why, for a table cell: no exception class, no shape dump, no newline."""
    msg = " ".join(str(e).split())
    if "Expected more than 1 value per channel" in msg:
        return "does not trace: a batch norm that trains needs a batch of 2 or more (one value per channel)"
    msg = re.sub(r"^model '[^']*' fails on a batch of shape \[[^\]]*\] \([^)]*\): ", "does not trace: ", msg)
    msg = re.sub(r"\b[A-Z]\w*(Error|Exception): ", "", msg)
    return msg if len(msg) <= 240 else msg[:237] + "..."


def schedule_max(board: Board) -> int:
    """The most instructions a schedule can hold on the board's images, real and emulated: their PSCH
    buffer, POET_SCHEDULE_BLOB_MAX (a port.mk's -D, else firmware/core/schedule.h's default; the host's
    SCHEDULE_BLOB_MAX without a firmware tree), less the header and the CRC."""
    h = FIRMWARE / "core" / "schedule.h"
    m = re.search(r"#define POET_SCHEDULE_BLOB_MAX (\d+)", h.read_text()) if h.exists() else None
    default = int(m.group(1)) if m else SCHEDULE_BLOB_MAX
    blobs = []
    for target in {board.firmware_target, board.emulator_target}:
        mk = FIRMWARE / "ports" / target / "port.mk"
        m = re.search(r"-DPOET_SCHEDULE_BLOB_MAX=(\d+)", mk.read_text()) if mk.exists() else None
        blobs.append(int(m.group(1)) if m else default)
    return (min(blobs) - HEADER_BYTES - CRC_BYTES) // INSTR_BYTES


def smallest(board: Board, prof: dict, label: str, g: TrainingGraph) -> Fit:
    static = int(prof["runtime_static_bytes"])
    pool = pool_for(g)
    fixed = static + pool.fixed
    if pool.flash.total > board.model_flash_bytes:
        return Fit(label, None, why=f"flash: needs {format_size(pool.flash.total)}, of "
                                    f"{format_size(board.model_flash_bytes)}")
    if fixed >= board.ram_bytes:
        return Fit(label, None, why=f"RAM: fixed part {format_size(fixed)} > {format_size(board.ram_bytes)}")
    try:
        cg = costed_storage(g, board, prof, estimate=True)
        arena = min_arena_budget(cg, DEADLINE * cg.one_pass_s, time_limit_s=TIME_LIMIT_S)
    except PoetError as e:
        return Fit(label, None, why=reason(e))
    if arena is None:
        return Fit(label, None, why="no plan meets the deadline")
    return Fit(label, g, fixed + arena)


def row(board_name: str, model: str, mode: str, batch: int = 1) -> Row:
    """The fp32 graph (frozen weights int8 where flash needs it, precision.flash_fit) and the frozen prefix
    in static int8 (static_int8.rewrite, with the head fused), as `poet solve` plans them: the smaller
    --ram of the two."""
    t0 = time.monotonic()
    r = Row(board_name, model, batch, mode)
    try:
        _fill(r)
    except Exception as e:  # noqa: BLE001 - a bug in poet or here: one row says so, the others still run
        traceback.print_exc(file=sys.stderr)
        r.ram = r.energy = r.time = r.schedule = "-"
        r.where = f"error ({type(e).__name__}, not a planning result): {reason(e)}"
    r.seconds = time.monotonic() - t0
    return r


def _w8(g: TrainingGraph) -> str:
    """The frozen fp32 weights placement stored int8 (weight-only, computed in fp32), for a label."""
    n = len(w8_params(g))
    return f", {n} frozen weight(s) int8 (weight-only)" if n else ""


def _fill(r: Row) -> None:
    board = load_board(r.board)
    prof = load_profile(board.name)
    static = int(prof["runtime_static_bytes"])
    try:
        _, g = traced(ModelChoice(r.model, r.batch, train=r.mode))
    except PoetError as e:  # e.g. a batch norm that trains cannot see a batch of one
        r.where = reason(e)
        return
    fits = []
    int8 = flash_fit(g, board.model_flash_bytes)
    try:
        placed = place(apply_storage(g, {}, set(int8)), board)
        fits.append(smallest(board, prof, ("fp32" + (f", {len(int8)} frozen weight(s) int8" if int8 else "")
                                           + _w8(placed)), placed))
    except UsageError as e:
        total = pool_for(apply_storage(g, {}, set(int8))).flash.total
        need = re.search(r"flash would need (.+?) of the", str(e))  # placement's own count, with w8 weights
        dense = re.search(r"and (\d+) frozen fp32 weights? stored int8", str(e))
        fits.append(Fit("fp32", None, why=f"flash: needs {need.group(1) if need else format_size(total)} with every "
                                          f"storable frozen weight int8"
                                          f"{f' ({dense.group(1)} weight-only)' if dense else ''}, of "
                                          f"{format_size(board.model_flash_bytes)}"))
    prefix = rewrite(g)
    if prefix is not None:
        n_q = sum(1 for n in prefix.graph.nodes if n.op in ("conv2d_q", "add_q"))
        fused = " + fused head" if any(n.op == "bn_relu_mean" for n in prefix.graph.nodes) else ""
        label = f"int8 prefix ({n_q} layer{'s' if n_q != 1 else ''}){fused}"
        # and its first stage patched as poet solve would at a budget below every option: the one needing least RAM
        # (patches.choose); both planned, the smaller kept (a stage of many strips is many nodes for the MILP)
        least = choose(prefix.graph, 0, static)
        variants = [(label, prefix.graph)]
        if least.patching is not None:
            variants.append((f"{label}, first stage in {least.patching.strips} strips",
                             prefix.patched(least.patching).graph))
        for name, q in variants:
            try:  # as poet solve: what is left fp32 int8 where flash needs it, then the largest int8 conv weights
                # on the SD card where flash still cannot hold them all (placement.place)
                placed = place(apply_storage(q, {}, set(flash_fit(q, board.model_flash_bytes))), board)
                fits.append(smallest(board, prof, name + _w8(placed), placed))
            except UsageError as e:
                fits.append(Fit(name, None, why=reason(e)))
    found = sorted((f for f in fits if f.ram is not None), key=lambda f: f.ram or 0)
    if not found:
        r.where = "; ".join(f"{f.label}: {f.why}" for f in fits)
        return
    best = found[0]
    assert best.g is not None and best.ram is not None
    pool = pool_for(best.g)
    sd = f"; SD {format_size(pool.flash.aux)} (streamed)" if pool.flash.aux else ""
    r.where = (f"{best.label}: RAM {format_size(static + pool.fixed)} fixed + arena; flash "
               f"{format_size(pool.flash.total)} (frozen {format_size(pool.flash.frozen)}){sd}")
    if best.ram > board.ram_bytes:
        r.ram = f"{format_size(best.ram)} (> board)"
        return
    cg = costed_storage(best.g, board, prof, estimate=True)
    deadline = DEADLINE * cg.one_pass_s
    ram = best.ram
    # the smallest budget's own plan; placing tensors at offsets may need more (fragmentation): then 5%,
    # 10%, 20%, 50% more, up to the board's RAM, and the least that places found to within 1 KiB
    def planned(budget: int) -> Planned | str:
        try:
            return plan_step(best.g, cg, board, budget, static, deadline, progress=lambda _m: None,
                             time_limit_s=TIME_LIMIT_S)
        except PoetError as e:
            return reason(e)

    tries = sorted({min(board.ram_bytes, ram + ram * k // 20) for k in (0, 1, 2, 4, 10)})
    low, p = ram - 1, planned(tries[0])  # low: the largest budget known not to place
    for failed, budget in zip(tries, tries[1:], strict=False):
        if not isinstance(p, str):
            break
        low, p = failed, planned(budget)
    if isinstance(p, str):
        r.ram = f"{format_size(ram)} (arena bound; no plan placed up to {format_size(tries[-1])}: {p})"
        return
    high = p.budget.ram_bytes
    while high - low > 1024:  # low fails, high places
        mid = (low + high) // 2
        q = planned(mid)
        low, high, p = (mid, high, p) if isinstance(q, str) else (low, mid, q)
    ram = p.budget.ram_bytes
    r.ram = format_size(ram)
    r.energy = f"{p.plan.energy_j * 1e6:,.1f} uJ"
    r.time = f"{p.plan.time_s * 1e3:,.2f} ms"
    if p.lowered is not None:
        n, most = len(p.lowered.schedule.instrs), schedule_max(board)
        r.schedule = f"{n} of {most}" if n <= most else f"{n} (> {most}: too long)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--boards", nargs="+", default=["nrf52840", "mkr1000", "esp32c3"])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--modes", nargs="+", default=list(MODES), help=f"--train modes (default {' '.join(MODES)})")
    ap.add_argument("--batch", nargs="+", type=int, default=[1], help="batches every model is planned at (default 1)")
    ap.add_argument("--batch-for", action="append", default=[], metavar="MODEL=N[,N...]",
                    help="this model's batches instead of --batch (repeatable)")
    ap.add_argument("--one-table", action="store_true",
                    help="one table for all boards, with the batch and the schedule's length")
    ap.add_argument("--jobs", type=int, default=1, help="rows planned at once (processes; default 1)")
    args = ap.parse_args()
    batches = {m: list(args.batch) for m in args.models}
    for item in args.batch_for:
        name, _, ns = item.partition("=")
        if name not in batches or not re.fullmatch(r"\d+(,\d+)*", ns):
            ap.error(f"--batch-for {item}: MODEL=N[,N...] with MODEL one of --models")
        batches[name] = [int(n) for n in ns.split(",")]
    if min(b for bs in batches.values() for b in bs) < 1:
        ap.error("batches must be at least 1")
    one_batch = len({b for bs in batches.values() for b in bs}) == 1
    work = [(board, model, mode, batch) for board in args.boards for model in args.models
            for batch in batches[model] for mode in args.modes]

    def header(board: str) -> None:
        if args.one_table:
            if board == args.boards[0]:
                print("| board | model | batch | --train | smallest --ram | energy / step | time / step | schedule "
                      "(instructions of the images' most) | where the bytes live |")
                print("|---|---|---|---|---|---|---|---|---|")
            return
        b = load_board(board)
        print(f"\n### {board}: {format_size(b.ram_bytes)} RAM, {format_size(b.model_flash_bytes)} of flash for "
              "the model and frozen weights\n")
        if one_batch:
            print(f"| model (batch {work[0][3]}) | --train | smallest --ram | energy / step | time / step | "
                  "where the bytes live |")
            print("|---|---|---|---|---|---|")
        else:
            print("| model | batch | --train | smallest --ram | energy / step | time / step | where the bytes live |")
            print("|---|---|---|---|---|---|---|")

    def line(r: Row) -> str:
        if args.one_table:
            return (f"| {r.board} | {r.model} | {r.batch} | {r.mode} | {r.ram} | {r.energy} | {r.time} | "
                    f"{r.schedule} | {r.where} |")
        model = f"{r.model} |" if one_batch else f"{r.model} | {r.batch} |"
        return f"| {model} {r.mode} | {r.ram} | {r.energy} | {r.time} | {r.where} |"

    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else _Serial() as ex:
        board = None
        for r in ex.map(row, *zip(*work, strict=True)):
            if r.board != board:
                board = r.board
                header(board)
            print(line(r), flush=True)
            if r.seconds > 120:
                print(f"<!-- {r.model} batch {r.batch} {r.mode}: {r.seconds:.0f} s -->", flush=True)


class _Serial:
    """ProcessPoolExecutor's map and context, in this process (--jobs 1)."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def map(self, fn, *iterables):  # noqa: ANN001, ANN201
        return map(fn, *iterables)


if __name__ == "__main__":
    main()
