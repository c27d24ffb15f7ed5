"""`poet`: the one command-line entry. Every user mistake ends in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import stat
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from poet import __version__, settings
from poet.boards import board_names, load_board
from poet.errors import PoetError, Terminated, UsageError
from poet.files import kind as file_kind
from poet.files import not_an_input
from poet.models.zoo import SMALL, ZOO, ModelChoice
from poet.paths import shown, write_output
from poet.plan.memory import check_ram, costed_fixed_bytes
from poet.plan.strategies import STRATEGIES
from poet.settings import PlanRequest, RunConfig
from poet.units import format_size, parse_deadline

DEFAULT_BOARD = "nrf52840"


def say(msg: str = "") -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- commands

def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]


def _size(n: int) -> str:
    """256 KiB, 4 MiB: whole units where the size is one (every board's is), else format_size."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return format_size(n)


def cmd_boards(args: argparse.Namespace) -> int:
    from poet.device.flash import stand_in
    from poet.device.serialports import attached, match_ports

    boards = [load_board(n) for n in board_names()]
    say("boards poet knows (boards/*.yaml):")
    rows = [["board", "core", "RAM", "flash", "flasher", "stand-in when none is attached", "description"]]
    for b in boards:
        # a Linux board's "flash" (the runtime's nv storage) is RAM too: what its runtime may use of each
        flash = _size(b.model_flash_bytes) + " nv (RAM)" if b.linux else _size(b.flash_bytes) if b.flash_bytes else "-"
        rows.append([b.name, str(b.raw.get("core", "-")), _size(b.ram_bytes), flash,
                     str(b.raw.get("flasher", "-")),
                     stand_in(b), b.description])
    for line in _table(rows):
        say("  " + line)
    say()
    ports = match_ports(attached(), boards)
    if not ports:
        say("no serial ports attached: every command uses the emulated stand-in above (no --port, "
            "or `poet flash --emulate`)")
        return 0
    say("serial ports attached now:")
    rows = [["port", "USB ID", "product", "board"]]
    rows += [[p.device, p.usb_id, p.product, p.verdict] for p in ports]
    for line in _table(rows):
        say("  " + line)
    if not any(p.boards for p in ports):
        say("none of them is a board poet recognises: pass --port to use one anyway, or leave it out "
            "for the emulated stand-in")
    return 0


def cmd_flash(args: argparse.Namespace) -> int:
    from poet.device.flash import flash

    flash(load_board(args.board), None if args.emulate else args.port, say, dry_run=args.dry_run,
          build_on_target=args.build_on_target)
    return 0


# ---------------------------------------------------------------- typed values from the command line

def _model_choice(args: argparse.Namespace, name: str | None = None) -> ModelChoice:
    model = settings.model_choice(vars(args))
    return dataclasses.replace(model, name=name) if name else model


def _plan_request(args: argparse.Namespace) -> PlanRequest:
    """--ram (parsed here, once), --deadline, --strategy... of solve, train and demo."""
    return settings.plan_request(vars(args))


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _run_config(args: argparse.Namespace, **fixed: Any) -> RunConfig:
    """A train (or demo) command line as the run's config; `fixed` sets what the command fixes."""
    return dataclasses.replace(settings.run_config(vars(args)), **fixed)


def _graph(args: argparse.Namespace, name: str | None = None):
    from poet.graph.reference import weights_of
    from poet.graph.tracer import traced

    model, g = traced(_model_choice(args, name))
    return g, model, weights_of(model)


def cmd_graph(args: argparse.Namespace) -> int:
    from poet.graph.training_graph import summary

    g, model, _ = _graph(args)
    say(summary(g))
    if args.output:
        write_output(Path(args.output), g.to_json_text().encode())
        say(f"wrote {args.output}")
    if args.check:
        from poet.graph.check import op_check, real_step, saved_check
        say("checking against a real PyTorch step ...")
        t = real_step(model, g.model, tuple(g.input_shape), g.classes, g.batch, g.input_dtype, g.train, loss=g.loss)
        saved = saved_check(model, t)
        say(saved.render())
        ops = op_check(t)
        say(f"PyTorch ran {ops.aten_forward} forward and {ops.aten_backward} backward ATen ops: "
            + ", ".join(f"{v} {k}" for k, v in ops.by_account.items()))
        for line in ops.unaccounted + ops.backward_mismatch:
            say(f"  NOT ACCOUNTED: {line}")
        if saved.unexplained or ops.unaccounted or ops.backward_mismatch:
            raise PoetError("the graph differs from PyTorch's step beyond the documented differences (above)")
        say("the graph matches PyTorch's step (differences above are the documented ones, docs/graph.md)")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from poet.device.connect import open_device
    from poet.device.profile import (
        existing_profile,
        profile_casts,
        profile_graphs,
        profile_paging,
        resumable,
        write_profile,
    )
    from poet.paths import profile_file

    board = load_board(args.board)
    if args.repeats < 1 or args.max_repeats < args.repeats:
        raise UsageError(f"--repeats {args.repeats} --max-repeats {args.max_repeats}: need 1 <= repeats <= max-repeats")
    path = Path(args.output) if args.output else profile_file(board.name)
    # refuses a file there that is no profile or another board's, and a place it cannot write
    existing = existing_profile(path, board.name)
    if existing and existing.get("source") == "measured" and not args.port:
        raise UsageError(f"{shown(path)} holds costs measured on a real {board.name}; profiling the emulated "
                         f"stand-in would replace them: pass -o another file (or --port the board)")
    models = args.models or ([args.model] if args.model else ["mlp-digits", "cnn-digits"])
    graphs = []
    for m in models:
        g, model, w = _graph(args, m)
        graphs.append(_as_planned(g, model, w, board))
    with tempfile.TemporaryDirectory() as work, open_device(board, args.port, workdir=Path(work)) as dev:
        prev = resumable(existing, dev)
        if existing and prev is None:
            say(f"{shown(path)} was made another way (firmware {existing.get('firmware')}, "
                f"{existing.get('source', 'an older poet')}): profiling afresh")
        elif prev is not None:
            say(f"resuming {shown(path)} (firmware {prev['firmware']}): what it has is skipped")
        prof = profile_graphs(dev, graphs, repeats=args.repeats, max_repeats=args.max_repeats, spread=args.spread,
                              progress=say, existing=prev, save=path, bars=True)
        if not args.no_paging:
            profile_paging(dev, prof, say, save=path)
        if args.casts:
            profile_casts(dev, prof, graphs, say, save=path)
    write_profile(prof, path)
    say(f"wrote {shown(path)}: {len(prof['ops'])} op shapes ({prof['source']}; the planner uses "
        f"{prof['compute']['used']} compute costs and the {prof['paging']['used']} paging model)")
    return 0


def _as_planned(g, model, weights: list, board):
    """A graph to profile as `poet solve` plans it: where its fp32 form cannot fit the board, with its
    frozen prefix in static int8 (the int8 layers' weights folded, their scales calibrated on the
    profile's own kind of input), so the profile measures the ops a run of it executes."""
    import numpy as np

    from poet.graph.reference import state_tensors
    from poet.plan.costs import load_profile
    from poet.plan.rewrites import for_profile

    rewritten = for_profile(g, board, int(load_profile(board.name)["runtime_static_bytes"]))
    if rewritten is None:
        return g, weights
    placed, prefix = rewritten
    say(f"{g.model}: its fp32 graph cannot fit {board.name}; profiling it with its frozen prefix in static int8, "
        "as `poet solve` plans it")
    calib = np.random.default_rng(0).random((64, *g.input_shape), dtype=np.float32)
    # and its largest int8 weights on the SD card where flash cannot hold them all
    return (placed,
            prefix.weights(dict(zip((n for n, _ in state_tensors(model)), weights, strict=True)), calib))


def _deadline(text: str, cg) -> float:
    """--deadline in seconds; refuse one below the compute-only time of a plain pass."""
    deadline_s = parse_deadline(text, cg.one_pass_s)
    if deadline_s < cg.one_pass_s * (1 - 1e-12):
        raise UsageError(f"--deadline {text} ({deadline_s * 1e3:.6g} ms) is below the compute-only time of one "
                         f"plain pass ({cg.one_pass_s * 1e3:.6g} ms); no plan can meet it: use 1x or more")
    return deadline_s


def cmd_solve(args: argparse.Namespace) -> int:
    from poet.graph.file import read_graph
    from poet.graph.training_graph import TrainingGraph
    from poet.plan.request import solve_request
    from poet.plan.rewrites import costed_for

    not_an_input("-o", args.output, [("--graph", args.graph), ("--profile", args.profile),
                                     ("--precision-rules", args.precision_rules)])
    board = load_board(args.board)
    request = _plan_request(args)
    ram = request.ram
    assert ram is not None
    if ram <= 0:
        raise UsageError(f"--ram {args.ram}: must be more than 0 bytes, e.g. 256k")
    if args.graph:
        g = read_graph(args.graph, reference=args.semantics == "reference")
        if not isinstance(g, TrainingGraph):
            if args.precision != "fp32":
                raise UsageError(f"--precision {args.precision} needs a training graph (it inserts cast nodes); "
                                 f"{args.graph} is a costed graph")
            return _solve_costed(args, g, ram)
    else:
        g, _, _ = _graph(args)
    if args.semantics != "poet":
        raise UsageError("--semantics reference applies to costed graph files (the POET reference's instances)")
    check_ram(ram, board.ram_bytes, board.name)
    cg, prof = costed_for(g, board, request, say)
    solve_request(request, g, cg, board, int(prof["runtime_static_bytes"]), _deadline(args.deadline, cg), say,
                  out=_path(args.output), need_schedule=bool(args.output), bars=True)
    return 0


def _solve_costed(args: argparse.Namespace, cg, ram: int) -> int:
    """Plan a costed graph file: no board, no lowering (the file has no ops to run)."""
    from poet.plan.request import plan_line
    from poet.plan.strategies import MILP, found, plan_with
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.strategies.poet_milp import min_arena_budget
    from poet.plan.types import POET, REFERENCE
    from poet.progress import above, ticker

    if args.output:
        raise UsageError(f"{args.graph} is a costed graph (no ops to run): it can be planned, not lowered to a "
                         f"schedule; drop -o")
    semantics = REFERENCE if args.semantics == "reference" else POET
    fixed = 0 if args.semantics == "reference" else costed_fixed_bytes(cg.param_bytes)
    arena = ram - fixed
    if arena <= 0:
        raise UsageError(f"--ram {format_size(ram)} does not hold this graph's parameters and gradients "
                         f"({format_size(fixed)}); the reference's budgets count activations only: "
                         f"add --semantics reference")
    deadline_s = _deadline(args.deadline, cg)
    say(f"[solve] {args.strategy} for {cg.name} ({len(cg)} nodes): arena {arena} B"
        + (f" (--ram {ram} B - parameters and gradients {fixed} B)" if fixed else "")
        + f", deadline {deadline_s:.6g} s ({deadline_s / cg.one_pass_s:.3g}x one pass), {args.semantics} semantics")
    limit = args.time_limit if args.strategy in MILP else None
    with ticker(f"solving ({args.strategy})", limit, shown=True) as clock:
        plan = plan_with(args.strategy, cg, arena, deadline_s, solver=args.solver, time_limit_s=args.time_limit,
                         gap=args.gap, progress=above(clock, lambda m: say(f"  {m}")), semantics=semantics)
    ka = keep_all(cg).peak_bytes
    say(plan_line(plan))
    if not found(plan):
        if args.strategy in MILP and plan.status == "infeasible":
            smallest = min_arena_budget(cg, deadline_s, solver=args.solver, time_limit_s=args.time_limit,
                                        semantics=semantics)
            if smallest is None:
                raise PoetError("no plan meets this deadline even with unlimited RAM; relax --deadline")
            raise PoetError(f"arena {arena} B is below the smallest feasible for this deadline, {smallest} B "
                            f"(--ram {fixed + smallest}); raise --ram or relax --deadline")
        hint = "raise --ram or relax --deadline" if args.strategy in MILP else "try --strategy poet or more --ram"
        raise PoetError(f"{args.strategy} found no plan ({plan.status}{': ' + plan.note if plan.note else ''}); "
                        f"{hint}")
    say(f"    energy      {plan.energy_j:.6g} J per step")
    say(f"    peak arena  {plan.peak_bytes} B of {arena} B (keep-everything needs {ka} B)")
    say(f"    time        {plan.time_s:.6g} s of {deadline_s:.6g} s deadline")
    say(f"    decisions   {plan.recomputes} recomputes, {plan.page_ins} page-ins, {plan.page_outs} page-outs")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from poet.graph.file import read_graph
    from poet.graph.training_graph import TrainingGraph
    from poet.paths import sweep_dir
    from poet.plan.costs import costed, load_profile
    from poet.plan.memory import budget_for
    from poet.plan.sweep import parse_ram_range, plot, run_sweep, semantics_named, write_csv

    rams = parse_ram_range(args.ram)
    strategies = args.strategies.split(",") if args.strategies is not None else list(STRATEGIES)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise UsageError(f"--strategies: unknown {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    g = read_graph(args.graph, reference=args.semantics == "reference") if args.graph else _graph(args)[0]
    if isinstance(g, TrainingGraph):
        board = load_board(args.board)
        prof = load_profile(board.name, Path(args.profile) if args.profile else None,
                            note=lambda m: say(f"note: {m}"))
        cg = costed(g, board, prof, estimate=True, note=lambda m: say(f"note: {m}"))
        fixed = budget_for(g, max(rams[-1], board.ram_bytes) * 4, int(prof["runtime_static_bytes"])).fixed
    else:
        cg, fixed = g, (0 if args.semantics == "reference" else costed_fixed_bytes(g.param_bytes))
    deadlines = [_deadline(d, cg) / cg.one_pass_s for d in args.deadline.split(",")]
    out = Path(args.output) if args.output else sweep_dir(cg.name)
    not_an_input("-o", out / "sweep.csv", [("--graph", args.graph), ("--profile", args.profile)])
    n = len(rams) * len(deadlines) * len(strategies)
    say(f"[sweep] {cg.name}: {len(strategies)} strategies x {len(rams)} budgets x {len(deadlines)} deadlines = {n} "
        f"plans, {args.jobs or 'all'} processes; fixed part of --ram {fixed} B")
    rows = run_sweep(cg, rams, deadlines, strategies, fixed, solver=args.solver, time_limit_s=args.time_limit,
                     jobs=args.jobs, semantics=semantics_named(args.semantics), progress=say)
    write_csv(rows, out / "sweep.csv")
    say(f"wrote {out / 'sweep.csv'}")
    for f in plot(rows, out):
        say(f"wrote {f}")
    return 0


# what --resume takes from the command line; everything else comes from the run's config.json
RESUME_OPTIONS = {"resume", "port", "emulate", "model", "data"}


def _resumed(args: argparse.Namespace) -> RunConfig:
    """The settings of the run --resume continues: its config.json, each value checked as the command
    line's would be.

    Nothing in a run folder makes poet import code: a run of a model or data factory resumes only
    when the command line names the same factory (a folder from someone else may name any module)."""
    from poet.train import saved_config

    run = Path(args.resume)
    cfg = saved_config(run)
    changed = sorted(args.given - RESUME_OPTIONS)
    if changed:
        opt = "--" + changed[0].replace("_", "-")
        was = cfg.get(changed[0])
        raise UsageError(f"{opt}: a resumed run keeps the settings it started with"
                         + (f" ({opt} {was} in {run / 'config.json'})" if was is not None else "")
                         + "; start a new run to change them")
    for key in ("model", "data"):
        v, opt = cfg[key], f"--{key}"
        factory = isinstance(v, str) and ":" in v and not (key == "data" and Path(v).exists())
        asked = getattr(args, key)
        if key in args.given and asked != v and not (Path(asked).exists() and Path(asked).resolve() == Path(v)):
            raise UsageError(f"{opt} {getattr(args, key)}: the run in {run} trains on {opt} {v}")
        if factory and key not in args.given:
            raise UsageError(f"the run in {run} uses {opt} {v}, code of your own: poet imports only code the command "
                             f"line names; if you trust it, resume with `poet train --resume {run} {opt} {v}`")
    return settings.run_config(_checked(cfg, run / "config.json"))


def _checked(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's config.json values, each checked and converted by the `poet train` option of its key, as the
    command line's would be (a NaN or negative lr in it is refused as --lr nan is), over train's defaults
    (what a key at null or false means). Keys that name no option (made_by) are not settings to check."""
    train = _subcommand(build_parser(), "train")
    values = vars(train.parse_args([]))
    options = {a.dest: a for a in train._actions if a.option_strings}
    for key, v in config.items():
        if key in options and v is not None and v is not False:
            values[key] = _option_value(options[key], key, v, path)
    return values


def _option_value(action: argparse.Action, key: str, v: Any, path: Path) -> Any:
    """config.json's `v` for the option `action`, through the option's own type and choices."""
    opt = action.option_strings[-1]

    def damaged(why: str) -> UsageError:
        return UsageError(f"{path}: {why}: the file was changed or damaged, so the run cannot be resumed")

    if action.nargs == 0:  # a flag: true, or absent (false)
        if v is not True:
            raise damaged(f"argument {opt}: ignored explicit argument {json.dumps(v)[:40]}")
        return True
    if isinstance(v, list) and v and all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        text = ",".join(str(d) for d in v)  # a shape, as --input-shape takes it
    elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
        text = str(v)
    else:
        raise damaged(f"{key} is {json.dumps(v)[:40]}, which is no value of {opt}")
    try:
        value = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise damaged(f"argument {opt}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise damaged(f"argument {opt}: invalid choice: {value!r} (choose from {choices})")
    return value


def _subcommand(ap: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def cmd_train(args: argparse.Namespace) -> int:
    from poet.train import train

    if args.port and args.emulate:
        raise UsageError("--port and --emulate: give one (a real board's port, or the emulated stand-in)")
    if args.resume:
        cfg = _resumed(args)
    elif args.ram is None:
        raise UsageError("--ram is required (what the training step may use in all, e.g. 128k)")
    else:
        cfg = _run_config(args)
    train(cfg, say, port=args.port, resume=_path(args.resume), bars=True)
    return 0


def logic_input(text: str) -> int:
    """A meter's logic input for --markers: 0-7, or D0-D7 as the PPK2 labels them."""
    t = text.strip()
    n = t[1:] if t[:1] in ("D", "d") else t
    if not (n.isdigit() and 0 <= int(n) <= 7):
        raise argparse.ArgumentTypeError(f"{text!r} is not a logic input: give 0-7 or D0-D7")
    return int(n)


def meter_offset(text: str) -> float:
    """--meter-offset: the meter's clock minus the host's, seconds. Both are clocks a meter or time.time()
    gives (within MAX_CLOCK_S of 0), so no offset between them is larger."""
    from poet.energy.meters.base import MAX_CLOCK_S

    v = _number(text)
    if abs(v) > MAX_CLOCK_S:
        raise argparse.ArgumentTypeError(f"{text!r} is no offset between two clocks (at most {MAX_CLOCK_S:g} s "
                                         "either way)")
    return v


def cmd_report(args: argparse.Namespace) -> int:
    from poet.energy.report import ReportOptions, report

    if args.depth is not None and args.depth < 0:
        raise UsageError(f"--depth {args.depth}: give 0 (the model only) or more")
    if args.top is not None and args.top < 1:
        raise UsageError(f"--top {args.top}: give 1 or more")
    if args.meter is None and (args.allow_gaps or args.meter_offset is not None or args.markers is not None):
        raise UsageError("--allow-gaps, --meter-offset and --markers apply to a recording: add --meter RECORDING.csv")
    if args.markers is not None and args.meter_offset is not None:
        raise UsageError("--markers aligns on the meter's own clock (its marker pulses), so --meter-offset has "
                         "nothing to move: give one of them")
    if args.meter is not None and args.diff:
        raise UsageError("--meter measures one trace; drop --diff (or report each trace on its own)")
    if args.diff and (args.chrome is not None or args.plot):  # they were ignored: a diff writes only its CSV
        raise UsageError("--diff writes a table and, with --csv, a CSV of the differences: drop --chrome and "
                         "--plot (or report each trace on its own)")

    def file_asked(f: str | None) -> bool | Path:  # --csv, --chrome: absent, bare (the default file) or a file
        return False if f is None else Path(f) if f else True

    return report(ReportOptions(
        trace=Path(args.trace), by=args.by, depth=args.depth, top=args.top, fold=args.fold, csv=file_asked(args.csv),
        chrome=file_asked(args.chrome), plot=args.plot, out=Path(args.out) if args.out else None,
        diff=Path(args.diff) if args.diff else None, meter=Path(args.meter) if args.meter is not None else None,
        allow_gaps=args.allow_gaps, meter_offset_s=args.meter_offset or 0.0, markers=args.markers), say)


def cmd_demo(args: argparse.Namespace) -> int:
    from poet.demo import demo

    demo(_run_config(args), args.steps, say, port=args.port, bars=True)
    return 0


# ---------------------------------------------------------------- parser

# Upper limits of the whole-number options: far beyond any real use, low enough that nothing
# downstream overflows (islice, float energy totals, struct fields) or runs for ever.
MAX_STEPS = 100_000
MAX_BATCH = 65535  # the model blob's batch field is u16 (docs/spec.md section 2)


def _whole(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from lo to hi, else one line saying so (exit 2).

    Checked while parsing, so a bad count is refused before anything is traced, solved or
    booted (`poet demo` starts QEMU long before it uses --steps)."""
    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:  # not a number, or more digits than int() takes
            v = lo - 1
        if not lo <= v <= hi:
            shown_text = text if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(f"{shown_text!r} is not a whole number from {lo} to {hi}")
        return v
    return parse


def _model_args(p: argparse.ArgumentParser, default: str | None = "mlp-digits") -> None:
    p.add_argument("--model", default=default,
                   help=f"zoo model ({', '.join([*ZOO, *SMALL])}), bert (sized by --layers, --hidden) or "
                   "package.module:factory"
                   + (f"; default {default}" if default else ""))
    p.add_argument("--batch", type=_whole(1, MAX_BATCH), default=16,
                   help=f"samples per training step, 1 to {MAX_BATCH} (default 16)")
    p.add_argument("--input-shape", type=_shape, help="shape of one sample for a module:factory model, e.g. 1,8,8 "
                   "(default: the model's input_shape attribute)")
    p.add_argument("--classes", type=_whole(1, 1_000_000),
                   help="classes of a module:factory model (default: its classes attribute, else 10)")
    # numpy's generators (the data order) take no negative seed, torch's none above 2**64 - 1
    p.add_argument("--seed", type=_whole(0, 2**32 - 1), default=0,
                   help="weight initialisation and data order seed, 0 to 4294967295 (default 0)")
    p.add_argument("--train", type=_train_mode, default="all", metavar="MODE",
                   help="what to fine-tune: all, last:N (the last N layers with parameters), bias, or "
                   "bias+last:N (every bias and the last N layers: tiny-training's sparse update) (default all)")
    p.add_argument("--layers", type=_whole(1, 256), help="encoder layers L of the bert model, 1 to 256 (default 12)")
    p.add_argument("--hidden", type=_whole(64, 8192),
                   help="hidden size H of the bert model, a multiple of 64 up to 8192 (default 768)")


def _number(text: str) -> float:
    """A finite float: `nan` and `inf` parse as floats but are no setting's value."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def _positive(text: str) -> float:
    v = _number(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return v


def _non_negative(text: str) -> float:
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return v


# The board takes the learning rate and the optimizer's settings as float32 (the STEP message's
# "<f", the model blob's optimizer attributes): past float32's largest a pack overflows, below its
# smallest normal the value is a subnormal or 0 the board steps with instead of the one given.
F32_MAX = 3.4028234663852886e38
F32_TINY = 1.1754943508222875e-38  # the smallest normal float32


def _as_f32(v: float) -> float:
    """v as the board holds it: packed as the link packs it (float32, to nearest), inf where that overflows."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:
        return math.inf


def _learning_rate(text: str) -> float:
    v = _positive(text)
    if not _as_f32(v) <= F32_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is beyond float32 ({F32_MAX:.4g}), which the board takes "
                                         "the learning rate as")
    if _as_f32(v) < F32_TINY:
        raise argparse.ArgumentTypeError(f"{text!r} is below float32's smallest normal number ({F32_TINY:.4g}), "
                                         "which the board takes the learning rate as")
    return v


def _optimizer(text: str) -> str:
    """--optimizer: parse_optimizer's forms and ranges, each setting as the board holds it (float32): a
    beta or momentum that rounds to 1 never forgets (Adam's bias correction divides by 0), an eps that
    is 0 or subnormal in float32 makes Adam's update 0/0 wherever a gradient is 0."""
    from poet.graph.training_graph import parse_optimizer

    try:
        opt = parse_optimizer(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--optimizer ")) from None
    for key, v in opt.items():
        if key == "name":
            continue
        f = _as_f32(v)
        if key != "eps" and f >= 1.0:
            raise argparse.ArgumentTypeError(f"{text!r}: {key} {v!r} is 1 as float32, which the board takes it as; "
                                             "give at most 0.9999999")
        if f < F32_TINY and (key == "eps" or v != 0):
            raise argparse.ArgumentTypeError(f"{text!r}: {key} {v!r} is below float32's smallest normal number "
                                             f"({F32_TINY:.4g}), which the board takes it as"
                                             + ("" if key == "eps" else "; give 0 or a larger one"))
    return text


def _port(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty port: give the board's serial port, e.g. /dev/ttyACM0")
    return text


def _train_mode(text: str) -> str:
    """--train: all, bias, last:N, or bias+last:N; how many layers the model has is checked when it is traced."""
    parts = text.split("+")
    if text == "all" or (len(set(parts)) == len(parts) and all(_one_train_mode(p) for p in parts)):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give all, bias, or last:N (N >= 1), or bias+last:N")


def _one_train_mode(text: str) -> bool:
    n = text[5:] if text.startswith("last:") else ""
    return text == "bias" or (n.isdigit() and 1 <= int(n) <= 100_000)


def _output_file(text: str) -> str:
    """-o FILE: refused before any work when it cannot be a file poet writes (a folder, or in a folder
    that does not exist: poet makes no folder trees the user did not ask for). A device is written
    in place (/dev/null, /dev/stdout); one that refuses (/dev/full) is one line when written."""
    p = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name in it")
    if not p.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {p.parent} does not exist: make it first, or write elsewhere")
    return text


def _output_regular_file(text: str) -> str:
    """-o FILE that poet rewrites atomically (a new file renamed over it), and reads back to resume:
    it must be a regular file, or renaming would replace a device node."""
    _output_file(text)
    p = Path(text)
    if p.exists() and not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a regular file (a device or a pipe): give a file")
    return text


def _output_folder(text: str) -> str:
    """A folder poet writes into, made (with the folders above it, as asked) if missing."""
    p = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    return text


def _input_file(text: str) -> str:
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not p.exists():
        if p.is_symlink():
            raise argparse.ArgumentTypeError(f"{text} is a link to {os.readlink(p)}, which does not exist")
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return text


def _planner_file(pipes: bool) -> Callable[[str], str]:
    """An argparse type for a file the planner reads (--graph, --profile, --precision-rules): a regular
    file, or with `pipes` a pipe (`<(...)`, /dev/stdin, a FIFO), which its reader reads once. Anything
    else is refused while parsing, saying what it is: a device would read forever (/dev/zero) or as
    empty (/dev/null), and a pipe given where the file is read more than once would wait for ever."""
    def check(text: str) -> str:
        _input_file(text)
        try:
            mode = os.stat(text).st_mode
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"{text}: cannot read it ({exc.strerror or exc})") from None
        if stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode)):
            return text
        link = f" (a link to {os.path.realpath(text)})" if os.path.islink(text) else ""
        if stat.S_ISFIFO(mode):
            raise argparse.ArgumentTypeError(f"{text}{link} is a pipe (FIFO): poet reads this file more than once; "
                                             f"save it to a file and give that")
        raise argparse.ArgumentTypeError(f"{text}{link} is {file_kind(mode)}, not a file: give a regular file")
    return check


# A deadline is a plausible time for one training step: a 400-digit one parses as an infinite float,
# which would reach the planner's solver as a bound of inf
DEADLINE_X_MAX = 1e6  # times one plain pass
DEADLINE_S_MAX = 365 * 24 * 3600.0  # a year


def _deadline_text(text: str) -> str:
    """--deadline: a multiple of one plain pass (1.5x) or a time (45ms), checked while parsing and kept as
    text (what it is in seconds needs the costed graph: _deadline)."""
    shown_text = text if len(text) <= 30 else text[:27] + "..."
    try:
        seconds = parse_deadline(text, 1.0)  # "x" as seconds of a 1 s pass: the multiple itself
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(repr(text), repr(shown_text))) from None
    multiple = text.strip().lower().endswith("x")
    if not seconds <= (DEADLINE_X_MAX if multiple else DEADLINE_S_MAX):
        limit = f"{DEADLINE_X_MAX:g} times one plain pass" if multiple else "a year"
        raise argparse.ArgumentTypeError(f"deadline {shown_text!r} is more than {limit} per training step: give "
                                         f"a deadline like 3x or 45ms")
    return text


def _deadlines(text: str) -> str:
    """sweep's --deadline: a comma-separated list of deadlines, each as _deadline_text."""
    for part in text.split(","):
        _deadline_text(part)
    return text


TIME_LIMIT_MAX = 365 * 24 * 3600.0  # a year: a limit beyond is no limit, and passes HiGHS a time of 1e300


def _time_limit(text: str) -> float:
    v = _positive(text)
    if v > TIME_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"{text[:30]!r} seconds is more than a year: give a time limit like 60")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number like 0.01") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1), e.g. 0.01 for 1%")
    return v


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape like 1,8,8") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    if math.prod(dims) > MAX_SAMPLE_ELEMS:
        raise argparse.ArgumentTypeError(f"{text!r}: {math.prod(dims):,} values in one sample; the model blob counts "
                                         f"a batch's input values in a u32 (at most {MAX_SAMPLE_ELEMS:,})")
    return dims


# The model blob's header counts the whole staged batch's input values as a u32 (x_elems, docs/spec.md
# section 2): one sample past it can never be staged, whatever the batch
MAX_SAMPLE_ELEMS = 2**32 - 1


def _board_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD}; see `poet boards`)")
    p.add_argument("--port", type=_port, help="serial port of a real board; without it the emulated stand-in runs")


