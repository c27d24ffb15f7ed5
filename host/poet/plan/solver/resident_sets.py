"""The row relaxation solved exactly on chains, by dynamic programming over resident sets.

The row relaxation (bound.py, relax_rows) is a MILP whose LP is weak where plans recompute chains
under a few free slots: it keeps a fraction of many checkpoints where a plan keeps all of a few, and
HiGHS closes that gap by branching, slowly (DS-CNN at 25% of keep-everything on the rpi4: its MILP
with every RAM row proves 4% below the optimum in 120 s; its optimum is the plan's). But when only a
few tensors fit beside what a stage must hold, the sets of tensors resident at a row are few, and
the relaxation can be solved by walking the rows: the cheapest way to reach each resident set at
row k+1 is the cheapest over the sets at row k plus what window k must make again, the tensors its
reads need and those row k+1 holds that row k did not.

It is the row relaxation with less in it, so no plan costs less than its optimum either:
- only rows whose resident sets are at most MAX_STATES (a relaxation on any subset of rows is one);
- no deadline row;
- tensors under SMALL of the largest are taken as always resident, in no RAM and at no cost;
- a page-in is charged its page-out divided by the number of windows (at most one page-in per
  window, so a tensor's page-ins carry at most one page-out between them), except for a few tensors
  (`paid`, at most MAX_PAID: the input, which no plan remakes, and those this division pages): each
  state carries which of them it has paged, and a window that pages one in may pay its page-out
  (a plan pays it once, before its first page-in). On the nRF52840, where a page-out costs a
  hundred recomputes, one divided over 15 rows is almost free: MobileNetV1 at 25% of
  keep-everything (tensors under 1/4 of the largest free, 3,000 sets a row) walks to 0.053 J with
  every page-out divided, 0.089 J with the input's and one activation's whole (the gap relaxation:
  0.077 J).
What a window must make costs, on a chain, the ops from each needed tensor down to the nearest one
available (resident, read or made in the window, or made already for a lower needed tensor), or
the page-in of one of them and the ops above it; taking the needed tensors from the lowest up is
optimal, since a higher one's chain passes through the lower. Graphs where a recomputable op has two
inputs that count (ResNet's adds) are not chains: no bound from here (None).
"""

from __future__ import annotations

import bisect
import math
import time

from poet.plan.solver.bound import RowRelaxation, binding_rows, gaps_of, stage_floor
from poet.plan.solver.effort import Effort
from poet.plan.types import PURE_KINDS, CostedGraph

MAX_STATES = 600  # resident sets at a row: the walk costs their square per row
MAX_NODES = 1_000  # beyond, finding the rows with few sets costs seconds (each row looks at every tensor),
# and long chains at a useful budget leave many slots: sets by the thousand at every row
SMALL = 1 / 8  # tensors under this fraction of the largest are taken as always resident
MAX_PAID = 4  # tensors whose page-out the walk charges once, whole: their paged subsets multiply the states

State = tuple[frozenset[int], frozenset[int]]  # (resident at a row, the paid tensors paged out so far)


def walk(graph: CostedGraph, arena_budget: int, recompute: bool = True, paging: bool = True,
         effort: Effort | None = None, rows: list[int] | None = None, small: float = SMALL,
         whole: bool = True) -> RowRelaxation | None:
    """The relaxation's optimum and its walk (see _walk), with whole page-outs for the tensors a
    walk that divides them pages (and the input), where paging is allowed and `whole`; tensors
    under `small` of the largest taken as always resident. effort: the walks' budget (effort.py;
    None: none), spent here."""
    effort = effort or Effort(math.inf)
    first = _walk(graph, arena_budget, recompute, paging, effort, rows, frozenset(), small)
    if first is None or not first.paged or not whole:
        return first  # not asked, or its cheapest walk pages nothing: whole page-outs would find it again
    nodes = graph.nodes
    inputs = [i for i, n in enumerate(nodes) if n.kind == "input" and n.bytes > 0]
    paid = sorted({*first.paged, *inputs}, key=lambda i: -nodes[i].page_out_j)[:MAX_PAID]
    if not paid:
        return first
    second = _walk(graph, arena_budget, recompute, paging, effort, first.rows, frozenset(paid), small)
    if second is None or second.bound_j <= first.bound_j:
        return first
    second.solve_time_s = first.solve_time_s + second.solve_time_s
    return second


