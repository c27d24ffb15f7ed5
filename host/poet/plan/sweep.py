"""`poet sweep`: every strategy over a grid of RAM budgets and deadlines, in parallel processes,
into a CSV and the POET paper's plots (Fig. 3 energy vs RAM, Fig. 4 energy vs deadline,
Fig. 5 overhead against Capuchin)."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from poet.boards import Board
from poet.device.children import signals_held
from poet.errors import UsageError
from poet.files import write_atomic
from poet.graph.training_graph import TrainingGraph
from poet.plan.types import POET, REFERENCE, CostedGraph, Plan, Semantics
from poet.progress import Say
from poet.units import parse_size


@dataclass
class Row:
    model: str
    strategy: str
    ram_bytes: int
    arena_bytes: int
    deadline_x: float
    deadline_s: float
    status: str
    energy_j: float
    time_s: float
    peak_bytes: int
    recomputes: int
    page_ins: int
    page_outs: int
    solve_s: float
    gap: float
    plain_j: float  # one plain pass: every node once, nothing paged (what overheads are relative to)
    note: str


MAX_BUDGETS = 1000  # a figure's worth many times over; 1e8 would run (and hold its rows) for days


def parse_ram_range(text: str) -> list[int]:
    """`32k:512k:16` = 16 budgets evenly from 32 KiB to 512 KiB; `64k,96k,128k` = those."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise UsageError(f"--ram {text!r}: use LOW:HIGH:COUNT like 32k:512k:16, or a list like 64k,96k")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        try:
            count = int(parts[2])
        except ValueError:
            raise UsageError(f"--ram {text!r}: COUNT {parts[2]!r} is not a whole number") from None
        if count < 1 or lo <= 0 or hi < lo:
            raise UsageError(f"--ram {text!r}: need 0 < LOW <= HIGH and COUNT >= 1")
        if count > MAX_BUDGETS:
            raise UsageError(f"--ram {text!r}: {count} budgets; a sweep takes up to {MAX_BUDGETS} (each one is "
                             "a plan per strategy and deadline)")
        if count == 1:
            return [lo]
        return sorted({round(lo + (hi - lo) * k / (count - 1)) for k in range(count)})
    sizes = [parse_size(p) for p in text.split(",") if p.strip()]
    if len(sizes) > MAX_BUDGETS:
        raise UsageError(f"--ram: {len(sizes)} budgets; a sweep takes up to {MAX_BUDGETS}")
    if not sizes or min(sizes) <= 0:
        raise UsageError(f"--ram {text!r}: every budget must be more than 0 bytes")
    return sorted(set(sizes))


def _one(graph: CostedGraph, strategy: str, ram: int, fixed: int, deadline_x: float, solver: str,
         time_limit_s: float, semantics: Semantics, starts: list[Plan] | None = None) -> tuple[Row, Plan | None]:
    from poet.plan.strategies import plan_with

    arena = ram - fixed
    deadline_s = deadline_x * graph.one_pass_s
    plain = sum(n.compute_j for n in graph.nodes)
    if arena <= 0:
        return Row(graph.name, strategy, ram, arena, deadline_x, deadline_s, "infeasible", math.nan, math.nan,
                   0, 0, 0, 0, 0.0, math.nan, plain, "--ram below the fixed part"), None
    p = plan_with(strategy, graph, arena, deadline_s, solver=solver, time_limit_s=time_limit_s, semantics=semantics,
                  starts=starts)
    ok = p.status in ("optimal", "feasible")
    return Row(graph.name, strategy, ram, arena, deadline_x, deadline_s, p.status,
               p.energy_j if ok else math.nan, p.time_s if ok else math.nan, p.peak_bytes if ok else 0,
               p.recomputes, p.page_ins, p.page_outs, round(p.solve_time_s, 3),
               p.gap if p.solver not in ("heuristic", "") else 0.0, plain, p.note), (p if ok else None)


