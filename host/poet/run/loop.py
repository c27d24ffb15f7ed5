"""The epochs of a run: each step on the board, a checkpoint (weights, optimizer state, trace, state)
every --checkpoint-every steps, and after each epoch its test metrics, energy and time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from poet.boards import Board
from poet.device.connect import Device
from poet.device.protocol import OPT_STATE
from poet.energy.accounting import charges
from poet.energy.predict import Epoch, Prediction, RunPredictor
from poet.energy.tracefile import Trace
from poet.errors import PoetError
from poet.graph.reference import Fed, accuracy, reconstruction_errors
from poet.graph.training_graph import TrainingGraph
from poet.models.datasets import Dataset
from poet.models.metrics import anomaly_labels, roc_auc
from poet.paths import shown
from poet.plan.cost.memory import pool_for
from poet.progress import Say, bar
from poet.run.features import Kept
from poet.run.finish import complete, metrics_line, to_model
from poet.run.folder import Run, RunState
from poet.settings import RunConfig


def _step_energy(tr: Trace, board: Board) -> tuple[float, float]:
    """Modelled joules and board seconds of the trace's last step (the account of that step alone)."""
    last = Trace(tr.board, tr.model, tr.provenance, tr.tick_hz, tr.nodes, steps=tr.steps[-1:])
    e = t = 0.0
    for c in charges(last, board):
        e += c.energy_j
        t += c.time_s
    return e, t


def _epoch_energy(tr: Trace, board: Board, first_step: int) -> tuple[float, float]:
    """Modelled joules and board seconds of the trace's steps from `first_step` on."""
    e = t = 0.0
    for c in charges(tr, board):
        if c.step >= first_step:
            e += c.energy_j
            t += c.time_s
    return e, t


def _evaluate(model: torch.nn.Module, g: TrainingGraph, weights: list[np.ndarray], data: Dataset,
              fed: Fed | None) -> dict[str, float]:
    """The test metrics with the board's weights: a classifier's accuracy; an autoencoder's mean
    reconstruction error (its loss, per sample), and its ROC AUC as an anomaly score when the test
    labels say normal (0) or anomaly (1)."""
    to_model(model, g, weights)
    was = model.training
    model.eval()
    try:
        if g.loss == "cross_entropy":
            return {"accuracy": accuracy(model, data.x_test, data.y_test, fed) if len(data.y_test) else float("nan")}
        if not len(data.y_test):
            return {"reconstruction_error": float("nan")}
        errors = reconstruction_errors(model, data.x_test, g.loss, fed)
        metrics = {"reconstruction_error": float(errors.mean())}
        if anomaly_labels(data.y_test):
            metrics["roc_auc"] = roc_auc(errors, data.y_test)
        return metrics
    finally:
        model.train(was)


