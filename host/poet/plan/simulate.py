"""An independent step-by-step checker of plans (docs/spec.md section 1).

It replays a plan event by event (page_in, free_before, each compute followed
by its free_after list, page_out, free, in this order inside every stage), tracks
what is resident in RAM and what is in aux storage, and raises PlanError at the
first broken rule. Every free must be where the spec's rule puts it: a tensor
paged out in the stage leaves at its end, any other tensor right after its last
use in the stage (before the first compute if the stage does not use it); a
tensor the stage does not free is kept for the next stage. It shares nothing
with the MILP (strategies/poet_milp.py) except the data classes, so a planner bug cannot hide
behind a shared helper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from poet.plan.types import POET, PURE_KINDS, CostedGraph, CostedNode, Plan, Semantics, Stage

# A plan meets the deadline if its time is within this relative tolerance of it
# (floating-point sums in another order, and the MILP solver's own 1e-9 tolerance).
DEADLINE_RTOL = 1e-8

ENERGY_KINDS = ("forward", "backward", "recompute", "page_in", "page_out", "optimizer")


class PlanError(ValueError):
    """A plan breaks a rule of docs/spec.md section 1; the message names stage, node and rule."""


@dataclass
class SimResult:
    peak_bytes: int
    time_s: float
    energy_j: float
    energy_by_kind_j: dict[str, float]
    recomputes: int
    page_ins: int
    page_outs: int
    memory_trace: list[int] = field(default_factory=list)  # resident bytes after every event


def _where(stage: Stage, at: int) -> str:
    if at < 0:
        return "before the first compute"
    if at >= len(stage.compute):
        return "at the end of the stage"
    return f"right after compute {stage.compute[at]}"


def _first_compute_kind(kind: str) -> str:
    if kind in ("input", "forward", "loss"):
        return "forward"
    if kind in ("backward", "optimizer"):
        return kind
    raise PlanError(f"unknown node kind {kind!r}")


class _Replay:
    """What the replay tracks from event to event: what is resident in RAM and in aux storage, the bytes
    in use and their peak, time and energy by kind; each event checked against the budget and deadline,
    each free against the rule's place for it."""

    def __init__(self, nodes: tuple[CostedNode, ...], arena_budget: int | None, deadline_s: float | None,
                 semantics: Semantics) -> None:
        self.nodes, self.n_nodes = nodes, len(nodes)
        self.arena_budget, self.deadline_s, self.semantics = arena_budget, deadline_s, semantics
        self.resident: set[int] = set()
        self.in_aux: set[int] = set()
        self.used = 0
        self.peak = 0
        self.time_s = 0.0
        self.deadline_time = 0.0  # time_s less what these semantics leave out of the deadline
        self.energy = dict.fromkeys(ENERGY_KINDS, 0.0)
        self.trace: list[int] = []
        self.counts = {"recompute": 0, "page_in": 0, "page_out": 0}
        self.time_limit = None if deadline_s is None else deadline_s * (1.0 + DEADLINE_RTOL)

    def fail(self, t: int, i: int, rule: str) -> NoReturn:
        name = self.nodes[i].name if 0 <= i < self.n_nodes else "?"
        raise PlanError(f"stage {t}, node {i} ({name}): {rule}")

    def check_id(self, t: int, i: int) -> None:
        if not 0 <= i < self.n_nodes:
            raise PlanError(f"stage {t}: node id {i} out of range 0..{self.n_nodes - 1}")

    def event(self, t: int, i: int, kind: str, dt: float, de: float) -> None:
        self.energy[kind] += de
        self.time_s += dt
        if self.semantics.paging_in_deadline or not kind.startswith("page"):
            self.deadline_time += dt
        self.peak = max(self.peak, self.used)
        self.trace.append(self.used)
        if self.arena_budget is not None and self.used > self.arena_budget:
            self.fail(t, i, f"memory {self.used} B above the arena budget {self.arena_budget} B")
        if self.time_limit is not None and self.deadline_time > self.time_limit:
            self.fail(t, i, f"time {self.deadline_time:.9g} s above the deadline {self.deadline_s:.9g} s")

    def allocate(self, t: int, i: int, what: str) -> None:
        if i in self.resident:
            self.fail(t, i, f"{what} of a tensor already resident (made resident twice)")
        self.resident.add(i)
        self.used += self.nodes[i].bytes

    def release(self, t: int, i: int, at: int, stage: Stage, due: dict[int, int]) -> None:
        """Free i at position `at` of stage t (-1 before the computes, k right after the k-th
        compute, len(compute) at the end); the rule frees it at due[i]."""
        self.check_id(t, i)
        if i not in self.resident:
            self.fail(t, i, f"free of a tensor not resident ({_where(stage, at)})")
        rule = due.get(i, -1)  # a resident tensor the stage neither uses nor pages out: before the computes
        if at < rule:
            why = ("it is paged out at the end of the stage" if rule == len(stage.compute)
                   else f"compute {stage.compute[rule]} uses it later in the stage")
            self.fail(t, i, f"freed {_where(stage, at)}, but {why}")
        if at > rule:
            why = ("the stage does not use it" if rule < 0
                   else f"its last use in the stage is compute {stage.compute[rule]}")
            self.fail(t, i, f"freed {_where(stage, at)}, later than the rule: {why}, so it leaves "
                            f"{_where(stage, rule)}")
        self.resident.remove(i)
        self.used -= self.nodes[i].bytes
        self.trace.append(self.used)

    def result(self) -> SimResult:
        return SimResult(peak_bytes=self.peak, time_s=self.time_s, energy_j=sum(self.energy.values()),
                         energy_by_kind_j=self.energy, recomputes=self.counts["recompute"],
                         page_ins=self.counts["page_in"], page_outs=self.counts["page_out"], memory_trace=self.trace)


