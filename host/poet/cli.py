"""`poet`: the one command-line entry. Every user mistake ends in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from poet import __version__
from poet.boards import board_names, load_board
from poet.errors import PoetError
from poet.memory import check_ram
from poet.models import ZOO
from poet.units import parse_deadline, parse_size

DEFAULT_BOARD = "nrf52840"


def say(msg: str = "") -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- commands

def cmd_boards(args: argparse.Namespace) -> int:
    for name in board_names():
        b = load_board(name)
        say(f"{name:<12} {b.description}  (emulated by QEMU {b.emulator.get('machine', '-')})")
    return 0


def _graph(args: argparse.Namespace):
    from poet.reference import weights_of
    from poet.run import model_and_graph

    model, g = model_and_graph(args)
    return g, model, weights_of(model)


def cmd_graph(args: argparse.Namespace) -> int:
    from poet.graph import summary

    g, model, _ = _graph(args)
    say(summary(g))
    if args.output:
        g.to_json(args.output)
        say(f"wrote {args.output}")
    if args.check:
        from poet.graphcheck import op_check, real_step, saved_check
        say("checking against a real PyTorch step ...")
        t = real_step(model, g.model, tuple(g.input_shape), g.classes, g.batch, g.input_dtype, g.train)
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
    from poet.costs import load_profile, profile_graphs, profile_path, write_profile
    from poet.device import open_device

    board = load_board(args.board)
    models = args.models or ["mlp-digits", "cnn-digits"]
    graphs = []
    for m in models:
        args.model = m
        g, _, w = _graph(args)
        graphs.append((g, w))
    path = Path(args.output) if args.output else profile_path(board.name)
    existing = load_profile(board.name, path) if path.exists() else None
    with tempfile.TemporaryDirectory() as work, open_device(board, args.port, workdir=Path(work)) as dev:
        prof = profile_graphs(dev, graphs, repeats=args.repeats, progress=say, existing=existing)
    write_profile(prof, path)
    say(f"wrote {path}: {len(prof['ops'])} op shapes, {'emulated' if not args.port else 'measured'}")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from poet.costs import costed, load_profile
    from poet.run import solve_and_lower

    board = load_board(args.board)
    ram = check_ram(parse_size(args.ram), board.ram_bytes, board.name)
    if args.graph:
        from poet.graph import TrainingGraph

        try:
            g = TrainingGraph.from_json(args.graph)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PoetError(f"cannot read training graph {args.graph}: {exc}; write one with "
                            f"`poet graph -o FILE`", status=2) from exc
    else:
        g, _, _ = _graph(args)
    prof = load_profile(board.name, Path(args.profile) if args.profile else None)
    cg = costed(g, board, prof)
    deadline_s = parse_deadline(args.deadline, cg.one_pass_s)
    solve_and_lower(args, g, cg, board, ram, int(prof["runtime_static_bytes"]), deadline_s, say,
                    out=Path(args.output) if args.output else None)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from poet.run import train_on_device

    train_on_device(args, say)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from poet.energy import render
    from poet.tracefile import Trace

    tr = Trace.load(args.trace)
    say(render(tr, load_board(tr.board), top=args.top))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from poet.run import demo

    demo(args, say)
    return 0


# ---------------------------------------------------------------- parser

def _model_args(p: argparse.ArgumentParser, default: str | None = "mlp-digits") -> None:
    p.add_argument("--model", default=default,
                   help=f"zoo model ({', '.join(ZOO)}), bert (sized by --layers, --hidden) or package.module:factory"
                   + (f"; default {default}" if default else ""))
    p.add_argument("--batch", type=int, default=16, help="samples per training step (default 16)")
    p.add_argument("--input-shape", type=_shape, help="shape of one sample for a module:factory model, e.g. 1,8,8")
    p.add_argument("--classes", type=int, help="classes of a module:factory model (default 10)")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.add_argument("--train", default="all", metavar="MODE",
                   help="what to fine-tune: all, last:N (the last N layers with parameters) or bias (default all)")
    p.add_argument("--layers", type=int, help="encoder layers L of the bert model (default 12)")
    p.add_argument("--hidden", type=int, help="hidden size H of the bert model, a multiple of 64 (default 768)")


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape like 1,8,8") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    return dims


def _board_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD}; see `poet boards`)")
    p.add_argument("--port", help="serial port of a real board; without it the emulated stand-in runs")


def _solve_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--ram", required=required,
                   help="RAM the training step may use in all: 256k = 256 KiB, 1m, or bytes"
                   + ("" if required else "; default: a quarter of the way from the smallest feasible budget "
                      "to what keeping every activation needs"))
    p.add_argument("--deadline", default="3x", help="time per step: a multiple of one plain pass (1.5x) "
                   "or a time (45ms); default 3x")
    p.add_argument("--solver", default="highs", choices=["highs", "cbc"], help="MILP solver (default highs)")
    p.add_argument("--time-limit", type=float, default=60.0, help="solver time limit in seconds")
    p.add_argument("--profile", help="op-cost profile (default profiles/<board>.yaml)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line like every other poet error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"poet: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="poet", description=__doc__.splitlines()[0].strip("`") + " "
                                 "Train neural networks on boards too small to train them.")
    ap.add_argument("--version", action="version", version=f"poet {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("boards", help="list the boards poet knows")
    p.set_defaults(func=cmd_boards)

    p = sub.add_parser("graph", help="trace a model's training step into a graph")
    _model_args(p)
    p.add_argument("-o", "--output", help="write the graph JSON here")
    p.add_argument("--check", action="store_true",
                   help="also run a real PyTorch step and compare saved tensors and ops with the graph")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("profile", help="measure op costs on the board, write profiles/<board>.yaml")
    _board_args(p)
    _model_args(p, default=None)
    p.add_argument("--models", nargs="+", help="models to profile (default: mlp-digits cnn-digits)")
    p.add_argument("--repeats", type=int, default=3, help="runs per op (default 3)")
    p.add_argument("-o", "--output", help="profile path (default profiles/<board>.yaml)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("solve", help="plan a training step for a RAM budget and deadline")
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD})")
    _model_args(p)
    _solve_args(p)
    p.add_argument("--graph", help="plan this training-graph JSON (from `poet graph -o`) instead of tracing --model")
    p.add_argument("-o", "--output", help="schedule file (default schedules/<model>.<board>.poet)")
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("train", help="plan, upload and run training steps on the board")
    _board_args(p)
    _model_args(p)
    _solve_args(p)
    p.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--run-dir", help="where the run's files go (default runs/<time>)")
    p.add_argument("--schedule", help="run this schedule file instead of solving (the board validates it)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("report", help="energy report of a saved trace")
    p.add_argument("trace", help="trace JSON written by `poet train` or `poet demo`")
    p.add_argument("--top", type=int, default=5, help="tensors to list (default 5)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", help="the whole loop on the default (emulated) board")
    _board_args(p)
    _model_args(p)
    _solve_args(p, required=False)
    p.add_argument("--steps", type=int, default=89, help="training steps (default 89: one epoch of digits)")
    p.add_argument("--lr", type=float, default=0.3, help="SGD learning rate (default 0.3)")
    p.add_argument("--run-dir", help="where the run's files go (default runs/demo)")
    p.set_defaults(func=cmd_demo, models=None, repeats=3, output=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except PoetError as exc:
        if args.debug:
            raise
        print(f"poet: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print("poet: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug in poet: one line unless --debug
        if args.debug:
            raise
        print(f"poet: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
