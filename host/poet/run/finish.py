"""A finished run's files: weights.pt, report.txt, the plots and its emissions row, then `complete` in its
state, each written whole so a run stopped among them is completed by --resume.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np
import torch

from poet.boards import Board
from poet.energy.accounting import account
from poet.energy.emissions import RunRecord, append
from poet.energy.predict import Comparison, Prediction, RunPredictor
from poet.energy.tracefile import Trace
from poet.files import SMALL, atomic, read_bytes, write_atomic
from poet.graph.reference import state_tensors
from poet.graph.training_graph import TrainingGraph
from poet.paths import shown
from poet.progress import Say
from poet.run.folder import Run, RunState
from poet.settings import RunConfig


def to_model(model: torch.nn.Module, g: TrainingGraph, weights: list[np.ndarray]) -> None:
    """Copy the board's weights (the run graph's order) into the model, by name: a static-int8 run's folded
    weights and scales are the board's own and leave the model's fp32 tensors as they are."""
    held = dict(state_tensors(model))
    with torch.no_grad():
        for (name, _), w in zip(g.params, weights, strict=True):
            if name in held:
                held[name].copy_(torch.from_numpy(w.reshape(held[name].shape)))


def metrics_line(h: dict[str, float], loss: str) -> str:
    """An epoch's test metrics as the epoch and final lines say them."""
    if "accuracy" in h:
        return f"test accuracy {h['accuracy']:.1%}"
    line = f"test reconstruction error ({loss}) {h['reconstruction_error']:.4f}"
    return line + (f", anomaly ROC AUC {h['roc_auc']:.3f}" if "roc_auc" in h else "")


def complete(cfg: RunConfig, g: TrainingGraph, board: Board, run: Run, state: RunState, tr: Trace,
             model: torch.nn.Module, weights: list[np.ndarray], predictor: RunPredictor, plan_pred: Prediction,
             say: Say) -> None:
    """A finished run's files, then `complete` in its state. Each file is written whole or not at all, and
    emissions.csv gets the run's row once, so a run stopped in here is completed by --resume."""
    _finish(g, board, run, state, tr, model, weights, say)
    actual = predictor.actual()
    for line in Comparison(predictor.prediction or plan_pred, actual).lines():
        say(f"  {line}")
    if plan_pred.energy_j > 0:  # a given schedule has no plan to compare with
        say(f"  {Comparison(plan_pred, actual).lines()[1].replace('prediction error', 'plan prediction error')}")
    emissions = run.dir / "emissions.csv"
    if not _has_row(emissions, run.dir.name):
        kept = append(emissions, RunRecord(actual.energy_j, actual.time_s, actual.co2_g, actual.grid, board.name,
                                           tr.provenance, cfg.plan.ram,
                                           experiment=f"{g.model} on {board.name}", run_id=run.dir.name))
        say(f"  emissions: {shown(emissions)} (codecarbon's columns)"
            + (f"; an older file with other columns was kept as {shown(kept)}" if kept else ""))
    state.complete = True
    run.save_state(state)


def _has_row(emissions: Path, run_id: str) -> bool:
    """Whether emissions.csv already has this run's row (written before the run was stopped)."""
    if not os.path.lexists(emissions):
        return False
    text = read_bytes(emissions, follow=False, limit=SMALL)  # a link or a device: refused by check_entries first
    try:
        return any(row.get("run_id") == run_id for row in csv.DictReader(io.StringIO(text.decode(), newline="")))
    except (UnicodeDecodeError, csv.Error):
        return False  # append() keeps an unreadable file aside and starts a new one


def _finish(g: TrainingGraph, board: Board, run: Run, state: RunState, tr: Trace, model: torch.nn.Module,
            weights: list[np.ndarray], say: Say) -> None:
    to_model(model, g, weights)
    with atomic(run.dir / "weights.pt") as f:  # a run stopped mid-write keeps no half file that looks whole
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, f)
    from poet.energy.report import render

    plan = tr.plan or {}
    if "peak_bytes" in plan and tr.steps:  # every step was checked against it (Device.step); said once here
        say(f"  board peak arena {max(s['peak_live_bytes'] for s in tr.steps)} B = planner's {plan['peak_bytes']} B; "
            f"extent {max(s['peak_extent_bytes'] for s in tr.steps)} B <= arena budget {plan['arena_budget']} B")
    trace_path = run.dir / "trace.json"
    say(f"\n[account] trace of {len(tr.steps)} steps saved to {shown(trace_path)} "
        f"(`poet report {shown(trace_path)}` prints this again)")
    report = render(account(tr, board), tr, board, top=5)
    write_atomic(run.dir / "report.txt", (report + "\n").encode())
    from poet.energy.report import plot

    pngs = plot(account(tr, board), tr, board, run.dir, "energy")
    h = state.history
    say(report)
    say(f"\n[done] {state.global_step} steps; final {metrics_line(h[-1], g.loss)}; "
        f"{sum(e['energy_j'] for e in h):.3f} J and {sum(e['time_s'] for e in h):.2f} s of board time (modelled)")
    say(f"  weights: {shown(run.dir / 'weights.pt')} (a state_dict: model.load_state_dict(torch.load(...)))")
    say(f"  plots: {', '.join(shown(p) for p in pngs)} (module tree, top tensors, power timeline)")