def _worker_started() -> None:
    """A sweep worker's first act: die with poet, and leave a Ctrl-C to it.

    The workers are forked by multiprocessing's fork server, not by poet: it forks from its one thread and
    lives until poet is gone (it exits when poet's end of its pipe closes), so asking the kernel for a
    SIGKILL when the parent dies (PR_SET_PDEATHSIG, tied to the *thread* that forked) is sound there. A
    worker poet forked itself would be tied to whichever poet thread forked it: ProcessPoolExecutor may
    fork from its manager thread, which ends before poet does. The fork server's exit is one step away
    from poet's death, so a thread here also watches poet itself (the sentinel multiprocessing keeps: a
    pipe from poet, at end of file once poet is gone) and ends the worker the moment it is; the kernel's
    signal covers a worker whose interpreter is too stuck to run that thread.

    A Ctrl-C in a terminal reaches the whole process group, the workers too: they ignore it (a
    KeyboardInterrupt in each would print a traceback); poet kills them (run_sweep)."""
    from poet.device.children import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    parent = multiprocessing.parent_process()
    if parent is not None:
        sentinel = parent.sentinel

        def watch() -> None:
            multiprocessing.connection.wait([sentinel])
            os._exit(1)  # poet is gone: nobody reads this worker's rows

        threading.Thread(target=watch, name="poet-sweep-watch", daemon=True).start()


@contextlib.contextmanager
def _pool(jobs: int) -> Iterator[ProcessPoolExecutor]:
    """Worker processes that end with the sweep however it ends: on an error, a Ctrl-C or the CLI's
    SIGTERM and SIGHUP they are killed, not waited for until their solves end (minutes)."""
    ctx = multiprocessing.get_context("forkserver")
    # the fork server imports the planner once; each worker forked from it starts with it loaded
    ctx.set_forkserver_preload(["poet.plan.sweep", "poet.plan.strategies"])
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_started)
    try:
        yield pool
    except BaseException:
        for proc in list((pool._processes or {}).values()):  # no public way to kill them (3.14's kill_workers)
            with contextlib.suppress(OSError):
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_sweep(graph: CostedGraph, rams: list[int], deadlines_x: list[float], strategies: list[str], fixed: int,
              solver: str = "highs", time_limit_s: float = 60.0, jobs: int | None = None,
              semantics: Semantics = POET, progress: Say = print) -> list[Row]:
    """Every (strategy, RAM, deadline), each in a worker process; rows in grid order.

    POET runs last at each point, warm-started from the best plan any other strategy found
    there (every strategy's plan is a POET plan), so a time limit cannot leave it behind.
    """
    tasks = [(s, r, d) for d in deadlines_x for r in rams for s in strategies]
    jobs = jobs or max(1, min(len(tasks), os.cpu_count() or 1))
    rows: dict[tuple[str, int, float], Row] = {}
    plans: dict[tuple[int, float], list[Plan]] = {}
    done = 0

    def record(key: tuple[str, int, float], row: Row, plan: Plan | None) -> None:
        nonlocal done
        done += 1
        rows[key] = row
        if plan is not None:
            plans.setdefault(key[1:], []).append(plan)
        what = f"{row.energy_j:.6g} J" if row.status in ("optimal", "feasible") else row.status
        progress(f"[{done}/{len(tasks)}] {row.strategy:<14} ram {row.ram_bytes:>10} B  deadline {row.deadline_x:g}x"
                 f"  {what}  ({row.solve_s:.2f} s)")

    with _pool(jobs) as pool:
        for phase in ("others", "poet"):
            with signals_held():  # the first submit forks the fork server: a Ctrl-C then is not lost
                futs = {pool.submit(_one, graph, s, r, fixed, d, solver, time_limit_s, semantics,
                                    plans.get((r, d)) if s == "poet" else None): (s, r, d)
                        for s, r, d in tasks if (s == "poet") == (phase == "poet")}
            for fut in as_completed(futs):
                record(futs[fut], *fut.result())
    return [rows[t] for t in tasks]


def write_csv(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=list(Row.__dataclass_fields__))
    w.writeheader()
    for r in rows:
        w.writerow(asdict(r))
    write_atomic(path, text.getvalue())  # never through a link at `path`, never half-written


def _found(r: Row) -> bool:
    return r.status in ("optimal", "feasible")


