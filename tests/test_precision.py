"""Storage precision (poet.precision): the cast-node graph transform, the rules, the three modes, the
fp32 default bit for bit as before, and greedy/auto plans of cnn-digits on the native runtime: they
run, their weights stay within 16-bit rounding of fp32's; fine-tuning mlp-digits with auto keeps the
test accuracy within a point of fp32's."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import NO_LIMIT, REPO, needs_tools
from conftest import digits_batches as batches
from fwhelpers import native_link
from poet.boards import load_board
from poet.device.protocol import BATCH, SCHEDULE
from poet.errors import UsageError
from poet.graph.reference import accuracy, load_weights, weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph, numel
from poet.models.datasets import digits_split
from poet.models.zoo import get_model
from poet.plan.cost.costs import costed, load_profile
from poet.plan.cost.memory import budget_for
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.request import solve_request
from poet.plan.simulate import simulate
from poet.plan.strategies import found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.transform.precision import (
    Rules,
    allowed,
    apply_storage,
    costed_storage,
    graph_for,
    int8_allowed,
    load_rules,
    select,
)
from poet.plan.types import Plan
from poet.settings import PlanRequest

BOARD = load_board("nrf52840")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="cc / make missing")


def _profile() -> dict[str, Any]:
    prof = load_profile(BOARD.name)
    assert prof.get("casts"), "profiles/nrf52840.yaml lost its casts section (poet profile --casts)"
    return prof


def _graph(name: str, batch: int) -> tuple[Any, TrainingGraph]:
    model, spec = get_model(name, seed=0)
    return model, trace(model, name, spec.input_shape, spec.classes, batch, spec.input_dtype)


STORAGE_ONLY = Rules(**{**vars(load_rules()), "int8": ()})  # the shipped rules without int8 layers


def _budgets(g: TrainingGraph, prof: dict[str, Any]) -> tuple[int, int, float]:
    """(tight, roomy) arenas as benchmarks/precision_zoo.py picks them, and the deadline (3x)."""
    tight, roomy, _, deadline = _arenas(g, prof)
    return tight, roomy, deadline


def _arenas(g: TrainingGraph, prof: dict[str, Any]) -> tuple[int, int, int, float]:
    """_budgets' tight and roomy arenas, one halfway from the smallest fp32 one to tight (where plans recompute
    and page), and the deadline."""
    cg = costed(g, BOARD, prof, estimate=True)
    deadline = 3 * cg.one_pass_s
    full = keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, deadline, time_limit_s=NO_LIMIT)
    assert smallest is not None
    tight = (smallest + full) // 2
    return tight, full, (smallest + tight) // 2, deadline


def test_apply_storage_inserts_the_casts_and_rewires_the_backward_readers() -> None:
    _, g = _graph("cnn-digits", 4)
    cands = allowed(g, load_rules())
    assert cands, "cnn-digits has saved tensors the default rules allow"
    choice = {i: "fp16" for i in cands}
    g2 = apply_storage(g, choice)
    assert len(g2.nodes) == len(g.nodes) + 2 * len(cands)
    by_name = {n.name: n for n in g2.nodes}
    for i in cands:
        src = g.nodes[i]
        low, back = by_name[f"{src.name}/fp16"], by_name[f"{src.name}/fp16/fp32"]
        assert low.op == back.op == "cast" and low.kind == back.kind == "forward"
        assert low.bytes * 2 == src.bytes == back.bytes  # 2 bytes an element, then fp32 again
        assert low.deps == [by_name[src.name].id] and back.deps == [low.id]
        assert (low.attrs["from"], low.attrs["to"], back.attrs["from"], back.attrs["to"]) == \
            ("fp32", "fp16", "fp16", "fp32")
        readers = [n for n in g2.nodes if n.kind == "backward" and back.id in n.deps]
        assert readers and back.id < min(r.id for r in readers)
        assert not any(by_name[src.name].id in n.deps for n in g2.nodes if n.kind == "backward")
        assert low.id == by_name[src.name].id + 1  # right after its producer
    model_blob(g2)  # the runtime's op set and dtype rules accept it
    assert apply_storage(g, {}) is g
    assert graph_for(g, {"stored": [{"id": i, "dtype": "fp16"} for i in cands]}).nodes == g2.nodes


def test_rules_keep_softmax_loss_and_norm_inputs_fp32(tmp_path: Path) -> None:
    _, g = _graph("transformer-block", 2)
    rules = load_rules()
    ok = set(allowed(g, rules))
    readers: dict[int, set[str]] = {}
    for n in g.nodes:
        for d in n.deps:
            readers.setdefault(d, set()).add(n.op)
    for i in g.saved_ids():
        n = g.nodes[i]
        if n.op in ("softmax", "layernorm", "cross_entropy") or readers.get(i, set()) & {
                "softmax_bwd", "layernorm_bwd", "cross_entropy_bwd"}:
            assert i not in ok, n.name
    assert ok, "some saved tensors of the transformer block may go low"
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"dtypes": ["bf16"], "deny": ["*"]}))
    assert allowed(g, load_rules(f)) == []
    assert allowed(g, Rules()) and set(allowed(g, Rules())) >= ok


def test_modes_at_a_tight_and_a_roomy_budget() -> None:
    """auto is never worse than greedy or fp32; with room for every activation the casts only cost, so
    greedy is worse than fp32; at a tight budget lower precision pays (auto beats fp32), though not
    necessarily everywhere: since firmware 2.1's faster fp32 kernels, mlp-digits' all-bf16 plan (greedy)
    costs more than fp32's recomputes, while cnn-digits' still costs less."""
    prof = _profile()
    for name in ("mlp-digits", "cnn-digits"):
        _, g = _graph(name, 16)
        tight, roomy, deadline = _budgets(g, prof)
        for arena in (tight, roomy):
            energy = {}
            for mode in ("fp32", "greedy", "auto"):
                sel = select(mode, g, BOARD, prof, arena, deadline, time_limit_s=NO_LIMIT)
                plan = (sel.plan if mode == "auto" else
                        plan_with("poet", sel.cg, arena, deadline, time_limit_s=NO_LIMIT))
                assert plan is not None and found(plan)
                simulate(sel.cg, plan, arena, deadline)
                energy[mode] = plan.energy_j
                if mode == "greedy":
                    assert len(sel.changes) == len(allowed(g, load_rules())) > 0
                    assert {c.dtype for c in sel.changes} == {"bf16"}  # the cheaper cast on the nrf52840
            assert energy["auto"] <= energy["greedy"] * (1 + 1e-9)
            assert energy["auto"] <= energy["fp32"] * (1 + 1e-9)
            if arena == roomy:
                assert energy["greedy"] > energy["fp32"]
            else:
                assert energy["auto"] < energy["fp32"] * (1 - 1e-6)


def test_a_node_costs_the_same_whatever_casts_the_graph_holds() -> None:
    """The transformer block's ops are not in the nrf52840 profile (estimated from the measured ones, some
    at the median rate of all): the casts' own entries must not move those estimates, or the switched
    MILP's costs would not be the plan's."""
    prof = _profile()
    _, g = _graph("transformer-block", 1)
    base = {n.name: (n.compute_s, n.compute_j) for n in costed_storage(g, BOARD, prof).nodes}
    greedy = select("greedy", g, BOARD, prof, 1 << 30, 1.0)
    assert greedy.changes and greedy.int8
    for n in greedy.cg.nodes:
        if n.name in base and greedy.graph.nodes[n.id].op not in ("linear_i8", "conv2d_i8"):
            assert (n.compute_s, n.compute_j) == base[n.name], n.name


def test_auto_with_nothing_allowed_is_fp32() -> None:
    _, g = _graph("mlp-digits", 16)
    sel = select("auto", g, BOARD, _profile(), 1 << 20, 1.0, Rules(deny=("*",)))
    assert sel.graph is g and not sel.changes and not sel.int8 and sel.tried == 0
    assert sel.lines() == ["precision auto: every tensor stays fp32, every layer computes in fp32"]


def _exhaustive(g: TrainingGraph, board: Any, prof: dict[str, Any], rules: Rules, arena: int, deadline: float
                ) -> tuple[Any, float]:
    """auto's selection and the least energy of the POET optima of every choice the rules allow (each
    saved tensor bf16 or not, each layer int8 or not), planned one by one."""
    stores, layers = allowed(g, rules), int8_allowed(g, rules)
    sel = select("auto", g, board, prof, arena, deadline, rules, time_limit_s=NO_LIMIT)
    assert sel.plan is not None and sel.tried == 3  # fp32's and greedy's plans, then the joint MILP
    simulate(sel.cg, sel.plan, arena, deadline)
    best = math.inf
    for bits in itertools.product((False, True), repeat=len(stores) + len(layers)):
        g2 = apply_storage(g, {i: "bf16" for i, b in zip(stores, bits[:len(stores)], strict=True) if b},
                           {k for k, b in zip(layers, bits[len(stores):], strict=True) if b})
        p = plan_with("poet", costed_storage(g2, board, prof), arena, deadline, time_limit_s=NO_LIMIT)
        if found(p):
            best = min(best, p.energy_j)
    # the joint MILP itself reaches the best choice (not only the fallback to fp32's or greedy's plan)
    assert sel.scores["joint"] == pytest.approx(best, rel=1e-9) == sel.plan.energy_j
    return sel, best


def test_auto_is_the_best_storage_set_by_exhaustive_search() -> None:
    """auto decides storage inside one MILP (a switch per tensor): its energy is the least of the POET
    optima of every one of the 2^m storage sets, at budgets where the answer is neither fp32 nor greedy."""
    prof = _profile()
    _, g = _graph("mlp-digits", 16)
    tight, roomy, low, deadline = _arenas(g, prof)
    assert len(allowed(g, STORAGE_ONLY)) == 4
    picked = set()
    for arena in (tight, low, roomy):
        sel, _ = _exhaustive(g, BOARD, prof, STORAGE_ONLY, arena, deadline)
        picked.add(len(sel.choice))
    assert 0 < min(picked - {0}) < 4 and 0 in picked  # partial sets were the optimum somewhere


def test_auto_with_int8_layers_is_the_best_of_every_choice_on_the_m4() -> None:
    """Storage and int8 switches together where plans recompute and page (mlp-digits halfway from its smallest
    arena to its tight one): an int8 layer's readers are forward ops the plan may recompute, so the residency they
    imply must follow the switch (a bug once made the fp32 choice infeasible there)."""
    prof = _profile()
    _, g = _graph("mlp-digits", 16)
    tight, roomy, low, deadline = _arenas(g, prof)
    rules = Rules(**{**vars(load_rules()), "allow": ("relu1/forward", "relu2/forward", "fc1/forward", "fc3/forward")})
    assert len(allowed(g, rules)) == 2 and len(int8_allowed(g, rules)) == 2
    for arena in (tight, low, roomy):
        _exhaustive(g, BOARD, prof, rules, arena, deadline)


def _m0_graph() -> tuple[Any, TrainingGraph, dict[str, Any], int, int, float]:
    """mlp-tiny at batch 8 on the mkr1000 (Cortex-M0+, soft float: int8 layers cost a quarter of fp32's,
    profiles/mkr1000.yaml), with its tight and roomy arenas and a 3x deadline."""
    board, prof = load_board("mkr1000"), load_profile("mkr1000")
    model, spec = get_model("mlp-tiny", seed=0)
    g = trace(model, "mlp-tiny", spec.input_shape, spec.classes, 8, spec.input_dtype)
    cg = costed(g, board, prof, estimate=True)
    deadline, full = 3 * cg.one_pass_s, keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, deadline, time_limit_s=NO_LIMIT)
    assert smallest is not None and prof.get("casts")
    return model, g, prof, (smallest + full) // 2, full, deadline


def test_auto_runs_layers_in_int8_where_it_pays() -> None:
    """On the M0 the int8 layers (quantising input and weight every step) are far cheaper than soft-float
    fp32: auto runs them in int8, every one where the arena holds their int8 copies. At the tight arena
    fc1's do not fit: its fp32 form reads the input in place (the staged batch, no arena bytes), its
    int8 form needs the input's and the weight's int8 copies (1.5 KiB) in the arena, and no plan of the
    all-int8 graph fits there; auto runs the other three in int8. (Greedy, which also stores the input
    in bf16, has no plan at either arena.) On the M4F (firmware 2.2's SMLAD kernels) int8 does not pay for
    cnn-digits' linear layers, whose larger weights are requantised every step: auto takes at most the conv
    (whose weight is 72 values), exactly when the profile says its int8 plan costs less, and greedy, which
    quantises every layer it may, is worse than fp32."""
    _, g, prof, tight, roomy, deadline = _m0_graph()
    m0 = load_board("mkr1000")
    layers = int8_allowed(g, load_rules())
    fc1 = next(k for k in layers if g.nodes[k].name == "fc1/forward")
    assert len(layers) == 4 and g.nodes[fc1].deps == [0]  # fc1 reads the input
    for arena in (tight, roomy):
        sel = {mode: select(mode, g, m0, prof, arena, deadline, time_limit_s=NO_LIMIT)
               for mode in ("fp32", "greedy", "auto")}
        plans = {mode: s.plan or plan_with("poet", s.cg, arena, deadline, time_limit_s=NO_LIMIT)
                 for mode, s in sel.items()}
        e = {mode: p.energy_j for mode, p in plans.items()}
        # greedy (every layer int8, the input's bf16 copy too) fits neither arena: fp32's keep-all holds
        # no copy of the input
        assert found(plans["fp32"]) and found(plans["auto"]) and not found(plans["greedy"])
        if arena == roomy:
            assert sorted(sel["auto"].int8) == layers
            assert e["auto"] < 0.8 * e["fp32"], e
        else:  # fc1's int8 copies do not fit
            assert not found(plan_with("poet", costed_storage(apply_storage(g, {}, set(layers)), m0, prof), arena,
                                       deadline, time_limit_s=NO_LIMIT))
            assert sorted(sel["auto"].int8) == [k for k in layers if k != fc1]
            assert e["auto"] < 0.9 * e["fp32"], e
        assert any(name in line for line in sel["auto"].lines() for name in sel["auto"].int8.values())
        assert sel["auto"].to_json()["int8"]
    _, g4 = _graph("cnn-digits", 16)
    tight4, roomy4, deadline4 = _budgets(g4, _profile())
    auto = select("auto", g4, BOARD, _profile(), roomy4, deadline4, time_limit_s=NO_LIMIT)
    greedy = select("greedy", g4, BOARD, _profile(), roomy4, deadline4)
    fp32 = plan_with("poet", costed_storage(g4, BOARD, _profile()), roomy4, deadline4, time_limit_s=NO_LIMIT)
    # whether the conv pays in int8 is the profile's to say (its int8 total is within a few percent of fp32's
    # on the M4F: firmware 2.2's epilogue made it 1.13x the fp32 kernel, it was 0.97x): auto takes it iff it does
    conv = next(n.id for n in g4.nodes if n.name == "conv1/forward")
    conv_j = plan_with("poet", costed_storage(apply_storage(g4, {}, {conv}), BOARD, _profile()), roomy4, deadline4,
                       time_limit_s=NO_LIMIT).energy_j
    assert list(auto.int8.values()) == (["conv1/forward"] if conv_j < fp32.energy_j else []) and auto.plan is not None
    assert {"conv1/forward", "fc1/forward"} <= set(greedy.int8.values())
    greedy_j = plan_with("poet", greedy.cg, roomy4, deadline4, time_limit_s=NO_LIMIT).energy_j
    assert auto.plan.energy_j <= min(fp32.energy_j, conv_j) * (1 + 1e-9) and fp32.energy_j < greedy_j


def test_auto_with_int8_layers_is_the_best_of_every_choice() -> None:
    """Storage and compute switches in one MILP: the least energy over all 2^4 choices of two saved
    tensors and two layers (each planned on its own), on the M0 at two budgets."""
    _, g, prof, tight, roomy, deadline = _m0_graph()
    rules = Rules(allow=("input", "relu1/forward", "fc2/forward", "fc3/forward"))
    assert len(allowed(g, rules)) == 2 and len(int8_allowed(g, rules)) == 2
    for arena in (tight, roomy):
        _exhaustive(g, load_board("mkr1000"), prof, rules, arena, deadline)


def _request(profile: Path, precision: str | None, ram: int) -> PlanRequest:
    """A solve's request; precision None: not given (the default)."""
    if precision is None:
        return PlanRequest(ram=ram, time_limit_s=NO_LIMIT, profile=profile)
    return PlanRequest(ram=ram, time_limit_s=NO_LIMIT, profile=profile, precision=precision)


def _solve_setup(tmp_path: Path) -> tuple[Path, TrainingGraph, Any, int, int, float]:
    """mlp-digits for solve_request: the profile written out, the graph, its costs, the fixed RAM, the
    tight arena and the deadline. (Not cnn-digits: with the input read in place its smallest arena is
    keep-all's, so its tight arena is too, and a graph with casts, whose schedule takes more of the
    fixed part, has no plan at the fp32 graph's smallest --ram.)"""
    prof_path = tmp_path / "nrf52840.yaml"
    prof_path.write_text(yaml.safe_dump(_profile()))
    _, g = _graph("mlp-digits", 16)
    cg = costed(g, BOARD, _profile(), estimate=True)
    tight, _, deadline = _budgets(g, _profile())
    return prof_path, g, cg, budget_for(g, 1 << 30, 28672).fixed, tight, deadline


def test_fp32_is_the_plan_of_before_bit_for_bit(tmp_path: Path) -> None:
    """--precision fp32 goes through the same code as a solve without the flag: same plan, same bytes."""
    prof_path, g, cg, fixed, tight, deadline = _solve_setup(tmp_path)
    said: list[str] = []
    before = solve_request(_request(prof_path, None, fixed + tight), g, cg, BOARD, 28672, deadline, said.append,
                             out=tmp_path / "a.poet", prof=_profile())
    now = solve_request(_request(prof_path, "fp32", fixed + tight), g, cg, BOARD, 28672, deadline, said.append,
                          out=tmp_path / "b.poet", prof=_profile())
    assert (tmp_path / "a.poet").read_bytes() == (tmp_path / "b.poet").read_bytes()
    assert before.plan.stages == now.plan.stages and before.plan.energy_j == now.plan.energy_j
    assert not any("precision" in line for line in said)


def test_solve_says_which_tensors_changed(tmp_path: Path) -> None:
    prof_path, g, cg, fixed, tight, deadline = _solve_setup(tmp_path)
    said: list[str] = []
    p = solve_request(_request(prof_path, "greedy", fixed + tight), g, cg, BOARD, 28672, deadline, said.append,
                        out=tmp_path / "g.poet", prof=_profile())
    text = "\n".join(said)
    assert "precision greedy:" in text and "saved tensors stored narrow" in text
    for i in allowed(g, load_rules()):
        assert any(g.nodes[i].name in line and "bf16" in line and "saves" in line for line in said)
    sel = p.selection
    assert sel is not None and p.lowered is not None
    assert p.training is sel.graph and len(p.lowered.schedule.instrs) > 0
    assert sel.to_json()["stored"][0]["bytes_saved"] > 0


# ---------------------------------------------------------------- on the native runtime


def _run(tmp_path: Path, g: TrainingGraph, plan: Plan, w0: list[np.ndarray],
         data: list[tuple[np.ndarray, np.ndarray]], lr: float) -> tuple[list[float], list[np.ndarray]]:
    lowered = lower(plan, g)
    losses = []
    with native_link(tmp_path, "linux", timeout_s=60.0) as link:
        link.load_model(model_blob(g), w0)
        link.upload(SCHEDULE, lowered.schedule.encode())
        for x, y in data:
            link.upload(BATCH, encode_batch(x, y))
            res = link.step(lr)
            assert res.peak_live_bytes == plan.peak_bytes  # the planner's memory model holds with the casts
            losses.append(res.loss)
        flat = link.read_params(model_blob(g))
    return losses, [w.reshape(s) for w, (_, s) in zip(flat, g.params, strict=True)]


def _digits(g: TrainingGraph, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    xtr, ytr, _, _ = digits_split()
    epoch = list(batches(xtr, ytr, g.batch, tuple(g.input_shape)))
    return [epoch[k % len(epoch)] for k in range(steps)]


def _plans(g: TrainingGraph, rules: Rules | None = None) -> dict[str, tuple[TrainingGraph, Plan, list[str]]]:
    prof = _profile()
    tight, _, deadline = _budgets(g, prof)
    out = {}
    for mode in ("fp32", "greedy", "auto"):
        sel = select(mode, g, BOARD, prof, tight, deadline, rules, time_limit_s=NO_LIMIT)
        plan = sel.plan if mode == "auto" else plan_with("poet", sel.cg, tight, deadline, time_limit_s=NO_LIMIT)
        assert plan is not None and found(plan)
        out[mode] = (sel.graph, plan, [c.name for c in sel.changes])
    return out


@needs_cc
def test_greedy_and_auto_plans_run_and_stay_within_16_bit_rounding(tmp_path: Path) -> None:
    model, g = _graph("cnn-digits", 16)
    w0 = weights_of(model)
    data = _digits(g, 3)
    plans = _plans(g, STORAGE_ONLY)
    ref_loss, ref_w = _run(tmp_path, g, plans["fp32"][1], w0, data, 0.1)
    # fp32 through the precision path is the graph and the schedule of before
    assert plans["fp32"][0] is g
    for mode in ("greedy", "auto"):
        g2, plan, changed = plans[mode]
        if not changed:
            continue
        losses, w = _run(tmp_path, g2, plan, w0, data, 0.1)
        assert losses[0] == ref_loss[0]  # the forward pass reads only fp32 tensors
        eps = 2.0 ** -8  # bf16's unit roundoff (the cheaper cast on the nrf52840)
        for a, r in zip(w, ref_w, strict=True):
            assert np.linalg.norm(a - r) <= 8 * eps * max(float(np.linalg.norm(r)), 1e-6)
        assert all(math.isfinite(v) for v in losses)


@needs_cc
def test_int8_layers_run_on_the_runtime_and_train_within_a_point(tmp_path: Path) -> None:
    """cnn-digits with every conv and linear forward in int8 (ops 49-52) on the native runtime: the plan's
    peak holds, the losses move by quantisation only, two epochs end within a point of fp32's accuracy."""
    model, g = _graph("cnn-digits", 16)
    w0 = weights_of(model)
    layers = int8_allowed(g, load_rules())
    assert [g.nodes[k].name for k in layers] == ["conv1/forward", "fc1/forward", "fc2/forward"]
    g8 = apply_storage(g, {}, set(layers))
    assert [n.op for n in g8.nodes].count("linear_i8") == 2 and [n.op for n in g8.nodes].count("conv2d_i8") == 1
    data = _digits(g, 2 * 89)
    _, _, xte, yte = digits_split()
    acc, first = {}, {}
    for name, gg in (("fp32", g), ("int8", g8)):
        losses, w = _run(tmp_path, gg, keep_all(costed_storage(gg, BOARD, _profile())), w0, data, 0.1)
        load_weights(model, w)
        model.eval()
        acc[name], first[name] = accuracy(model, xte.reshape((-1, *g.input_shape)), yte), losses[0]
    assert first["int8"] != first["fp32"] and first["int8"] == pytest.approx(first["fp32"], rel=1e-2)
    assert acc["fp32"] > 0.8 and abs(acc["int8"] - acc["fp32"]) <= 0.01, acc


@needs_cc
def test_fine_tuning_with_auto_keeps_accuracy_within_a_point(tmp_path: Path) -> None:
    """mlp-digits at its tight arena, where auto stores hidden activations in bf16 (cnn-digits' tight arena
    is keep-all's now the input is read in place: there auto stores nothing narrow)."""
    model, g = _graph("mlp-digits", 16)
    w0 = weights_of(model)
    steps = 6 * 89  # six epochs of the digits training split at 0.3 (the MLP is at 0.2 after two at 0.1, still
    # climbing at four: the two runs apart by their rounding, not their plans)
    data = _digits(g, steps)
    plans = _plans(g)
    g_auto, plan_auto, changed = plans["auto"]
    assert changed, "auto stores something narrow at the tight budget"
    _, _, xte, yte = digits_split()
    acc = {}
    for mode, (g2, plan, _) in (("fp32", plans["fp32"]), ("auto", (g_auto, plan_auto, changed))):
        _, w = _run(tmp_path, g2, plan, w0, data, 0.3)
        load_weights(model, w)
        model.eval()
        acc[mode] = accuracy(model, xte.reshape((-1, *g.input_shape)), yte)
    assert acc["fp32"] > 0.8
    assert abs(acc["auto"] - acc["fp32"]) <= 0.01, acc


@needs_cc
def test_poet_train_with_auto_runs_the_narrow_graph_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`poet train --precision auto` on the emulated nrf52840 at a RAM budget where half-size storage
    pays (mlp-digits' tight arena; cnn-digits has none below keep-all's now the input is read in place):
    the plan (and plan.json) names the tensors stored narrow, and the board runs that graph."""
    from poet.cli import main

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "nrf52840.yaml").write_text(yaml.safe_dump(_profile()))
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    _, g = _graph("mlp-digits", 16)
    tight, _, _ = _budgets(g, _profile())
    ram = budget_for(g, 1 << 30, int(_profile()["runtime_static_bytes"])).fixed + tight
    run_dir = tmp_path / "runs" / "auto"
    assert main(["train", "--model", "mlp-digits", "--ram", str(ram), "--epochs", "1", "--data-limit", "48",
                 "--lr", "0.1", "--precision", "auto", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    plan = json.loads((run_dir / "plan.json").read_text())
    stored = plan["precision"]["stored"]
    assert plan["precision"]["mode"] == "auto" and stored
    for s in stored:
        assert s["name"] in out and s["bytes_saved"] > 0
    assert "precision auto:" in out
    # the run's energy report says which tensors changed precision and what their casts cost
    # (and which layers run int8, if any)
    report = (run_dir / "report.txt").read_text()
    int8 = plan["precision"]["int8"]
    assert f"precision: {len(stored)} tensor(s) stored narrow, {len(int8)} layer(s) in int8" in report, report
    for s in stored:
        assert f"{s['name']}: fp32 -> {s['dtype']}" in report
    for layer in int8:
        assert f"{layer['name']}: int8 forward" in report


@needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
def test_poet_train_on_the_m0_runs_int8_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`poet train --board mkr1000 --precision auto` on the emulated Cortex-M0: auto runs every layer in
    int8 (soft-float fp32 costs four times as much), the board trains that graph, the report lists the
    layers, and the accuracy stays within a point of the same run in fp32."""
    from poet.cli import main

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mkr1000.yaml").write_bytes((REPO / "profiles" / "mkr1000.yaml").read_bytes())
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    acc = {}
    for mode in ("fp32", "auto"):
        run_dir = tmp_path / "runs" / mode
        assert main(["train", "--board", "mkr1000", "--model", "mlp-tiny", "--batch", "8", "--ram", "32k",
                     "--epochs", "2", "--data-limit", "64", "--lr", "0.1", "--precision", mode,
                     "--run-dir", str(run_dir)]) == 0
        acc[mode] = json.loads((run_dir / "state.json").read_text())["history"][-1]["accuracy"]
    capsys.readouterr()
    plan = json.loads((tmp_path / "runs" / "auto" / "plan.json").read_text())
    layers = [x["name"] for x in plan["precision"]["int8"]]
    assert layers == ["fc1/forward", "fc2/forward", "fc3/forward", "fc4/forward"], plan["precision"]
    report = (tmp_path / "runs" / "auto" / "report.txt").read_text()
    assert f"{len(layers)} layer(s) in int8" in report and all(f"{n}: int8 forward" in report for n in layers)
    assert abs(acc["auto"] - acc["fp32"]) <= 0.01, acc


def test_cli_precision_refusals_and_output(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    (tmp_path / "profiles" / "nrf52840.yaml").write_text(yaml.safe_dump(_profile()))
    env = {**os.environ, "POET_WORKSPACE": str(tmp_path)}

    def poet(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "poet", *args], capture_output=True, text=True, timeout=300,
                              env=env)

    r = poet("solve", "--model", "mlp-digits", "--ram", "80k", "--precision", "auto", "--precision-rules",
             str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing.yaml" in r.stderr, r.stderr
    (tmp_path / "bad.yaml").write_text("int8: [matmul]\n")
    r = poet("solve", "--model", "mlp-digits", "--ram", "80k", "--precision", "auto", "--precision-rules",
             str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "int8 kernels are linear, conv2d" in r.stderr, r.stderr
    r = poet("solve", "--model", "mlp-digits", "--ram", "80k", "--precision", "greedy")
    assert r.returncode == 0, r.stderr
    assert "precision greedy: 4 saved tensors stored narrow" in r.stdout and "bf16" in r.stdout
    assert "4 layers in int8" in r.stdout and "fc1/forward" in r.stdout and "int8 forward" in r.stdout
    # on the M0, auto runs mlp-tiny's layers in int8 and the schedule lowers
    r = poet("solve", "--board", "mkr1000", "--model", "mlp-tiny", "--batch", "8", "--ram", "32k", "--precision",
             "auto", "--time-limit", str(NO_LIMIT), "-o", str(tmp_path / "m0.poet"))
    assert r.returncode == 0 and "4 layers in int8" in r.stdout, r.stdout + r.stderr
    r = poet("solve", "--model", "mlp-digits", "--ram", "80k", "--precision", "greedy", "-o", str(tmp_path / "g.poet"))
    assert r.returncode == 0 and (tmp_path / "g.poet").stat().st_size > 0, r.stderr


def test_flash_fit_stores_the_largest_frozen_weights_int8_until_the_model_fits() -> None:
    """MobileNetV2-0.35 fine-tuned last:2 has 1.6 MiB of fp32 frozen weights; the nRF52840 keeps 768 KiB
    of flash for the model: the largest frozen conv weights go int8 (a quarter of the bytes), as few as
    fit. A model whose weights fit stays fp32; the Selection says which weights live in flash as int8."""
    from poet.plan.cost.memory import pool_for
    from poet.plan.transform.precision import flash_fit, int8_storable

    board = load_board("nrf52840")
    model, spec = get_model("mobilenetv2-cifar-0.35")
    g = trace(model, spec.name, spec.input_shape, spec.classes, 1, train="last:2")
    flash = board.model_flash_bytes
    assert pool_for(g).flash.total > flash
    chosen = flash_fit(g, flash)
    assert pool_for(apply_storage(g, {}, set(chosen))).flash.total <= flash
    weight = {n.id: numel(g.params[n.attrs["w"]][1]) for n in g.nodes if n.attrs.get("w", -1) in int8_storable(g)}
    # the largest first, and one fewer does not fit
    assert min(weight[k] for k in chosen) >= max(weight[k] for k in set(weight) - chosen)
    smallest = min(chosen, key=lambda k: weight[k])
    assert pool_for(apply_storage(g, {}, set(chosen) - {smallest})).flash.total > flash
    assert g.nodes[max(chosen, key=lambda k: weight[k])].name == "conv2/forward"  # 1280x112, the largest
    g8 = apply_storage(g, {}, set(chosen))
    assert all(n.op == "conv2d_i8" and len(n.deps) == 2 for n in g8.nodes if n.op.endswith("_i8"))
    # a model that fits keeps fp32 (no layer forced); one that fits not even in int8 is one line
    _, small = _graph("cnn-digits", 4)
    assert flash_fit(small, flash) == frozenset()
    model, spec = get_model("resnet18-cifar")
    big = trace(model, spec.name, spec.input_shape, spec.classes, 1, train="last:1")
    every = flash_fit(big, flash)  # every storable weight, and still too big: placement streams the largest
    assert len(every) == 20 and every == {n.id for n in big.nodes if n.attrs.get("w", -1) in int8_storable(big)}
    from poet.plan.cost.memory import pool_for
    from poet.plan.transform.placement import place
    placed = place(apply_storage(big, {}, set(every)), board)  # int8 convs' stored weights stream from the card
    assert placed.streamed_params and pool_for(placed).flash.total <= flash
    assert all(n.op == "conv2d_i8" for n in placed.nodes if n.attrs.get("stream"))
    with pytest.raises(UsageError, match=r"fit neither nrf52840's flash nor its SD card: flash would need .* even "
                                         r"with the weights of \d+ of its layers on the SD card"):
        place(apply_storage(big, {}, set(every)), dataclasses.replace(board, model_flash_bytes=64 * 1024))
