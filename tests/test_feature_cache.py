"""Features once (issue 48): the cuts of a frozen prefix, the suffix graph that trains from a kept tensor, and
the planner's choice of which tensor to keep, if any (plan/transform/feature_cache.py, plan/features.py)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from poet.boards import load_board
from poet.graph.file import read_graph
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import ModelChoice
from poet.plan.features import features_once
from poet.plan.request import plan_for
from poet.plan.transform import rewrites
from poet.plan.transform.feature_cache import Choice, Cut, Step, choose, cuts, suffix_of
from poet.plan.types import CostedGraph, CostedNode
from poet.settings import PlanRequest


def _graph(name: str, train: str, batch: int = 4) -> TrainingGraph:
    return traced(ModelChoice(name, batch=batch, train=train))[1]


def test_cuts_lie_in_the_frozen_prefix_before_the_first_trained_layer() -> None:
    g = _graph("mlp-digits", "last:1")
    got = cuts(g)
    trained = {name for name, _ in g.params if name not in set(g.frozen)}
    first_trained = min(n.id for n in g.nodes if n.kind == "forward"
                        and any(g.params[v][0] in trained for k, v in n.attrs.items() if k in ("w", "b") and v >= 0))
    assert got and all(c.node < first_trained for c in got)
    assert [c.node for c in got] == sorted(c.node for c in got)
    # every node after a cut reads the prefix only through it
    for c in got:
        assert all(d >= c.node for n in g.nodes[c.node + 1:] for d in n.deps)


@pytest.mark.parametrize(("name", "train"), [("mlp-digits", "all"), ("cnn-digits", "bias+last:1"),
                                             ("mlp-digits", "bias")])
def test_no_cut_where_the_first_layer_trains(name: str, train: str) -> None:
    assert cuts(_graph(name, train)) == []


def test_a_prefix_that_is_not_per_sample_has_no_cut_past_it() -> None:
    """A batch norm in training mode (its statistics are the batch's) or a dropout (its mask the step's)
    ends the cuts: the features would differ from epoch to epoch."""
    g = _graph("mlperf-kws", "last:1")  # DS-CNN: batch norms in training mode, dropout after the first block
    coupled = min((n.id for n in g.nodes if n.op in ("batchnorm", "bn_relu_mean", "dropout")), default=None)
    assert coupled is not None
    assert all(c.node < coupled for c in cuts(g))


def test_the_suffix_is_a_training_graph_that_trains_what_the_whole_trains(tmp_path: Path) -> None:
    g = _graph("mlp-digits", "last:1")
    c = cuts(g)[-1]
    s = c.suffix
    assert s.nodes[0].op == "input" and s.nodes[0].shape == g.nodes[c.node].shape
    assert s.input_shape == g.nodes[c.node].shape[1:] and s.batch == g.batch
    assert len(s.nodes) == len(g.nodes) - c.node
    # the same ops in the same order, reading the same tensors (renumbered)
    for n, m in zip(g.nodes[c.node + 1:], s.nodes[1:], strict=True):
        assert (n.op, n.kind, n.bytes) == (m.op, m.kind, m.bytes)
        assert [d - c.node for d in n.deps] == m.deps
    trained = [p for p in g.params if p[0] not in set(g.frozen)]
    assert [p for p in s.params if p[0] not in set(s.frozen)] == trained
    assert len(s.params) < len(g.params)  # the prefix's weights are not the suffix's
    # it passes the graph file's checks, as any graph poet plans
    path = tmp_path / "suffix.json"
    s.to_json(path)
    back = read_graph(path)
    assert isinstance(back, TrainingGraph) and len(back.nodes) == len(s.nodes)


def test_an_int8_cut_is_staged_int8_at_its_own_scale() -> None:
    """MobileNetV2-0.35 last:2 at 256 KB plans its prefix in static int8: a cut at an int8 layer's output
    makes a suffix whose input is staged int8 with that layer's output scale."""
    _, g = traced(ModelChoice("mobilenetv2-cifar-0.35", batch=1, train="last:2"))
    p = plan_for(g, load_board("nrf52840"), PlanRequest(ram=256 * 1024, deadline="3x"), say=lambda _l: None)
    assert p.training is not None
    int8 = [c for c in cuts(p.training) if p.training.nodes[c.node].op == "add_q"]
    assert int8
    c = int8[-1]
    inp = c.suffix.nodes[0]
    assert inp.attrs["i8"] == 1 and inp.bytes == c.batch_bytes
    assert c.suffix.params[inp.attrs["scale"]] == p.training.params[p.training.nodes[c.node].attrs["out_scale"]]


def _whole(costs: list[tuple[float, float, float]]) -> CostedGraph:
    """A chain whose node i computes for costs[i][0] J and pages out / in for costs[i][1] / costs[i][2] J."""
    nodes = tuple(CostedNode(i, f"n{i}", "forward", (i - 1,) if i else (), 64, 1e-3, cj, pi * 1e3, pi, po * 1e3, po)
                  for i, (cj, po, pi) in enumerate(costs))
    return CostedGraph(nodes, "chain", 0)


