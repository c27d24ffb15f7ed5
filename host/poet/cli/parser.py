"""poet's command line: the subcommands and their options (values checked by poet.cli.values)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from poet import __version__
from poet.cli.values import (
    MAX_BATCH,
    MAX_STEPS,
    _deadline_text,
    _deadlines,
    _fraction,
    _input_file,
    _learning_rate,
    _non_negative,
    _optimizer,
    _output_file,
    _output_folder,
    _output_regular_file,
    _planner_file,
    _port,
    _positive,
    _shape,
    _time_limit,
    _train_mode,
    _whole,
    logic_input,
    meter_offset,
)
from poet.models.zoo import SMALL, ZOO
from poet.plan.strategies import STRATEGIES

DEFAULT_BOARD = "nrf52840"


def _model_args(p: argparse.ArgumentParser, default: str | None = "mlp-digits") -> None:
    p.add_argument("--model", default=default,
                   help=f"zoo model ({', '.join([*ZOO, *SMALL])}), bert (sized by --layers, --hidden) or "
                   "package.module:factory"
                   + (f"; default {default}" if default else ""))
    p.add_argument("--batch", type=_whole(1, MAX_BATCH), default=16,
                   help=f"samples per training step, 1 to {MAX_BATCH} (default 16)")
    p.add_argument("--input-shape", type=_shape, help="shape of one sample for a module:factory model, e.g. 1,8,8 "
                   "(default: the model's input_shape attribute; one that reads token ids also carries "
                   "input_dtype = 'int64')")
    p.add_argument("--classes", type=_whole(1, 1_000_000),
                   help="classes of a module:factory model (default: its classes attribute, else 10)")
    # numpy's generators (the data order) take no negative seed, torch's none above 2**64 - 1
    p.add_argument("--seed", type=_whole(0, 2**32 - 1), default=0,
                   help="weight initialisation and data order seed, 0 to 4294967295 (default 0)")
    p.add_argument("--train", type=_train_mode, default="all", metavar="MODE",
                   help="what to fine-tune: all, last:N (the last N layers with parameters), bias (every bias), "
                   "bias:K (the biases of the last K layers), layers:NAME,NAME (those modules' parameters; NAME@R: "
                   "a conv's weight for its first R of input channels), or several joined by + (their union; "
                   "last:1+bias:12 is a sparse update as tiny-training's; poet graph --list-layers shows the "
                   "layers) (default all)")
    p.add_argument("--layers", type=_whole(1, 256), help="encoder layers L of the bert model, 1 to 256 (default 12)")
    p.add_argument("--hidden", type=_whole(64, 8192),
                   help="hidden size H of the bert model, a multiple of 64 up to 8192 (default 768)")


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
                   help="how hard the planner looks, in seconds (default 60): the searches before the MILP get "
                   "the work a reference machine does in their share of it, so a busy or slow machine finds the "
                   "same plan, later; the MILP stops at the limit (the plan says if it did). With a second core "
                   "free a second MILP (or, where none is built, the relaxations by another path) races on it")
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


def _start_args(p: argparse.ArgumentParser) -> None:
    """The weights a run starts from and its data: train and export."""
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


def _step_args(p: argparse.ArgumentParser) -> None:
    """How each step updates the weights: train and export."""
    p.add_argument("--lr", type=_learning_rate, default=0.1, help="learning rate (default 0.1)")
    p.add_argument("--optimizer", type=_optimizer, default="sgd",
                   help="sgd, momentum[:M] or adam[:BETA1,BETA2,EPS] (default sgd)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line like every other poet error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"poet: {message} (see `{self.prog} --help`)\n")


PROFILE_HELP = ("op-cost profile (default: the one `poet profile` measured into workspace/profiles/<board>.yaml, "
                "else the shipped profiles/<board>.yaml)")


# the first line of `poet --help` (the cli module's docstring, as it always read)
COMMAND_LINE = "poet`: the one command-line entry. Every user mistake ends in one line and a non-zero exit."


def build_parser() -> argparse.ArgumentParser:
    """poet's parser: one subcommand each, its options added by _<command>_command below. A subcommand's
    `func` names its handler in poet.cli (looked up when it runs, so the handlers can be replaced)."""
    ap = _Parser(prog="poet", description=COMMAND_LINE + " Train neural networks on boards too small to train them.")
    ap.add_argument("--version", action="version", version=f"poet {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _boards_command(sub)
    _flash_command(sub)
    _graph_command(sub)
    _profile_command(sub)
    _solve_command(sub)
    _sweep_command(sub)
    _train_command(sub)
    _report_command(sub)
    _demo_command(sub)
    _export_command(sub)
    return ap


def _boards_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("boards", help="list the boards poet knows and the serial ports attached now")
    p.set_defaults(func="cmd_boards")


def _flash_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("flash", help="build the firmware and put it on the board (or boot its emulated stand-in)")
    _board_or_stand_in(p, "the board's serial port (/dev/ttyACM0), or ssh://user@host[:port] for rpi4 and jetson",
                       "build the emulated stand-in's image and boot it (the default without --port)")
    p.add_argument("--dry-run", action="store_true", help="print the exact commands, run nothing")
    p.add_argument("--build-on-target", action="store_true",
                   help="Linux boards: copy the firmware sources and build the runtime on the board "
                   "instead of copying the cross build")
    p.set_defaults(func="cmd_flash")


def _graph_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("graph", help="trace a model's training step into a graph")
    _model_args(p)
    p.add_argument("-o", "--output", type=_output_file, help="write the graph JSON here")
    p.add_argument("--check", action="store_true",
                   help="also run a real PyTorch step and compare saved tensors and ops with the graph")
    p.add_argument("--list-layers", action="store_true",
                   help="list the layers with parameters in forward order, numbered from the last as last:N and "
                   "bias:K count them, named as layers: takes them, and what --train trains of each")
    p.set_defaults(func="cmd_graph")


def _profile_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.set_defaults(func="cmd_profile")


def _solve_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.set_defaults(func="cmd_solve")


def _sweep_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--time-limit", type=_time_limit, default=60.0,
                   help="per plan, as solve's --time-limit (default 60)")
    # Python forks every worker up front: a huge --jobs would fork that many
    p.add_argument("--jobs", type=_whole(1, 256), help="parallel processes, 1 to 256 (default: one per core)")
    p.add_argument("--profile", type=_planner_file(pipes=False), help=PROFILE_HELP)
    p.add_argument("--semantics", choices=["poet", "reference"], default="poet",
                   help="for costed graph files: the POET reference's rules (see `poet solve --help`)")
    p.add_argument("-o", "--output", type=_output_folder, help="output folder (default workspace/sweeps/<model>)")
    p.set_defaults(func="cmd_sweep")


def _train_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    _start_args(p)
    p.add_argument("--epochs", type=_whole(1, MAX_STEPS), default=3, help=f"epochs, 1 to {MAX_STEPS} (default 3)")
    p.add_argument("--order", choices=("host", "device"), default="host",
                   help="the order each epoch visits the training samples in: host (a shuffle fixed by --seed and "
                   "the epoch; default) or device (the one an exported device's poet_train_epoch uses with that "
                   "seed, so this run trains on the same batches: docs/device.md)")
    _step_args(p)
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
    p.add_argument("--no-feature-cache", action="store_true",
                   help="compute the frozen layers every epoch, even where the plan would keep their output on the "
                   "board's storage after epoch 1 and train only the rest from it (same weights either way; "
                   "docs/planner.md, \"Features once\")")
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
    p.set_defaults(func="cmd_train")


def _report_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.set_defaults(func="cmd_report")


def _demo_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.set_defaults(func="cmd_demo")


def _export_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="write a folder from which your own firmware trains and predicts, no host "
                       "attached: bundle, runtime sources, C API, Makefile and CMake build",
                       description="Plan as `poet train` with the same options would, then write -o DIR: the "
                       "bundle (model, frozen and initial weights, training and forward schedules) as bundle.bin "
                       "and bundle.c/.h, the runtime's sources and API (runtime/core/poet.h), a Makefile and a "
                       "CMakeLists.txt building libpoet.a, card.img when weights stream from the SD card, README.md "
                       "and export.json. The device's training equals the host-driven run's bit for bit. What does "
                       "not fit the board (RAM, flash) is refused, and nothing is written.")
    p.add_argument("--board", default=DEFAULT_BOARD, help=f"board name (default {DEFAULT_BOARD}; see `poet boards`)")
    _model_args(p)
    _solve_args(p)
    _start_args(p)
    _step_args(p)
    p.add_argument("-o", "--out", type=_output_folder, required=True, metavar="DIR",
                   help="the folder to write: new, or empty (made with the folders above it)")
    p.set_defaults(func="cmd_export")


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


def joined_negatives(ap: argparse.ArgumentParser, argv: list[str]) -> list[str]:
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
    sub = subcommand(ap, command)
    rest = argv[argv.index(command) + 1:]
    unset = object()
    dests = {a.dest for a in sub._actions if a.dest != "help"}
    ns = argparse.Namespace(**dict.fromkeys(dests, unset))
    sub.parse_known_args(rest, namespace=ns)  # defaults fill only what the namespace lacks
    return {k for k in dests if getattr(ns, k) is not unset}


def subcommand(ap: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
