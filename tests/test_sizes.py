"""Graphs too large to plan are refused up front, in one line, before the work that would take
hours or gigabytes; graphs below the limits are planned, with progress on the long ones.

The numbers behind the limits (graphfile.MAX_NODES, MAX_FILE_BYTES) are measured by
benchmarks/graph_sizes.py; these tests check where and how the refusals happen, not speed.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from conftest import refused
from poet.cli import main
from poet.graph import file as graphfile
from poet.graph.file import MAX_FILE_BYTES, MAX_NODES, read_graph
from poet.plan.strategies import revolve as revolve_module
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import MAX_MILP_VARIABLES, milp_size
from poet.plan.types import CostedGraph, CostedNode
from poet.units import format_size


@pytest.fixture(autouse=True)
def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "workspace"))




def write_chain(path: Path, forward: int, compact: bool = False) -> int:
    """A training-shaped costed chain (input, `forward` nodes, loss, backward), streamed node by
    node; compact: only the required fields, so many nodes fit in few bytes. Returns the node count."""
    costs = '"compute_s": 0, "compute_j": 0' if compact else \
        '"compute_s": 0.001, "compute_j": 0.002, "page_in_s": 0.0001, "page_in_j": 0.0001, ' \
        '"page_out_s": 0.0001, "page_out_j": 0.0001'
    n = 0
    with path.open("w") as fh:
        fh.write('{"model": "gen", "nodes": [')

        def node(kind: str, deps: list[int], nbytes: int) -> None:
            nonlocal n
            fh.write(("," if n else "") + f'{{"id": {n}, "kind": "{kind}", "deps": {deps}, "bytes": {nbytes}, '
                     f'{costs}}}')
            n += 1

        node("input", [], 1000)
        for k in range(1, forward + 1):
            node("forward", [k - 1], 1000 + 10 * (k % 7))
        node("loss", [forward], 4)
        node("backward", [forward + 1, forward], 1000)
        for k in range(forward, 0, -1):
            node("backward", [n - 1, k - 1], 1000)
        fh.write("]}")
    return n


# ---------------------------------------------------------------- graph files

def test_a_million_node_file_is_refused_by_its_size_before_it_is_parsed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's file: 10^6 nodes ran 11 minutes in 7.8 GB and printed nothing."""
    path = tmp_path / "huge.json"
    assert write_chain(path, 499_999, compact=True) == 1_000_001
    assert path.stat().st_size > MAX_FILE_BYTES

    def parsed(*_a: object, **_k: object) -> None:
        raise AssertionError("the file was parsed; its size alone must refuse it")

    monkeypatch.setattr(graphfile.json, "loads", parsed)
    tracemalloc.start()
    try:
        line = refused(capsys, ["solve", "--graph", str(path), "--ram", "256k"], 2,
                       str(path), "MiB; poet reads graph files up to", "coarsen the graph")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # imports on the way allocate a few MB; reading the file would take all of its bytes and more
    assert peak < path.stat().st_size // 8, f"refusing it allocated {peak} B: the file was read"
    assert f"{path.stat().st_size / 2**20:.2f} MiB" in line


def test_a_pipe_over_the_byte_limit_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pipe has no size to look at: poet reads up to the limit and one byte more, then stops."""
    r, w = os.pipe()

    def feed() -> None:
        with os.fdopen(w, "wb") as out:
            try:
                out.write(b" " * (MAX_FILE_BYTES + 2**20))
            except BrokenPipeError:  # poet stopped reading, as it should
                pass

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        refused(capsys, ["solve", "--graph", f"/dev/fd/{r}", "--ram", "256k"], 2,
                f"over {format_size(MAX_FILE_BYTES)}; poet reads graph files up to {format_size(MAX_FILE_BYTES)}")
    finally:
        os.close(r)
        feeder.join()


def test_a_file_of_more_nodes_than_poet_plans_is_refused_once_they_are_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "many.json"
    n = write_chain(path, MAX_NODES // 2, compact=True)
    assert n > MAX_NODES and path.stat().st_size <= MAX_FILE_BYTES

    def walked(*_a: object, **_k: object) -> None:
        raise AssertionError("the nodes were walked; their count alone must refuse them")

    monkeypatch.setattr(graphfile, "find_cycle", walked)
    refused(capsys, ["solve", "--graph", str(path), "--ram", "256k"], 2,
            f"graph file {path} has {n:,} nodes; poet plans up to {MAX_NODES:,}", "O(n x live tensors)",
            "coarsen the graph")


def test_a_file_of_as_many_nodes_as_poet_plans_is_read(tmp_path: Path) -> None:
    path = tmp_path / "limit.json"
    n = write_chain(path, (MAX_NODES - 3) // 2)
    assert MAX_NODES - 2 <= n <= MAX_NODES
    g = read_graph(path)
    assert isinstance(g, CostedGraph) and len(g) == n


def test_too_big_for_the_milp_falls_back_and_says_so_with_progress(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Above PROGRESS_NODES each heuristic reports; the best heuristic's plan is named as such."""
    path = tmp_path / "chain.json"
    n = write_chain(path, 600)
    g = read_graph(path)
    assert isinstance(g, CostedGraph) and milp_size(g) > MAX_MILP_VARIABLES
    ram = keep_all(g).peak_bytes // 2
    assert main(["solve", "--graph", str(path), "--ram", str(ram), "--deadline", "2x"]) == 0
    out = capsys.readouterr().out
    assert f"{n:,} nodes: running the 6 heuristics" in out
    for name in ("checkpoint-all", "sqrtn", "chen-greedy", "revolve", "dtr", "capuchin"):
        assert f"  {name}: " in out, out
    # the gap relaxation (plan/solver/bound.py) bounds it, and here proves capuchin's plan optimal: said so
    assert "lower bound" in out and "optimal without the MILP" in out
    assert "a heuristic's plan (capuchin), at the lower bound" in out and "status optimal" in out