def train_epochs(cfg: RunConfig, g: TrainingGraph, board: Board, dev: Device, run: Run, state: RunState,
                 tr: Trace, data: Dataset, model: torch.nn.Module, fed: Fed | None, per_epoch: int,
                 plan_pred: Prediction, say: Say, bars: bool = False, kept: Kept | None = None) -> None:
    """The run's epochs from where `state` is, on the board holding the whole model g with the run's weights
    and optimizer state. kept: the run keeps its frozen prefix's features (poet.run.features): epoch 1
    writes them, and the board holds the suffix from epoch 2."""
    opt_bytes = pool_for(g).optimizer_state
    every = max(1, cfg.checkpoint_every or 1)
    predictor = run_predictor(cfg.epochs, per_epoch, plan_pred, kept is not None)
    for h in state.history:  # a resumed run's finished epochs
        predictor.add(Epoch(per_epoch, h["energy_j"], h["time_s"]))
    weights = dev.read_weights(g)
    opt_state = dev.link.read_blob(OPT_STATE, opt_bytes) if opt_bytes else b""
    on_suffix = False
    while state.epoch < cfg.epochs:
        order = data.epoch_order(state.epoch, cfg.model.seed, cfg.order)
        batches = data.epoch_batches(g.batch, state.epoch, cfg.model.seed, cfg.order)
        if kept is not None and state.epoch > 0 and not on_suffix:
            if not kept.on_card(dev):
                kept.rebuild(dev, data.epoch_batches(g.batch, 0, cfg.model.seed, cfg.order), cfg.lr, say, run.dir)
            kept.to_suffix(dev, weights, opt_state)
            on_suffix = True
        epoch_start = state.global_step - state.step
        del state.losses[state.step:]  # the saved state has exactly the steps its checkpoint has
        # cleared when the epoch ends (or stops): its one summary line below takes the bar's place
        with bar(per_epoch, f"epoch {state.epoch + 1}/{cfg.epochs}", shown=bars, unit="step",
                 initial=state.step) as steps:
            while state.step < per_epoch:
                x, y = batches[state.step]
                if g.loss != "cross_entropy":  # the target is the input: the board ignores labels, send valid ones
                    y = np.zeros_like(y)
                if on_suffix:
                    assert kept is not None
                    rows = order[state.step * g.batch:(state.step + 1) * g.batch]
                    res = kept.as_whole(dev.step_staged(kept.offsets(rows), [int(v) for v in y], cfg.lr))
                else:
                    if kept is not None:  # epoch 1: the step writes its batch's features as it computes them
                        dev.link.keep_features(kept.node, kept.keep_at(state.step))
                    res = dev.step(x, y, cfg.lr)
                if not math.isfinite(res.loss):
                    _diverged(run, state, f"the loss is {res.loss}", cfg.lr)
                tr.add_step(res, cfg.lr)
                state.losses.append(float(res.loss))
                state.step += 1
                state.global_step += 1
                if state.global_step % every == 0 or state.step == per_epoch:
                    if on_suffix:
                        assert kept is not None
                        weights = kept.whole_weights(weights, dev.read_weights(kept.suffix))
                    else:
                        weights = dev.read_weights(g)
                    if not all(np.isfinite(w).all() for w in weights):
                        state.global_step -= 1  # the step that broke them, for the message
                        state.step -= 1
                        _diverged(run, state, "the weights are NaN or infinite", cfg.lr)
                    opt_state = dev.link.read_blob(OPT_STATE, opt_bytes) if opt_bytes else b""
                    # trace, checkpoint (holding the state), then state: a run stopped between them resumes
                    # from the checkpoint (Run.caught_up) or the state before it, the trace cut to either
                    tr.save(run.dir / "trace.json")
                    run.save_checkpoint(weights, opt_state, state)
                    run.save_state(state)
                step_j, step_s = _step_energy(tr, board)
                if steps.disable:  # no bar (not a terminal): the step's line, as before
                    say(f"  epoch {state.epoch + 1}/{cfg.epochs} step {state.step:3d}/{per_epoch}  loss "
                        f"{res.loss:.4f}  {step_j * 1e3:.3f} mJ  {step_s * 1e3:.2f} ms (modelled)")
                else:
                    steps.set_postfix_str(f"loss {res.loss:.4f}, {step_j * 1e3:.3f} mJ/step", refresh=False)
                    steps.update()
        e_j, t_s = _epoch_energy(tr, board, epoch_start)
        metrics = _evaluate(model, g, weights, data, fed)
        losses = state.losses
        state.history.append({"epoch": state.epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
                              **metrics, "energy_j": e_j, "time_s": t_s})
        state.epoch += 1
        state.step = 0
        state.losses = []
        run.save_state(state)
        say(f"epoch {state.epoch}/{cfg.epochs}: mean loss {state.history[-1]['loss']:.4f}, "
            f"{metrics_line(metrics, g.loss)}, {e_j * 1e3:.3f} mJ, {t_s:.3f} s of board time (modelled)")
        made = predictor.add(Epoch(per_epoch, e_j, t_s))
        if made is not None and cfg.epochs > 1:
            say(f"  {made.line()}")
    state.finished = True
    run.save_state(state)
    complete(cfg, g, board, run, state, tr, model, weights, predictor, plan_pred, say)


def run_predictor(epochs: int, per_epoch: int, plan_pred: Prediction, kept: bool) -> RunPredictor:
    """The run's predictor from its measured epochs: after the first, or, when the run keeps features (its
    first epoch is not like the rest), after the second, from it alone."""
    if kept and epochs > 1:
        return RunPredictor(epochs, per_epoch * epochs, plan_pred.grid, after=2, like_rest=1)
    return RunPredictor(epochs, per_epoch * epochs, plan_pred.grid)


def _diverged(run: Run, state: RunState, what: str, lr: float) -> None:
    """Stop a run whose training diverged; its last checkpoint (before the step) stays as it was."""
    ckpt = Run(run.dir).load_checkpoint()
    kept = f"the checkpoint after step {ckpt[2]} is kept" if ckpt else "no step before it was checkpointed"
    raise PoetError(f"training diverged: after epoch {state.epoch + 1} step {state.step + 1} (step "
                    f"{state.global_step + 1} of the run) {what}; the run is stopped and {kept} in {shown(run.dir)}: "
                    f"start a new run with a lower --lr than {lr:g}, or check the data")