def _board_or_stand_in(p: argparse.ArgumentParser, port_help: str, emulate_help: str) -> None:
    """--board, and --port or --emulate (not both): flash and profile."""
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD}; see `poet boards`)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--port", type=_port, help=port_help)
    where.add_argument("--emulate", action="store_true", help=emulate_help)


def _solve_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--ram", required=required,
                   help="RAM the training step may use in all: 256k = 256 KiB, 1m, or bytes (a Linux board's "
                   "runtime, rpi4 or jetson, starts with a pool of this size)"
                   + ("" if required else "; default: a quarter of the way from the smallest feasible budget "
                      "to what keeping every activation needs"))
    p.add_argument("--deadline", type=_deadline_text, default="3x", help="time per step: a multiple of one "
                   "plain pass (1.5x, up to 1e6x) or a time (45ms, up to a year); default 3x")
    p.add_argument("--strategy", default="poet", choices=list(STRATEGIES), metavar="NAME",
                   help="how to plan: " + "; ".join(f"{k}: {v}" for k, v in STRATEGIES.items())
                   + " (default poet)")
    p.add_argument("--solver", default="highs", choices=["highs", "cbc"], help="MILP solver (default highs)")
    p.add_argument("--time-limit", type=_time_limit, default=60.0,
                   help="planner time limit in seconds, lower-bound relaxations and MILP together; with a second "
                   "core free a second MILP (or, where none is built, the relaxations by another path) races on it "
                   "for the whole limit (default 60)")
    p.add_argument("--gap", type=_fraction, default=0.0,
                   help="stop once the plan is proven within this relative gap of a lower bound, e.g. 0.01 (default 0)")
    p.add_argument("--profile", type=_planner_file(pipes=False), help=PROFILE_HELP)
    p.add_argument("--precision", default="fp32", choices=["fp32", "greedy", "auto"],
                   help="fp32 keeps every value (default); greedy stores every allowed saved activation in 16 "
                   "bits and runs every linear and conv2d forward in int8; auto decides each tensor and layer "
                   "inside the planner's MILP, casts counted, for the least energy (greedy and auto change "
                   "values by 16-bit rounding and int8 quantisation)")
    p.add_argument("--precision-rules", type=_planner_file(pipes=False), metavar="FILE",
                   help="which tensors may go 16-bit and which layers int8 (default: poet's "
                   "data/precision.yaml: softmax, loss and norm inputs stay fp32)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line like every other poet error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"poet: {message} (see `{self.prog} --help`)\n")


PROFILE_HELP = ("op-cost profile (default: the one `poet profile` measured into workspace/profiles/<board>.yaml, "
                "else the shipped profiles/<board>.yaml)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="poet", description=__doc__.splitlines()[0].strip("`") + " "
                                 "Train neural networks on boards too small to train them.")
    ap.add_argument("--version", action="version", version=f"poet {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("boards", help="list the boards poet knows and the serial ports attached now")
    p.set_defaults(func=cmd_boards)

    p = sub.add_parser("flash", help="build the firmware and put it on the board (or boot its emulated stand-in)")
    _board_or_stand_in(p, "the board's serial port (/dev/ttyACM0), or ssh://user@host[:port] for rpi4 and jetson",
                       "build the emulated stand-in's image and boot it (the default without --port)")
    p.add_argument("--dry-run", action="store_true", help="print the exact commands, run nothing")
    p.add_argument("--build-on-target", action="store_true",
                   help="Linux boards: copy the firmware sources and build the runtime on the board "
                   "instead of copying the cross build")
    p.set_defaults(func=cmd_flash)

    p = sub.add_parser("graph", help="trace a model's training step into a graph")
    _model_args(p)
    p.add_argument("-o", "--output", type=_output_file, help="write the graph JSON here")
    p.add_argument("--check", action="store_true",
                   help="also run a real PyTorch step and compare saved tensors and ops with the graph")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("profile", help="measure op costs and paging on the board, write "
                       "workspace/profiles/<board>.yaml")
    _board_or_stand_in(p, "serial port of a real board (or ssh://user@host for rpi4 and jetson)",
                       "profile the emulated stand-in (the default without --port); numbers are 'emulated'")
    _model_args(p, default=None)
    p.add_argument("--models", nargs="+", help="models to profile (default: mlp-digits cnn-digits)")
    p.add_argument("--repeats", type=_whole(1, 1000), default=3, help="least runs per graph (default 3)")
    p.add_argument("--max-repeats", type=_whole(1, 1000), default=10,
                   help="most runs per graph while an op's spread is above --spread (default 10)")
    p.add_argument("--spread", type=_fraction, default=0.02,
                   help="stop repeating once every op's (max - min) / median ticks is below this (default 0.02)")
    p.add_argument("--no-paging", action="store_true", help="skip the paging sweep")
    p.add_argument("--casts", action="store_true",
                   help="also measure the casts (fp32 <-> fp16, bf16, int8) over sizes, fitting cycles = r n + c, "
                        "and the int8 linear/conv forward against fp32 at the models' layer shapes")
    p.add_argument("-o", "--output", type=_output_regular_file,
                   help="profile path (default workspace/profiles/<board>.yaml; $POET_WORKSPACE moves workspace/)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("solve", help="plan a training step for a RAM budget and deadline")
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD})")
    _model_args(p)
    _solve_args(p)
    p.add_argument("--graph", type=_planner_file(pipes=True),
                   help="plan this graph file instead of tracing --model: a training graph from "
                   "`poet graph -o`, or a costed graph (the POET reference's schema); every number in it is "
                   "checked on load (sizes whole and below 2**48, costs 0 to 1e9 s or J, deps earlier nodes)")
    p.add_argument("--semantics", choices=["poet", "reference"], default="poet",
                   help="for costed graph files: reference = the POET reference's rules (paging time outside "
                   "the deadline, no page-out in the producing stage, inputs recomputable, budget = activations)")
    p.add_argument("-o", "--output", type=_output_file,
                   help="schedule file (default workspace/schedules/<model>.<board>.poet)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("sweep", help="every strategy over RAM budgets and deadlines: a CSV and the POET paper's plots")
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD})")
    _model_args(p)
    p.add_argument("--graph", type=_planner_file(pipes=True),
                   help="sweep this graph file (training graph or costed graph) instead of --model")
    p.add_argument("--ram", required=True, help="budgets: LOW:HIGH:COUNT (e.g. 32k:512k:16) or a list 64k,96k")
    p.add_argument("--deadline", type=_deadlines, default="1.5x",
                   help="deadlines, comma-separated: 1.2x,1.5x,2x or 45ms (default 1.5x)")
    p.add_argument("--strategies", help=f"comma-separated subset of {','.join(STRATEGIES)} (default all)")
    p.add_argument("--solver", default="highs", choices=["highs", "cbc"], help="MILP solver (default highs)")
    p.add_argument("--time-limit", type=_time_limit, default=60.0, help="per-plan solver time limit in s (default 60)")
    # Python forks every worker up front: a huge --jobs would fork that many
    p.add_argument("--jobs", type=_whole(1, 256), help="parallel processes, 1 to 256 (default: one per core)")
    p.add_argument("--profile", type=_planner_file(pipes=False), help=PROFILE_HELP)
    p.add_argument("--semantics", choices=["poet", "reference"], default="poet",
                   help="for costed graph files: the POET reference's rules (see `poet solve --help`)")
    p.add_argument("-o", "--output", type=_output_folder, help="output folder (default workspace/sweeps/<model>)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("train", help="fine-tune a model on the board: plan, flash, upload, train epochs, read back",
                       description="Fine-tune a model on the board within --ram and --deadline. The run lives in "
                       "workspace/runs/<id>/ (config, plan, schedule, trace, checkpoint after every step, report, "
                       "weights.pt); "
                       "one stopped by a reset, a lost cable or Ctrl-C continues with --resume workspace/runs/<id>.")
    _board_args(p)
    p.add_argument("--emulate", action="store_true", help="use the board's emulated stand-in (the default without "
                   "--port)")
    _model_args(p)
    _solve_args(p, required=False)
    p.add_argument("--weights", type=_input_file, metavar="FILE.pt",
                   help="start from these weights (a state_dict: torch.save(model.state_dict(), FILE.pt)) instead of "
                   "--seed's: fine-tune a pretrained model; only tensors are read, no code")
    p.add_argument("--data", default="digits", help="digits (scikit-learn's 8x8, bundled; upsampled for square image "
                   "models, e.g. 3x32x32; folded into a model's fewer classes, e.g. even/odd for 2; 64 tokens, each "
                   "pixel's intensity 0..16, for a model of token ids such as bert-tiny), "
                   "mfcc (synthetic keyword clips, 1x49x10 MFCCs, 12 classes: for mlperf-kws), "
                   "machine-sound (synthetic 5x128 log-mel machine sounds, normal to train, normal and anomalous to "
                   "test: for mlperf-ad), a folder with train_x.npy "
                   "and train_y.npy (test_x.npy/test_y.npy optional), or module:factory returning a torch Dataset "
                   "(or a (train, test) pair); default digits")
    p.add_argument("--data-limit", type=_whole(1, 10**9), help="use only the first N training samples")
    p.add_argument("--epochs", type=_whole(1, MAX_STEPS), default=3, help=f"epochs, 1 to {MAX_STEPS} (default 3)")
    p.add_argument("--lr", type=_learning_rate, default=0.1, help="learning rate (default 0.1)")
    p.add_argument("--optimizer", type=_optimizer, default="sgd",
                   help="sgd, momentum[:M] or adam[:BETA1,BETA2,EPS] (default sgd)")
    p.add_argument("--budget-j", type=_positive, help="refuse a run predicted to need more joules than this")
    p.add_argument("--battery-mah", type=_positive, help="refuse a run the battery cannot carry (with --volts)")
    p.add_argument("--volts", type=_positive, help="the battery's nominal voltage")
    p.add_argument("--force", action="store_true", help="run even if over --budget-j or the battery")
    p.add_argument("--country", help="ISO 3166 code of the grid the board draws from (carbon intensity; default "
                   "the world average)")
    p.add_argument("--carbon-intensity", type=_non_negative, metavar="G_PER_KWH", help="grid carbon intensity to use "
                   "instead of the bundled table")
    p.add_argument("--checkpoint-every", type=_whole(1, MAX_STEPS), default=1, metavar="N",
                   help="read weights and optimizer state back every N steps (default 1: a resumed run loses "
                   "nothing; on a slow serial line a larger N saves link time, and --resume re-runs up to N-1 "
                   "steps, with the same result)")
    p.add_argument("--run-dir", type=_output_folder,
                   help="the run's folder, new or empty (default workspace/runs/<time>-<model>, with "
                   "-2, -3... when taken); one that holds a run is refused: continue that with --resume")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder from its last finished step "
                   "(or write the files a run stopped after its last step lacks)")
    p.add_argument("--schedule", type=_input_file,
                   help="run this schedule file (from `poet solve`) instead of planning; the board "
                   "validates it")
    p.add_argument("--meter", metavar="BACKEND[:ARG]",
                   help="record a power meter over the steps into workspace/runs/<id>/meter.csv (for `poet report "
                   "TRACE --meter`): rapl[:ZONE], ina219[:INDEX], ina3221[:RAIL+RAIL] or file:RECORDING.csv "
                   "(replays a recording from the run's start)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("report", help="energy report of a saved trace: by module, layer, tensor, kind; CSV, "
                       "Chrome trace, plots; a diff of two schedules")
    p.add_argument("trace", type=_input_file,
                   help="trace JSON written by `poet train` or `poet demo` (checked against the "
                   "schedule.poet beside it, when there is one)")
    p.add_argument("--by", choices=["module", "layer", "tensor", "kind"],
                   help="one view: the module tree (EDD), layers (graph modules), tensors or kinds "
                   "(default: kinds, module tree and top tensors)")
    p.add_argument("--depth", type=_whole(0, 1000), help="module tree levels below the model (default 2; plots: all)")
    p.add_argument("--top", type=_whole(1,
                   100_000), help="tensors (and with --by layer, layers) to list (default 5; plots 10)")
    p.add_argument("--fold", action="store_true",
                   help="summarized footprint: fold numbered self-similar siblings (layer_3 -> layer_*)")
    p.add_argument("--csv", nargs="?", const="", metavar="FILE",
                   help="write the long-form CSV (step, module, tensor, kind, energy_j, time_s); default "
                   "TRACE-stem.energy.csv next to the trace or in --out")
    p.add_argument("--chrome", nargs="?", const="", metavar="FILE",
                   help="write a Chrome trace-event JSON for Perfetto (ops on board time, power counter); "
                   "default TRACE-stem.chrome.json")
    p.add_argument("--plot", action="store_true",
                   help="write PNGs: the EDD as an icicle chart, top tensors (energy, power), power timeline")
    p.add_argument("--out", type=_output_folder,
                   metavar="DIR", help="where --csv/--chrome/--plot files go (default: the trace's folder)")
    p.add_argument("--diff", type=_input_file, metavar="TRACE_B",
                   help="compare with another trace of the same graph: joules per step by kind and tensor")
    p.add_argument("--meter", type=_input_file, metavar="RECORDING.csv",
                   help="measured energy: a power meter's recording (poet-meter/1 CSV, e.g. "
                   "workspace/runs/<id>/meter.csv from `poet train --meter`) aligned with the trace by its steps' "
                   "host times (or, with "
                   "--markers, by the op marker's pulses); shown beside the modelled account")
    p.add_argument("--allow-gaps", action="store_true",
                   help="with --meter: interpolate over gaps in the recording (the ops over them are flagged) "
                   "instead of refusing it")
    p.add_argument("--meter-offset", type=meter_offset, metavar="S",
                   help="with --meter: the meter's clock minus the host's time.time(), in seconds (default 0: "
                   "host-side meters stamp time.time())")
    p.add_argument("--markers", type=logic_input, metavar="CH",
                   help="with --meter: align by the op marker instead of host times: the recording's logic input "
                   "CH (0-7 or D0-D7; the PPK2's D0 in docs/energy.md) must carry one pulse per trace record, "
                   "in order (refused otherwise)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the whole loop on the default (emulated) board")
    _board_args(p)
    _model_args(p)
    _solve_args(p, required=False)
    p.add_argument("--steps", type=_whole(1, MAX_STEPS), default=89,
                   help="training steps, taken from one epoch of digits (default 89, the whole epoch at batch 16; "
                   "for more, `poet train --epochs`)")
    p.add_argument("--lr", type=_learning_rate, default=0.3, help="SGD learning rate (default 0.3)")
    p.add_argument("--run-dir", type=_output_folder,
                   help="where the run's files go (default workspace/runs/demo, rewritten by every demo)")
    p.set_defaults(func=cmd_demo)
    return ap


def _value_options(ap: argparse.ArgumentParser) -> set[str]:
    """Every option string, of the parser and its subcommands, that takes a value."""
    found: set[str] = set()
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _value_options(sub)
        elif action.option_strings and action.nargs != 0:
            found.update(action.option_strings)
    return found


def _joined_negatives(ap: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--deadline -1x` as `--deadline=-1x`: argparse takes a value that starts with '-' and is not a
    plain number for an option and says "expected one argument"; joined, the option's own check says
    what is wrong with the value."""
    takes = _value_options(ap)
    out: list[str] = []
    for tok in argv:
        if out and out[-1] in takes and len(tok) > 1 and tok[0] == "-" and (tok[1].isdigit() or tok[1] == "."):
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


def given_options(ap: argparse.ArgumentParser, argv: list[str], command: str) -> set[str]:
    """The dests of the options the command line gave `command` (not left at their defaults)."""
    sub = _subcommand(ap, command)
    rest = argv[argv.index(command) + 1:]
    unset = object()
    dests = {a.dest for a in sub._actions if a.dest != "help"}
    ns = argparse.Namespace(**dict.fromkeys(dests, unset))
    sub.parse_known_args(rest, namespace=ns)  # defaults fill only what the namespace lacks
    return {k for k in dests if getattr(ns, k) is not unset}


STOPPED = {2: "interrupted", 15: "terminated (SIGTERM)", 1: "hung up (SIGHUP)"}  # what main() says, by signal


def _stopping_signals() -> list[tuple[int, Any]]:
    """SIGTERM and SIGHUP raise Terminated while main() runs; the handlers they replaced, to put back.

    Only a signal left at its default is taken: one ignored stays ignored (nohup's SIGHUP, a background
    job's), one an embedding program handles stays its own. Only the main thread can take signals."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return []

    def stop(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    saved = []
    for sig in (getattr(signal, name, None) for name in ("SIGTERM", "SIGHUP")):  # Windows has no SIGHUP
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            saved.append((int(sig), signal.signal(sig, stop)))
    return saved


def _stopped_by(exc: BaseException) -> int | None:
    """The signal behind `exc`: a KeyboardInterrupt's (Ctrl-C: SIGINT), or a failure raised while
    handling one (train's 'stopped by Ctrl-C', status 130); None if no signal."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return int(getattr(at, "signum", 2))
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    import signal

    ap = build_parser()
    argv = _joined_negatives(ap, list(sys.argv[1:] if argv is None else argv))
    args = ap.parse_args(argv)
    args.given = given_options(ap, argv, args.command)
    saved = _stopping_signals()
    try:
        return args.func(args)
    except PoetError as exc:
        if args.debug:
            raise
        print(f"poet: {exc}", file=sys.stderr)
        signum = _stopped_by(exc) if exc.status == 130 else None  # said what was saved: the status is the signal's
        return 128 + signum if signum is not None else exc.status
    except KeyboardInterrupt as exc:  # Ctrl-C, or Terminated: one line, 128 + the signal as a shell has it
        signum = int(getattr(exc, "signum", 2))
        print(f"poet: {STOPPED.get(signum, 'stopped')}", file=sys.stderr)
        return 128 + signum
    except MemoryError:
        if args.debug:
            raise
        print("poet: out of memory: this machine cannot hold the model or graph asked for; try a smaller one",
              file=sys.stderr)
        return 1
    except OSError as exc:  # a file poet reads or writes: which, and the system's reason
        if args.debug:
            raise
        if exc.filename:
            print(f"poet: cannot read or write {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        else:  # a serial port, a socket: the exception says which
            print(f"poet: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug in poet: one line unless --debug
        if args.debug:
            raise
        print(f"poet: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1
    finally:  # tests run main() in one process many times: leave the handlers as they were
        for sig, handler in saved:
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