# ---------------------------------------------------------------- traced models

@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a factory module `tests_helper_module` into tmp_path and make it importable as the
    CLI would (models._user_model: the current directory on sys.path)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tests_helper_module", raising=False)

    def write(body: str) -> str:
        (tmp_path / "tests_helper_module.py").write_text("import torch\nfrom torch import nn\n" + body)
        return "tests_helper_module:factory"
    yield write
    sys.modules.pop("tests_helper_module", None)


def test_an_input_beyond_the_tensor_limit_is_refused_before_it_is_allocated(
        user_module, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """--input-shape 100000,1000,1000 at batch 16 is 1.6e12 elements: torch tried to allocate 6 TB."""
    from poet.graph import tracer

    name = user_module("def factory():\n    return nn.Sequential(nn.Flatten(), nn.Linear(1000, 10))\n")

    def allocated(*_a: object, **_k: object) -> None:
        raise AssertionError("an example batch was made; the shape alone must refuse it")

    monkeypatch.setattr(tracer, "_example_batch", allocated)
    # a sample that fits the blob's u32 count, a batch of 16 of them that no tensor can hold
    line = refused(capsys, ["graph", "--model", name, "--input-shape", "1000,1000,200"], 2,
                   "[16, 1000, 1000, 200]", "3,200,000,000 elements", "GiB as float32",
                   "at most 2**31 - 1 elements", "--input-shape")
    assert name in line
    # a sample the blob cannot count at all: refused as the command line is parsed
    refused(capsys, ["graph", "--model", name, "--input-shape", "100000,1000,1000"], 2,
            "100,000,000,000 values in one sample", "u32", "--input-shape")


def test_a_traced_tensor_beyond_the_limit_is_refused_from_the_shapes_alone(
        user_module, capsys: pytest.CaptureFixture[str]) -> None:
    """An outer product of two 65536-wide rows: 16 x 65536 x 65536 elements, 256 GiB were it real."""
    name = user_module(
        "class Outer(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(1, 10)\n"
        "    def forward(self, x):\n"
        "        b, n = x.shape\n"
        "        y = torch.matmul(x.view(b, n, 1), x.view(b, 1, n))\n"
        "        return self.fc(y.mean((1, 2)).view(b, 1))\n"
        "def factory():\n"
        "    return Outer()\n")
    refused(capsys, ["graph", "--model", name, "--input-shape", "65536"], 2,
            "makes a tensor of shape [16, 65536, 65536]", "68,719,476,736 elements", "256.0 GiB")


def test_a_model_that_needs_values_gets_no_real_batch_beyond_the_limit(
        user_module, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch on a value fails on meta tensors; the real pass it falls back to would allocate
    16 x 20,000,000 floats (1.2 GiB) for the batch and keep every activation alive."""
    from poet.graph import tracer

    real = tracer._example_batch

    def example(batch: int, shape: tuple[int, ...], dtype: str, device: str = "cpu") -> object:
        assert device == "meta", "a real batch was made; its size must refuse it"
        return real(batch, shape, dtype, device)

    monkeypatch.setattr(tracer, "_example_batch", example)
    name = user_module(
        "class Branchy(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(1, 10)\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n"
        "            x = torch.relu(x)\n"
        "        return self.fc(x.mean(1).view(x.shape[0], 1))\n"
        "def factory():\n"
        "    return Branchy()\n")
    refused(capsys, ["graph", "--model", name, "--input-shape", "20000000"], 2,
            "needs values to trace, not only shapes", "takes 1.2 GiB; poet traces on real batches up to 1.0 GiB",
            "--input-shape")


def test_a_traced_model_of_more_nodes_than_poet_plans_is_refused(
        user_module, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # the check, not the constant: tracing 10,000 nodes takes seconds (the slow test below does)
    monkeypatch.setattr(graphfile, "MAX_NODES", 15)
    name = user_module("def factory():\n    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(6)], "
                       "nn.Linear(4, 10))\n")
    refused(capsys, ["solve", "--model", name, "--input-shape", "4", "--ram", "256k"], 2,
            f"model '{name}' has 18 nodes; poet plans up to 15", "a smaller model")


@pytest.mark.slow
def test_a_deep_bert_is_refused_once_traced(capsys: pytest.CaptureFixture[str]) -> None:
    """bert --layers 256 traces to 13,336 nodes (at --hidden 8192 its weights alone are 769 GiB:
    models.get_model builds them before anything here can count)."""
    refused(capsys, ["solve", "--model", "bert", "--layers", "256", "--hidden", "64", "--ram", "256k"], 2,
            "model 'bert' has 13,336 nodes; poet plans up to", "--layers")


# ---------------------------------------------------------------- the heuristics on long chains

def _chain(forward: int, seed: int = 0) -> CostedGraph:
    import random

    r = random.Random(seed)
    nodes = [CostedNode(0, "x", "input", (), 100, 0.0, 0.0)]
    for k in range(1, forward + 1):
        nodes.append(CostedNode(k, f"f{k}", "forward", (k - 1,), r.randint(1, 500), r.random(), r.random(),
                                0.1, 0.1, 0.1, 0.1))
    nodes.append(CostedNode(forward + 1, "loss", "loss", (forward,), 4, 0.01, 0.01))
    nodes.append(CostedNode(forward + 2, "dloss", "backward", (forward + 1, forward), 100, 0.01, 0.01))
    for k in range(forward, 0, -1):
        nodes.append(CostedNode(len(nodes), f"b{k}", "backward", (len(nodes) - 1, k - 1), r.randint(1, 500),
                                r.random(), r.random(), 0.1, 0.1, 0.1, 0.1))
    return CostedGraph(tuple(nodes), name=f"chain{forward}")


def test_revolve_cost_in_closed_form_is_the_recurrence() -> None:
    @functools.cache
    def recurrence(length: int, slots: int) -> tuple[int, int]:
        if length <= 1:
            return 0, 0
        if slots == 0:
            return length * (length - 1) // 2, 0
        best = min((m + recurrence(length - m, slots - 1)[0] + recurrence(m, slots)[0], m) for m in range(1, length))
        return best

    for length in range(0, 160):
        for slots in range(0, 24):
            assert revolve_module._revolve_cost(length, slots) == recurrence(length, slots), (length, slots)


@pytest.mark.parametrize("frac", [0.6, 0.3])
def test_revolve_bisection_finds_what_trying_every_count_finds(frac: float, monkeypatch: pytest.MonkeyPatch) -> None:
    g = _chain(40, seed=3)
    budget, deadline = int(keep_all(g).peak_bytes * frac), 3 * g.one_pass_s
    every = revolve_module.revolve(g, budget, deadline)
    monkeypatch.setattr(revolve_module, "EVERY_COUNT_UP_TO", 16)  # its chain of 41 (and the loss) is bisected
    bisected = revolve_module.revolve(g, budget, deadline)
    assert "bisected over 0-41" in bisected.note and "bisected" not in every.note
    assert bisected.status == every.status == "feasible"
    assert (bisected.energy_j, bisected.peak_bytes, bisected.stages) == (every.energy_j, every.peak_bytes, every.stages)


def test_recomputing_a_chain_longer_than_the_recursion_limit() -> None:
    """Each backward stage recomputes the forward chain from the input: 1,500 deep (Python stops at 1,000)."""
    from poet.plan.strategies.builder import build
    from poet.plan.strategies.chen import Checkpoints

    g = _chain(1500)
    plan = build(g, 10**9, 10**9, Checkpoints("none kept", set()))
    assert plan.status == "feasible" and plan.recomputes >= 1500
