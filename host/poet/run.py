"""Training runs on a board: upload, step, read back, account. Used by `poet train` and `poet demo`."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from poet.boards import Board, load_board
from poet.device.connect import Device, open_device
from poet.device.link import DeviceError
from poet.energy.tracefile import Trace
from poet.errors import PoetError
from poet.graph.reference import accuracy, load_weights, train_steps, weights_of
from poet.graph.training_graph import TrainingGraph, summary
from poet.models.datasets import batches, digits_split
from poet.paths import profile_file, profile_to_read, runs_dir, schedule_file, shown, write_output
from poet.plan.memory import check_ram
from poet.plan.pipeline import Planned, plan_step
from poet.plan.types import Plan
from poet.units import format_size, parse_deadline, parse_size

Say = Callable[[str], None]


def data_batches(g: TrainingGraph, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first `steps` batches of the fixed digits training split, cycling over epochs."""
    xtr, ytr, _, _ = digits_split()
    if int(np.prod(g.input_shape)) != xtr.shape[1] or g.classes != 10:
        raise PoetError(f"model {g.model} takes inputs of shape {tuple(g.input_shape)} and {g.classes} classes; "
                        f"the digits set has 8x8 images ({xtr.shape[1]} values) and 10 classes: "
                        f"train mlp-digits or cnn-digits on it", status=2)
    epoch = list(batches(xtr, ytr, g.batch, tuple(g.input_shape)))
    return list(itertools.islice(itertools.cycle(epoch), steps))


def run_steps(dev: Device, g: TrainingGraph, weights: list[np.ndarray], schedule: bytes,
              data: list[tuple[np.ndarray, np.ndarray]], lr: float, trace: Trace | None, say: Say,
              expect_peak: int | None = None) -> list[float]:
    """Load model, weights and schedule, run one step per batch; returns the losses."""
    dev.load_model(g, weights)
    try:
        dev.load_schedule(schedule)
    except DeviceError as exc:
        raise PoetError(f"the board refused the schedule: {exc}") from exc
    losses = []
    for k, (x, y) in enumerate(data):
        res = dev.step(x, y, lr)
        losses.append(res.loss)
        if trace is not None:
            trace.add_step(res, lr)
        if expect_peak is not None and res.peak_live_bytes != expect_peak:
            raise PoetError(f"step {k}: the board's peak arena use {res.peak_live_bytes} B differs from the "
                            f"planner's {expect_peak} B (memory model mismatch: please report)")
        say(f"  step {k + 1:3d}/{len(data)}  loss {res.loss:.4f}  peak arena {res.peak_live_bytes} B  "
            f"{res.step_ticks} ticks")
    return losses


def _state_dict(model: torch.nn.Module, weights: list[np.ndarray]) -> dict[str, torch.Tensor]:
    load_weights(model, weights)
    return {k: v.clone() for k, v in model.state_dict().items()}


def train_session(dev: Device, args: argparse.Namespace, g: TrainingGraph, model: torch.nn.Module,
                  say: Say, run_dir: Path) -> dict:
    from poet.plan.costs import costed, load_profile

    board = dev.board
    prof = load_profile(board.name, Path(args.profile) if getattr(args, "profile", None) else None,
                        note=lambda m: say(f"note: {m}"))
    cg = costed(g, board, prof)
    deadline_s = parse_deadline(args.deadline, cg.one_pass_s)
    ram = parse_size(args.ram)
    given = getattr(args, "schedule", None)
    if given:
        sched = _read_schedule(Path(given))
        say(f"\n[schedule] using {given} ({len(sched)} bytes) as given; the board validates it")
        p = None
    else:
        p = solve_and_lower(args, g, cg, board, ram, dev.runtime_static, deadline_s, say)
        sched = p.lowered.schedule.encode()
        from poet.plan.precision import training_graph
        g = training_graph(p, g)  # --precision: the model blob with the plan's casts
    (run_dir / "schedule.poet").write_bytes(sched)

    weights0 = weights_of(model)
    data = data_batches(g, args.steps)
    say(f"\n[train] uploading model, weights ({g.param_bytes} B) and schedule; the board validates it; "
        f"{args.steps} SGD steps, lr {args.lr}, batch {g.batch}")
    tr = Trace.for_graph(g, board.name, dev.provenance, dev.hello.tick_hz)
    if p is not None:
        tr.plan = {"ram_bytes": ram, "arena_budget": p.budget.arena, "peak_bytes": p.plan.peak_bytes,
                   "energy_j": p.plan.energy_j, "status": p.plan.status, "recomputes": p.plan.recomputes,
                   "page_ins": p.plan.page_ins, "page_outs": p.plan.page_outs}
    trace_path = run_dir / "trace.json"
    try:
        losses = run_steps(dev, g, weights0, sched, data, args.lr, tr, say,
                           expect_peak=p.plan.peak_bytes if p else None)
    except BaseException:
        if tr.steps:  # an interrupted run keeps the trace of every finished step
            tr.save(trace_path)
            print(f"poet: saved the trace of {len(tr.steps)} finished steps to {shown(trace_path)}",
                  file=sys.stderr)
        raise
    final = dev.read_weights(g)
    peak = max(s["peak_live_bytes"] for s in tr.steps)
    extent = max(s["peak_extent_bytes"] for s in tr.steps)
    if p is not None:
        say(f"  board peak arena {peak} B = planner's {p.plan.peak_bytes} B; extent {extent} B "
            f"<= arena budget {p.budget.arena} B")

    tr.save(trace_path)
    torch.save(_state_dict(model, final), run_dir / "weights.pt")
    say(f"\n[account] trace of {len(tr.steps)} steps saved to {shown(trace_path)} "
        f"(`poet report {shown(trace_path)}` prints this again)")
    from poet.energy.accounting import account
    from poet.energy.report import render

    report = render(account(tr, board), tr, board, top=5)
    (run_dir / "report.txt").write_text(report + "\n")
    say(report)
    return {"planned": p, "losses": losses, "weights0": weights0, "final": final, "data": data, "trace": tr}


