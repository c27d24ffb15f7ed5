"""The POET MILP: against keep-all, deadlines, minimal budgets, both solvers and brute force."""

from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from poet.plan import CostedGraph, CostedNode
from poet.simulate import simulate
from poet.solve import keep_all, lower_bound_bytes, min_arena_budget, solve_poet

LINEAR_M0 = Path(__file__).resolve().parents[1] / "../shared/benchmarks/poet-reference/linear.m0.json"


def node(i: int, kind: str, deps: tuple[int, ...], nbytes: int, compute_s: float,
         page_watts: float = 0.1) -> CostedNode:
    """Compute draws 50 mW; paging is fast but may draw more (page-out 1.5x page-in)."""
    page_s = 1e-3 + 2e-6 * nbytes
    return CostedNode(id=i, name=f"{kind}{i}", kind=kind, deps=deps, bytes=nbytes,
                      compute_s=compute_s, compute_j=0.05 * compute_s,
                      page_in_s=page_s, page_in_j=page_watts * page_s,
                      page_out_s=1.5 * page_s, page_out_j=1.5 * page_watts * page_s,
                      recomputable=kind in ("forward", "loss"))


def chain(sizes: tuple[int, ...] = (512, 512, 384, 384, 256, 64), x_bytes: int = 256,
          page_watts: float = 2.0) -> CostedGraph:
    """input, forward layers (linear, relu, ...), loss, then backward: each backward reads
    the previous gradient and its layer's input. Paging saves time, recompute saves energy."""
    nodes = [node(0, "input", (), x_bytes, 0.0, page_watts)]
    for k, b in enumerate(sizes, start=1):
        nodes.append(node(k, "forward", (k - 1,), b, 1e-4 * b * (3 if k % 2 else 1), page_watts))
    n = len(sizes)
    nodes.append(node(n + 1, "loss", (n,), 4, 1e-3, page_watts))
    nodes.append(node(n + 2, "backward", (n,), sizes[-1], 1e-3, page_watts))  # reads the logits
    for k in range(n, 0, -1):  # backward of layer k: grad of its output and its input activation
        i = len(nodes)
        grad_bytes = sizes[k - 2] if k > 1 else 0
        nodes.append(node(i, "backward", (i - 1, k - 1), grad_bytes, 2e-4 * sizes[k - 1], page_watts))
    nodes.append(node(len(nodes), "optimizer", (), 0, 2e-3, page_watts))
    return CostedGraph(tuple(nodes), name="chain")


def tiny(page_watts: float = 0.1) -> CostedGraph:
    """x -> linear -> linear -> linear (logits) -> loss, and the backward: 10 nodes, brute-forceable."""
    w = page_watts
    return CostedGraph((
        node(0, "input", (), 1, 0.0, w),
        node(1, "forward", (0,), 6, 0.05, w),
        node(2, "forward", (1,), 6, 0.03, w),
        node(3, "forward", (2,), 2, 0.01, w),
        node(4, "loss", (3,), 1, 0.01, w),
        node(5, "backward", (3,), 2, 0.01, w),
        node(6, "backward", (5, 2), 2, 0.02, w),
        node(7, "backward", (6, 1), 2, 0.06, w),
        node(8, "backward", (7, 0), 0, 0.1, w),
        node(9, "optimizer", (), 0, 0.01, w),
    ), name="tiny")


def _subsets(items: list[int]) -> Iterator[tuple[int, ...]]:
    return itertools.chain.from_iterable(itertools.combinations(items, k) for k in range(len(items) + 1))


def brute_force(g: CostedGraph, budget: int, deadline_s: float) -> float | None:
    """Least energy over every plan meeting the budget and the deadline (None: there is none)."""
    feasible = [e for e, s in _brute_front(g, budget) if s <= deadline_s * (1 + 1e-9)]
    return min(feasible) if feasible else None


