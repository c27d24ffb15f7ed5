"""Bad numbers end in one line on stderr, never in "poet: internal error": counts on the command
line (refused while parsing, before anything is traced, solved or booted) and the numbers of a
graph file (refused on load, naming the file, the node and the field).

Everything runs in-process (main([...])): a subprocess costs seconds of torch import per case.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import refused, run
from poet import cli
from poet.cli import main
from poet.graph.file import read_graph
from poet.paths import REPO_ROOT

REF_DIR = REPO_ROOT.parent / "shared" / "benchmarks" / "poet-reference"
SHIPPED_PROFILE = REPO_ROOT / "profiles" / "nrf52840.yaml"
HUGE = "99999999999999999999999"


@pytest.fixture(autouse=True)
def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "workspace"))


# ---------------------------------------------------------------- counts on the command line

@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that starts fails the test: these refusals belong to the parser (`poet demo`
    would boot QEMU first)."""
    def ran(args: Any) -> int:
        raise AssertionError(f"poet {args.command} started; the bad number must be refused while parsing")
    for name in ("cmd_demo", "cmd_train", "cmd_profile", "cmd_sweep", "cmd_graph", "cmd_solve"):
        monkeypatch.setattr(cli, name, ran)


CLI_CASES = [
    (["demo", "--steps", "0"], ["--steps", "'0'", "whole number from 1 to 100000"]),
    (["demo", "--steps", "-1"], ["--steps", "'-1'", "from 1 to 100000"]),
    (["demo", "--steps", HUGE], ["--steps", HUGE, "from 1 to 100000"]),
    (["demo", "--steps", "1.5"], ["--steps", "whole number"]),
    (["demo", "--steps", "many"], ["--steps", "'many'"]),
    (["demo", "--steps", "9" * 5000], ["--steps", "...'", "whole number"]),  # more digits than int() reads
    (["demo", "--batch", "-2"], ["--batch", "from 1 to 65535"]),
    (["demo", "--seed", HUGE], ["--seed", "from 0 to 4294967295"]),
    (["train", "--ram", "128k", "--epochs", "0"], ["--epochs", "from 1 to 100000"]),
    (["train", "--ram", "128k", "--epochs", HUGE], ["--epochs", "from 1 to 100000"]),
    (["train", "--ram", "128k", "--checkpoint-every", "0"], ["--checkpoint-every", "from 1 to 100000"]),
    (["train", "--ram", "128k", "--data-limit", "-5"], ["--data-limit", "from 1 to"]),
    (["train", "--ram", "128k", "--seed", "-1"], ["--seed", "from 0 to"]),
    (["profile", "--repeats", "0"], ["--repeats", "from 1 to 1000"]),
    (["profile", "--max-repeats", HUGE], ["--max-repeats", "from 1 to 1000"]),
    (["sweep", "--ram", "64k", "--jobs", "-1"], ["--jobs", "from 1 to 256"]),
    (["sweep", "--ram", "64k", "--jobs", HUGE], ["--jobs", "from 1 to 256"]),
    (["graph", "--batch", HUGE], ["--batch", "from 1 to 65535"]),
    (["graph", "--classes", "0"], ["--classes", "from 1 to"]),
    (["graph", "--model", "bert", "--layers", "0"], ["--layers", "from 1 to 256"]),
    (["graph", "--model", "bert", "--hidden", HUGE], ["--hidden", "from 64 to 8192"]),
    (["solve", "--ram", "64k", "--batch", "0"], ["--batch", "from 1 to 65535"]),
]


@pytest.mark.parametrize("argv,words", CLI_CASES, ids=[" ".join(a)[:40] for a, _ in CLI_CASES])
def test_bad_count_is_refused_while_parsing(capsys: pytest.CaptureFixture[str], nothing_runs: None,
                                            argv: list[str], words: list[str]) -> None:
    refused(capsys, argv, 2, *words)


def test_good_counts_still_parse() -> None:
    args = cli.build_parser().parse_args(["demo", "--steps", "1", "--batch", "65535", "--seed", "4294967295"])
    assert (args.steps, args.batch, args.seed) == (1, 65535, 4294967295)
    args = cli.build_parser().parse_args(["train", "--ram", "1k", "--epochs", " 100000 ", "--checkpoint-every", "7"])
    assert (args.epochs, args.checkpoint_every) == (100000, 7)


# ---------------------------------------------------------------- numbers in graph files