def _read_schedule(path: Path) -> bytes:
    if not path.is_file():
        raise PoetError(f"schedule file {path} does not exist", status=2)
    return path.read_bytes()


def solve_and_lower(args: argparse.Namespace, g: TrainingGraph, cg, board: Board, ram: int, runtime_static: int,
                    deadline_s: float, say: Say, out: Path | None = None, need_schedule: bool = True) -> Planned:
    """Plan, print the plan, write the schedule (default workspace/schedules/<model>.<board>.poet).

    need_schedule=False (plain `poet solve`): a graph the C runtime cannot run yet is
    planned and printed, and the reason no schedule is written is said.
    """
    from poet.plan.lower import check_runtime

    strategy = getattr(args, "strategy", "poet")
    say(f"\n[solve] {strategy} for {g.model} on {board.name}: --ram {format_size(ram)}, deadline "
        f"{deadline_s * 1e3:.3f} ms ({deadline_s / cg.one_pass_s:.2f}x one pass), solver {args.solver}")
    runnable = True
    if not need_schedule:
        try:
            check_runtime(g)
        except PoetError as exc:
            runnable = False
            why = str(exc)
    sel = None
    if getattr(args, "precision", "fp32") not in (None, "fp32"):  # fp32: not even imported, the plan as before
        from poet.plan.precision import select_for
        sel = select_for(args, g, board, ram, runtime_static, deadline_s, say)
        g, cg = sel.graph, sel.cg
    p = plan_step(g, cg, board, ram, runtime_static, deadline_s, solver=args.solver,
                  time_limit_s=args.time_limit, progress=lambda m: say(f"  {m}"), strategy=strategy,
                  gap=getattr(args, "gap", 0.0), lower_plan=runnable)
    if sel is not None:
        from poet.plan.precision import with_selection
        p = with_selection(p, sel)
    print_plan(p, say)
    if sel is not None:
        for line in sel.lines():
            say(f"  {line}")
    if p.plan.peak_bytes >= p.keep_all_peak:
        say("  note: this budget holds every activation; nothing needs recomputing or paging")
    if p.lowered is None:
        say(f"\n[lower] no schedule written: {why}")
        return p
    sched = p.lowered.schedule.encode()
    out = out or schedule_file(g.model, board.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_output(out, sched)
    say(f"\n[lower] schedule: {len(sched)} bytes ({len(p.lowered.schedule.instrs)} instructions, "
        f"version 1, model hash {p.lowered.schedule.model_hash:016x}, CRC-32) -> {shown(out)}")
    return p


def plan_line(plan: Plan) -> str:
    """How a plan was made and what the maker says of it: one line."""
    return (f"  plan: {plan.strategy} via {plan.solver}, status {plan.status}, made in {plan.solve_time_s:.2f} s"
            + (f", gap {plan.gap:.2%}" if plan.status == "feasible" and plan.solver != "heuristic" else "")
            + (f" ({plan.note})" if plan.note else ""))


def print_plan(p: Planned, say: Say) -> None:
    plan = p.plan
    say("  memory (--ram):")
    say(p.budget.table())
    say(plan_line(plan))
    say(f"    energy      {plan.energy_j * 1e6:10.2f} uJ per step (modelled)")
    say(f"    peak arena  {plan.peak_bytes:10d} B of {p.budget.arena} B budget (keep-everything needs "
        f"{p.keep_all_peak} B)" + (f"; placed extent {p.lowered.extent_bytes} B" if p.lowered else ""))
    say(f"    runtime     {plan.time_s * 1e3:10.3f} ms of {p.deadline_s * 1e3:.3f} ms deadline")
    say(f"    decisions   {plan.recomputes} recomputes, {plan.page_ins} page-ins, {plan.page_outs} page-outs")


# what only `poet train` writes: a folder with one of these holds a run the demo would spoil
TRAIN_ONLY_FILES = ("config.json", "state.json", "checkpoint.npz")


def new_run_dir(given: str | None, default: str) -> Path:
    """The demo's folder: rewritten on every demo, so never one that holds a `poet train` run."""
    d = Path(given) if given else runs_dir() / default
    if any((d / f).exists() for f in TRAIN_ONLY_FILES):
        raise PoetError(f"--run-dir {d} holds a `poet train` run, which the demo would overwrite: give another "
                        "folder", status=2)
    d.mkdir(parents=True, exist_ok=True)
    return d


def model_and_graph(args: argparse.Namespace) -> tuple[torch.nn.Module, TrainingGraph]:
    """The model the command line names, freshly initialised, and its traced training graph."""
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model

    if args.batch < 1:
        raise PoetError(f"--batch {args.batch}: must be at least 1", status=2)
    model, spec = get_model(args.model, seed=args.seed, input_shape=getattr(args, "input_shape", None),
                            classes=getattr(args, "classes", None), layers=getattr(args, "layers", None),
                            hidden=getattr(args, "hidden", None))
    return model, trace(model, spec.name, spec.input_shape, spec.classes, args.batch, spec.input_dtype,
                        getattr(args, "train", "all"))


def auto_budget(g: TrainingGraph, board: Board, prof: dict, runtime_static: int, deadline: str, say: Say) -> int:
    """A --ram a quarter of the way from the smallest feasible budget to what keeping every activation needs.

    Tight enough that the plan must both recompute and page on the zoo's MLP, with room
    to spare for the solver.
    """
    from poet.plan.costs import costed
    from poet.plan.memory import budget_for
    from poet.plan.solve import keep_all, min_arena_budget

    cg = costed(g, board, prof)
    fixed = budget_for(g, board.ram_bytes, runtime_static).fixed
    full = fixed + keep_all(cg).peak_bytes
    smallest_arena = min_arena_budget(cg, parse_deadline(deadline, cg.one_pass_s))
    if smallest_arena is None:
        raise PoetError(f"no plan meets deadline {deadline} for {g.model}; relax --deadline", status=2)
    smallest = fixed + smallest_arena
    ram = min(board.ram_bytes, smallest + (full - smallest) // 4)
    say(f"\n[budget] {g.model}: keeping every activation needs {full} B of RAM in all, the smallest feasible "
        f"budget at deadline {deadline} is {smallest} B; the demo plans for --ram {ram} (a quarter of the way)")
    return ram


def demo(args: argparse.Namespace, say: Say) -> None:
    """The whole loop of DESIGN.md on the default board: trace, profile, solve, lower, train, account."""
    from poet.device.profile import profile_graphs, write_profile
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model

    board: Board = load_board(args.board)
    if args.ram is not None:
        check_ram(parse_size(args.ram), board.ram_bytes, board.name)
    say(f"[trace] training graphs (batch {args.batch}):")
    graphs = []
    for name in ("mlp-digits", "cnn-digits"):
        m, spec = get_model(name, seed=args.seed)
        g = trace(m, name, spec.input_shape, spec.classes, args.batch)
        graphs.append((g, weights_of(m)))
        say(f"  {summary(g)}")
    model, g = model_and_graph(args)
    run_dir = new_run_dir(args.run_dir, "demo")
    with open_device(board, args.port, workdir=run_dir) as dev:
        say(f"\n[profile] every op of both models on the {dev.provenance} {board.name}")
        # the profile there (if this firmware made it) is resumed, so its paging fit and cast costs stay
        from poet.plan.costs import load_profile

        path, start = profile_file(board.name), profile_to_read(board.name)
        existing = load_profile(board.name, start) if start.exists() else None
        prof = profile_graphs(dev, graphs, repeats=args.repeats, progress=lambda m: say(f"  {m}"), existing=existing)
        if dev.emulated and path.exists() and (existing or {}).get("source") == "measured":
            say(f"  kept {shown(path)} (measured on a real {board.name}): the demo's emulated costs are not saved")
        else:
            write_profile(prof, path)
            say(f"  wrote {shown(profile_file(board.name))}: {len(prof['ops'])} op shapes "
                f"({dev.provenance} ticks; time and energy from the board model)")
        if args.ram is None:
            args.ram = str(auto_budget(g, board, prof, dev.runtime_static, args.deadline, say))
        out = train_session(dev, args, g, model, say, run_dir)

    ref_model, _ = model_and_graph(args)
    train_steps(ref_model, out["data"], args.lr)
    worst = max(float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
                for a, b in zip(out["final"], weights_of(ref_model), strict=True))
    _, _, xte, yte = digits_split()
    load_weights(model, out["final"])
    acc = accuracy(model, xte.reshape((-1, *g.input_shape)), yte)
    say(f"\n[check] board weights vs the same {args.steps} steps in PyTorch on the host: "
        f"max relative error {worst:.2e}; test accuracy with the board's weights {acc:.1%}")
