"""`poet train`: fine-tune a model on the board within its RAM, its deadline and its energy budget.

A run lives in its own folder (runs/<id>/): config.json (what was asked), plan.json and
schedule.poet (what was planned), trace.json (every step's per-op trace), checkpoint.npz (weights
and optimizer state after the last finished step), state.json (where the run is), report.txt and
weights.pt (a state_dict) at the end. Everything is written after every step, atomically, so a run
stopped by a reset, a pulled cable or Ctrl-C resumes with `--resume runs/<id>` from its last
finished step, with the same data order: the final weights are those of an uninterrupted run.
A run stopped after its last step but before its files (report, weights, plots, emissions) were
all written gets them on --resume.

This module puts a run together: the firmware, the energy refusal, the run's folder and board. Its
parts are poet.run: what it starts from and can be refused for before a board is touched (inputs,
shared with `poet export`), the folder (folder), the plan and its cache (plans), the epochs (loop)
and the finished run's files (finish). Test
accuracy is measured after every epoch on the host, with the weights read back from the board; for
an autoencoder (a loss of its output against its input) the mean reconstruction error instead, and
with 0/1 anomaly labels the ROC AUC of that error as the anomaly score.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from poet.boards import Board, load_board
from poet.device import firmware, flash
from poet.device.connect import open_device
from poet.device.link import LinkError, ProtocolMismatch
from poet.device.protocol import OPT_STATE, PROTO
from poet.energy.battery import check_battery, refusal
from poet.energy.carbon import Intensity, intensity
from poet.energy.meters.replay import open_meter
from poet.energy.meters.window import recorded
from poet.energy.predict import Epoch, Prediction, plan_prediction
from poet.energy.tracefile import Trace
from poet.errors import PoetError, UsageError, signal_of, stopped_by
from poet.files import read_bytes, remove_temporaries, write_atomic
from poet.paths import shown
from poet.plan.cost.memory import check_ram
from poet.progress import Say
from poet.run.features import Kept
from poet.run.finish import complete
from poet.run.folder import (
    LOCK_FILE,
    RUN_ENTRIES,
    Run,
    RunState,
    check_entries,
    check_finished,
    check_resumable,
    checkpoint_limit,
    lock,
    new_folder,
    refuse_if_run,
    resume_checkpoint,
    unmake,
)
from poet.run.inputs import check_request, initial_weights, model_graph, run_data
from poet.run.loop import run_predictor, train_epochs
from poet.run.plans import SCHEDULE_LIMIT, SUFFIX_FILE, plan_for_run, read_given_schedule, run_graph, run_plan
from poet.settings import RunConfig, config_json

STEP_COUNTER_MAX = 0xFFFF_FFFF  # the board counts optimizer steps in a uint32 (core/interp.h, opt_step)


def _ensure_firmware(board: Board, port: str, run_dir: Path, say: Say) -> None:
    """Flash the board when it runs poet's firmware of another version than this poet builds, or of an
    older protocol. A device with no valid HELLO reply in any protocol (NotPoet) is not known to be
    poet's board and is never flashed unasked: its one line says how to flash it on purpose. A board
    of a newer protocol is not downgraded: its ProtocolMismatch says to update poet."""
    want = firmware.source_version()
    try:
        with open_device(board, port, workdir=run_dir, quiet=True) as dev:
            have = dev.hello.fw_version
    except ProtocolMismatch as exc:
        if exc.proto > PROTO:
            raise
        have = f"another protocol ({exc})"
    if have == want:
        return
    say(f"\n[flash] the board runs firmware {have}, this poet builds {want}: flashing it")
    flash.flash(board, port, say)


def _check_energy(cfg: RunConfig, plan: dict, per_epoch: int, epochs: int, say: Say) -> Prediction:
    """The plan's prediction of the run; refuse, before anything runs, a run the energy budget or the
    battery cannot carry (unless --force)."""
    grid = intensity(cfg.country, cfg.carbon_intensity)
    pred = plan_run(plan, per_epoch, epochs, grid)
    if "energy_j" not in plan:  # a given schedule: nothing predicts it before it runs
        return pred
    say(f"\n[energy] {pred.line('the plan predicts')}")
    msg = None
    if cfg.budget_j is not None and pred.energy_j > cfg.budget_j:
        msg = (f"the run needs {pred.energy_j:.4g} J (predicted from the plan), more than --budget-j "
               f"{cfg.budget_j:g} J: train fewer epochs, or pass --force to run anyway")
    elif cfg.battery_mah is not None:
        check = check_battery(pred.energy_j, cfg.battery_mah, cfg.volts)
        say(f"  {check.line()}")
        msg = refusal(check)
    if msg:
        if not cfg.force:
            raise UsageError(msg)
        say(f"  warning: {msg.split(':')[0]} (--force given: running anyway)")
    return pred


def plan_run(plan: dict, per_epoch: int, epochs: int, grid: Intensity) -> Prediction:
    """The run as its plan predicts it: every step the plan's; or, when it keeps features, epoch 1's steps
    the whole step and the write, the later ones the read and the suffix (plan.json's "features")."""
    steps = per_epoch * epochs
    if "energy_j" not in plan:
        return plan_prediction(0.0, 0.0, steps, epochs, grid)
    feats = plan.get("features")
    if feats is None:
        return plan_prediction(plan["energy_j"], plan["time_s"], steps, epochs, grid)
    (e1, t1), (e2, t2) = feats["first"], feats["later"]
    later = steps - per_epoch
    return plan_prediction((per_epoch * e1 + later * e2) / steps, (per_epoch * t1 + later * t2) / steps, steps,
                           epochs, grid)


def train(cfg: RunConfig, say: Say = print, port: str | None = None, resume: Path | None = None,
          bars: bool = False) -> Path:
    """Run a fine-tuning run on the board at `port` (None: its emulated stand-in), or resume the one in
    the folder `resume` (whose config cfg must be, as cli reads it); returns the run's folder. bars:
    progress bars (solve, uploads, each epoch's steps) on stderr when it is a terminal (poet.progress)."""
    with contextlib.ExitStack() as held:  # the run's lock, released however the run ends
        return _train(cfg, say, port, resume, held, bars)


def _train(cfg: RunConfig, say: Say, port: str | None, resume: Path | None, held: contextlib.ExitStack,
           bars: bool = False) -> Path:
    prof = check_request(cfg, say)
    ckpt = None
    if resume:
        run = Run(resume)
        check_entries(run.dir)  # before anything in it is opened (run_config did too, for the CLI)
        held.callback(os.close, lock(run.dir / LOCK_FILE, "the run's lock"))
        # a run killed inside an atomic write (a checkpoint, a plot) left its temporary: it is ours, and gone
        remove_temporaries(run.dir, RUN_ENTRIES)
        state = run.caught_up(run.load_state())
        if state.finished or state.complete:
            check_finished(run, state, cfg.epochs)
            if state.complete:
                say(f"run {shown(run.dir)} already finished: nothing to resume")
            else:
                _complete_finished(cfg, run, state, say)
            return run.dir
    elif cfg.run_dir:
        refuse_if_run(cfg.run_dir)
    # everything a new run could be refused for is checked before its folder exists
    board = load_board(cfg.board)
    assert cfg.plan.ram is not None
    check_ram(cfg.plan.ram, board.ram_bytes, board.name)
    model, g = model_graph(cfg)
    data, per_epoch = run_data(cfg, g)
    if per_epoch * cfg.epochs > STEP_COUNTER_MAX:
        raise UsageError(f"--epochs {cfg.epochs} x {per_epoch} steps is {per_epoch * cfg.epochs:,} steps: more than "
                         f"the board's step counter holds ({STEP_COUNTER_MAX:,}; Adam's bias correction would "
                         "divide by 0 when it wraps); train fewer epochs")
    if resume:
        g_run, _ = run_graph(g, run_plan(run))
        ckpt = resume_checkpoint(run, state, checkpoint_limit(g_run))
        check_resumable(run, state, g_run, ckpt, per_epoch, cfg.epochs)
        at = "after its last step" if state.global_step == per_epoch * cfg.epochs else \
            f"at epoch {state.epoch + 1}, step {state.step + 1}"
        say(f"resuming {shown(run.dir)} {at} ({state.global_step} steps done)")
    given = read_given_schedule(cfg.schedule, g, board) if cfg.schedule else None  # one the board would refuse: here
    meter = open_meter(cfg.meter) if cfg.meter else None  # a missing sensor: refused here
    if not resume:
        folder, made = new_folder(cfg)
        run = Run(folder)
        left = set(os.listdir(run.dir))  # what was there (an empty --run-dir may hold the user's other files)
        held.callback(os.close, lock(run.dir / LOCK_FILE, "the run's lock"))
        if cfg.run_dir:
            refuse_if_run(run.dir)  # again, under the lock: another poet may have run there since the check above
        state = RunState()
    total_steps = per_epoch * cfg.epochs
    try:
        if port:
            _ensure_firmware(board, port, run.dir, say)
        with open_device(board, port, workdir=run.dir, ram=cfg.plan.ram) as dev:
            plan, sched = plan_for_run(cfg, g, board, dev, run, say, bars, given, prof, len(data.y_train),
                                       resuming=resume is not None)
            g, prefix = run_graph(g, plan)
            kept = Kept.of_run(plan, g, read_bytes(run.dir / SUFFIX_FILE, "suffix.poet", limit=SCHEDULE_LIMIT,
                                                     follow=False),
                               data.epoch_order(0, cfg.model.seed, cfg.order)) if "features" in plan else None
            w0, fed = initial_weights(model, prefix, data, say)
            pred = _check_energy(cfg, plan, per_epoch, cfg.epochs, say)
            if not resume:
                # only now: a run refused for its energy or schedule leaves no config, so no run to be refused for
                write_atomic(run.config_path, json.dumps(config_json(cfg), indent=1).encode())
            trace_path = run.dir / "trace.json"
            tr = Trace.load(trace_path) if state.global_step else \
                Trace.for_graph(g, board.name, dev.provenance, dev.hello.tick_hz)
            tr.plan = plan
            tr.steps = tr.steps[:state.global_step]  # a step traced but not checkpointed runs again
            dev.load_model(g, w0, bars=bars)
            if ckpt is not None:
                weights, opt_state, _ = ckpt
                dev.load_model(g, weights, bars=bars)
                dev.link.upload(OPT_STATE, opt_state)
            dev.load_schedule(sched, planned_peak=plan.get("peak_bytes"),
                              planned_time_s=plan.get("time_s"))
            say(f"\n[train] {g.model} ({g.train}) on the {dev.provenance} {board.name}: {cfg.epochs} epochs x "
                f"{per_epoch} steps of {g.batch}, {g.optimizer['name']} lr {cfg.lr}, data {data.name} "
                f"({len(data.y_train)} train / {len(data.y_test)} test)")
            try:
                # the meter records the steps on the host clock; `poet report trace.json --meter meter.csv` aligns
                with recorded(meter, run.dir / "meter.csv", say) if meter else contextlib.nullcontext():
                    train_epochs(cfg, g, board, dev, run, state, tr, data, model, fed, per_epoch, pred, say, bars,
                                 kept)
            except (LinkError, KeyboardInterrupt) as exc:
                ctrl_c = isinstance(exc, KeyboardInterrupt)
                why = f"stopped by {stopped_by(exc)}" if ctrl_c else f"lost the board: {exc}"
                raise PoetError(f"{why}; {state.global_step} of {total_steps} steps are done and saved in "
                                f"{shown(run.dir)}: resume with `poet train --resume {shown(run.dir)}`",
                                status=128 + signal_of(exc) if ctrl_c else 1) from None
    except BaseException:
        if not resume and not run.config_path.exists():
            unmake(run.dir, made, left)  # refused before it began (energy, schedule, flashing): no run to leave
        raise
    return run.dir


def _complete_finished(cfg: RunConfig, run: Run, state: RunState, say: Say) -> None:
    """--resume of a run stopped after its last step, before its files: write them from the run's folder
    (checkpoint, trace, state, plan); no board is needed."""
    say(f"run {shown(run.dir)} finished its {state.global_step} steps but not its files: writing them")
    trace_path = run.dir / "trace.json"
    if not os.path.lexists(trace_path):
        raise UsageError(f"{shown(run.dir)}: trace.json is missing: the run's report cannot be written")
    board = load_board(cfg.board)
    model, g = model_graph(cfg)
    _, per_epoch = run_data(cfg, g)
    plan = run_plan(run)
    g_run, _ = run_graph(g, plan)
    # the weights and report are written from the checkpoint: it must be the run's last step, as the state
    # must be (a state saying `finished` after 2 of 8 steps would make a 2-step run look complete)
    ckpt = resume_checkpoint(run, state, checkpoint_limit(g_run))
    check_resumable(run, state, g_run, ckpt, per_epoch, cfg.epochs)
    assert ckpt is not None  # check_resumable: a finished run's state has all its steps, so a checkpoint
    tr = Trace.load(trace_path)
    tr.plan = plan
    grid = intensity(cfg.country, cfg.carbon_intensity)
    plan_pred = plan_run(plan, per_epoch, cfg.epochs, grid)
    predictor = run_predictor(cfg.epochs, per_epoch, plan_pred, "features" in plan)
    for h in state.history:
        predictor.add(Epoch(per_epoch, h["energy_j"], h["time_s"]))
    complete(cfg, g_run, board, run, state, tr, model, ckpt[0], predictor, plan_pred, say)
    say(f"run {shown(run.dir)} is complete")