def _cut(i: int) -> Cut:
    return Cut(i, f"n{i}", 64, TrainingGraph("s", 1, [16], 2, [], []))


def test_choose_prices_every_way_and_keeps_the_cheapest() -> None:
    """Against every choice priced in full: the pruned search keeps the same (random chains, random
    suffix costs; a suffix's plan costs at least its nodes' compute)."""
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 8)
        costs = [(rng.uniform(0, 1), rng.uniform(0, 2), rng.uniform(0, 2)) for _ in range(n)]
        whole = _whole(costs)
        step = Step(sum(c[0] for c in costs) * rng.uniform(1, 1.5), 1.0)
        extra = {i: rng.uniform(0, 0.5) for i in range(n)}

        def suffix(c: Cut, costs=costs, extra=extra) -> Step:  # type: ignore[no-untyped-def]
            return Step(sum(x[0] for x in costs[c.node + 1:]) + extra[c.node], 0.5)

        epochs = rng.randint(1, 12)
        best, _ = choose(whole, step, [_cut(i) for i in range(1, n)], epochs, suffix)
        every = [Choice(None, step, step)] + [
            Choice(_cut(i), Step(step.energy_j + costs[i][1], 0.0), Step(costs[i][2] + suffix(_cut(i)).energy_j, 0.0))
            for i in range(1, n)] if epochs > 1 else [Choice(None, step, step)]
        cheapest = min(ch.run(epochs, 1).energy_j for ch in every)
        assert best.run(epochs, 1).energy_j == pytest.approx(cheapest, rel=1e-12)


def test_one_epoch_keeps_nothing() -> None:
    whole = _whole([(1.0, 0.0, 0.0)] * 3)
    best, priced = choose(whole, Step(3.0, 1.0), [_cut(1), _cut(2)], 1, lambda c: Step(0.0, 0.0))
    assert best.cut is None and len(priced) == 1


def test_vww_keeps_its_pooled_features_and_later_epochs_cost_a_tenth() -> None:
    """MLPerf VWW `last:1` on the nRF52840 at 256 KB, 10 epochs: the planner keeps a tensor, and a step of
    epoch 2 on costs under a tenth of one that runs the whole prefix (the issue's expectation: 10x)."""
    board = load_board("nrf52840")
    request = PlanRequest(ram=256 * 1024, deadline="3x")
    _, g = traced(ModelChoice("mlperf-vww", batch=1, train="last:1"))
    prof = rewrites.profile_for(board, request, lambda _m: None)
    whole = plan_for(g, board, request, say=lambda _l: None)
    best, priced = features_once(whole, board, prof, request, int(prof["runtime_static_bytes"]), 10,
                                 say=lambda _l: None)
    assert best.cut is not None
    assert best.later.energy_j * 10 < whole.plan.energy_j
    assert best.first.energy_j > whole.plan.energy_j  # epoch 1 pays the writes
    assert best.run(10, 1).energy_j == min(c.run(10, 1).energy_j for c in priced)
    # the suffix keeps the trained layer and its input only: none of the prefix's weights
    assert all(not name.startswith("features.0.") for name, _ in best.cut.suffix.params)


def test_suffix_of_the_input_is_refused_by_cuts() -> None:
    """The input itself is never a cut: keeping it would keep the samples."""
    g = _graph("mlp-digits", "last:1")
    assert all(c.node > 0 for c in cuts(g))
    assert suffix_of(g, cuts(g)[0].node).nodes[0].op == "input"


def test_cuts_are_forward_nodes_each_once() -> None:
    g = _graph("mlp-digits", "last:1")
    ids = [c.node for c in cuts(g)]
    assert all(a < b for a, b in itertools.pairwise(ids)) and all(g.nodes[i].kind == "forward" for i in ids)


def test_a_damaged_features_record_is_named_and_never_used() -> None:
    """plan.json's "features" (poet.run.features) is checked as the rest of a plan.json is: each count a
    count, the epochs' costs an energy and a time, finite; a damaged one is named."""
    from poet.run.features import record_problem

    good = {"node": 5, "name": "relu3/forward", "base": 4096, "sample_bytes": 128, "peak_bytes": 640,
            "arena_budget": 9000, "first": [1e-3, 1e-2], "later": [1e-4, 1e-3]}
    assert record_problem(good) is None
    for k, v in [("node", -1), ("base", 1.5), ("sample_bytes", True), ("peak_bytes", None), ("first", [1e-3]),
                 ("later", [float("nan"), 0.0]), ("first", [1.0, -1.0])]:
        why = record_problem({**good, k: v})
        assert why is not None and k in why, (k, v)
    assert record_problem([1, 2]) is not None
