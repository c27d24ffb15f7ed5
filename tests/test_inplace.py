"""Ops made in place (docs/spec.md 1, "In place"): an op whose kernel makes each output element from the same
element of its inputs (ReLU, ReLU6 and their backwards) may make its output over its dep 0 where dep 0 leaves
right after it, needing no bytes beyond dep 0's. The planner (MILP, builder, simulator) counts it so, the MILP's
optimum is the brute force's (which counts it on its own), every relaxation stays a bound, and the board runs the
lowered schedule with the planned peak, bit for bit the weights of the same plan made without it."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fwhelpers import native_link
from poet.device.protocol import BATCH, SCHEDULE
from poet.graph.reference import train_steps, weights_of
from poet.graph.tracer import trace
from poet.plan.cost.costs import uncosted
from poet.plan.cost.memory import in_place
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import FREE, IN_PLACE, peak_live_bytes
from poet.plan.simulate import simulate
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget, solve_poet
from poet.plan.strategies.poet_milp_model import lower_bound_bytes
from poet.plan.types import CostedGraph
from test_bound import BOUNDS, TOL
from test_planner import brute_force, deep, tiny

nn = torch.nn


def _in_place(g: CostedGraph, seed: int) -> CostedGraph:
    """g with about half the nodes that could be made in place (a dep 0 at least as large, read by no other slot)
    marked so, at random."""
    rng = random.Random(seed)
    nodes = g.nodes
    return replace(g, nodes=tuple(
        replace(n, inplace=True) if n.deps and n.bytes and nodes[n.deps[0]].bytes >= n.bytes
        and n.deps.count(n.deps[0]) == 1 and rng.random() < 0.6 else n for n in nodes), name=f"{g.name}-inplace")


def _graphs() -> list[object]:
    """tiny and deep with in-place ops at random; two deeper ones (half a minute each to brute-force) are slow."""
    out: list[object] = []
    for seed, make in enumerate((tiny, deep, lambda: deep((4, 3, 3), 0.05), lambda: deep((5, 5, 2), 10.0))):
        g = _in_place(make(), seed)
        assert any(n.inplace for n in g.nodes)
        out.append(g if seed < 2 else pytest.param(g, marks=pytest.mark.slow, id=g.name))
    return out


@pytest.mark.parametrize("g", _graphs(), ids=lambda g: getattr(g, "name", None))
def test_the_milp_with_in_place_ops_is_the_brute_force_optimum_and_every_bound_below_it(g: CostedGraph) -> None:
    plain = replace(g, nodes=tuple(replace(n, inplace=False) for n in g.nodes))
    lo, hi = lower_bound_bytes(g), keep_all(g).peak_bytes
    assert lo <= lower_bound_bytes(plain) and keep_all(g).peak_bytes <= keep_all(plain).peak_bytes
    gained = 0
    for budget in sorted({lo - 1, lo, (lo + hi) // 2, hi}):
        for factor in (1.0, 1.3, 2.0):
            deadline = factor * g.one_pass_s
            best = brute_force(g, budget, deadline)
            plan = solve_poet(g, budget, deadline, time_limit_s=60, bound=False)
            if best is None:
                assert plan.status == "infeasible", (budget, factor, plan.energy_j)
            else:
                assert plan.status == "optimal" and plan.energy_j == pytest.approx(best, rel=1e-9), (budget, factor)
                assert simulate(g, plan, budget, deadline).peak_bytes == plan.peak_bytes <= budget
            for name, bound_of in BOUNDS.items():
                rel = bound_of(g, budget, deadline)
                if rel.status == "infeasible":
                    assert best is None, (name, budget, factor)
                elif best is not None:
                    assert rel.bound_j <= best * (1 + TOL), (name, budget, factor, rel.bound_j, best)
            without = brute_force(plain, budget, deadline)
            assert without is None or (best is not None and best <= without * (1 + 1e-12))
            gained += best is not None and (without is None or best < without * (1 - 1e-9))
    assert gained, "in place changed no optimum: the check checked nothing"


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # the widest op the first ReLU's backward: its gradient, its output and its input's gradient, 1 KiB each
        self.net = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 8), nn.ReLU6(), nn.Linear(8, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_the_board_runs_in_place_computes_with_the_planned_peak_and_the_same_bits(tmp_path: Path) -> None:
    """ReLU and ReLU6 forward and backward in place: their schedules carry the flag and drop the dep's free, the
    board's peak is the plan's (lower than the same plan made without), and the weights are the same plan's
    without in place, bit for bit, and PyTorch's."""
    torch.manual_seed(0)
    model = _Mlp()
    g = trace(model, "mlp-inplace", (12,), 5, 4)
    made = [n.op for n in g.nodes if in_place(g, n)]
    assert {"relu", "relu_bwd", "hardtanh", "hardtanh_bwd"} <= set(made), made
    cg = uncosted(g)
    deadline = 50 * cg.one_pass_s
    plans = [keep_all(cg)]
    small = min_arena_budget(cg, deadline, time_limit_s=30)
    plans.append(solve_poet(cg, small, deadline, time_limit_s=30))
    rng = np.random.default_rng(2)
    data = [(rng.standard_normal((4, 12)).astype(np.float32), rng.integers(0, 5, 4).astype(np.int32))
            for _ in range(3)]
    w0 = weights_of(model)
    blob = model_blob(g)
    results = []
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        for plan in plans:
            assert plan.status in ("optimal", "feasible")
            for flat in (False, True):
                low = lower(plan, g, in_place_ops=not flat)
                data_s = low.schedule.encode()
                flags = [i for i in low.schedule.instrs if i.flags & IN_PLACE]
                assert bool(flags) != flat
                peak = peak_live_bytes(data_s, blob)
                assert peak == low.peak_live_bytes
                if not flat:
                    assert peak == plan.peak_bytes == simulate(cg, plan).peak_bytes
                    for ins in flags:  # the dep's free is the compute's own
                        d = g.nodes[ins.node].deps[0]
                        assert not any(i.op == FREE and i.node == d
                                       for i in low.schedule.instrs[low.schedule.instrs.index(ins):][:2])
                link.load_model(blob, w0)
                link.upload(SCHEDULE, data_s)
                losses = []
                for x, y in data:
                    link.upload(BATCH, encode_batch(x, y))
                    res = link.step(0.05)
                    assert res.peak_live_bytes == peak
                    losses.append(res.loss)
                results.append((flat, peak, losses, link.read_params(blob)))
    for _, _, losses, weights in results[1:]:
        assert losses == results[0][2] and all(np.array_equal(a, b) for a, b in zip(weights, results[0][3],
                                                                                      strict=True))
    peaks = [peak for _, peak, _, _ in results]  # per plan: in place, then without
    assert peaks[0] < peaks[1] and peaks[2] <= peaks[3], peaks
    host = train_steps(model, data, 0.05, frozen=g.frozen, graph=g)
    assert np.allclose(results[0][2], host, rtol=1e-5)


