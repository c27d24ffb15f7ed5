"""The demand-driven plan builder every heuristic strategy runs on.

It walks the stages of docs/spec.md section 1 in order. Stage t computes node t; a
dep that is not resident is paged in if it is in aux storage (unless the policy would
rather recompute it), else recomputed (recursively, from whatever is resident). After the
stage each present tensor still read by a later node is kept for stage t+1 unless the policy lets it go. When a stage
would exceed the budget the policy may evict tensors that pass through it unused:
dropped (recomputed when next needed) or paged out at the end of the previous stage,
where they were resident (if the semantics let a tensor leave in the stage that made it).
A tensor the policy pages out at the end of stage t is resident all through stage t and is
in aux storage only after it (spec section 1): evicted from stage t, its page-out moves to
the end of stage t-1, or it is dropped and not paged out at all.

The builder knows nothing of energy or deadlines beyond what a policy asks; every
plan it makes is replayed by simulate.py, which decides whether it fits the budget
and meets the deadline under exactly the rules the MILP plans obey.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from poet.plan.simulate import PlanError, simulate
from poet.plan.types import POET, PURE_KINDS, CostedGraph, CostedNode, Plan, Semantics, Stage, rule_stage


class Stuck(Exception):
    """The builder cannot go on: a tensor is lost, or a stage cannot fit whatever is evicted
    (then `stage` is that stage and `recomputed` what it recomputes, for a policy to repair)."""

    def __init__(self, msg: str, stage: int | None = None, recomputed: frozenset[int] = frozenset()) -> None:
        super().__init__(msg)
        self.stage, self.recomputed = stage, recomputed


def recomputable(node: CostedNode) -> bool:
    return node.recomputable and node.kind in PURE_KINDS


class Policy:
    """What a strategy decides; the defaults are PyTorch's: keep everything until its last use."""

    name = "checkpoint-all"

    def retain(self, b: Builder, i: int, t: int) -> bool:
        """Keep tensor i, present in stage t and read by a later node, for stage t+1?"""
        return True

    def retain_all(self, b: Builder, read_later: set[int], t: int) -> set[int]:
        """retain() of each tensor in read_later, as a set: the builder's inner loop, so a policy
        may answer for the whole set at once (set algebra runs in C, a call per tensor does not)."""
        if type(self).retain is Policy.retain:  # keeps everything: no call per tensor
            return read_later
        return {i for i in read_later if self.retain(b, i, t)}

    def fetch(self, b: Builder, t: int, i: int) -> bool:
        """Stage t needs tensor i, paged out and recomputable: page it in (else recompute it)?"""
        return True

    def page_out(self, b: Builder, t: int, present: set[int]) -> set[int]:
        """Tensors of `present` to page out at the end of stage t, whatever the budget (a plan
        made in advance, strategies/gaps.py); the others page out only when evicted."""
        return set()

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        """Stage t is over budget: a tensor from `candidates` (resident, unused in stage t) to
        evict and whether to page it out (else it is dropped); None gives up. Paging out one not
        already in aux storage (b.aux) takes b.may_page_out(t, i): it leaves at the end of stage t-1."""
        return None


@dataclass
class _StageDraft:
    computes: set[int]
    pin: set[int]
    pout: set[int]


