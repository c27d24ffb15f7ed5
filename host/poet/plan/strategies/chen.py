"""Chen et al. 2016, "Training deep nets with sublinear memory cost": sqrt(n) and greedy checkpoints."""

from __future__ import annotations

import math

from poet.plan.strategies.base import Options, Strategy
from poet.plan.strategies.builder import Builder, Policy, better, build, forward_ids, recomputable
from poet.plan.types import POET, PURE_KINDS, CostedGraph, Plan, Semantics


class Checkpoints(Policy):
    """Keep the checkpoints; drop other forward tensors once the forward pass no longer reads
    them; in the backward pass a dropped tensor is recomputed from the nearest resident
    ancestors and kept until its last reader (one segment at a time)."""

    def __init__(self, name: str, checkpoints: set[int]) -> None:
        self.name, self.checkpoints = name, checkpoints

    def retain(self, b: Builder, i: int, t: int) -> bool:
        node = b.nodes[i]
        if i in self.checkpoints or not recomputable(node) or b.nodes[t].kind not in PURE_KINDS:
            return True
        nxt = b.next_read(i, t)
        return nxt is not None and b.nodes[nxt].kind in PURE_KINDS


def sqrtn(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
          options: Options | None = None) -> Plan:
    """Chen's sqrt(n): a checkpoint every ceil(sqrt(n)) forward tensors."""
    fwd = forward_ids(graph)
    k = max(1, math.ceil(math.sqrt(len(fwd))))
    chosen = set(fwd[k - 1::k])
    return build(graph, budget, deadline_s, Checkpoints("sqrtn", chosen), f"{len(chosen)} checkpoints", semantics)


def chen_greedy(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
                options: Options | None = None) -> Plan:
    """Chen's greedy: walk the forward tensors summing bytes, checkpoint where the sum passes a
    segment size b, restart; over a geometric range of b, the least-energy plan that fits."""
    fwd = forward_ids(graph)
    sizes = [graph.nodes[i].bytes for i in fwd]
    if not fwd:
        return build(graph, budget, deadline_s, Checkpoints("chen-greedy", set()), semantics=semantics)
    lo, hi = min(sizes), sum(sizes)
    best: Plan | None = None
    seen: set[frozenset[int]] = set()
    for k in range(25):
        seg = lo * (hi / lo) ** (k / 24)
        chosen, acc = set(), 0
        for i, s in zip(fwd, sizes):
            acc += s
            if acc > seg:
                chosen.add(i)
                acc = 0
        if frozenset(chosen) in seen:
            continue
        seen.add(frozenset(chosen))
        plan = build(graph, budget, deadline_s, Checkpoints("chen-greedy", chosen),
                     f"segment {seg:.0f} B, {len(chosen)} checkpoints", semantics)
        if best is None or better(plan, best):
            best = plan
    assert best is not None
    return best


SQRTN = Strategy("sqrtn", "Chen et al.: a checkpoint every sqrt(n) activations, recompute the rest", sqrtn)
CHEN_GREEDY = Strategy("chen-greedy", "Chen et al.'s greedy segments, the best segment size that fits", chen_greedy)