def plot(rows: list[Row], out_dir: Path) -> list[Path]:
    """The three figures; a figure whose strategies are absent from the sweep is skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    model = rows[0].model if rows else ""
    deadlines = sorted({r.deadline_x for r in rows})
    strategies = list(dict.fromkeys(r.strategy for r in rows))

    fig, axes = plt.subplots(1, len(deadlines), figsize=(6 * len(deadlines), 4.2), squeeze=False)
    for ax, d in zip(axes[0], deadlines):
        for s in strategies:
            pts = sorted((r.ram_bytes / 1024, r.energy_j) for r in rows if r.strategy == s and r.deadline_x == d
                         and _found(r))
            if pts:  # one colour per strategy in every panel
                ax.plot(*zip(*pts), marker="o", ms=3, label=s, lw=2.2 if s == "poet" else 1.2,
                        color=f"C{strategies.index(s) % 10}")
        ax.set(title=f"{model}, deadline {d:g}x", xlabel="RAM budget (KiB)", ylabel="energy per step (J)")
        ax.grid(alpha=0.3)
    handles = {lab: h for ax in axes[0] for h, lab in zip(*ax.get_legend_handles_labels())}
    if handles:
        fig.legend(handles.values(), handles.keys(), fontsize=7, loc="center right")
        fig.subplots_adjust(right=0.85)
    fig.suptitle("Energy vs RAM budget per strategy (cf. POET Fig. 3); missing points: no plan")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    written.append(out_dir / "fig3_energy_vs_ram.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    trio = [s for s in ("remat-only", "page-only", "poet") if s in strategies]
    if len(deadlines) > 1 and trio:
        feasible_rams = sorted({r.ram_bytes for r in rows if r.strategy == "poet" and _found(r)})
        if feasible_rams:
            ram = feasible_rams[len(feasible_rams) // 2]
            fig, ax = plt.subplots(figsize=(6, 4.2))
            for s in trio:
                pts = sorted((r.deadline_x, r.energy_j) for r in rows if r.strategy == s and r.ram_bytes == ram
                             and _found(r))
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=s)
            ax.set(title=f"{model}, RAM {ram / 1024:.0f} KiB (cf. POET Fig. 4)", xlabel="deadline (x one pass)",
                   ylabel="energy per step (J)")
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            written.append(out_dir / "fig4_energy_vs_deadline.png")
            fig.savefig(written[-1], dpi=110)
            plt.close(fig)

    if "capuchin" in strategies and "poet" in strategies:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        for s in ("poet", "capuchin"):
            for d in deadlines:
                # overhead over one plain pass: what recompute and paging cost on top of it
                pts = [(r.ram_bytes / 1024, 100 * (r.energy_j / r.plain_j - 1)) for r in rows
                       if r.strategy == s and r.deadline_x == d and _found(r) and r.plain_j > 0]
                if pts:
                    ax.plot(*zip(*sorted(pts)), marker="o", ms=3, label=f"{s} {d:g}x",
                            ls="-" if s == "poet" else "--")
        ax.set(title=f"{model}: energy overhead over one plain pass (cf. POET Fig. 5)", xlabel="RAM budget (KiB)",
               ylabel="overhead (%)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(out_dir / "fig5_overhead_vs_capuchin.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written


def semantics_named(name: str) -> Semantics:
    return REFERENCE if name == "reference" else POET


def costed_for_sweep(g: TrainingGraph | CostedGraph, board: Board | None, profile: Path | None, rams: list[int],
                     semantics_name: str, say: Say) -> tuple[CostedGraph, int]:
    """The graph a sweep plans, costed (a training graph by its board's profile; a costed graph file as it
    is), and the fixed part every --ram of the sweep holds besides the arena (0 under the reference's
    semantics, whose budgets are the arena)."""
    from poet.plan.cost.costs import costed, load_profile
    from poet.plan.cost.memory import budget_for, costed_fixed_bytes

    if isinstance(g, TrainingGraph):
        assert board is not None
        prof = load_profile(board.name, profile, note=lambda m: say(f"note: {m}"))
        cg = costed(g, board, prof, estimate=True, note=lambda m: say(f"note: {m}"))
        return cg, budget_for(g, max(rams[-1], board.ram_bytes) * 4, int(prof["runtime_static_bytes"])).fixed
    return g, (0 if semantics_name == "reference" else costed_fixed_bytes(g.param_bytes))
