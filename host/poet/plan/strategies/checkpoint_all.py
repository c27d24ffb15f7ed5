"""PyTorch's default: keep every activation until its last use, recompute and page nothing."""

from __future__ import annotations

from poet.plan.simulate import simulate
from poet.plan.strategies.base import Options, Strategy
from poet.plan.strategies.builder import Policy, build
from poet.plan.types import POET, CostedGraph, Plan, Semantics, Stage


def checkpoint_all(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
                   options: Options | None = None) -> Plan:
    return build(graph, budget, deadline_s, Policy(), semantics=semantics)


CHECKPOINT_ALL = Strategy("checkpoint-all", "keep every activation until its last use (PyTorch's default)",
                          checkpoint_all)


def keep_all(graph: CostedGraph) -> Plan:
    """Compute every node once and keep each tensor until its last use (PyTorch's default), with no
    budget or deadline to meet: its peak and time are what budgets and deadlines are set against."""
    n_nodes, nodes = len(graph), graph.nodes
    last_use = list(range(n_nodes))
    for c in nodes:
        for d in c.deps:
            last_use[d] = max(last_use[d], c.id)
    frees: list[list[int]] = [[] for _ in range(n_nodes)]
    for i, node in enumerate(nodes):
        if node.bytes > 0:
            frees[last_use[i]].append(i)
    plan = Plan(strategy="keep-all", status="feasible",
                stages=[Stage(compute=[t], free_after={t: frees[t]} if frees[t] else {})
                        for t in range(n_nodes)])
    sim = simulate(graph, plan)
    plan.energy_j, plan.time_s, plan.peak_bytes = sim.energy_j, sim.time_s, sim.peak_bytes
    plan.arena_budget, plan.deadline_s = sim.peak_bytes, sim.time_s
    return plan
