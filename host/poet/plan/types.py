"""The planner's plain data: a costed training graph in, a staged plan out.

The semantics of a plan (what a stage does, in which order, how RAM is counted)
are stated once, in docs/spec.md section 1; the MILP (strategies/poet_milp.py), the
simulator (simulate.py), the lowering (lower.py) and the firmware all follow it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PURE_KINDS = ("forward", "loss")
# The range of one node's cost (seconds or joules of computing or paging it) that the planner takes: the
# MILP cannot weigh 1e30 against 1e-6, and a nonzero cost below a picosecond or picojoule is no op's (a
# coefficient of 1e-300 beside 1e-3 defeats the solver's scaling; HiGHS's tolerances are 1e-7 relative)
COST_MAX = 1e9
COST_MIN = 1e-12


@dataclass(frozen=True)
class Semantics:
    """What counts, where poet and the POET reference (Patil et al. 2022) differ.

    poet's default: paging takes time within the deadline (serial SPI, no DMA overlap) and a
    tensor may be paged out in the stage that makes it. The reference leaves paging time
    out of the deadline and pages out only in later stages (and lets graph inputs be
    recomputed: CostedGraph.from_json(reference=True)). `poet solve --semantics reference`
    uses the reference's rules so results can be compared with its own.
    """

    paging_in_deadline: bool = True
    page_out_when_made: bool = True


POET = Semantics()
REFERENCE = Semantics(paging_in_deadline=False, page_out_when_made=False)


@dataclass(frozen=True)
class CostedNode:
    """One node of a training graph with the cost of computing and paging its output."""

    id: int
    name: str
    kind: str  # input | forward | loss | backward | optimizer
    deps: tuple[int, ...]
    # what it takes in the arena: a traced graph's input takes none (it is the staged batch, read in place:
    # memory.arena_bytes), so it is resident throughout and never kept, paged or freed; a costed graph file's
    # inputs (the POET reference's) have their bytes, kept or paged
    bytes: int
    compute_s: float
    compute_j: float
    page_in_s: float = 0.0
    page_in_j: float = 0.0
    page_out_s: float = 0.0
    page_out_j: float = 0.0
    recomputable: bool = True
    # its output may take the place of dep 0 when dep 0 is not needed after it (docs/spec.md 1, "In place";
    # poet.plan.cost.memory.in_place): then computing it needs no bytes beyond dep 0's
    inplace: bool = False

    @property
    def pageable(self) -> bool:
        return self.bytes > 0


@dataclass(frozen=True)
class CostedGraph:
    """Nodes in topological order; node i may only depend on nodes < i."""

    nodes: tuple[CostedNode, ...]
    name: str = "graph"
    param_bytes: int = 0

    def __post_init__(self) -> None:
        for i, n in enumerate(self.nodes):
            if n.id != i:
                raise ValueError(f"node {n.name!r} has id {n.id}, expected {i} (topological order)")
            for d in n.deps:
                if not 0 <= d < i:
                    raise ValueError(f"node {n.name!r} depends on {d}, which is not an earlier node")

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def one_pass_s(self) -> float:
        """Time of one plain forward+backward pass: every node computed once, nothing paged."""
        return sum(n.compute_s for n in self.nodes)

    @classmethod
    def from_json(cls, path: str | Path, reference: bool = False) -> CostedGraph:
        """Read the costed-graph JSON (the schema of ../shared/benchmarks/poet-reference).

        Fields missing from foreign graphs get conservative defaults: a node without
        deps is a graph input (kept or paged, never recomputed; with reference=True a
        forward node the planner may recompute, as in the reference); backward nodes are
        never recomputed; duplicated edges are dropped.
        """
        return cls.from_dict(json.loads(Path(path).read_text()), Path(path).stem, reference)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], name: str = "graph", reference: bool = False) -> CostedGraph:
        """The costed graph in a parsed file (from_json); `name` when the file names no model. A file from
        a user is checked first (poet.graph.file.read_graph)."""
        nodes = []
        for n in raw["nodes"]:
            deps = tuple(dict.fromkeys(int(d) for d in n.get("deps", [])))
            kind = n.get("kind", "forward")
            if kind == "forward" and not deps and not reference:
                kind = "input"
            nodes.append(
                CostedNode(
                    id=int(n["id"]),
                    name=str(n.get("name", f"n{n['id']}")),
                    kind=kind,
                    deps=deps,
                    bytes=int(n["bytes"]),
                    compute_s=float(n["compute_s"]),
                    compute_j=float(n["compute_j"]),
                    page_in_s=float(n.get("page_in_s", 0.0)),
                    page_in_j=float(n.get("page_in_j", 0.0)),
                    page_out_s=float(n.get("page_out_s", 0.0)),
                    page_out_j=float(n.get("page_out_j", 0.0)),
                    recomputable=bool(n.get("recomputable", kind in PURE_KINDS)),
                )
            )
        return cls(nodes=tuple(nodes), name=str(raw.get("model", name)),
                   param_bytes=int(raw.get("param_bytes", 0)))


@dataclass
class Stage:
    """What happens in stage t (docs/spec.md section 1), in this order: page_in, free_before,
    compute (ascending, ends with t) each followed by its free_after list, page_out, free.

    Which tensor is freed where is fixed by the spec's rule (a tensor neither kept for
    stage t+1 nor paged out in t leaves right after its last use in the stage); the
    lists spell it out for the lowering, and simulate.py checks them against the rule.
    """

    page_in: list[int] = field(default_factory=list)
    compute: list[int] = field(default_factory=list)
    page_out: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)  # end of stage: paged out here and not kept
    free_after: dict[int, list[int]] = field(default_factory=dict)  # compute node -> freed right after it
    free_before: list[int] = field(default_factory=list)  # after page_in: present but unused here


@dataclass
class Plan:
    """A plan for one training step, one stage per node, with the solver's account of it."""

    strategy: str
    stages: list[Stage]
    status: str  # optimal | feasible | infeasible | no-solution
    energy_j: float = 0.0
    time_s: float = 0.0
    peak_bytes: int = 0
    arena_budget: int = 0
    deadline_s: float = 0.0
    solve_time_s: float = 0.0
    gap: float = 0.0
    solver: str = ""
    note: str = ""  # why a strategy found no plan, or what it chose (e.g. its checkpoint count)
    bound_j: float | None = None  # no plan for this budget and deadline costs less (None: not known)

    @property
    def recomputes(self) -> int:
        return sum(len(s.compute) - 1 for s in self.stages)

    @property
    def page_ins(self) -> int:
        return sum(len(s.page_in) for s in self.stages)

    @property
    def page_outs(self) -> int:
        return sum(len(s.page_out) for s in self.stages)


def rule_stage(graph: CostedGraph, t: int, computes: list[int], start: set[int], pin: set[int],
               pout: set[int], keep_next: set[int]) -> Stage:
    """Stage t with its frees where the spec's rule puts them: tensors paged out and not kept at
    the end, other tensors not kept right after their last use in the stage (or before the
    computes if the stage does not use them)."""
    nodes = graph.nodes
    last_use: dict[int, int] = {}
    for c in computes:
        for i in (c, *nodes[c].deps):
            if nodes[i].bytes > 0:
                last_use[i] = c
    present = start | {c for c in computes if nodes[c].bytes > 0}
    free_after: dict[int, list[int]] = {}
    before, end = [], []
    for i in sorted(present - keep_next):
        if i in pout:
            end.append(i)
        elif i in last_use:
            free_after.setdefault(last_use[i], []).append(i)
        else:
            before.append(i)
    return Stage(sorted(pin), computes, sorted(pout), end, free_after, before)