@functools.cache
def _brute_front(g: CostedGraph, budget: int) -> list[tuple[float, float]]:
    """The (energy, time) Pareto front of every plan (spec section 1) within the budget, by
    dynamic programming over (kept, in aux) states. Shares no code with the MILP. Only
    dominated choices are left out: paging out a tensor already in aux, keeping or paging
    out a tensor no later node reads."""
    nodes, n_nodes = g.nodes, len(g)
    read_after = [{d for c in nodes[t + 1:] for d in c.deps} for t in range(n_nodes)]
    states: dict[tuple[frozenset[int], frozenset[int]], list[tuple[float, float]]] = {
        (frozenset(), frozenset()): [(0.0, 0.0)]}
    for t in range(n_nodes):
        nxt: dict[tuple[frozenset[int], frozenset[int]], list[tuple[float, float]]] = defaultdict(list)
        for (kept, aux), costs in states.items():
            for pin in _subsets(sorted(aux - kept)):
                free_to_rec = [i for i in range(t) if nodes[i].kind in ("forward", "loss")
                               and nodes[i].bytes > 0 and i not in kept and i not in pin]
                for rec in _subsets(free_to_rec):
                    present = set(kept) | set(pin)
                    ok = True
                    for c in (*rec, t):
                        ok = all(nodes[d].bytes == 0 or d in present for d in nodes[c].deps)
                        if not ok:
                            break
                        if nodes[c].bytes > 0:
                            present.add(c)
                    if not ok or sum(nodes[i].bytes for i in present) > budget:
                        continue
                    e = sum(nodes[c].compute_j for c in (*rec, t)) + sum(nodes[i].page_in_j for i in pin)
                    s = sum(nodes[c].compute_s for c in (*rec, t)) + sum(nodes[i].page_in_s for i in pin)
                    later = sorted(present & read_after[t])
                    for pout in _subsets([i for i in later if i not in aux]):
                        e2 = e + sum(nodes[i].page_out_j for i in pout)
                        s2 = s + sum(nodes[i].page_out_s for i in pout)
                        for keep in _subsets(later):
                            key = (frozenset(keep), aux | frozenset(pout))
                            nxt[key].extend((ce + e2, cs + s2) for ce, cs in costs)
        states = {k: _pareto(v) for k, v in nxt.items() if v}
    return _pareto([c for costs in states.values() for c in costs])