def _walk(graph: CostedGraph, arena_budget: int, recompute: bool, paging: bool, effort: Effort,
          rows: list[int] | None, paid: frozenset[int], small: float) -> RowRelaxation | None:
    """The relaxation's optimum (bound_j: no plan that fits `arena_budget` costs less), and the
    cheapest walk as the row relaxation answers: the tensors resident at each row kept, what each
    window pages in (the rest it recomputes), what it pages out (strategies/relaxed.py builds it
    into a plan). None where this relaxation does not apply: not a chain, no row with few
    resident sets, no solution, `effort` spent."""
    t0 = time.perf_counter()
    nodes, n_nodes = graph.nodes, len(graph)
    floor = stage_floor(graph)
    if not nodes or n_nodes > MAX_NODES or max(floor) > arena_budget:
        return None
    largest = max(n.bytes for n in nodes)
    free = [n.bytes == 0 or n.bytes < small * largest for n in nodes]
    can_rec = [recompute and n.recomputable and n.kind in PURE_KINDS for n in nodes]
    parent: list[int | None] = [None] * n_nodes  # a recomputable op's one input that counts
    for n in nodes:
        if can_rec[n.id]:
            inputs = [d for d in dict.fromkeys(n.deps) if not free[d]]
            if len(inputs) > 1:
                return None
            parent[n.id] = inputs[0] if inputs else None
    source = [False] * n_nodes
    for i, p in enumerate(parent):
        if can_rec[i] and p is not None:
            source[p] = True
    reads: list[list[int]] = [[] for _ in nodes]
    for c in nodes:
        for d in dict.fromkeys(c.deps):
            if nodes[d].bytes > 0:
                reads[d].append(c.id)
    points = [{i, *reads[i]} for i in range(n_nodes)]
    gaps = gaps_of(graph)

    def candidates(t: int, inside: set[int]) -> list[int]:
        return [d for d in range(t) if not free[d] and t not in points[d] and (d in inside or source[d])]

    def inside_at(t: int) -> set[int]:
        return {g.tensor for g in gaps if g.after < t < g.until}

    kept = []
    for t in binding_rows(graph, arena_budget) if rows is None else rows:
        sets = _sets(candidates(t, inside_at(t)), nodes, arena_budget - floor[t])
        if sets is not None:
            kept.append((t, sets))
            effort.spend("walk", len(sets))
        if effort.over:
            return None
    if not kept:
        return None
    rows = [t for t, _ in kept]
    n_rows = len(rows)
    ends: list[list[int]] = [[] for _ in rows]  # window k: tensors whose gap's last row is k
    for g in gaps:
        lo, hi = bisect.bisect_right(rows, g.after), bisect.bisect_left(rows, g.until)
        if hi > lo and not free[g.tensor]:
            ends[hi - 1].append(g.tensor)
    page_j = [n.page_in_j + (0.0 if n.id in paid else n.page_out_j / n_rows) if paging else math.inf
              for n in nodes]
    page_out_j = [n.page_out_j if n.id in paid else 0.0 for n in nodes]
    plain_j = sum(n.compute_j for n in nodes)

    none: frozenset[int] = frozenset()
    best: dict[State, float] = {(a, none): 0.0 for a in kept[0][1]}  # nothing precedes the first row
    came: list[dict[State, State]] = []  # per window, each state's cheapest predecessor
    windows: list[_Window] = []
    for k in range(n_rows):
        lo, hi = rows[k], rows[k + 1] if k + 1 < n_rows else n_nodes
        touched = set()  # made or read in the window: resident there at no cost
        for s in range(lo + 1, min(hi + 1, n_nodes)):
            touched.add(s)
            touched.update(nodes[s].deps)
        at_row = {d for d in range(n_nodes) if lo in points[d]}
        window = _Window(nodes, parent, can_rec, page_j, paid, free, touched, at_row, effort)
        windows.append(window)
        nxt = kept[k + 1][1] if k + 1 < n_rows else [frozenset()]
        try:
            best, came_k = _step(window, best, frozenset(ends[k]), nxt, paid, page_out_j)
        except _Spent:
            return None
        came.append(came_k)
        if not best:
            return None
    sets = _back(best, came)
    resident: dict[int, set[int]] = {}
    paged_in: dict[int, set[int]] = {}
    for k, ((a, _), (b, q)) in enumerate(reversed(sets)):
        # the small tensors it took as resident are, where a plan can keep them
        resident[rows[k]] = set(a) | {d for d in inside_at(rows[k]) if free[d] and rows[k] not in points[d]}
        _, _, paged_in[k] = windows[k].make((frozenset(ends[k]) | (b - windows[k].touched)) - a, a, q)
    bound_j = plain_j + min(best.values())
    paged = set().union(*paged_in.values())
    return RowRelaxation("optimal", bound_j, rows, resident, paged_in, paged, bound_j, time.perf_counter() - t0)