class Builder:
    """Builds a staged plan under a Policy (see the module doc)."""

    def __init__(self, graph: CostedGraph, budget: int, policy: Policy, semantics: Semantics = POET) -> None:
        self.g, self.nodes, self.budget, self.policy = graph, graph.nodes, budget, policy
        self.semantics = semantics
        self.nbytes = [node.bytes for node in graph.nodes]
        self.inplace = [node.inplace for node in graph.nodes]
        n = len(graph)
        self.readers: list[list[int]] = [[] for _ in range(n)]
        for c in graph.nodes:
            for d in dict.fromkeys(c.deps):
                if graph.nodes[d].bytes > 0:
                    self.readers[d].append(c.id)
        # the last node reading each tensor (-1: none): "read after stage t?" is asked of every
        # present tensor in every stage, the builder's inner loop
        self.last_read = [r[-1] if r else -1 for r in self.readers]
        # resident entering stage t, for the stages not yet made into Stages: a set per stage of
        # the whole graph held O(n x live) (245 MB for a 10,000-node chain's checkpoint-all)
        self.kept: dict[int, set[int]] = {0: set()}
        self.drafts: list[_StageDraft] = []
        self.aux: set[int] = set()
        self.last_access = [0] * n
        self.extra_s = 0.0  # time beyond one plain pass spent on recomputes and paging so far

    def next_read(self, i: int, t: int) -> int | None:
        """The first node after stage t that reads tensor i (None: no later reader)."""
        # readers[i] is ascending (filled in node order): a bisection, not a scan, since policies
        # ask this for every present tensor in every stage (a linear scan made revolve O(n^4))
        r = self.readers[i]
        k = bisect.bisect_right(r, t)
        return r[k] if k < len(r) else None

    def may_page_out(self, t: int, i: int) -> bool:
        """May tensor i, resident entering stage t, be evicted from stage t by a page-out at the end
        of stage t-1? Not where the semantics page out only after the producing stage (the
        reference's) and stage t-1 computed i (made it, or made it again)."""
        return self.semantics.page_out_when_made or i not in self.drafts[t - 1].computes

    def _demand(self, t: int, resident: set[int]) -> tuple[set[int], set[int]]:
        """What stage t computes and pages in: t, and each missing dep paged in if in aux storage
        and the policy fetches it, else recomputed from its own deps, depth first in dep order. A
        stack of iterators, not recursion: a chain of a thousand dropped tensors overflowed
        Python's stack."""
        nodes = self.nodes
        computes, pin = {t}, set()
        stack = [iter(nodes[t].deps)]
        while stack:
            d = next(stack[-1], None)
            if d is None:
                stack.pop()
                continue
            if d in resident or d in pin or d in computes or nodes[d].bytes == 0:
                continue
            if d in self.aux and (not recomputable(nodes[d]) or self.policy.fetch(self, t, d)):
                pin.add(d)
                self.extra_s += nodes[d].page_in_s
            elif recomputable(nodes[d]):
                computes.add(d)
                self.extra_s += nodes[d].compute_s
                stack.append(iter(nodes[d].deps))
            else:
                raise Stuck(f"stage {t} needs {nodes[d].name}, which was dropped but cannot be "
                             f"recomputed ({nodes[d].kind}) and was not paged out")
        return computes, pin

    def peak(self, start: set[int], computes: list[int], retained: set[int]) -> int:
        """Peak RAM of a stage by the spec's rule (what simulate.py replays)."""
        nodes, nbytes = self.nodes, self.nbytes
        last: dict[int, int] = {}
        for c in computes:
            for i in (c, *nodes[c].deps):
                last[i] = c
        # set algebra and map() rather than Python loops: called once per stage and once per
        # eviction, it was a third of a long chain's planning time
        gone = start - retained - last.keys()  # neither kept nor used: freed before the computes
        live = start - gone
        peak = sum(map(nbytes.__getitem__, start))
        used = peak - sum(map(nbytes.__getitem__, gone))
        leaving: dict[int, list[int]] = {}  # compute -> tensors not retained whose last use it is
        for i, c in last.items():
            if i not in retained:
                leaving.setdefault(c, []).append(i)
        inplace = self.inplace
        for c in computes:
            if nbytes[c] > 0 and c not in live:
                live.add(c)
                used += nbytes[c]
            # in place (spec section 1): made over dep 0, which leaves right after it, in dep 0's bytes
            over = nbytes[c] if inplace[c] and nodes[c].deps[0] in leaving.get(c, ()) else 0
            peak = max(peak, used - over)
            for i in leaving.get(c, ()):
                if i in live:
                    live.remove(i)
                    used -= nbytes[i]
        return peak

    def run(self) -> list[Stage]:
        nodes = self.nodes
        stages: list[Stage] = []
        for t in range(len(nodes)):
            resident = self.kept[t]
            computes, pin = self._demand(t, resident)
            order = sorted(computes)
            used_here = {i for c in order for i in (c, *nodes[c].deps) if nodes[i].bytes > 0}
            for i in used_here:
                self.last_access[i] = t
            present = resident | pin | {c for c in order if nodes[c].bytes > 0}
            last_read = self.last_read
            keep = self.policy.retain_all(self, {i for i in present if last_read[i] > t}, t)
            pout = self.policy.page_out(self, t, present) - self.aux
            for x in pout:
                self.extra_s += nodes[x].page_out_s
            # a tensor paged out at the end of the stage is resident until then (spec section 1),
            # and in aux storage only after it: not in self.aux while this stage evicts, or an
            # evicted one would be taken as already paged out (it would leave stage t-1 without a
            # page-out and stage t would page out a tensor it no longer has)
            while self.peak(resident | pin, order, keep | pout) > self.budget:
                cands = sorted(i for i in resident if i not in used_here)
                choice = self.policy.evict(self, t, cands) if cands else None
                if choice is None:
                    raise Stuck(f"stage {t} ({nodes[t].name}) needs {self.peak(resident | pin, order, keep | pout)} B "
                                f"> {self.budget} B with nothing left to evict", t, frozenset(computes - {t}))
                x, page = choice
                resident.discard(x)
                keep.discard(x)
                if x in pout:  # not resident in stage t any more: paged out at t-1 below, or not at all
                    pout.discard(x)
                    self.extra_s -= nodes[x].page_out_s
                if page and x not in self.aux:
                    if not self.may_page_out(t, x):
                        raise RuntimeError(f"policy {self.policy.name} pages out {nodes[x].name} at the end of stage "
                                           f"{t - 1}, which computes it: these semantics page out only later")
                    self.drafts[t - 1].pout.add(x)
                    self.aux.add(x)
                    self.extra_s += nodes[x].page_out_s
            self.aux |= pout
            self.kept[t + 1] = keep
            self.drafts.append(_StageDraft(computes, pin, pout))
            if t > 0:  # stage t-1 is final now: stage t's evictions change its page-outs and what it keeps
                stages.append(self._stage(t - 1))
        if nodes:
            stages.append(self._stage(len(nodes) - 1))
        return stages

    def _stage(self, t: int) -> Stage:
        """Stage t as the spec's rule frees it; its start set is not needed again."""
        d = self.drafts[t]
        start = self.kept.pop(t)
        return rule_stage(self.g, t, sorted(d.computes), start | d.pin, d.pin, d.pout, self.kept[t + 1])


