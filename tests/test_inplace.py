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
    schedule's bit for bit, and the board's peak the plan's, below the flat one's."""
    from poet.plan.cost.memory import in_place_plane, pool_for
    from test_patches import _prefix, _steps

    _, prefix, w, _ = _prefix()
    q = prefix.graph
    marked = [n for n in q.nodes if n.op == "conv2d_q" and n.attrs.get("inplace")]
    assert len(marked) == 3 and all(n.attrs["groups"] == n.attrs["C"] == n.attrs["O"] for n in marked)
    assert any(n.attrs["out_scale"] < 0 for n in marked) and any(n.attrs["stride"] == 2 for n in marked)
    assert pool_for(q).stream == max(in_place_plane(n) for n in marked) == model_blob(q).pool.stream
    cg = uncosted(q)
    plan = keep_all(cg)
    rng = np.random.default_rng(9)
    data = [(rng.standard_normal((2, 1, 19, 19)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(2)]
    runs = []
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        for made_in_place in (True, False):
            low = lower(plan, q, in_place_ops=made_in_place)
            over = {q.nodes[i.node].op for i in low.schedule.instrs if i.flags & IN_PLACE}
            assert ("conv2d_q" in over) == made_in_place
            runs.append((low.peak_live_bytes, *_steps(link, q, w, plan, data, in_place_ops=made_in_place)))
    (peak, losses, weights), (flat_peak, flat_losses, flat_weights) = runs
    assert peak == plan.peak_bytes == simulate(cg, plan).peak_bytes < flat_peak
    assert losses == flat_losses and all(np.array_equal(a, b) for a, b in zip(weights, flat_weights, strict=True))



def test_a_depthwise_int8_conv_streaming_its_weight_is_costed_not_in_place() -> None:
    """Placement streams a conv2d_q's weight from the SD card and unmarks it (its reads take the stream buffer a
    channel made in place would); the planner's costs of the placed graph must say so too. They kept the mark:
    mcunet-5fps's 49kb plan held 12 KiB more at one depthwise conv than the planner counted."""
    from poet.boards import load_board
    from poet.plan.cost.costs import costed, load_profile, with_stream_costs
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
    assert not after.nodes[marked[0].id].inplace and all(after.nodes[n.id].inplace for n in marked[1:])
    assert [n.inplace for n in after.nodes] == [n.inplace for n in costed(placed, board, prof, estimate=True).nodes]