def _costed() -> dict[str, Any]:
    """A small costed graph in the POET reference's schema."""
    def node(i: int, name: str, kind: str, deps: list[int]) -> dict[str, Any]:
        return {"id": i, "name": name, "kind": kind, "deps": deps, "bytes": 256, "compute_s": 1e-3,
                "compute_j": 2e-3, "page_in_s": 1e-4, "page_in_j": 1e-4, "page_out_s": 1e-4, "page_out_j": 1e-4}
    return {"model": "tiny", "param_bytes": 1024,
            "nodes": [node(0, "x", "forward", []), node(1, "fc1", "forward", [0]),
                      node(2, "fc2", "forward", [1]), node(3, "fc2_grad", "backward", [2, 1]),
                      node(4, "fc1_grad", "backward", [3, 0])]}


@pytest.fixture(scope="module")
def training_graph(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`poet graph -o` of mlp-digits, as the file a user would edit."""
    out = tmp_path_factory.mktemp("graph") / "g.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POET_WORKSPACE", str(out.parent / "workspace"))
        assert main(["graph", "--model", "mlp-digits", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _write(path: Path, graph: dict[str, Any]) -> Path:
    path.write_text(json.dumps(graph))  # NaN and Infinity as Python's json writes them
    return path


def _set(graph: dict[str, Any], node: int | None, key: str, value: Any) -> dict[str, Any]:
    g = json.loads(json.dumps(graph))
    place = g if node is None else g["nodes"][node]
    if value is _DROP:
        del place[key]
    else:
        place[key] = value
    return g


class _Drop:
    """A field the case removes (its repr is stable, so parallel workers collect the same ids)."""

    def __repr__(self) -> str:
        return "<dropped>"


_DROP = _Drop()
NAN, INF = float("nan"), float("inf")

COSTED_CASES = [
    (2, "bytes", NAN, "bytes is NaN; must be a whole number >= 0 and below 2**48"),
    (2, "bytes", -1, "bytes is -1; must be a whole number"),
    (2, "bytes", "12", 'bytes is "12"; must be a whole number'),
    (2, "bytes", 1e30, "bytes is 1e+30; must be a whole number >= 0 and below 2**48"),
    (2, "bytes", 10**30, "bytes is 1000000000000000000000000000000;"),
    (2, "bytes", 2**48, "below 2**48"),
    (2, "bytes", 1.5, "bytes is 1.5"),
    (2, "bytes", True, "bytes is true"),
    (2, "compute_s", NAN, "compute_s is NaN; must be a number from 0 to 1e9 (seconds)"),
    (2, "compute_s", INF, "compute_s is Infinity"),
    (2, "compute_j", -1, "compute_j is -1; must be a number from 0 to 1e9 (joules)"),
    (2, "page_in_s", "12", 'page_in_s is "12"'),
    (2, "page_out_j", 1e30, "page_out_j is 1e+30"),
    (2, "page_in_j", 10**30, "page_in_j is 1000000000000000000000000000000;"),
    (2, "compute_j", _DROP, 'no "compute_j"'),
    (2, "deps", [99], "deps has 99; each must be a node id 0..4"),
    (2, "deps", [-1], "deps has -1"),
    (2, "deps", [1.0], "deps has 1.0"),
    (2, "deps", [True], "deps has true"),
    (2, "kind", "weights", 'kind is "weights"'),
    (2, "recomputable", "yes", 'recomputable is "yes"'),
    (None, "param_bytes", -3, "param_bytes is -3"),
]


@pytest.mark.parametrize("node,key,value,words", COSTED_CASES, ids=lambda v: repr(v)[:24])
def test_bad_number_in_a_costed_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str], node: int | None,
                                      key: str, value: Any, words: str) -> None:
    path = _write(tmp_path / "g.json", _set(_costed(), node, key, value))
    where = f"node {node} ({_costed()['nodes'][node]['name']}): " if node is not None else ""
    refused(capsys, ["solve", "--graph", str(path), "--ram", "64k", "--semantics", "reference"], 2,
            f"graph file {path}: {where}", words)


TRAINING_CASES = [
    (3, "bytes", NAN, "bytes is NaN; must be a whole number >= 0 and below 2**48"),
    (3, "bytes", -5, "bytes is -5"),
    (3, "bytes", "12", 'bytes is "12"'),
    (3, "bytes", 1e30, "bytes is 1e+30"),
    (3, "bytes", 2**60, "below 2**48"),
    (3, "flops", -1, "flops is -1; must be a whole number >= 0 and below 2**63"),
    (3, "flops", NAN, "flops is NaN"),
    (3, "flops", 1.5, "flops is 1.5"),
    (3, "deps", [99], "deps has 99; each must be a node id 0..17"),
    (3, "deps", [0, 1, 2, 0, 1], "deps has 5 entries; a node of a training graph reads at most 4"),
    (3, "shape", [16, -1], "shape is [16, -1]"),
    (3, "saved", [1], "saved is [1]; must list only ids among its deps [2]"),
    (3, "attrs", {"B": 2**40, "in": 32, "out": 32, "w": 2, "b": 3}, "attrs.B is 1099511627776;"),
    (3, "attrs", {"B": "16", "in": 32, "out": 32, "w": 2, "b": 3}, 'attrs.B is "16"'),
    (3, "attrs", {"B": NAN, "in": 32, "out": 32, "w": 2, "b": 3}, "attrs.B is NaN"),
    (3, "attrs", {"in": 32, "out": 32, "w": 2, "b": 3}, 'attrs has no "B"; op linear needs B, in, out'),
    (3, "kind", "weights", 'kind is "weights"'),
    (None, "batch", 0, "batch is 0; must be a whole number from 1 to 65535"),
    (None, "batch", 70000, "batch is 70000"),
    (None, "batch", "16", 'batch is "16"'),
    (None, "classes", -1, "classes is -1"),
    (None, "input_shape", [0], "input_shape is [0]"),
    (None, "params", [["fc1.weight", [32, NAN]]], "params has"),
    (None, "optimizer", {"name": "nesterov"}, 'optimizer is {"name": "nesterov"}'),
    (None, "optimizer", {"name": "momentum", "momentum": NAN}, "optimizer: momentum is NaN"),
    (None, "optimizer", {"name": "adam", "beta1": 0.9, "beta2": 0.999}, 'optimizer: no "eps"'),
]


@pytest.mark.parametrize("node,key,value,words", TRAINING_CASES, ids=lambda v: repr(v)[:24])
def test_bad_number_in_a_training_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        training_graph: dict[str, Any], node: int | None, key: str,
                                        value: Any, words: str) -> None:
    path = _write(tmp_path / "g.json", _set(training_graph, node, key, value))
    where = f"node {node} ({training_graph['nodes'][node]['name']}): " if node is not None else ""
    refused(capsys, ["solve", "--graph", str(path), "--ram", "96k", "--profile", str(SHIPPED_PROFILE)], 2,
            f"graph file {path}: {where}", words)


@pytest.mark.parametrize("text,words", [
    ('{"nodes": [{"id": 0, "bytes": ' + "9" * 5000 + "}]}", "thousands of digits"),
    ("[" * 100_000, "nested too deeply"),
])
def test_unreadable_numbers_and_nesting(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                        words: str) -> None:
    path = tmp_path / "g.json"
    path.write_text(text)
    refused(capsys, ["solve", "--graph", str(path), "--ram", "64k"], 2, f"graph file {path}", words)


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(b'{"nodes": [\xff]}')
    refused(capsys, ["sweep", "--graph", str(path), "--ram", "64k"], 2, f"graph file {path}", "not UTF-8")


# ---------------------------------------------------------------- good files still load

def test_poet_graph_output_reads_back_and_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 training_graph: dict[str, Any]) -> None:
    path = _write(tmp_path / "g.json", training_graph)
    assert run(["solve", "--graph", str(path), "--ram", "96k", "--profile", str(SHIPPED_PROFILE)]) == 0
    assert "status optimal" in capsys.readouterr().out


def _reference_files() -> Iterator[Path]:
    yield from sorted(REF_DIR.glob("*.json"))


@pytest.mark.skipif(not REF_DIR.is_dir(), reason="reference instances absent")
def test_every_reference_instance_loads_and_plans(capsys: pytest.CaptureFixture[str]) -> None:
    files = list(_reference_files())
    assert len(files) == 15
    for path in files:
        read_graph(path, reference=True)
        # a heuristic plan: the MILP on the large instances takes minutes (benchmarks/, not tests)
        assert run(["solve", "--graph", str(path), "--semantics", "reference", "--ram", "4g",
                    "--deadline", "2x", "--strategy", "checkpoint-all"]) == 0, capsys.readouterr().err
    assert run(["solve", "--graph", str(REF_DIR / "linear.m0.json"), "--semantics", "reference", "--ram", "3300",
                "--deadline", "1.0x"]) == 0
    assert "0.105044 J" in capsys.readouterr().out