def _step(window: _Window, best: dict[State, float], must: frozenset[int], nxt: list[frozenset[int]],
          paid: frozenset[int], page_out_j: list[float]) -> tuple[dict[State, float], dict[State, State]]:
    """One window of the walk: from the cheapest cost of each state at its first row (`best`) to the cheapest
    of each state at the next (a resident set of `nxt` and the paid tensors paged out by then), with each
    one's cheapest predecessor. `must`: the tensors the window's reads need whatever the next row holds."""
    # `must` priced from each start is a floor under that start's cost, by which the starts are tried
    # (making more never costs less)
    starts = sorted(((v + window.cost(must - a, a, paid), v, a, p) for (a, p), v in _undominated(best)),
                    key=lambda s: s[:2])
    out: dict[State, float] = {}
    came: dict[State, State] = {}
    for b in nxt:
        need = must | (b - window.touched)
        # the cheapest way to b for each paid set (one with more paid, at no more cost, makes it
        # useless); a start's floor plus the page-outs it pays tells which it cannot improve
        low: dict[frozenset[int], tuple[float, State]] = {}

        def beaten(q: frozenset[int], c: float) -> bool:
            return any(q2 >= q and c2 <= c for q2, (c2, _) in low.items())  # noqa: B023

        for floor_j, v, a, p in starts:
            if floor_j >= low.get(paid, (math.inf,))[0]:
                break  # every later start too, whatever it pays
            for pays in _subsets(paid - p):
                pays_j = sum(page_out_j[x] for x in pays)
                q = p | pays
                if beaten(q, floor_j + pays_j):
                    continue
                c = v + window.cost(need - a, a, q) + pays_j
                if not beaten(q, c):
                    low[q] = (c, (a, p))
        for q, (c, arg) in low.items():
            out[(b, q)], came[(b, q)] = c, arg
    return out, came


def _back(best: dict[State, float], came: list[dict[State, State]]) -> list[tuple[State, State]]:
    """Back from the cheapest state at the end: each window's (state at its first row, state at the next),
    last window first."""
    sets, to = [], min(best, key=best.__getitem__)
    for k in range(len(came) - 1, -1, -1):
        sets.append((came[k][to], to))
        to = came[k][to]
    return sets


def _sets(cands: list[int], nodes: list, cap: int) -> list[frozenset[int]] | None:  # type: ignore[type-arg]
    """Every subset of `cands` within `cap` bytes; None if more than MAX_STATES."""
    if cap < 0:
        return None
    out: list[frozenset[int]] = [frozenset()]
    stack: list[tuple[int, frozenset[int], int]] = [(0, frozenset(), 0)]
    while stack:
        start, cur, used = stack.pop()
        for j in range(start, len(cands)):
            b = used + nodes[cands[j]].bytes
            if b <= cap:
                s = cur | {cands[j]}
                out.append(s)
                if len(out) > MAX_STATES:
                    return None
                stack.append((j + 1, s, b))
    return out


def _subsets(items: frozenset[int]) -> list[frozenset[int]]:
    out = [frozenset()]
    for x in items:
        out += [s | {x} for s in out]
    return out


def _undominated(best: dict[State, float]) -> list[tuple[State, float]]:
    """The states by cost, without those a state with more resident and more paged reaches as
    cheaply (it makes no more again, and pays no more page-outs)."""
    out: list[tuple[State, float]] = []
    for (a, p), v in sorted(best.items(), key=lambda av: av[1]):
        if not any(v2 <= v and a2 >= a and p2 >= p for (a2, p2), v2 in out):
            out.append(((a, p), v))
    return out


class _Spent(Exception):
    """The walk's effort is spent (inside a window: a window's costings can number millions)."""


class _Window:
    """What making tensors again in one window costs, on a chain."""

    def __init__(self, nodes: list, parent: list[int | None], can_rec: list[bool],  # type: ignore[type-arg]
                 page_j: list[float], paid: frozenset[int], free: list[bool], touched: set[int],
                 at_row: set[int], effort: Effort) -> None:
        self.nodes, self.parent, self.can_rec, self.page_j = nodes, parent, can_rec, page_j
        self.paid = paid  # tensors that page in only once their page-out is paid
        self.free, self.touched, self.at_row = free, touched, at_row
        self.source_free = touched | at_row  # at hand as a recompute's input
        self.effort = effort

    def cost(self, need: frozenset[int], resident: frozenset[int], paged: frozenset[int]) -> float:
        """The least cost to make every tensor of `need` with `resident` at the row, lowest first; of
        the paid tensors only those in `paged` (paged out already) page in. Each is a unit of the
        walk's effort: _Spent once it is spent."""
        self.effort.spend("walk", 1)
        if self.effort.over:
            raise _Spent
        return self.make(need, resident, paged)[0]

    def make(self, need: frozenset[int], resident: frozenset[int],
             paged: frozenset[int]) -> tuple[float, set[int], set[int]]:
        """cost(), and what it makes again: (cost, recomputed, paged in)."""
        have = set(resident)
        total, recomputed, pages = 0.0, set(), set()
        for q in sorted(need):
            if q in have or q in self.at_row:
                continue
            path: list[int] = []  # recomputed, from q down
            x: int | None = q
            cost, best, made, page = 0.0, math.inf, [], None
            while True:
                if x is None or (x != q and (x in have or self.free[x] or x in self.source_free)):
                    if cost < best:  # the chain reached a tensor at hand
                        best, made, page = cost, path, None
                    break
                pin = self.page_j[x] if x in paged or x not in self.paid else math.inf
                if pin + cost < best:
                    best, made, page = pin + cost, path, x
                if not self.can_rec[x]:
                    break
                path = [*path, x]
                cost += self.nodes[x].compute_j
                x = self.parent[x]
            if not math.isfinite(best):
                return math.inf, recomputed, pages
            total += best
            have.update(made)
            recomputed.update(made)
            if page is not None:
                have.add(page)
                pages.add(page)
        return total, recomputed, pages