def _pareto(costs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for e, s in sorted(costs):
        if not out or s < out[-1][1]:
            out.append((e, s))
    return out


def _check(g: CostedGraph, budget: int, deadline_s: float, **kw: object) -> None:
    """Solve, and check the plan with the simulator whatever solve_poet claims."""
    plan = solve_poet(g, budget, deadline_s, **kw)  # type: ignore[arg-type]
    assert plan.status == "optimal"
    sim = simulate(g, plan, budget, deadline_s)
    assert sim.peak_bytes == plan.peak_bytes <= budget
    assert sim.energy_j == plan.energy_j and sim.time_s == plan.time_s <= deadline_s * (1 + 1e-8)


def linear_m0() -> CostedGraph:
    if not LINEAR_M0.exists():
        pytest.skip(f"{LINEAR_M0} absent")
    return CostedGraph.from_json(LINEAR_M0)


GRAPHS = {"chain": chain, "tiny": tiny, "linear.m0": linear_m0}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_enough_memory_gives_keep_all(name: str) -> None:
    g = GRAPHS[name]()
    base = keep_all(g)
    for budget in (base.peak_bytes, 2 * base.peak_bytes):
        plan = solve_poet(g, budget, 3 * g.one_pass_s)
        assert plan.status == "optimal"
        assert math.isclose(plan.energy_j, base.energy_j, rel_tol=1e-9)
        assert plan.recomputes == plan.page_ins == plan.page_outs == 0
        assert plan.peak_bytes == base.peak_bytes  # useless keeps were dropped
    assert math.isclose(base.energy_j, sum(n.compute_j for n in g.nodes), rel_tol=1e-12)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_tight_memory_recomputes_or_pages(name: str) -> None:
    g = GRAPHS[name]()
    base = keep_all(g)
    budget = (base.peak_bytes + lower_bound_bytes(g)) // 2
    plan = solve_poet(g, budget, 3 * g.one_pass_s)
    assert plan.status == "optimal"
    assert plan.recomputes + plan.page_ins > 0
    assert plan.peak_bytes <= budget < base.peak_bytes
    assert plan.energy_j > base.energy_j
    sim = simulate(g, plan, budget, 3 * g.one_pass_s)
    assert sim.energy_j == plan.energy_j


def test_min_deadline_keeps_everything() -> None:
    """At exactly one plain pass, no recompute and no paging fits: only keep-all's memory works."""
    g = chain()
    base = keep_all(g)
    assert solve_poet(g, base.peak_bytes, g.one_pass_s).status == "optimal"
    assert solve_poet(g, base.peak_bytes - 1, g.one_pass_s).status == "infeasible"
    assert min_arena_budget(g, g.one_pass_s) == base.peak_bytes
    assert min_arena_budget(g, 0.99 * g.one_pass_s) is None


@pytest.mark.parametrize(("name", "budget", "factor"), [("chain", 2112, 1.05), ("linear.m0", 3300, 1.0017)])
def test_tighter_deadline_forbids_recompute(name: str, budget: int, factor: float) -> None:
    """Recompute saves energy but costs time here: a tighter deadline makes the plan page instead."""
    g = GRAPHS[name]()
    loose = solve_poet(g, budget, 3 * g.one_pass_s)
    deadline = factor * g.one_pass_s
    tight = solve_poet(g, budget, deadline)
    assert loose.status == tight.status == "optimal"
    assert tight.time_s <= deadline < loose.time_s
    assert tight.energy_j > loose.energy_j
    assert tight.recomputes < loose.recomputes and tight.page_ins > loose.page_ins
    simulate(g, tight, budget, deadline)


@pytest.mark.parametrize("name", ["chain", "linear.m0"])
def test_min_arena_budget_is_tight(name: str) -> None:
    g = GRAPHS[name]()
    deadline = 1.2 * g.one_pass_s
    best = min_arena_budget(g, deadline)
    assert best is not None
    assert lower_bound_bytes(g) <= best < keep_all(g).peak_bytes
    _check(g, best, deadline)
    assert solve_poet(g, best - 1, deadline).status == "infeasible"


def test_min_arena_budget_brute_force() -> None:
    g = tiny()
    for factor in (1.0, 1.01, 1.05, 1.5, 3.0):
        deadline = factor * g.one_pass_s
        best = min_arena_budget(g, deadline)
        brute = next(b for b in range(keep_all(g).peak_bytes + 1) if brute_force(g, b, deadline) is not None)
        assert best == brute, factor
        assert solve_poet(g, best - 1, deadline).status == "infeasible"
        _check(g, best, deadline)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_highs_and_cbc_agree(name: str) -> None:
    g = GRAPHS[name]()
    budget = (keep_all(g).peak_bytes + lower_bound_bytes(g)) // 2
    for deadline in (1.1 * g.one_pass_s, 3 * g.one_pass_s):
        highs = solve_poet(g, budget, deadline, solver="highs")
        cbc = solve_poet(g, budget, deadline, solver="cbc")
        assert highs.status == cbc.status
        assert math.isclose(highs.energy_j, cbc.energy_j, rel_tol=1e-7), (highs.energy_j, cbc.energy_j)


@pytest.mark.parametrize("page_watts", [0.1, 10.0])
def test_brute_force_agrees(page_watts: float) -> None:
    g = tiny(page_watts)
    lb, peak = lower_bound_bytes(g), keep_all(g).peak_bytes
    for budget in (lb - 1, lb, lb + 1, peak - 1, peak):
        for factor in (1.0, 1.05, 1.2):
            deadline = factor * g.one_pass_s
            plan = solve_poet(g, budget, deadline)
            brute = brute_force(g, budget, deadline)
            if brute is None:
                assert plan.status == "infeasible", (budget, factor)
            else:
                assert plan.status == "optimal", (budget, factor)
                assert math.isclose(plan.energy_j, brute, rel_tol=1e-9), (budget, factor)


def test_infeasible_below_lower_bound_and_progress() -> None:
    g = chain()
    said: list[str] = []
    plan = solve_poet(g, lower_bound_bytes(g) - 1, 10 * g.one_pass_s, progress=said.append)
    assert plan.status == "infeasible" and plan.stages == []
    assert len(said) == 2 and "infeasible" in said[1]


def test_linear_m0_reference_instance() -> None:
    """The reference's 3,300 B / 1.0x instance is infeasible once paging takes time; at 1.01x
    the plan costs a little more than the reference's 0.105044 J (its input is free to recompute)."""
    g = linear_m0()
    assert solve_poet(g, 3300, g.one_pass_s).status == "infeasible"
    plan = solve_poet(g, 3300, 1.01 * g.one_pass_s)
    assert plan.status == "optimal" and plan.peak_bytes <= 3300
    assert 0.105044 < plan.energy_j < keep_all(g).energy_j * 1.01


def _reference(name: str) -> CostedGraph:
    path = LINEAR_M0.with_name(f"{name}.json")
    if not path.exists():
        pytest.skip(f"{path} absent")
    return CostedGraph.from_json(path)


@pytest.mark.slow
def test_reference_table_instances() -> None:
    """Two rows of the benchmarks README where both formulations find the same plan (no paging)."""
    g = _reference("transformer.m4")
    assert math.isclose(solve_poet(g, 40_000_000, 1.2 * g.one_pass_s).energy_j, 8.256776, rel_tol=1e-6)
    g = _reference("resnet18_cifar.a72")
    plan = solve_poet(g, 3_000_000, 7.6 * g.one_pass_s, time_limit_s=120)
    assert plan.status == "optimal" and math.isclose(plan.energy_j, 7.889510, rel_tol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_time_limit_reports_feasible_with_gap(solver: str) -> None:
    g = _reference("resnet18_cifar.m4")
    plan = solve_poet(g, 737_719, 1.5 * g.one_pass_s, solver=solver, time_limit_s=15)
    assert plan.status in ("feasible", "no-solution")
    if plan.status == "feasible":
        assert 0 < plan.gap < 1 and plan.peak_bytes <= 737_719
        simulate(g, plan, 737_719, 1.5 * g.one_pass_s)
