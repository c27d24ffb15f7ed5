"""A lower bound on every plan's energy, from a relaxation that stays small at any graph size.

The POET MILP (strategies/poet_milp.py) has a variable per stage and tensor, O(T^2): at
BERT-base's 646 nodes it is too large to build, at MobileNetV2's 338 HiGHS finds no bound in a
minute. This relaxation decides per *gap* instead: the stretch between two consecutive reads of
a tensor (or its making and its first read). Over a gap a tensor is either resident all along, or
it is not at some stage's main compute and must be made again before the read that ends the gap:
recomputed (its compute_j) or paged in (its page_in_j, and one page-out per tensor).

Relaxation (binaries, for the gaps (i, a, b) with b > a + 1):
  xr[g] + xp[g] <= 1          dropped in gap g, made again by a recompute or a page-in
  xp[g] <= po[i]              a page-in needs the tensor's page-out
  at the main compute of every stage t whose keep-everything RAM exceeds the budget:
    bytes(t) + bytes(deps of t) + sum over gaps (i, a, b) with a < t < b of bytes(i) (1 - x[g]) <= budget
  extra time of the recomputes and paging <= deadline - one plain pass
  minimise one plain pass + sum xr compute_j + xp page_in_j + po page_out_j.

Why no plan costs less (docs/planner.md, "The bound"): take any plan. The main compute of stage
t (node t itself, the last compute of the stage) has t's output and inputs resident, and every
tensor the stage keeps for later. Set x[g] = 1 when tensor i is not resident at the main compute
of some stage inside gap g. It is resident again at b's main compute, which reads it, so between
the two some stage recomputes or pages it in: an event of at least the cost the relaxation charges,
and the events of different gaps of one tensor are different ones. The RAM rows count a subset of
what is resident; the time row a subset of the extra time. So the plan's values satisfy every row
and its energy is at least the objective: the relaxation's optimum, or the proven bound of a solve
stopped early, is a lower bound. And an infeasible relaxation proves that no plan exists.

What it leaves out, and why it is nonetheless tight on the zoo: a recompute needs its inputs
resident (dropping a tensor and its producer's input costs more than both computes), and the RAM
of the computes a stage runs before its main one. Both are second-order where it matters (the peak
is at the start of the backward pass, where only kept tensors and one op's working set are
resident), which is what docs/benchmarks.md measures ("Planner on the zoo").
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poet.plan.solver.effort import Effort
from poet.plan.solver.milp import run_highs, settle
from poet.plan.types import POET, PURE_KINDS, CostedGraph, Semantics


@dataclass(frozen=True)
class Gap:
    """Tensor `tensor` is read (or made) at stage `after` and next read at stage `until`."""

    tensor: int
    after: int
    until: int


# The solver's bound is lowered by this much (relative) before it is used, a hair for HiGHS's
# 1e-9 feasibility tolerance; well below milp.PROVEN_REL_TOL, so a plan at the bound is proven.
BOUND_MARGIN = 1e-9

# Above this many (gap, RAM row) pairs the relaxation is not built (a 10,000-node chain has
# 25 million): its bound is then one plain pass. The zoo's largest, BERT-base, has about 100,000.
MAX_ENTRIES = 2_000_000


@dataclass
class Relaxation:
    """What the gap relaxation established (module docstring).

    status: optimal (bound_j is the relaxation's optimum), feasible (stopped by its time limit:
    bound_j is the solver's proven bound), infeasible (no plan fits the budget and deadline: a
    proof), no-solution (nothing found in the time limit, or the relaxation was too large to
    build: bound_j is still a bound, at least one plain pass).
    """

    status: str
    bound_j: float  # no plan's energy is below this
    objective_j: float = math.inf  # the relaxation's best solution
    solve_time_s: float = 0.0
    binding_stages: int = 0  # stages whose keep-everything RAM is over the budget (one row each)


def gaps_of(graph: CostedGraph) -> list[Gap]:
    """Every gap of every tensor with bytes: (tensor, read or made at, next read at), ascending."""
    nodes = graph.nodes
    reads: list[list[int]] = [[] for _ in nodes]
    for c in nodes:
        for d in dict.fromkeys(c.deps):
            if nodes[d].bytes > 0:
                reads[d].append(c.id)
    out = []
    for i, n in enumerate(nodes):
        if n.bytes == 0:
            continue
        points = [i, *reads[i]]
        out += [Gap(i, a, b) for a, b in zip(points, points[1:], strict=False) if b > a + 1]
    return out


def stage_floor(graph: CostedGraph) -> list[int]:
    """Per stage, the bytes its main compute always holds: its output and its inputs, or its inputs alone when it
    may run in place (spec section 1: its output then takes dep 0's bytes; counted as if it always did, so every
    relaxation built on this floor stays below every plan)."""
    nodes = graph.nodes
    return [(0 if n.inplace else n.bytes) + sum(nodes[d].bytes for d in dict.fromkeys(n.deps)) for n in nodes]


class _Lp:
    """Columns and rows gathered in arrays, handed to HiGHS at once."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.starts: list[int] = []
        self.index: list[int] = []
        self.value: list[float] = []

    def var(self, cost: float) -> int:
        self.cost.append(cost)
        return len(self.cost) - 1

    def row(self, lo: float, hi: float, cols: list[int], vals: list[float]) -> None:
        self.lo.append(lo)
        self.hi.append(hi)
        self.starts.append(len(self.index))
        self.index += cols
        self.value += vals

    def solve(self, effort: Effort | None = None, integer: bool = True) -> tuple[str, float, list[float] | None]:
        """Minimise over binaries (or their LP relaxation) with HiGHS: (status, bound, values).

        status: optimal | feasible (stopped when `effort`, HiGHS work, was spent: effort.py) | infeasible |
        no-solution; bound: no solution costs less (the solver's, lowered by BOUND_MARGIN; 0 if it gave
        none); values: the best solution's, or None. The work done is spent from `effort`.
        """
        import highspy

        settle()  # one HiGHS solve at a time (milp.py)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        for option, value in (("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0), ("primal_feasibility_tolerance", 1e-9),
                              ("mip_feasibility_tolerance", 1e-9)):
            h.setOptionValue(option, value)
        nv = len(self.cost)
        # costs scaled to at most 1: at joules (1e-5 J a page-in) HiGHS took choices 1e-6 J apart for equal
        scale = max(self.cost, default=0.0) or 1.0
        # a node's (an iteration's) work grows with the matrix; HiGHS reports nodes at its MIP callbacks
        # (iterations at an LP's), where it stops once they reach the budget: the same callback on every
        # run (effort.py)
        kind, per = ("mip" if integer else "lp"), float(max(1, len(self.index)))
        done = [0]
        if effort is not None and math.isfinite(effort.left):
            most = max(1.0, effort.units_left(kind) / per)

            def spent(e: Any) -> None:
                done[0] = int(e.data_out.mip_node_count if integer else e.data_out.simplex_iteration_count)
                if done[0] >= most:
                    e.interrupt()

            # a MIP's LPs report nothing to a simplex callback: it counts its nodes at its own
            if integer:
                h.cbMipInterrupt += spent
            else:
                h.cbSimplexInterrupt += spent
        if nv:
            idx = np.arange(nv, dtype=np.int32)
            h.addVars(nv, np.zeros(nv), np.ones(nv))
            h.changeColsCost(nv, idx, np.array(self.cost) / scale)
            if integer:
                h.changeColsIntegrality(nv, idx, np.array([highspy.HighsVarType.kInteger] * nv))
        if self.lo:
            h.addRows(len(self.lo), np.array(self.lo), np.array(self.hi), len(self.index),
                      np.array(self.starts, dtype=np.int32), np.array(self.index, dtype=np.int32),
                      np.array(self.value, dtype=np.float64))
        run_highs(h)  # on a thread: a Ctrl-C stops it at once (milp.py)
        status, info = h.getModelStatus(), h.getInfo()
        if effort is not None:
            count = int(info.mip_node_count if integer else info.simplex_iteration_count)
            effort.spend(kind, max(done[0], count) * per)
        ms = highspy.HighsModelStatus
        if status == ms.kInfeasible:
            return "infeasible", math.inf, None
        raw = info.mip_dual_bound if integer else info.objective_function_value
        bound = max(0.0, raw * scale * (1 - BOUND_MARGIN)) if math.isfinite(raw) else 0.0
        if info.primal_solution_status != 2:  # nothing found within its effort
            return "no-solution", bound, None
        x = list(h.getSolution().col_value)
        value = sum(c for c, v in zip(self.cost, x, strict=True) if v > 0.5)
        return ("optimal" if status == ms.kOptimal else "feasible"), min(bound, value), x


