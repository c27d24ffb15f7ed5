"""The baseline strategies that are not MILPs: Chen's checkpointing, Griewank's revolve, DTR, Capuchin.

All of them run on one demand-driven builder that walks the stages of docs/spec.md
section 1 in order. Stage t computes node t; a dep that is not resident is paged in
if it is in aux storage, else recomputed (recursively, from whatever is resident).
After the stage each present tensor still read by a later node is kept for stage
t+1 unless the policy lets it go. When a stage would exceed the budget the policy
may evict tensors that pass through it unused: dropped (recomputed when next
needed) or paged out at the end of the previous stage, where they were resident.

The builder knows nothing of energy or deadlines beyond what a policy asks; every
plan it makes is replayed by simulate.py, which decides whether it fits the budget
and meets the deadline under exactly the rules the MILP plans obey.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from poet.plan import POET, PURE_KINDS, CostedGraph, CostedNode, Plan, Semantics, rule_stage
from poet.simulate import PlanError, simulate


class _Stuck(Exception):
    """The builder cannot go on: a tensor is lost, or a stage cannot fit whatever is evicted."""


def recomputable(node: CostedNode) -> bool:
    return node.recomputable and node.kind in PURE_KINDS


class Policy:
    """What a strategy decides; the defaults are PyTorch's: keep everything until its last use."""

    name = "checkpoint-all"

    def retain(self, b: Builder, i: int, t: int) -> bool:
        """Keep tensor i, present in stage t and read by a later node, for stage t+1?"""
        return True

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        """Stage t is over budget: a tensor from `candidates` (resident, unused in stage t) to
        evict and whether to page it out (else it is dropped); None gives up."""
        return None


@dataclass
class _StageDraft:
    computes: set[int]
    pin: set[int]
    pout: set[int]


class Builder:
    """Builds a staged plan under a Policy (see the module doc)."""

    def __init__(self, graph: CostedGraph, budget: int, policy: Policy) -> None:
        self.g, self.nodes, self.budget, self.policy = graph, graph.nodes, budget, policy
        n = len(graph)
        self.readers: list[list[int]] = [[] for _ in range(n)]
        for c in graph.nodes:
            for d in dict.fromkeys(c.deps):
                if graph.nodes[d].bytes > 0:
                    self.readers[d].append(c.id)
        self.kept: list[set[int]] = [set() for _ in range(n + 1)]  # resident entering stage t
        self.drafts: list[_StageDraft] = []
        self.aux: set[int] = set()
        self.last_access = [0] * n
        self.extra_s = 0.0  # time beyond one plain pass spent on recomputes and paging so far

    def next_read(self, i: int, t: int) -> int | None:
        """The first node after stage t that reads tensor i (None: no later reader)."""
        return next((c for c in self.readers[i] if c > t), None)

    def _demand(self, t: int, resident: set[int]) -> tuple[set[int], set[int]]:
        computes, pin = {t}, set()

        def need(d: int) -> None:
            if d in resident or d in pin or d in computes or self.nodes[d].bytes == 0:
                return
            if d in self.aux:
                pin.add(d)
                self.extra_s += self.nodes[d].page_in_s
            elif recomputable(self.nodes[d]):
                computes.add(d)
                self.extra_s += self.nodes[d].compute_s
                for dd in self.nodes[d].deps:
                    need(dd)
            else:
                raise _Stuck(f"stage {t} needs {self.nodes[d].name}, which was dropped but cannot be "
                             f"recomputed ({self.nodes[d].kind}) and was not paged out")

        for d in self.nodes[t].deps:
            need(d)
        return computes, pin

    def peak(self, start: set[int], computes: list[int], retained: set[int]) -> int:
        """Peak RAM of a stage by the spec's rule (what simulate.py replays)."""
        nodes = self.nodes
        last: dict[int, int] = {}
        for c in computes:
            for i in (c, *nodes[c].deps):
                last[i] = c
        live = {i for i in start if i in retained or i in last}
        used = sum(nodes[i].bytes for i in start)
        peak = used
        used = sum(nodes[i].bytes for i in live)
        for c in computes:
            if nodes[c].bytes > 0 and c not in live:
                live.add(c)
                used += nodes[c].bytes
            peak = max(peak, used)
            for i in [i for i in live if i not in retained and last.get(i) == c]:
                live.remove(i)
                used -= nodes[i].bytes
        return peak

    def run(self) -> list:
        nodes = self.nodes
        for t in range(len(nodes)):
            resident = self.kept[t]
            computes, pin = self._demand(t, resident)
            order = sorted(computes)
            used_here = {i for c in order for i in (c, *nodes[c].deps) if nodes[i].bytes > 0}
            for i in used_here:
                self.last_access[i] = t
            present = resident | pin | {c for c in order if nodes[c].bytes > 0}
            keep = {i for i in present if self.next_read(i, t) is not None and self.policy.retain(self, i, t)}
            while self.peak(resident | pin, order, keep) > self.budget:
                cands = sorted(i for i in resident if i not in used_here)
                choice = self.policy.evict(self, t, cands) if cands else None
                if choice is None:
                    raise _Stuck(f"stage {t} ({nodes[t].name}) needs {self.peak(resident | pin, order, keep)} B "
                                 f"> {self.budget} B with nothing left to evict")
                x, page = choice
                resident.discard(x)
                keep.discard(x)
                if page and x not in self.aux:
                    self.drafts[t - 1].pout.add(x)
                    self.aux.add(x)
                    self.extra_s += nodes[x].page_out_s
            self.kept[t + 1] = keep
            self.drafts.append(_StageDraft(computes, pin, set()))
        return [rule_stage(self.g, t, sorted(d.computes), self.kept[t] | d.pin, d.pin, d.pout, self.kept[t + 1])
                for t, d in enumerate(self.drafts)]


