"""DTR, Kirisame et al. 2021, "Dynamic Tensor Rematerialization", simulated on the static graph."""

from __future__ import annotations

from poet.plan.strategies.base import Options, Strategy
from poet.plan.strategies.builder import Builder, Policy, build, recomputable
from poet.plan.types import POET, CostedGraph, Plan, Semantics


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


def dtr(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
        options: Options | None = None) -> Plan:
    return build(graph, budget, deadline_s, Dtr(), semantics=semantics)


DTR = Strategy("dtr", "DTR: evict the tensor with the least cost / (bytes x staleness), recompute on demand", dtr)
