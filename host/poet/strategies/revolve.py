"""Griewank and Walther's revolve: binomial checkpointing for chains."""

from __future__ import annotations

import functools
import math

from poet.plan import POET, PURE_KINDS, CostedGraph, Plan, Semantics
from poet.strategies.builder import Builder, Policy, Stuck, better, checked, forward_ids, recomputable


def chain_order(graph: CostedGraph) -> list[int] | None:
    """The forward tensors as a chain (each reads only the one before it, or graph inputs);
    None if the forward part branches, where revolve does not apply."""
    fwd = forward_ids(graph)
    prev = None
    for i in fwd:
        dropped = [d for d in graph.nodes[i].deps if graph.nodes[d].bytes > 0 and recomputable(graph.nodes[d])]
        if dropped and dropped != [prev]:
            return None
        if prev is not None and not dropped:
            return None
        prev = i
    return fwd


@functools.cache
def _revolve_cost(length: int, slots: int) -> tuple[int, int]:
    """(steps, first split) to reverse a chain of `length` steps from a snapshot at its start
    with `slots` free snapshots, by Griewank's recurrence (uniform step cost)."""
    if length <= 1:
        return 0, 0
    if slots == 0:
        return length * (length - 1) // 2, 0
    best = (math.inf, 1)
    for m in range(1, length):
        cost = m + _revolve_cost(length - m, slots - 1)[0] + _revolve_cost(m, slots)[0]
        if cost < best[0]:
            best = (cost, m)
    return int(best[0]), best[1]


class Revolve(Policy):
    """Binomial checkpointing on a chain: at most `slots` snapshots besides the inputs. Recomputing
    from snapshot c up to the tensor j a backward node needs takes snapshots at Griewank's
    splits of [c, j]; other recomputed tensors are kept only for the next stage's reader."""

    name = "revolve"

    def __init__(self, chain: list[int], slots: int) -> None:
        self.chain, self.slots = chain, slots
        self.pos = {i: k for k, i in enumerate(chain)}
        self.snap: set[int] = set()
        self._splits(-1, len(chain) - 1)

    def _splits(self, c: int, j: int) -> None:
        """Snapshots along recomputing chain positions c+1..j from position c."""
        free = self.slots - len(self.snap)
        while j - c > 1 and free > 0:
            c += _revolve_cost(j - c, free)[1]
            self.snap.add(self.chain[c])
            free -= 1

    def retain(self, b: Builder, i: int, t: int) -> bool:
        if i not in self.pos:
            return True
        self.snap = {s for s in self.snap if b.next_read(s, t) is not None}
        if i in self.snap:
            return True
        nxt = b.next_read(i, t)
        forward = b.nodes[t].kind in PURE_KINDS
        return nxt == t + 1 or (forward and nxt is not None and b.nodes[nxt].kind in PURE_KINDS)

    def on_backward_demand(self, b: Builder, t: int, resident: set[int]) -> None:
        """Before stage t recomputes: plan the snapshots for the chain segment it will redo."""
        wanted = [self.pos[d] for d in b.nodes[t].deps if d in self.pos and d not in resident]
        if not wanted:
            return
        j = max(wanted)
        have = [self.pos[i] for i in resident if i in self.pos and self.pos[i] < j]
        self._splits(max(have, default=-1), j)


class _RevolveBuilder(Builder):
    def _demand(self, t: int, resident: set[int]) -> tuple[set[int], set[int]]:
        if self.nodes[t].kind not in PURE_KINDS:
            assert isinstance(self.policy, Revolve)
            self.policy.on_backward_demand(self, t, resident)
        return super()._demand(t, resident)


def revolve(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
    """Griewank's revolve for chains, with the fewest snapshots whose plan fits the budget."""
    chain = chain_order(graph)
    if chain is None:
        return Plan(strategy="revolve", stages=[], status="not-applicable", arena_budget=budget,
                    deadline_s=deadline_s, solver="heuristic",
                    note="revolve needs a chain; this graph's forward pass branches")
    best: Plan | None = None
    for slots in range(len(chain) + 1):
        policy = Revolve(chain, slots)
        plan = Plan(strategy="revolve", stages=[], status="infeasible", arena_budget=budget,
                    deadline_s=deadline_s, solver="heuristic", note=f"{slots} snapshots")
        try:
            plan.stages = _RevolveBuilder(graph, budget, policy).run()
        except Stuck as exc:
            plan.note += f"; {exc}"
        else:
            plan = checked(graph, plan, budget, deadline_s, semantics)
        if best is None or better(plan, best):
            best = plan
    assert best is not None
    return best
