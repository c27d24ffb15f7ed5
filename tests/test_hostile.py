"""Hostile input to the CLI, as a table: every case ends in one line on stderr and exit 2 (the
command line or a file the user gave was wrong), and a refusal comes before poet touches a board
or the workspace: no emulator booted, no run folder left. Code named only by a run folder is
never imported.

Everything runs in-process (main([...])); no case boots QEMU (open_device fails the test).
Runtime failures (exit 1) and Ctrl-C (exit 130) need a board: tests/test_train.py, test_cli.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import refused
from poet import cli
from poet.cli import build_parser, main
from poet.models.zoo import get_model
from poet.paths import REPO_ROOT
from poet.settings import CONFIG_KEYS

SHIPPED_PROFILE = REPO_ROOT / "profiles" / "nrf52840.yaml"
TRAIN = ["train", "--model", "mlp-digits", "--ram", "200k", "--epochs", "1", "--data-limit", "64"]


def _data(tmp: Path, x: np.ndarray, y: np.ndarray) -> str:
    d = tmp / "data"
    d.mkdir()
    np.save(d / "train_x.npy", x)
    np.save(d / "train_y.npy", y)
    return str(d)


def _digits_like(tmp: Path, change: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]) -> str:
    rng = np.random.default_rng(0)
    x, y = rng.random((80, 64)).astype(np.float32), rng.integers(0, 10, 80)
    return _data(tmp, *change(x, y))


def _config(**changes: Any) -> dict[str, Any]:
    """A run's config.json as `poet train TRAIN` writes it, with changes."""
    from poet.cli import _run_config
    from poet.settings import config_json

    ns = build_parser().parse_args(TRAIN)
    cfg = json.loads(json.dumps(config_json(_run_config(ns))))
    cfg.update(changes)
    return cfg


