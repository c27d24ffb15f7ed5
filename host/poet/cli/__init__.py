"""`poet`: the one command-line entry. Every user mistake ends in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import dataclasses
import os
import select
import sys
import tempfile
from pathlib import Path
from typing import Any

from poet import settings
from poet.boards import board_names, load_board
from poet.cli.parser import build_parser, given_options, joined_negatives
from poet.cli.resume import resumed
from poet.errors import PoetError, Terminated, UsageError
from poet.files import not_an_input
from poet.models.zoo import ModelChoice
from poet.paths import shown, write_output
from poet.plan.cost.memory import check_ram
from poet.plan.strategies import STRATEGIES
from poet.settings import PlanRequest, RunConfig
from poet.units import format_size


def say(msg: str = "") -> None:
    print(msg, flush=True)


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
    from poet.graph.training_graph import layers_text, summary

    not_an_input("-o", args.output, _model_choice(args).files())
    g, model, _ = _graph(args)
    say(summary(g))
    if args.list_layers:
        say(layers_text(g))
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
    from poet.plan.transform.rewrites import as_planned

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
        graphs.append(as_planned(g, model, w, board, say))
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


def cmd_solve(args: argparse.Namespace) -> int:
    from poet.graph.file import read_graph
    from poet.graph.training_graph import TrainingGraph
    from poet.plan.request import deadline_for, solve_costed, solve_request
    from poet.plan.transform.rewrites import costed_for, profile_for

    not_an_input("-o", args.output, [("--graph", args.graph), ("--profile", args.profile),
                                     ("--precision-rules", args.precision_rules),
                                     *([] if args.graph else _model_choice(args).files())])
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
            if args.output:
                raise UsageError(f"{args.graph} is a costed graph (no ops to run): it can be planned, not lowered "
                                 f"to a schedule; drop -o")
            solve_costed(g, ram, request, args.semantics, say)
            return 0
    else:
        g, _, _ = _graph(args)
    if args.semantics != "poet":
        raise UsageError("--semantics reference applies to costed graph files (the POET reference's instances)")
    check_ram(ram, board.ram_bytes, board.name)
    prof = profile_for(board, request, say)
    cg = costed_for(g, board, prof, lambda _m: None)  # its estimates: named by decide(), once final
    solve_request(request, g, cg, board, int(prof["runtime_static_bytes"]), deadline_for(args.deadline, cg), say,
                  out=_path(args.output), need_schedule=bool(args.output), bars=True, prof=prof)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from poet.graph.file import read_graph
    from poet.graph.training_graph import TrainingGraph
    from poet.paths import sweep_dir
    from poet.plan.request import deadline_for
    from poet.plan.sweep import costed_for_sweep, parse_ram_range, plot, run_sweep, semantics_named, write_csv

    rams = parse_ram_range(args.ram)
    strategies = args.strategies.split(",") if args.strategies is not None else list(STRATEGIES)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise UsageError(f"--strategies: unknown {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    g = read_graph(args.graph, reference=args.semantics == "reference") if args.graph else _graph(args)[0]
    board = load_board(args.board) if isinstance(g, TrainingGraph) else None
    cg, fixed = costed_for_sweep(g, board, _path(args.profile), rams, args.semantics, say)
    deadlines = [deadline_for(d, cg) / cg.one_pass_s for d in args.deadline.split(",")]
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


def cmd_train(args: argparse.Namespace) -> int:
    from poet.train import train

    if args.port and args.emulate:
        raise UsageError("--port and --emulate: give one (a real board's port, or the emulated stand-in)")
    if args.resume:
        cfg = resumed(args)
    elif args.ram is None:
        raise UsageError("--ram is required (what the training step may use in all, e.g. 128k)")
    else:
        cfg = _run_config(args)
    train(cfg, say, port=args.port, resume=_path(args.resume), bars=True)
    return 0


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


def cmd_export(args: argparse.Namespace) -> int:
    from poet.export.export import export

    out = Path(args.out)
    cfg = _run_config(args)
    not_an_input("-o", out, [("--weights", args.weights), *_model_choice(args).files()])
    export(cfg, out, say, bars=True)
    return 0


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


def _stdout_gone() -> bool:
    """Whether stdout's reader has closed the pipe (a board's link closing is reported, not this). Then stdout
    goes to devnull, so the interpreter's flush at exit writes nothing more there."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        gone = any(ev & select.POLLERR for _, ev in poll.poll(0))  # a pipe with no reader polls as an error
    except (OSError, ValueError):  # no real file behind stdout (a test's capture)
        return False
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return gone


def main(argv: list[str] | None = None) -> int:
    import signal

    ap = build_parser()
    argv = joined_negatives(ap, list(sys.argv[1:] if argv is None else argv))
    args = ap.parse_args(argv)
    args.given = given_options(ap, argv, args.command)
    saved = _stopping_signals()
    try:
        # the subcommand's handler by name (cli.parser cannot import this module): looked up now, so one
        # replaced here (tests, an embedding program) is the one that runs
        return globals()[args.func](args)
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
        if isinstance(exc, BrokenPipeError) and _stdout_gone():  # `poet ... | head`: the reader has all it wants
            return 128 + signal.SIGPIPE
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