def _check_shape(t: int, stage: Stage) -> None:
    """The stage's computes end with its own node, ascending, and free_after names only those."""
    if not stage.compute or stage.compute[-1] != t:
        raise PlanError(f"stage {t}: the last compute must be node {t}, got {stage.compute}")
    if any(a >= b for a, b in zip(stage.compute, stage.compute[1:])):
        raise PlanError(f"stage {t}: computes not strictly ascending: {stage.compute}")
    for j in stage.free_after:
        if j not in stage.compute:
            raise PlanError(f"stage {t}: free_after names node {j}, which is not a compute of the stage")


def simulate(graph: CostedGraph, plan: Plan, arena_budget: int | None = None,
             deadline_s: float | None = None, semantics: Semantics = POET) -> SimResult:
    """Replay `plan` on `graph`; raise PlanError on the first violation, else return its account.

    time_s is all the time the plan takes; under semantics without paging in the deadline
    (the reference's) only compute time is checked against the deadline.
    """
    nodes = graph.nodes
    n_nodes = len(nodes)
    if len(plan.stages) != n_nodes:
        raise PlanError(f"plan has {len(plan.stages)} stages, graph has {n_nodes} nodes")
    r = _Replay(nodes, arena_budget, deadline_s, semantics)
    resident, counts = r.resident, r.counts

    for t, stage in enumerate(plan.stages):
        _check_shape(t, stage)
        # where the rule frees each tensor of the stage (if the stage frees it at all): at the
        # end if paged out here, else right after its last use (the last compute reading or
        # making it), else before the computes (not stored: an entry per resident tensor per
        # stage made the replay O(stages x resident), seconds for a 10,000-node chain)
        due: dict[int, int] = {}
        for k, c in enumerate(stage.compute):
            r.check_id(t, c)
            for i in (c, *nodes[c].deps):
                due[i] = k
        for i in stage.page_out:
            due[i] = len(stage.compute)

        for i in stage.page_in:
            r.check_id(t, i)
            if nodes[i].bytes == 0:
                r.fail(t, i, "page-in of a node without an arena output (bytes == 0)")
            if i not in r.in_aux:
                r.fail(t, i, "page-in of a tensor not in aux storage (never paged out)")
            r.allocate(t, i, "page-in")
            counts["page_in"] += 1
            r.event(t, i, "page_in", nodes[i].page_in_s, nodes[i].page_in_j)

        for i in stage.free_before:
            r.release(t, i, -1, stage, due)

        for k, i in enumerate(stage.compute):
            node = nodes[i]
            recompute = i < t
            if recompute and not (node.recomputable and node.kind in PURE_KINDS):
                r.fail(t, i, f"recompute of a non-recomputable node (kind {node.kind})")
            for d in node.deps:
                if nodes[d].bytes > 0 and d not in resident:
                    r.fail(t, i, f"dep {d} ({nodes[d].name}) not resident at compute")
            if node.bytes > 0:
                r.allocate(t, i, "recompute" if recompute else "compute")
            # in place (spec section 1): made over dep 0, which leaves right after it, in dep 0's bytes
            over = node.bytes if node.inplace and node.deps[0] in stage.free_after.get(i, ()) else 0
            r.used -= over
            if recompute:
                counts["recompute"] += 1
                r.event(t, i, "recompute", node.compute_s, node.compute_j)
            else:
                r.event(t, i, _first_compute_kind(node.kind), node.compute_s, node.compute_j)
            r.used += over
            for f in stage.free_after.get(i, ()):
                r.release(t, f, k, stage, due)

        for i in stage.page_out:
            r.check_id(t, i)
            if i not in resident:
                r.fail(t, i, "page-out of a tensor not resident")
            if not semantics.page_out_when_made and i in stage.compute:
                r.fail(t, i, "page-out in the stage that computes it (not allowed by these semantics)")
            r.in_aux.add(i)
            counts["page_out"] += 1
            r.event(t, i, "page_out", nodes[i].page_out_s, nodes[i].page_out_j)

        for i in stage.free:
            r.release(t, i, len(stage.compute), stage, due)
        # what the stage did not free is kept for stage t+1; that is the plan's choice

    if resident:
        i = min(resident)
        r.fail(n_nodes - 1, i, f"tensors {sorted(resident)} left resident after the last stage")

    return r.result()