def shortfall(graph: CostedGraph, arena_budget: int) -> np.ndarray:
    """Per stage, the bytes its main compute holds beyond the budget if every tensor is kept
    between its reads (> 0: the stage's RAM row can bind)."""
    nodes = graph.nodes
    inner = np.zeros(len(nodes) + 1, dtype=np.int64)
    for g in gaps_of(graph):
        inner[g.after + 1] += nodes[g.tensor].bytes
        inner[g.until] -= nodes[g.tensor].bytes
    return np.cumsum(inner)[: len(nodes)] + np.array(stage_floor(graph), dtype=np.int64) - arena_budget


def binding_rows(graph: CostedGraph, arena_budget: int) -> list[int]:
    """The stages whose RAM rows can bind (shortfall > 0)."""
    return [int(t) for t in np.flatnonzero(shortfall(graph, arena_budget) > 0)]


def relax(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics = POET,
          recompute: bool = True, paging: bool = True, effort: Effort | None = None) -> Relaxation:
    """Solve the gap relaxation (module docstring) with HiGHS."""
    t0 = time.perf_counter()
    nodes, n_nodes = graph.nodes, len(graph)
    plain_j = sum(n.compute_j for n in nodes)
    gaps = gaps_of(graph)

    def out(status: str, bound: float, objective: float = math.inf, rows: int = 0) -> Relaxation:
        return Relaxation(status, bound, objective, time.perf_counter() - t0, rows)

    floor = stage_floor(graph)
    slack = deadline_s - graph.one_pass_s
    if max(floor, default=0) > arena_budget or slack < -1e-12 * graph.one_pass_s:
        return out("infeasible", math.inf)
    need = shortfall(graph, arena_budget)
    rows = [int(t) for t in np.flatnonzero(need > 0)]
    if not rows:
        return out("optimal", plain_j, plain_j)
    entries = sum(int(bisect.bisect_left(rows, g.until) - bisect.bisect_left(rows, g.after + 1)) for g in gaps)
    if entries > MAX_ENTRIES:  # one plain pass is still a bound
        return out("no-solution", plain_j, rows=len(rows))

    lp = _Lp()
    secs: dict[int, float] = {}  # extra seconds of a variable, for the deadline row
    xr: dict[int, int] = {}
    xp: dict[int, int] = {}
    po: dict[int, int] = {}

    def page_out(d: int) -> int:
        if d not in po:
            po[d] = lp.var(nodes[d].page_out_j)
            secs[po[d]] = nodes[d].page_out_s if semantics.paging_in_deadline else 0.0
        return po[d]

    for k, g in enumerate(gaps):
        n = nodes[g.tensor]
        if recompute and n.recomputable and n.kind in PURE_KINDS:
            xr[k] = lp.var(n.compute_j)
            secs[xr[k]] = n.compute_s
        if paging:
            xp[k] = lp.var(n.page_in_j)
            secs[xp[k]] = n.page_in_s if semantics.paging_in_deadline else 0.0
            lp.row(-math.inf, 0.0, [xp[k], page_out(g.tensor)], [1.0, -1.0])  # a page-in needs the page-out
        if k in xr and k in xp:
            lp.row(-math.inf, 1.0, [xr[k], xp[k]], [1.0, 1.0])
    # A recompute in gap g happens after a RAM row inside g, so after the first one, F. Each input d
    # it reads is resident then: if d's own reads ended before F, d was resident at F's main compute
    # (tail[d, F], counted in F's row) or was made again after F (recomputed, which needs d's
    # inputs the same way, or paged in). Shared by every recompute after F that needs d: a bound
    # whatever the plan shares.
    last_read = list(range(n_nodes))
    for c in nodes:
        for d in c.deps:
            last_read[d] = max(last_read[d], c.id)
    tail: dict[tuple[int, int], int] = {}
    ways_of: dict[tuple[int, int], list[int]] = {}
    todo: list[tuple[int, int, int]] = []  # (recompute variable, tensor it makes, first row)

    def resident_after(d: int, first: int) -> list[int]:
        """Variables one of which holds if tensor d is resident at some stage after row `first`."""
        key = (d, first)
        if key not in ways_of:
            nd = nodes[d]
            tail[key] = lp.var(0.0)
            ways = [tail[key]]
            if paging:
                v = lp.var(nd.page_in_j)
                secs[v] = nd.page_in_s if semantics.paging_in_deadline else 0.0
                lp.row(-math.inf, 0.0, [v, page_out(d)], [1.0, -1.0])
                ways.append(v)
            if recompute and nd.recomputable and nd.kind in PURE_KINDS:
                v = lp.var(nd.compute_j)
                secs[v] = nd.compute_s
                ways.append(v)
                todo.append((v, d, first))
            ways_of[key] = ways
        return ways_of[key]

    for k, v in xr.items():
        g = gaps[k]
        at = int(bisect.bisect_left(rows, g.after + 1))
        if at < len(rows) and rows[at] < g.until:  # else no RAM row inside the gap: dropping sheds nothing
            todo.append((v, g.tensor, rows[at]))
    while todo:  # a worklist, not a recursion: chains of recomputes run as deep as the graph
        v, i, first = todo.pop()
        for d in dict.fromkeys(nodes[i].deps):
            if nodes[d].bytes > 0 and last_read[d] < first:
                ways = resident_after(d, first)
                lp.row(-math.inf, 0.0, [v, *ways], [1.0] + [-1.0] * len(ways))
    # the RAM rows: sum of bytes(i) x[g] over the gaps open at t, less the tails kept to t, >= what t must shed
    shed: dict[int, list[tuple[int, float]]] = {t: [] for t in rows}
    for k, g in enumerate(gaps):
        b = float(nodes[g.tensor].bytes)
        for t in rows[int(bisect.bisect_left(rows, g.after + 1)):int(bisect.bisect_left(rows, g.until))]:
            shed[t] += [(x[k], b) for x in (xr, xp) if k in x]
    for (d, t), v in tail.items():
        shed[t].append((v, -float(nodes[d].bytes)))
    for t in rows:
        if not any(b > 0 for _, b in shed[t]):  # nothing can shed these bytes
            return out("infeasible", math.inf, rows=len(rows))
        lp.row(float(need[t]), math.inf, [v for v, _ in shed[t]], [b for _, b in shed[t]])
    _deadline_row(lp, secs, slack)
    status, bound, x = lp.solve(effort)
    if status == "infeasible":
        return out("infeasible", math.inf, rows=len(rows))
    objective = plain_j + sum(c for c, v in zip(lp.cost, x, strict=True) if v > 0.5) if x is not None else math.inf
    return out(status, plain_j + bound, objective, len(rows))


