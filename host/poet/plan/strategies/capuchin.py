"""Capuchin, Peng et al. 2020: page first by memory saved per second, recompute only after."""

from __future__ import annotations

import math

from poet.plan.strategies.base import Options, Strategy
from poet.plan.strategies.builder import Builder, Policy, build, recomputable
from poet.plan.types import POET, CostedGraph, Plan, Semantics


class Capuchin(Policy):
    """Page first, recompute only after: evict the candidate that frees the most bytes per second
    of paging (MSPS) while the deadline has room for its page-out and page-in; once it has
    not, drop recomputable tensors by bytes per second of recompute."""

    name = "capuchin"

    def __init__(self, graph: CostedGraph, deadline_s: float, semantics: Semantics = POET) -> None:
        self.slack = deadline_s - graph.one_pass_s if semantics.paging_in_deadline else math.inf

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        nodes = b.nodes
        pageable = [i for i in candidates if i in b.aux or (
                    b.may_page_out(t, i) and b.extra_s + nodes[i].page_out_s + nodes[i].page_in_s <= self.slack)]
        if pageable:
            return max(pageable, key=lambda i: nodes[i].bytes / max(
                (0 if i in b.aux else nodes[i].page_out_s) + nodes[i].page_in_s, 1e-30)), True
        rec = [i for i in candidates if recomputable(nodes[i])]
        if rec:
            return max(rec, key=lambda i: nodes[i].bytes / max(nodes[i].compute_s, 1e-30)), False
        return None


def capuchin(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
             options: Options | None = None) -> Plan:
    return build(graph, budget, deadline_s, Capuchin(graph, deadline_s, semantics), semantics=semantics)


CAPUCHIN = Strategy(
    "capuchin", "Capuchin: page out by memory saved per second while the deadline allows, then recompute", capuchin)
