"""Griewank and Walther's revolve: binomial checkpointing for chains."""

from __future__ import annotations

import math

from poet.plan.strategies.base import Options, Strategy
from poet.plan.strategies.builder import Builder, Policy, Stuck, better, checked, forward_ids, recomputable
from poet.plan.types import POET, PURE_KINDS, CostedGraph, Plan, Semantics


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


def _beta(s: int, r: int) -> int:
    """Griewank's beta(s, r) = C(s + r, s): the longest chain s snapshots reverse with r repetitions."""
    return math.comb(s + r, s) if r >= 0 else 0


def _revolve_cost(length: int, slots: int) -> tuple[int, int]:
    """(steps, first split) to reverse a chain of `length` steps from a snapshot at its start
    with `slots` free snapshots, uniform step cost.

    The recurrence cost(l, s) = min over m of m + cost(l - m, s - 1) + cost(m, s) (first minimal
    m) in closed form (Griewank 1992; Griewank and Walther 2000, Prop. 1): with S = slots + 1
    snapshots counting the start and r the least with beta(S, r) >= length, cost = r * length -
    beta(S + 1, r - 1) and the least optimal split is max(beta(S, r - 2), length - beta(S - 1, r)).
    tests/test_sizes.py checks it against the recurrence, which memoised cost O(length^3) and
    took minutes on a chain of 500 tensors.
    """
    if length <= 1:
        return 0, 0
    if slots == 0:
        return length * (length - 1) // 2, 0
    big_s, r = slots + 1, 1
    while _beta(big_s, r) < length:
        r += 1
    return r * length - _beta(big_s + 1, r - 1), max(1, _beta(big_s, r - 2), length - _beta(big_s - 1, r))


class Revolve(Policy):
    """Binomial checkpointing on a chain: at most `slots` snapshots besides the inputs. Recomputing
    from snapshot c up to the tensor j a backward node needs takes snapshots at Griewank's
    splits of [c, j]; other recomputed tensors are kept only for the next stage's reader."""

    name = "revolve"

    def __init__(self, chain: list[int], slots: int) -> None:
        self.chain, self.slots = chain, slots
        self.pos = {i: k for k, i in enumerate(chain)}
        self.snap: set[int] = set()
        self._pruned = -1  # the stage snap was last pruned for (-1: not since it last grew)
        self._splits(-1, len(chain) - 1)

    def _splits(self, c: int, j: int) -> None:
        """Snapshots along recomputing chain positions c+1..j from position c."""
        free = self.slots - len(self.snap)
        while j - c > 1 and free > 0:
            c += _revolve_cost(j - c, free)[1]
            self.snap.add(self.chain[c])
            self._pruned = -1
            free -= 1

    def retain(self, b: Builder, i: int, t: int) -> bool:
        if i not in self.pos:
            return True
        if self._pruned != t:  # once per stage, not per tensor: the same set each time (O(n) saved)
            self.snap = {s for s in self.snap if b.last_read[s] > t}
            self._pruned = t
        if i in self.snap:
            return True
        nxt = b.next_read(i, t)
        forward = b.nodes[t].kind in PURE_KINDS
        return nxt == t + 1 or (forward and nxt is not None and b.nodes[nxt].kind in PURE_KINDS)

    def retain_all(self, b: Builder, read_later: set[int], t: int) -> set[int]:
        """retain() of each, with the snapshots and the tensors off the chain taken as sets."""
        on_chain = read_later & self.pos.keys()
        if not on_chain:  # retain() would not have pruned the snapshots either
            return read_later
        self.retain(b, next(iter(on_chain)), t)  # prunes the snapshots for stage t
        rest = on_chain - self.snap
        return (read_later - rest) | {i for i in rest if self.retain(b, i, t)}

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


# Chains up to this many forward tensors try every snapshot count (each a whole builder run, so
# n runs of O(n) stages); longer ones bisect for the most snapshots that fit, O(log n) runs. Every
# chain in the zoo and the POET reference has at most 40; a 499-tensor chain took 75 s exhaustively.
EVERY_COUNT_UP_TO = 128


def revolve(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
            options: Options | None = None) -> Plan:
    """Griewank's revolve for chains: the least-energy plan over the snapshot counts tried.

    More snapshots mean fewer recomputes (less energy, less time) and more RAM, so on a long
    chain the count is bisected: the largest count whose plan fits the budget. Where it meets
    the deadline it is the plan trying every count finds (tests/test_sizes.py); where no count
    does, the plan returned is that one, the closest to the deadline, not the smallest peak.
    """
    chain = chain_order(graph)
    if chain is None:
        return Plan(strategy="revolve", stages=[], status="not-applicable", arena_budget=budget,
                    deadline_s=deadline_s, solver="heuristic",
                    note="revolve needs a chain; this graph's forward pass branches")
    best: tuple[int, Plan] | None = None  # (snapshots, plan); the other plans are dropped, not kept
    tried = 0

    def attempt(slots: int) -> Plan:
        nonlocal best, tried
        plan = Plan(strategy="revolve", stages=[], status="infeasible", arena_budget=budget,
                    deadline_s=deadline_s, solver="heuristic", note=f"{slots} snapshots")
        try:
            plan.stages = _RevolveBuilder(graph, budget, Revolve(chain, slots), semantics).run()
        except Stuck as exc:
            plan.note += f"; {exc}"
        else:
            plan = checked(graph, plan, budget, deadline_s, semantics)
        tried += 1
        # the best as if every count were tried in ascending order: of equals, the fewest snapshots
        if best is None or better(plan, best[1]) or (not better(best[1], plan) and slots < best[0]):
            best = (slots, plan)
        return plan

    def fits(plan: Plan) -> bool:  # in RAM; a deadline it misses, more snapshots may meet
        return bool(plan.stages) and plan.peak_bytes <= budget

    if len(chain) <= EVERY_COUNT_UP_TO:
        for slots in range(len(chain) + 1):
            attempt(slots)
    elif not fits(attempt(len(chain))):
        # fits(lo) (taken for 0, the fewest snapshots and least RAM, until tried), not fits(hi); 0 is
        # tried last, if at all: its plan recomputes O(n^2) tensors
        lo, hi = 0, len(chain)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(attempt(mid)):
                lo = mid
            else:
                hi = mid
        if lo == 0:
            attempt(0)
    assert best is not None
    plan = best[1]
    if len(chain) > EVERY_COUNT_UP_TO:
        plan.note += f" (bisected over 0-{len(chain)} for a chain of {len(chain)}: {tried} tried)"
    return plan


REVOLVE = Strategy("revolve", "Griewank's binomial checkpointing (chains only), the fewest snapshots that fit", revolve)
