"""Timing every op of some graphs: each graph runs under a keep-everything schedule, step after step,
until every op's ticks agree within `spread` (or `max_repeats` steps ran); ops of one shape pool
their samples, and the median is the op's cost."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poet.boards import Board
from poet.device.link import LinkClosed, LinkTimeout
from poet.device.profile.file import new_profile, resumable, write_profile
from poet.device.profile.provenance import op_times, provenance_of
from poet.device.profile.stopped import ProfileInterrupted, exit_status, went
from poet.errors import PoetError
from poet.graph.training_graph import TrainingGraph
from poet.paths import shown
from poet.plan.cost.costs import op_key, uncosted, work
from poet.progress import Say, bar

COMPUTE_KINDS = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class Settings:
    min_repeats: int = 3
    max_repeats: int = 10
    spread: float = 0.02  # relative (max - min) / median of an op's ticks that counts as settled


def measured_nodes(g: TrainingGraph, emulated: bool = True) -> list:
    """The nodes whose costs a profile of g records: all, but the optimizer of a graph that updates in
    backward, which only counts the step (its cost per trained element is not measured by it), and on
    a real board a conv that streams its weight from the SD card, whose ticks hold the reads too (the
    planner adds those from the paging model: poet.plan.cost.costs.stream_cost). Emulated, the reads take
    no virtual time (semihosting), so its ticks are its compute alone."""
    skip = g.updates_in_backward
    return [n for n in g.nodes if not (skip and n.kind == "optimizer")
            and (emulated or not n.attrs.get("stream"))]


def _done_key(g: TrainingGraph) -> str:
    """The models entry of a profiled graph: a fine-tuning mode other than `all` runs other backward calls
    (a frozen layer's makes no weight gradient: costs.op_key), so it is a graph of its own to measure."""
    return f"{g.model} batch {g.batch}" + (f" train {g.train}" if g.train != "all" else "")


def profile_graphs(device: Any, graphs: list[tuple[TrainingGraph, list[np.ndarray]]], repeats: int = 3,
                   progress: Say = print, existing: dict[str, Any] | None = None, max_repeats: int = 10,
                   spread: float = 0.02, save: Path | None = None, bars: bool = False) -> dict[str, Any]:
    """Measure every op of every graph; returns the profile (also written to `save` after each graph).

    `repeats` is the least number of steps per graph; a graph the resumable `existing` profile
    already has is skipped. On LinkClosed/LinkTimeout/Ctrl-C raises ProfileInterrupted with the
    one line to print, the finished graphs saved. bars: a bar per graph over its ops, counting those
    whose ticks have settled, on stderr when it is a terminal (poet.progress), in place of a line per run.
    """
    settings = Settings(max(1, repeats), max(repeats, max_repeats), spread)
    prof = resumable(existing, device) or new_profile(device)
    prof["date"] = datetime.date.today().isoformat()
    prof["settings"] = {"min_repeats": settings.min_repeats, "max_repeats": settings.max_repeats,
                        "spread": settings.spread}
    every = {op_key(n, g) for g, _ in graphs for n in measured_nodes(g, device.emulated)}
    for g, weights in graphs:
        key = _done_key(g)
        if prof["models"].get(key, {}).get("done"):
            progress(f"profile {g.model}: already in the profile (firmware {prof['firmware']}), skipped")
            continue
        try:
            summary = _profile_graph(device, g, weights, settings, prof, progress, bars)
        except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
            saved = False
            # with no op measured yet, writing would only replace another firmware's profile with an empty one
            if save is not None and prof["ops"]:
                write_profile(prof, save)
                saved = True
            done = sum(1 for k in every if k in prof["ops"])
            where = f"saved to {shown(save)}" if saved else "nothing saved"
            raise ProfileInterrupted(f"{went(exc)} while profiling {g.model} ({done} of {len(every)} ops done, "
                                     f"{where}); run the same command again to resume", exit_status(exc)) from exc
        if save is not None:
            write_profile(prof, save)  # also takes in what another profile into the same file finished
        progress(summary)  # only once saved: what it says is done is on disk
    prof["ops"] = dict(sorted(prof["ops"].items()))
    return prof


def _profile_graph(device: Any, g: TrainingGraph, weights: list[np.ndarray], s: Settings, prof: dict[str, Any],
                   progress: Say, bars: bool = False) -> str:
    """Measure one graph into prof; returns the line that says it is done."""
    from poet.plan.lowering.lower import lower
    from poet.plan.strategies.checkpoint_all import keep_all

    board: Board = device.board
    progress(f"profile {g.model}: {len(g.nodes)} ops, {s.min_repeats}..{s.max_repeats} runs until every op's "
             f"spread < {s.spread:.0%}")
    device.load_model(g, weights)
    device.load_schedule(lower(keep_all(uncosted(g)), g).schedule.encode(), planned_time_s=_expected_s(g, board, prof))
    rng = np.random.default_rng(0)  # the same inputs on every board and every resume
    samples: dict[int, list[int]] = {}
    measured = {n.id for n in measured_nodes(g, device.emulated)}
    # cleared when the graph is done (or stops): its done line takes the bar's place. A count of settled ops,
    # not a rate: an op settles when its spread does, not at a pace
    fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} ops settled [{elapsed}{postfix}]"
    with bar(len(measured), f"profile {g.model}", shown=bars, unit="op", bar_format=fmt) as ops:
        for r in range(s.max_repeats):
            x = rng.random((g.batch, *g.input_shape), dtype=np.float32)
            y = rng.integers(0, g.classes, g.batch)
            res = device.step(x, y, lr=0.0)  # lr 0: the weights, hence the inputs of every op, stay put
            for rec in res.records:
                if rec.kind in COMPUTE_KINDS and rec.node in measured:
                    samples.setdefault(rec.node, []).append(rec.ticks)
            worst = max((spread_of(t) for t in samples.values()), default=0.0)
            if ops.disable:  # no bar (not a terminal): a line per run, as before
                progress(f"  run {r + 1}: {res.step_ticks} ticks, worst op spread {worst:.2%}")
            else:
                # settled by the rule that ends the loop: the least runs done and the op's spread below the bound
                ops.total = len(samples)  # the ops that report ticks (an input node has none)
                ops.n = sum(spread_of(t) < s.spread for t in samples.values()) if r + 1 >= s.min_repeats else 0
                ops.set_postfix_str(f"run {r + 1}/{s.max_repeats}, worst spread {worst:.2%}")
            if r + 1 >= s.min_repeats and worst < s.spread:
                break
    runs = r + 1
    by_key: dict[str, list[int]] = {}  # nodes of one shape (two ReLUs of one width) pool their samples
    for nid, ticks in samples.items():
        by_key.setdefault(op_key(g.nodes[nid], g), []).extend(ticks)
    w = {op_key(g.nodes[nid], g): work(g.nodes[nid]) for nid in samples}
    for key, ticks in by_key.items():
        med = statistics.median(ticks)
        prof["ops"][key] = {
            "work": w[key],
            "ticks": int(med),
            "spread": round(spread_of(ticks), 6),
            "repeats": runs,
            "samples": len(ticks),  # repeats x the nodes of this shape
            "provenance": provenance_of(board, device),
            **op_times(board, device, med, w[key]),
        }
    unsettled = sum(1 for t in by_key.values() if spread_of(t) >= s.spread)
    prof["models"][_done_key(g)] = {"done": True, "ops": len(by_key), "runs": runs,
                                    "unsettled_ops": unsettled}
    return (f"  {g.model} done: {len(samples)} nodes, {len(by_key)} op shapes"
            + (f", {unsettled} still spread >= {s.spread:.0%} after {s.max_repeats} runs" if unsettled else ""))


def _expected_s(g: TrainingGraph, board: Board, prof: dict[str, Any]) -> float | None:
    """One step of g as the profile so far estimates it (its ops measured or estimated from others): how
    long the host waits for a step before it gives the board up. None when nothing is measured yet."""
    from poet.plan.cost.costs import costed

    try:
        return costed(g, board, prof, estimate=True).one_pass_s
    except PoetError:
        return None


def spread_of(ticks: list[int]) -> float:
    med = statistics.median(ticks)
    return (max(ticks) - min(ticks)) / med if med else 0.0