def build(graph: CostedGraph, budget: int, deadline_s: float, policy: Policy, note: str = "",
          semantics: Semantics = POET) -> Plan:
    """Run `policy` through the builder and check its plan with the simulator.

    status feasible: the plan fits and meets the deadline; infeasible: it does not (or the
    builder got stuck), with the reason in note.
    """
    plan = Plan(strategy=policy.name, stages=[], status="infeasible", arena_budget=budget,
                deadline_s=deadline_s, solver="heuristic", note=note)
    try:
        plan.stages = Builder(graph, budget, policy, semantics).run()
    except Stuck as exc:
        plan.note = "; ".join(x for x in (note, str(exc)) if x)
        plan.stages = []
        return plan
    return checked(graph, plan, budget, deadline_s, semantics)


def forward_ids(graph: CostedGraph) -> list[int]:
    """Forward tensors a checkpointing strategy may drop: recomputable, with bytes."""
    return [n.id for n in graph.nodes if recomputable(n) and n.bytes > 0]


def better(a: Plan, b: Plan) -> bool:
    """Feasible beats infeasible; then less energy; among infeasible ones, the smaller peak."""
    if (a.status == "feasible") != (b.status == "feasible"):
        return a.status == "feasible"
    if a.status == "feasible":
        return a.energy_j < b.energy_j
    return bool(a.stages) and (not b.stages or a.peak_bytes < b.peak_bytes)


def checked(graph: CostedGraph, plan: Plan, budget: int, deadline_s: float, semantics: Semantics) -> Plan:
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