def test_a_depthwise_int8_conv_runs_in_place_a_channel_at_a_time(tmp_path: Path) -> None:
    """A static-int8 prefix's depthwise convs (stride 1 and 2, int8 out, and one whose fp32 output is as large as
    its int8 input) are marked to run in place: the pool's stream buffer holds one output channel, the board makes
    each channel there and copies it over the input channels already read; the weights and losses are the flat
    schedule's bit for bit, and the board's peak the plan's, below the flat one's. With their weights on the SD
    card, they stay in place, reading their weights' rows into the buffer after the channel: the same bits."""
    from poet.plan.cost.memory import in_place_plane, pool_for
    from poet.plan.transform.placement import streamed
    from test_patches import _prefix, _steps

    _, prefix, w, _ = _prefix()
    q = prefix.graph
    marked = [n for n in q.nodes if n.op == "conv2d_q" and n.attrs.get("inplace")]
    assert len(marked) == 3 and all(n.attrs["groups"] == n.attrs["C"] == n.attrs["O"] for n in marked)
    assert any(n.attrs["out_scale"] < 0 for n in marked) and any(n.attrs["stride"] == 2 for n in marked)
    assert pool_for(q).stream == max(in_place_plane(n) for n in marked) == model_blob(q).pool.stream
    on_card = streamed(q, {q.params[n.attrs["w"]][0] for n in marked})
    assert all(on_card.nodes[n.id].attrs.get("inplace") for n in marked)
    assert pool_for(on_card).stream == max(-(-in_place_plane(n) // 4) * 4 + 9 for n in marked) \
        == model_blob(on_card).pool.stream
    rng = np.random.default_rng(9)
    data = [(rng.standard_normal((2, 1, 19, 19)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(2)]
    runs = []
    for k, g in enumerate((q, on_card)):
        cg = uncosted(g)
        plan = keep_all(cg)
        (tmp_path / str(k)).mkdir()
        with native_link(tmp_path / str(k), "linux", timeout_s=60.0) as link:
            for made_in_place in (True, False):
                low = lower(plan, g, in_place_ops=made_in_place)
                over = {g.nodes[i.node].op for i in low.schedule.instrs if i.flags & IN_PLACE}
                assert ("conv2d_q" in over) == made_in_place
                runs.append((low.peak_live_bytes, *_steps(link, g, w, plan, data, in_place_ops=made_in_place)))
        assert runs[-2][0] == plan.peak_bytes == simulate(cg, plan).peak_bytes < runs[-1][0]
    for _, losses, weights in runs[1:]:
        assert losses == runs[0][1] and all(np.array_equal(a, b) for a, b in zip(weights, runs[0][2], strict=True))


def test_a_depthwise_int8_conv_streaming_its_weight_is_costed_in_place_with_its_reads() -> None:
    """Placement streams a conv2d_q's weight from the SD card; it stays in place (its rows are read after the channel
    it makes), and the planner's costs of the placed graph are those of a fresh costing of it, its reads charged.
    (They once disagreed on the mark: mcunet-5fps's 49kb plan held 12 KiB more at one depthwise conv than the
    planner counted.)"""
    from poet.boards import load_board
    from poet.plan.cost.costs import costed, load_profile, with_stream_costs
    from poet.plan.cost.memory import streamed_reads
    from poet.plan.transform.placement import streamed
    from test_patches import _prefix

    _, prefix, _, _ = _prefix()
    q = prefix.graph
    marked = [n for n in q.nodes if n.op == "conv2d_q" and n.attrs.get("inplace")]
    board = load_board("nrf52840")
    prof = load_profile(board.name)
    cg = costed(q, board, prof, estimate=True)
    assert all(cg.nodes[n.id].inplace for n in marked)
    placed = streamed(q, {q.params[marked[0].attrs["w"]][0]})
    after = with_stream_costs(cg, placed, board, prof)
    assert all(after.nodes[n.id].inplace for n in marked)
    assert after.nodes[marked[0].id].compute_s > cg.nodes[marked[0].id].compute_s
    assert [n.inplace for n in after.nodes] == [n.inplace for n in costed(placed, board, prof, estimate=True).nodes]
    # its scale, then its rows as many a read as the buffer holds past the channel, again for each sample
    reads = streamed_reads(placed)[marked[0].id]
    assert reads[0] == 4 and sum(reads[1:]) == marked[0].attrs["C"] * 9 * (1 if len(reads) == 2 else 2)


class _Depthwise(nn.Module):
    """A pointwise conv whose bias trains, then three depthwise convs: stride 2 trained in part (half its channels:
    a split weight), stride 1 frozen (its weight stored int8, w8, in the test), stride 1 trained whole; then the
    classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 1)
        self.d2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.d3 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.d4 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # d3 reads d2's output, which no backward reads (d3's weight is frozen): d3 may run in place forward
        h = torch.relu(self.d3(self.d2(torch.relu(self.c1(x)))))
        return self.fc(torch.flatten(torch.relu(self.d4(h)), 1))


@pytest.mark.parametrize("batch", [1, 2])
def test_fp32_depthwise_convs_run_in_place_a_channel_at_a_time_with_the_layers_bits(tmp_path: Path,
                                                                                  batch: int) -> None:
    """fp32 depthwise convs marked to run in place (poet.plan.transform.in_place_convs; firmware ops/conv.c
    by_channel): forward at any batch, backward at batch 1 (a weight gradient sums over the batch), their weights
    whole, split (a share trained) or stored int8. The board runs each a channel at a time through the stream buffer,
    its output over its input where the plan says: the losses and weights are the unmarked graph's bit for bit, in
    place or not, and the board's peak the plan's, below the same plan's made without in place."""
    from poet.plan.cost.memory import in_place_plane, pool_for
    from poet.plan.transform.in_place_convs import eligible, marked
    from poet.plan.transform.placement import weight_only_int8

    torch.manual_seed(3)
    model = _Depthwise()
    g0 = weight_only_int8(trace(model, "dw-inplace", (1, 8, 8), 5, batch, train="layers:c1,d2@0.5,d4,fc"),
                          {"d3.weight"})
    assert g0.rests and g0.int8_params == {"d3.weight"}
    can = [n for n in g0.nodes if eligible(g0, n)]
    bwd = sorted(n.name for n in can if n.op == "conv2d_bwd")
    # forward: all three; backward at batch 1 the stride-1 ones (d2's input gradient is larger than its output's)
    assert len(can) - len(bwd) == 3 and len(bwd) == (2 if batch == 1 else 0), [n.name for n in can]
    g = marked(g0, {n.name for n in can})
    assert pool_for(g).stream == max(in_place_plane(n) for n in g.nodes if n.attrs.get("inplace")) \
        == model_blob(g).pool.stream
    assert [n.op for n in g.nodes if in_place(g, n) and n.op.startswith("conv")] == [n.op for n in can]
    rng = np.random.default_rng(4)
    data = [(rng.standard_normal((batch, 1, 8, 8)).astype(np.float32), rng.integers(0, 5, batch).astype(np.int32))
            for _ in range(3)]
    w0 = weights_of(model)
    runs = []
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        for graph, flags in ((g0, (False,)), (g, (True, False))):
            blob, plan = model_blob(graph), keep_all(uncosted(graph))
            for made_in_place in flags:
                low = lower(plan, graph, in_place_ops=made_in_place)
                over = {graph.nodes[i.node].name for i in low.schedule.instrs if i.flags & IN_PLACE}
                # forward, the one whose input no backward reads; backward, each marked
                assert {o for o in over if o[:2] in ("d2", "d3", "d4")} == (
                    {"d3/forward", *bwd} if made_in_place else set())
                link.load_model(blob, w0)
                link.upload(SCHEDULE, low.schedule.encode())
                losses = []
                for x, y in data:
                    link.upload(BATCH, encode_batch(x, y))
                    res = link.step(0.05)
                    assert res.peak_live_bytes == low.peak_live_bytes
                    losses.append(res.loss)
                runs.append((low.peak_live_bytes, losses, link.read_params(blob)))
    (flat_peak, losses, weights), (peak, *_), _ = runs
    assert peak == keep_all(uncosted(g)).peak_bytes < flat_peak
    for _, other_losses, other in runs[1:]:
        assert other_losses == losses and all(np.array_equal(a, b) for a, b in zip(other, weights, strict=True))


def test_the_depthwise_convs_marked_are_those_that_pay_and_a_plan_records_them() -> None:
    """in_place_convs.choose marks a conv where the stream buffer already holds its plane, then the widest op's
    convs while that lowers the widest op plus the buffer; nothing where marking would only grow the buffer.
    plan.json's `in_place` makes the same graph again from a fresh trace, and names no conv the graph lacks."""
    from poet.plan.cost.memory import op_floor, stream_bytes
    from poet.plan.transform.in_place_convs import choose, eligible, in_place_lines, marked
    from poet.plan.transform.rewrites import ForeignPlan, Rewrites

    torch.manual_seed(3)
    # the widest op is the depthwise conv's backward: its incoming gradient, its input and its input's gradient
    wide = nn.Sequential(nn.Conv2d(1, 16, 1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
    g = trace(wide, "dw-wide", (1, 8, 8), 5, 1)
    names = choose(g)
    # the backward, which pays; then the forward, free (its plane is as large)
    assert names == {"2/backward", "2/forward"}, names
    out = marked(g, set(names))

    def need(x: object) -> int:
        return max(op_floor(x, n) for n in x.nodes) + stream_bytes(x)  # type: ignore[attr-defined]

    assert need(out) < need(g) and in_place_lines(out) and not in_place_lines(g)
    # each conv left unmarked would only cost: marking it too does not lower the need
    for n in g.nodes:
        if eligible(g, n) and n.name not in names:
            assert need(marked(g, set(names) | {n.name})) >= need(out), n.name
    # a graph whose widest op is no depthwise conv marks none
    assert not choose(trace(_Depthwise(), "dw", (1, 8, 8), 5, 1, train="layers:c1,d2@0.5,d4,fc"))
    record = Rewrites(in_place=tuple(sorted(names)))
    again, _ = Rewrites.from_json(record.to_json()).apply(g)
    assert model_blob(again).encode() == model_blob(out).encode()
    with pytest.raises(ForeignPlan, match="in place"):
        Rewrites(in_place=("fc/forward",)).apply(g)