def _deadline_row(lp: _Lp, secs: dict[int, float], slack: float) -> None:
    """The extra seconds within the deadline's slack, scaled to 1 so the solver's tolerance is
    relative to the slack."""
    cols = [v for v, sec in secs.items() if sec]
    if cols:
        scale = max(slack, 1e-30)
        lp.row(-math.inf, max(slack, 0.0) / scale, cols, [secs[c] / scale for c in cols])


@dataclass
class RowRelaxation:
    """The row relaxation's answer (relax_rows)."""

    status: str
    bound_j: float
    rows: list[int] = field(default_factory=list)  # the stages with a RAM row, ascending
    resident: dict[int, set[int]] = field(default_factory=dict)  # row stage -> tensors resident at it
    paged_in: dict[int, set[int]] = field(default_factory=dict)  # row index k -> tensors paged in after row k
    paged: set[int] = field(default_factory=set)  # tensors paged out
    objective_j: float = math.inf
    solve_time_s: float = 0.0
    variables: int = 0


@dataclass
class _RowModel:
    """The row relaxation's LP with every variable it needs and the rows that tie them together, but
    not yet the RAM rows and the deadline (relax_rows writes those, then solves). Keys are (tensor d,
    row k): res resident at row k, evr / evp recomputed / paged in in window k; po[d]: d paged out;
    secs: each variable's seconds toward the deadline; at_row[k]: (res variable, bytes) at row k."""

    lp: _Lp
    res: dict[tuple[int, int], int]
    evr: dict[tuple[int, int], int]
    evp: dict[tuple[int, int], int]
    po: dict[int, int]
    secs: dict[int, float]
    at_row: list[list[tuple[int, int]]]


