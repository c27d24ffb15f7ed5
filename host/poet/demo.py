"""`poet demo`: the whole loop of DESIGN.md on the default board. Trace the digits models, profile
their ops on the board, pick a budget that makes the plan recompute and page, then a `poet train`
run of fixed settings (one epoch of digits), checked at the end against the same steps in PyTorch."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from poet.boards import Board, load_board
from poet.errors import PoetError, UsageError
from poet.files import read_bytes
from poet.graph.agreement import reference
from poet.graph.reference import accuracy, load_weights, state_tensors, weights_of
from poet.graph.tracer import trace, traced
from poet.graph.training_graph import summary
from poet.models.datasets import load_dataset
from poet.models.zoo import get_model
from poet.paths import profile_file, profile_to_read, runs_dir, shown
from poet.plan.cost.memory import check_ram
from poet.progress import Say
from poet.run.folder import RUN_FILES, read_back
from poet.settings import RunConfig
from poet.train import train

DIGITS_MODELS = ("mlp-digits", "cnn-digits")  # what the demo profiles
REPEATS = 3  # profiling runs per graph


def demo_folder(given: Path | None) -> Path:
    """The demo's run folder, emptied: a demo rewrites its own folder on every run, never a
    `poet train` run's."""
    folder = given or runs_dir() / "demo"
    if any((folder / f).exists() for f in RUN_FILES):
        try:
            made_by = json.loads(read_bytes(folder / "config.json", follow=False)).get("made_by")
        except (PoetError, ValueError, AttributeError):  # a link, a device, not JSON: not the demo's
            made_by = None
        if made_by != "demo":
            raise UsageError(f"--run-dir {folder} holds a `poet train` run, which the demo would overwrite: give "
                             "another folder")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def demo(cfg: RunConfig, steps: int, say: Say = print, port: str | None = None, bars: bool = False) -> Path:
    """Profile, budget, then train cfg (a digits run; plan.ram None: the demo's budget) for `steps`
    steps of one epoch; returns the run's folder. bars: progress bars as `poet train` and `poet profile`
    draw them (poet.progress)."""
    from poet.device.connect import open_device
    from poet.device.profile import profile_graphs, write_profile
    from poet.plan.cost.costs import load_profile
    from poet.plan.request import auto_budget

    board: Board = load_board(cfg.board)
    if cfg.plan.ram is not None:
        check_ram(cfg.plan.ram, board.ram_bytes, board.name)
    data = load_dataset("digits")
    if steps * cfg.model.batch > len(data.y_train):
        raise UsageError(f"--steps {steps}: the digits training set makes {len(data.y_train) // cfg.model.batch} "
                         f"steps of {cfg.model.batch}; for more, `poet train --epochs`")
    say(f"[trace] training graphs (batch {cfg.model.batch}):")
    graphs = []
    for name in DIGITS_MODELS:
        m, spec = get_model(name, seed=cfg.model.seed)
        g = trace(m, name, spec.input_shape, spec.classes, cfg.model.batch)
        graphs.append((g, weights_of(m)))
        say(f"  {summary(g)}")
    _, g = traced(cfg.model)
    run_dir = demo_folder(cfg.run_dir)
    with open_device(board, port, workdir=run_dir) as dev:
        say(f"\n[profile] every op of both models on the {dev.provenance} {board.name}")
        # the profile there (if this firmware made it) is resumed, so its paging fit and cast costs stay
        path, start = profile_file(board.name), profile_to_read(board.name)
        existing = load_profile(board.name, start) if start.exists() else None
        prof = profile_graphs(dev, graphs, repeats=REPEATS, progress=lambda m: say(f"  {m}"), existing=existing,
                              bars=bars)
        if dev.emulated and path.exists() and (existing or {}).get("source") == "measured":
            say(f"  kept {shown(path)} (measured on a real {board.name}): the demo's emulated costs are not saved")
        else:
            write_profile(prof, path)
            say(f"  wrote {shown(profile_file(board.name))}: {len(prof['ops'])} op shapes "
                f"({dev.provenance} ticks; time and energy from the board model)")
        ram = cfg.plan.ram or auto_budget(g, board, prof, dev.runtime_static, cfg.plan.deadline, say)
    cfg = dataclasses.replace(cfg, plan=dataclasses.replace(cfg.plan, ram=ram), run_dir=run_dir, epochs=1,
                              data="digits", data_limit=steps * cfg.model.batch, made_by="demo")
    train(cfg, say, port=port, bars=bars)
    _check(cfg, run_dir, steps, say)
    return run_dir


def _check(cfg: RunConfig, run_dir: Path, steps: int, say: Say) -> None:
    """The board's weights against the same steps (same batches, same order) in PyTorch on the host:
    whether they are as close to float64 PyTorch's as float32 PyTorch's are (poet.graph.agreement)."""
    model, g = traced(cfg.model)
    final = read_back(run_dir, g)
    data = load_dataset(cfg.data, cfg.data_limit).fitted(tuple(g.input_shape), g.classes, g.model, g.loss, g.vocab)
    host, _ = traced(cfg.model)
    ref = reference(host, data.epoch_batches(g.batch, 0, cfg.model.seed), cfg.lr)
    agreed = ref.agree(final, names=[n for n, _ in state_tensors(host)])
    load_weights(model, final)
    acc = accuracy(model, data.x_test, data.y_test)
    say(f"\n[check] board weights vs the same {steps} steps in PyTorch on the host: "
        f"{agreed.summary()}; test accuracy with the board's weights {acc:.1%}")