def _run(tmp: Path, config: dict[str, Any] | str | None = None, state: Any = None,
         checkpoint: Callable[[Path], None] | None = None) -> str:
    """A run folder: config.json (a dict, or text as is), optional state.json and checkpoint."""
    run = tmp / "workspace" / "runs" / "r"
    run.mkdir(parents=True)
    cfg = _config() if config is None else config
    (run / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    if state is not None:
        (run / "state.json").write_text(state if isinstance(state, str) else json.dumps(state))
    if checkpoint is not None:
        checkpoint(run / "checkpoint.npz")
    return str(run)


MIDWAY = {"epoch": 0, "step": 2, "global_step": 2, "finished": False, "complete": False, "history": [],
          "losses": [2.3, 2.2]}
MLP_SHAPES = [tuple(p.shape) for p in get_model("mlp-digits")[0].parameters()]


def _ckpt(shapes: list[tuple[int, ...]], fill: float = 0.0, step: int = 2) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        arrays = {f"w{i}": np.full(s, fill, np.float32) for i, s in enumerate(shapes)}
        np.savez(p, opt_state=np.zeros(0, np.uint8), global_step=step, **arrays)
    return make


def _file(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


def _module(tmp: Path, name: str) -> str:
    """A model module in tmp (the test's cwd, where poet finds module:factory models): its name."""
    (tmp / f"{name}.py").write_text("import torch.nn as nn\n\ndef f():\n    m = nn.Linear(4, 2)\n"
                                    "    m.input_shape = (4,)\n    return m\n")
    return name


def _graph_file(tmp: Path, name: str = "g.json") -> str:
    """mlp-digits' training graph as `poet graph -o` writes it."""
    from poet.graph.tracer import traced
    from poet.models.zoo import ModelChoice

    (tmp / name).write_text(traced(ModelChoice("mlp-digits"))[1].to_json_text())
    return str(tmp / name)


def _linked(tmp: Path, name: str, target: Path) -> str:
    (tmp / name).symlink_to(target)
    return str(tmp / name)


def _linked_config(tmp: Path, target: str) -> str:
    """A folder whose config.json is a link to `target`."""
    d = tmp / "linked"
    d.mkdir()
    (d / "config.json").symlink_to(target)
    return str(d)


def _evil(tmp: Path) -> None:
    (tmp / "evilpkg.py").write_text("from pathlib import Path\nPath('PWNED').write_text('ran')\n"
                                    "def f():\n    raise SystemExit('imported')\n")


# (id, argv maker given tmp_path, words the one line must hold)
CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    # numbers that parse as floats but are no value of the option
    ("lr-nan", lambda t: [*TRAIN, "--lr", "nan"], ("--lr", "not a finite number")),
    ("lr-inf", lambda t: [*TRAIN, "--lr", "inf"], ("--lr", "not a finite number")),
    ("lr-negative", lambda t: [*TRAIN, "--lr", "-0.1"], ("--lr", "must be more than 0")),
    ("lr-zero", lambda t: [*TRAIN, "--lr", "0"], ("--lr", "must be more than 0")),
    ("time-limit-inf", lambda t: [*TRAIN, "--time-limit", "inf"], ("--time-limit", "finite")),
    ("solve-time-limit-nan", lambda t: ["solve", "--ram", "200k", "--time-limit", "nan"], ("--time-limit",)),
    ("carbon-nan", lambda t: [*TRAIN, "--carbon-intensity", "nan"], ("--carbon-intensity", "finite")),
    ("carbon-negative", lambda t: [*TRAIN, "--carbon-intensity", "-5"], ("--carbon-intensity", "0 or more")),
    ("budget-inf", lambda t: [*TRAIN, "--budget-j", "inf"], ("--budget-j",)),
    ("data-limit-negative", lambda t: [*TRAIN, "--data-limit", "-5"], ("--data-limit", "whole number")),
    ("checkpoint-every-0", lambda t: [*TRAIN, "--checkpoint-every", "0"], ("--checkpoint-every",)),
    ("checkpoint-every-negative", lambda t: [*TRAIN, "--checkpoint-every", "-2"], ("--checkpoint-every",)),
    ("classes-0", lambda t: [*TRAIN, "--classes", "0"], ("--classes",)),
    ("bert-no-layers", lambda t: ["graph", "--model", "bert", "--layers", "0"], ("--layers",)),
    ("ram-huge", lambda t: ["solve", "--ram", "99999999999999999999999g"], ("256 TiB",)),
    ("train-ram-huge", lambda t: [*TRAIN[:3], "--ram", "1e30"], ("size",)),
    ("deadline-negative", lambda t: ["solve", "--ram", "200k", "--deadline", "-1x"], ("deadline '-1x'",)),
    ("train-deadline-negative", lambda t: [*TRAIN, "--deadline", "-1x"], ("deadline '-1x'",)),
    ("train-last-0", lambda t: [*TRAIN, "--train", "last:0"], ("--train", "last:N")),
    ("graph-last-99999", lambda t: ["graph", "--model", "mlp-digits", "--train", "last:99999"],
     ("--train last:99999", "layers with parameters")),
    ("solve-last-99999", lambda t: ["solve", "--model", "mlp-digits", "--ram", "200k", "--train", "last:99999"],
     ("--train last:99999", "layers with parameters")),
    ("train-mode", lambda t: [*TRAIN, "--train", "some"], ("--train",)),
    ("empty-port", lambda t: [*TRAIN, "--port", ""], ("--port", "empty port")),
    ("profile-empty-port", lambda t: ["profile", "--port", " "], ("--port",)),
    ("adam-eps-inf", lambda t: [*TRAIN, "--optimizer", "adam:0.9,0.999,inf"], ("eps",)),
    ("momentum-nan", lambda t: [*TRAIN, "--optimizer", "momentum:nan"], ("momentum",)),
    ("precision-rules-not-lists", lambda t: [*TRAIN, "--precision", "greedy", "--precision-rules",
                                             _file(t, "rules.yaml", "dtypes: 5\n")], ("dtypes must be a list",)),
    ("precision-rules-python", lambda t: [*TRAIN, "--precision", "greedy", "--precision-rules",
                                          _file(t, "rules.yaml", "!!python/object/apply:os.abort []\n")],
     ("not plain YAML",)),
    ("model-colon", lambda t: ["graph", "--model", ":"], ("package.module:factory",)),
    ("sweep-budgets", lambda t: ["sweep", "--ram", "64k:128k:100000000"], ("100000000 budgets",)),
    ("sweep-no-strategy", lambda t: ["sweep", "--ram", "64k", "--strategies", ""], ("--strategies",)),
    ("profile-of-another-board", lambda t: ["solve", "--board", "mkr1000", "--ram", "30k", "--profile",
                                            str(SHIPPED_PROFILE)], ("measured on the nrf52840, not the mkr1000",)),
    ("emulated-profile-over-measured", lambda t: ["profile", "-o", _file(
        t, "measured.yaml", SHIPPED_PROFILE.read_text().replace("source: emulated", "source: measured"))],
     ("measured on a real nrf52840",)),
    ("demo-over-a-train-run", lambda t: ["demo", "--run-dir", _run(t)], ("holds a `poet train` run",)),
    ("demo-config-a-device", lambda t: ["demo", "--run-dir", _linked_config(t, "/dev/zero")],
     ("holds a `poet train` run",)),  # read until memory ran out
    ("bert-huge", lambda t: ["graph", "--model", "bert", "--layers", "256", "--hidden", "8192"],
     ("GiB in fp32", "fewer --layers")),
    # options a model does not take
    ("zoo-input-shape", lambda t: ["graph", "--model", "cnn-digits", "--input-shape", "1,8,8"], ("--input-shape",)),
    ("zoo-classes", lambda t: [*TRAIN, "--classes", "5"], ("--classes", "mlp-digits")),
    # files and folders
    # no output over an input
    ("solve-o-over-its-graph", lambda t: ["solve", "--graph", _graph_file(t), "--ram", "200k", "-o", str(t / "g.json")],
     ("-o", "g.json", "--graph", "never writes over")),
    ("solve-o-over-its-profile", lambda t: ["solve", "--model", "mlp-digits", "--ram", "200k", "--profile",
                                            _file(t, "p.yaml", SHIPPED_PROFILE.read_text()), "-o", str(t / "p.yaml")],
     ("-o", "--profile", "never writes over")),
    ("solve-o-a-link-to-its-profile", lambda t: ["solve", "--model", "mlp-digits", "--ram", "200k", "--profile",
                                                 _file(t, "p.yaml", SHIPPED_PROFILE.read_text()), "-o",
                                                 _linked(t, "out.poet", t / "p.yaml")], ("--profile",)),
    # -o over the model's own source: `poet graph --model mymod:f -o mymod.py` wrote the graph over it
    ("graph-o-over-its-model", lambda t: ["graph", "--model", _module(t, "ownsrc_graph") + ":f", "-o",
                                          str(t / "ownsrc_graph.py")], ("-o", "--model", "never writes over")),
    ("solve-o-over-its-model", lambda t: ["solve", "--model", _module(t, "ownsrc_solve") + ":f", "--ram", "200k",
                                          "-o", str(t / "ownsrc_solve.py")], ("-o", "--model", "never writes over")),
    ("sweep-o-over-its-graph", lambda t: ["sweep", "--graph", _graph_file(t, "sweep.csv"), "--ram", "64k",
                                          "-o", str(t)], ("sweep.csv", "--graph", "never writes over")),
    ("solve-o-missing-folder", lambda t: ["solve", "--ram", "200k", "-o", str(t / "no" / "dir" / "x.poet")],
     ("does not exist",)),
    ("profile-o-device", lambda t: ["profile", "-o", "/dev/null"], ("not a regular file",)),
    ("graph-o-folder", lambda t: ["graph", "-o", str(t)], ("is a folder",)),
    ("schedule-folder", lambda t: [*TRAIN, "--schedule", str(t)], ("--schedule", "is a folder")),
    ("schedule-missing", lambda t: [*TRAIN, "--schedule", str(t / "none.poet")], ("--schedule", "does not exist")),
    ("report-folder", lambda t: ["report", str(t)], ("is a folder",)),
    ("graph-file-folder", lambda t: ["solve", "--ram", "200k", "--graph", str(t)], ("--graph", "is a folder")),
    ("profile-folder", lambda t: ["solve", "--ram", "200k", "--profile", str(t)], ("--profile", "is a folder")),
    ("run-dir-a-file", lambda t: [*TRAIN, "--run-dir", str(SHIPPED_PROFILE)], ("--run-dir", "not a folder")),
    # refusals that once came after QEMU booted and a run folder was made
    ("battery-without-volts", lambda t: [*TRAIN, "--battery-mah", "100"], ("--battery-mah and --volts",)),
    ("volts-without-battery", lambda t: [*TRAIN, "--volts", "3.7"], ("--battery-mah and --volts",)),
    ("unknown-country", lambda t: [*TRAIN, "--country", "ZZ"], ("--country ZZ",)),
    ("budget-with-schedule", lambda t: [*TRAIN, "--budget-j", "1", "--schedule", str(SHIPPED_PROFILE)],
     ("--budget-j",)),
    # data that would train to NaN, or on other values than given
    ("data-nan", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (np.where(x > 0.99, np.nan, x), y))],
     ("NaN or infinite",)),
    ("data-inf", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (np.where(x > 0.99, np.inf, x), y))],
     ("NaN or infinite",)),
    ("data-huge", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (x * 1e38, y))], ("scale the data",)),
    ("data-float-labels", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (x, y + 0.5))],
     ("not a whole class number",)),
    ("data-complex", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (x + 1j, y))], ("complex",)),
    ("steps-past-the-board-counter", lambda t: [*TRAIN[:-4], "--batch", "1", "--epochs", "100000", "--data", _data(
        t, np.zeros((60_000, 64), np.float32), np.zeros(60_000, np.int64))], ("step counter", "fewer epochs")),
    ("data-strings", lambda t: [*TRAIN, "--data", _digits_like(t, lambda x, y: (x, y.astype(str)))],
     ("not numbers",)),
    # --resume takes everything but the link from the run, and imports nothing the command line does not name
    ("resume-epochs", lambda t: ["train", "--resume", _run(t), "--epochs", "1"], ("--epochs", "start a new run")),
    ("resume-lr", lambda t: ["train", "--resume", _run(t), "--lr", "5"], ("--lr", "keeps the settings")),
    ("resume-other-model", lambda t: ["train", "--resume", _run(t), "--model", "cnn-digits"],
     ("--model cnn-digits", "mlp-digits")),
    ("resume-factory", lambda t: (_evil(t), ["train", "--resume", _run(t, _config(model="evilpkg:f"))])[1],
     ("evilpkg:f", "imports only code")),
    ("resume-data-factory", lambda t: (_evil(t), ["train", "--resume", _run(t, _config(data="evilpkg:f"))])[1],
     ("--data evilpkg:f",)),
    ("resume-missing", lambda t: ["train", "--resume", str(t / "nothing")], ("no such run folder",)),
    ("resume-not-a-run", lambda t: ["train", "--resume", str(t)], ("not a run folder",)),
    ("config-not-json", lambda t: ["train", "--resume", _run(t, "{not json")], ("config.json", "unreadable")),
    ("config-a-list", lambda t: ["train", "--resume", _run(t, "[1, 2]")], ("config.json", "lacks")),
    ("config-lr-nan", lambda t: ["train", "--resume", _run(t, _config(lr=float("nan")))], ("config.json", "--lr")),
    ("config-epochs-text", lambda t: ["train", "--resume", _run(t, _config(epochs="many"))],
     ("config.json", "--epochs")),
    ("config-dict-value", lambda t: ["train", "--resume", _run(t, _config(batch={"a": 1}))], ("config.json", "batch")),
    ("config-missing-key", lambda t: ["train", "--resume", _run(t, {k: v for k, v in _config().items()
                                                                     if k != "lr"})], ("lacks lr",)),
    ("state-not-json", lambda t: ["train", "--resume", _run(t, state="garbage")], ("state.json", "unreadable")),
    ("state-wrong-kind", lambda t: ["train", "--resume", _run(t, state={**MIDWAY, "epoch": "x"})],
     ("state.json", "wrong kind")),
    ("state-beyond-run", lambda t: ["train", "--resume", _run(t, state={**MIDWAY, "global_step": 99},
                                                             checkpoint=_ckpt(MLP_SHAPES, step=99))],
     ("state.json", "does not fit")),
    ("checkpoint-missing", lambda t: ["train", "--resume", _run(t, state=MIDWAY)], ("checkpoint.npz is missing",)),
    ("checkpoint-garbage", lambda t: ["train", "--resume", _run(t, state=MIDWAY,
                                                                checkpoint=lambda p: p.write_bytes(b"PK\x03\x04junk"))],
     ("checkpoint.npz is unreadable",)),
    ("checkpoint-wrong-shapes", lambda t: ["train", "--resume", _run(t, state=MIDWAY,
                                                                     checkpoint=_ckpt([(3, 3), (3,)]))],
     ("not this run's checkpoint",)),
    ("checkpoint-nan", lambda t: ["train", "--resume", _run(t, state=MIDWAY,
                                                            checkpoint=_ckpt(MLP_SHAPES, np.nan))], ("NaN",)),
    ("checkpoint-other-step", lambda t: ["train", "--resume", _run(t, state=MIDWAY,
                                                                   checkpoint=_ckpt(MLP_SHAPES, step=1))],
     ("checkpoint after step 1",)),
    ("trace-missing", lambda t: ["train", "--resume", _run(t, state=MIDWAY, checkpoint=_ckpt(MLP_SHAPES))],
     ("trace.json has 0 of the 2 steps",)),
]