def _row_model(graph: CostedGraph, rows: list[int], semantics: Semantics, recompute: bool,
               paging: bool) -> _RowModel:
    """relax_rows' variables and their rows, made from each tensor's gaps at the rows (see _RowModel)."""
    nodes, n_nodes = graph.nodes, len(graph)
    gaps = gaps_of(graph)
    n_rows = len(rows)
    reads: list[list[int]] = [[] for _ in nodes]
    for c in nodes:
        for d in dict.fromkeys(c.deps):
            if nodes[d].bytes > 0:
                reads[d].append(c.id)
    # per tensor, the sorted stages where it is resident for free: made, read
    points = [[i, *reads[i]] if nodes[i].bytes > 0 else [] for i in range(n_nodes)]
    point_set = [set(p) for p in points]

    def touched_in(d: int, k: int) -> bool:
        """Tensor d is made or read in window k: resident there with no cost."""
        lo = rows[k] if k >= 0 else -1
        hi = rows[k + 1] if k + 1 < n_rows else n_nodes
        p = points[d]
        at = bisect.bisect_right(p, lo)
        return at < len(p) and p[at] <= hi

    lp = _Lp()
    res: dict[tuple[int, int], int] = {}
    evr: dict[tuple[int, int], int] = {}
    evp: dict[tuple[int, int], int] = {}
    po: dict[int, int] = {}
    secs: dict[int, float] = {}
    at_row: list[list[tuple[int, int]]] = [[] for _ in rows]  # (res variable, bytes)
    can_rec = [recompute and n.recomputable and n.kind in PURE_KINDS for n in nodes]

    # Variables are made on first use and their rows written from a worklist (a recursion would be
    # as deep as the longest chain of recomputes times the rows it spans).
    todo: list[tuple[str, int, int]] = []

    def state(d: int, k: int) -> list[int] | None:
        """Variables one of which is 1 if d is resident at row k's main compute; None: always is."""
        t = rows[k]
        if t < d:
            return []  # not made yet
        if t in point_set[d]:
            return None
        key = (d, k)
        if key not in res:
            res[key] = lp.var(0.0)
            at_row[k].append((res[key], nodes[d].bytes))
            todo.append(("res", d, k))
        return [res[key]]

    def made(d: int, k: int) -> list[int]:
        """The variables of d being made again in window k."""
        key = (d, k)
        if key not in evr and key not in evp:
            n = nodes[d]
            if paging:
                evp[key] = lp.var(n.page_in_j)
                secs[evp[key]] = n.page_in_s if semantics.paging_in_deadline else 0.0
                if d not in po:
                    po[d] = lp.var(n.page_out_j)
                    secs[po[d]] = n.page_out_s if semantics.paging_in_deadline else 0.0
                lp.row(-math.inf, 0.0, [evp[key], po[d]], [1.0, -1.0])
            if can_rec[d]:
                evr[key] = lp.var(n.compute_j)
                secs[evr[key]] = n.compute_s
                todo.append(("made", d, k))
        return [v[key] for v in (evr, evp) if key in v]

    def needs(v: int, d: int, k: int) -> None:
        """Row: v <= (d resident at row k) + (d made again in window k), unless d always is."""
        st = state(d, k)
        if st is not None:
            ways = [*st, *made(d, k)]
            lp.row(-math.inf, 0.0, [v, *ways], [1.0] + [-1.0] * len(ways))

    def drain() -> None:
        while todo:
            what, d, k = todo.pop()
            if what == "res":  # resident at row k: resident at row k-1 too, or made again in between
                if k > 0 and not touched_in(d, k - 1):
                    needs(res[d, k], d, k - 1)
            else:  # recomputed in window k: each input resident then
                for e in dict.fromkeys(nodes[d].deps):
                    if nodes[e].bytes > 0 and not touched_in(e, k):
                        needs(evr[d, k], e, k)

    # every tensor inside a gap at a row: a variable, and present again at the read ending the gap
    for g in gaps:
        lo, hi = bisect.bisect_right(rows, g.after), bisect.bisect_left(rows, g.until)
        for k in range(lo, hi):
            state(g.tensor, k)
        if hi > lo:
            k = hi - 1  # the last row inside the gap: resident there, or made again before the read
            ways = [*(state(g.tensor, k) or []), *made(g.tensor, k)]
            lp.row(1.0, math.inf, ways, [1.0] * len(ways))
        drain()
    return _RowModel(lp, res, evr, evp, po, secs, at_row)