def build(graph: CostedGraph, budget: int, deadline_s: float, policy: Policy, note: str = "",
          semantics: Semantics = POET) -> Plan:
    """Run `policy` through the builder and check its plan with the simulator.

    status feasible: the plan fits and meets the deadline; infeasible: it does not (or the
    builder got stuck), with the reason in note.
    """
    plan = Plan(strategy=policy.name, stages=[], status="infeasible", arena_budget=budget,
                deadline_s=deadline_s, solver="heuristic", note=note)
    try:
        plan.stages = Builder(graph, budget, policy).run()
    except _Stuck as exc:
        plan.note = "; ".join(x for x in (note, str(exc)) if x)
        plan.stages = []
        return plan
    return _checked(graph, plan, budget, deadline_s, semantics)


def forward_ids(graph: CostedGraph) -> list[int]:
    """Forward tensors a checkpointing strategy may drop: recomputable, with bytes."""
    return [n.id for n in graph.nodes if recomputable(n) and n.bytes > 0]


# ---------------------------------------------------------------- Chen et al. 2016


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


def sqrtn(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
    """Chen's sqrt(n): a checkpoint every ceil(sqrt(n)) forward tensors."""
    fwd = forward_ids(graph)
    k = max(1, math.ceil(math.sqrt(len(fwd))))
    chosen = set(fwd[k - 1::k])
    return build(graph, budget, deadline_s, Checkpoints("sqrtn", chosen), f"{len(chosen)} checkpoints", semantics)


def chen_greedy(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
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
        if best is None or _better(plan, best):
            best = plan
    assert best is not None
    return best


def _better(a: Plan, b: Plan) -> bool:
    """Feasible beats infeasible; then less energy; among infeasible ones, the smaller peak."""
    if (a.status == "feasible") != (b.status == "feasible"):
        return a.status == "feasible"
    if a.status == "feasible":
        return a.energy_j < b.energy_j
    return bool(a.stages) and (not b.stages or a.peak_bytes < b.peak_bytes)


# ---------------------------------------------------------------- Griewank's revolve


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
        except _Stuck as exc:
            plan.note += f"; {exc}"
        else:
            plan = _checked(graph, plan, budget, deadline_s, semantics)
        if best is None or _better(plan, best):
            best = plan
    assert best is not None
    return best


def _checked(graph: CostedGraph, plan: Plan, budget: int, deadline_s: float, semantics: Semantics) -> Plan:
    """Account the plan by the simulator (it must obey the spec whatever the budget), then
    mark it feasible if it fits the budget and meets the deadline."""
    sim = simulate(graph, plan)
    plan.energy_j, plan.time_s, plan.peak_bytes = sim.energy_j, sim.time_s, sim.peak_bytes
    try:
        simulate(graph, plan, budget, deadline_s, semantics)
        plan.status = "feasible"
    except PlanError as exc:
        plan.note = "; ".join(x for x in (plan.note, str(exc)) if x)
    return plan


# ---------------------------------------------------------------- DTR (Kirisame et al. 2021)


class Dtr(Policy):
    """Dynamic tensor rematerialization: keep everything; when over budget drop the tensor with
    the smallest h = (cost to recompute it and its dropped ancestors) / (bytes x staleness)."""

    name = "dtr"

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        cands = [i for i in candidates if recomputable(b.nodes[i])]
        if not cands:
            return None

        def h(i: int) -> float:
            cost, stack, seen = 0.0, [i], set()
            while stack:  # e*: the dropped ancestors that recomputing i would redo
                x = stack.pop()
                if x in seen:
                    continue
                seen.add(x)
                cost += b.nodes[x].compute_s
                stack += [d for d in b.nodes[x].deps if b.nodes[d].bytes > 0 and d not in b.kept[t]
                          and d not in b.aux and recomputable(b.nodes[d])]
            return cost / (b.nodes[i].bytes * (t - b.last_access[i] + 1))

        return min(cands, key=h), False


# ---------------------------------------------------------------- Capuchin (Peng et al. 2020)


class Capuchin(Policy):
    """Page first, recompute only after: evict the candidate that frees the most bytes per second
    of paging (MSPS) while the deadline has room for its page-out and page-in; once it has
    not, drop recomputable tensors by bytes per second of recompute."""

    name = "capuchin"

    def __init__(self, graph: CostedGraph, deadline_s: float, semantics: Semantics = POET) -> None:
        self.slack = deadline_s - graph.one_pass_s if semantics.paging_in_deadline else math.inf

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        nodes = b.nodes
        pageable = [i for i in candidates if i in b.aux or
                    b.extra_s + nodes[i].page_out_s + nodes[i].page_in_s <= self.slack]
        if pageable:
            return max(pageable, key=lambda i: nodes[i].bytes / max(
                (0 if i in b.aux else nodes[i].page_out_s) + nodes[i].page_in_s, 1e-30)), True
        rec = [i for i in candidates if recomputable(nodes[i])]
        if rec:
            return max(rec, key=lambda i: nodes[i].bytes / max(nodes[i].compute_s, 1e-30)), False
        return None


def dtr(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
    return build(graph, budget, deadline_s, Dtr(), semantics=semantics)


def capuchin(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
    return build(graph, budget, deadline_s, Capuchin(graph, deadline_s, semantics), semantics=semantics)


def checkpoint_all(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET) -> Plan:
    return build(graph, budget, deadline_s, Policy(), semantics=semantics)