@pytest.mark.parametrize("make,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_in_one_line_before_anything_runs(ws: Path, capsys: pytest.CaptureFixture[str],
                                                                   make: Callable[[Path], list[str]],
                                                                   words: tuple[str, ...]) -> None:
    tmp = ws.parent
    argv = make(tmp)
    runs = ws / "runs"
    before = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    refused(capsys, argv, 2, *words)
    after = sorted(p.name for p in runs.iterdir()) if runs.exists() else []
    assert after == before, "a refused command left a run folder"
    assert not (tmp / "PWNED").exists(), "code named only by a run folder was imported"
    assert not (tmp / "no").exists(), "a refused -o made folders"


def test_the_table_names_every_option_a_resumed_config_holds() -> None:
    """config.json's keys are train's options: a config is checked by parsing it as a command line."""
    dests = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["train"]._actions}  # type: ignore[union-attr]
    assert set(CONFIG_KEYS) <= dests


def test_given_options_tell_a_default_from_a_value_typed_equal_to_it() -> None:
    ap = build_parser()
    assert "lr" in cli.given_options(ap, ["train", "--lr", "0.1"], "train")  # 0.1 is the default
    assert "lr" not in cli.given_options(ap, ["train", "--ram", "1k"], "train")
    assert cli.joined_negatives(ap, ["solve", "--deadline", "-1x", "--ram", "1k"])[1] == "--deadline=-1x"


@pytest.mark.parametrize("argv,words", [
    (["graph", "-o", "/dev/full"], ("cannot write /dev/full", "No space left")),
    (["solve", "--ram", "200k", "-o", "/dev/full"], ("cannot write /dev/full",)),
    (["graph", "-o", "/proc/version"], ("cannot write /proc/version",)),
], ids=["graph-to-dev-full", "schedule-to-dev-full", "graph-to-proc"])
def test_a_write_that_fails_is_one_line_naming_the_file(ws: Path, capsys: pytest.CaptureFixture[str],
                                                        argv: list[str], words: tuple[str, ...]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" not in err[0], err
    for w in words:
        assert w in err[0], err[0]