def relax_rows(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics = POET,
               recompute: bool = True, paging: bool = True, effort: Effort | None = None,
               rows: list[int] | None = None, integer: bool = True) -> RowRelaxation:
    """The relaxation at RAM-row granularity (docs/planner.md, "The bound").

    rows: the binding stages to write RAM rows for (default: every stage whose keep-everything
    RAM is over the budget); fewer rows give a weaker bound, still a bound, from a smaller model.
    Per tensor d and row k: res[d,k] resident at row k's main compute, ev[d,k] = evr + evp made
    again (recomputed, paged in) between row k and row k+1 ("window k").
    """

    t0 = time.perf_counter()
    nodes = graph.nodes
    plain_j = sum(n.compute_j for n in nodes)
    floor = stage_floor(graph)
    if max(floor, default=0) > arena_budget or deadline_s < graph.one_pass_s * (1 - 1e-12):
        return RowRelaxation("infeasible", math.inf, solve_time_s=time.perf_counter() - t0)
    if rows is None:
        rows = binding_rows(graph, arena_budget)
    if not rows:
        return RowRelaxation("optimal", plain_j, [], objective_j=plain_j, solve_time_s=time.perf_counter() - t0)
    m = _row_model(graph, rows, semantics, recompute, paging)
    lp, res, evp, po = m.lp, m.res, m.evp, m.po
    # RAM rows
    for k, t in enumerate(rows):
        cols = [v for v, _ in m.at_row[k]]
        lp.row(-math.inf, float(arena_budget - floor[t]), cols, [float(b) for _, b in m.at_row[k]])
    _deadline_row(lp, m.secs, deadline_s - graph.one_pass_s)
    status, bound, x = lp.solve(effort, integer)
    dt, nv = time.perf_counter() - t0, len(lp.cost)
    if status == "infeasible":
        return RowRelaxation("infeasible", math.inf, rows, solve_time_s=dt, variables=nv)
    if x is None:
        return RowRelaxation(status, plain_j + bound, rows, solve_time_s=dt, variables=nv)
    on = {v for v in range(nv) if x[v] > 0.5}
    resident: dict[int, set[int]] = {t: set() for t in rows}
    for (d, k), v in res.items():
        if v in on:
            resident[rows[k]].add(d)
    paged_in: dict[int, set[int]] = {}
    for (d, k), v in evp.items():
        if v in on:
            paged_in.setdefault(k, set()).add(d)
    objective = plain_j + sum(lp.cost[v] for v in on)
    return RowRelaxation(status, plain_j + bound, rows, resident, paged_in,
                         {d for d, v in po.items() if v in on}, objective, dt, nv)
