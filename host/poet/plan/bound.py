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

import numpy as np

from poet.plan.types import POET, PURE_KINDS, CostedGraph, Semantics


@dataclass(frozen=True)
class Gap:
    """Tensor `tensor` is read (or made) at stage `after` and next read at stage `until`."""

    tensor: int
    after: int
    until: int


KEEP, RECOMPUTE, PAGE = "keep", "recompute", "page"

# The solver's bound is lowered by this much (relative) before it is used: HiGHS works to 1e-9
# feasibility and 1e-7 dual tolerances.
BOUND_MARGIN = 1e-6

# Above this many (gap, RAM row) pairs the relaxation is not built (a 10,000-node chain has
# 25 million): its bound is then one plain pass. The zoo's largest, BERT-base, has about 100,000.
MAX_ENTRIES = 2_000_000


@dataclass
class Relaxation:
    """What the relaxation established (module docstring).

    status: optimal (bound_j is the relaxation's optimum), feasible (stopped by its time limit:
    bound_j is the solver's proven bound, choice its best solution), infeasible (no plan fits
    the budget and deadline: a proof), no-solution (nothing found in the time limit).
    """

    status: str
    bound_j: float  # no plan's energy is below this (-inf if nothing was proven)
    gaps: list[Gap] = field(default_factory=list)
    choice: list[str] = field(default_factory=list)  # per gap: keep | recompute | page
    objective_j: float = math.inf  # the relaxation's energy of `choice`
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
    """Per stage, the bytes its main compute always holds: its output and its inputs."""
    nodes = graph.nodes
    return [n.bytes + sum(nodes[d].bytes for d in dict.fromkeys(n.deps)) for n in nodes]


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
          recompute: bool = True, paging: bool = True, time_limit_s: float = 30.0,
          recompute_j: dict[int, float] | None = None, raise_rows: dict[int, int] | None = None) -> Relaxation:
    """Solve the relaxation (module docstring) with HiGHS.

    recompute_j and raise_rows change it into a heuristic's model and void its bound (the caller,
    strategies/gaps.py, keeps the bound of the unchanged one): recompute_j[g] is gap g's cost of
    recomputing, raise_rows[t] bytes more to free at stage t.
    """
    import highspy

    t0 = time.perf_counter()
    nodes, n_nodes = graph.nodes, len(graph)
    plain_j = sum(n.compute_j for n in nodes)
    gaps = gaps_of(graph)
    floor = stage_floor(graph)
    keep = [KEEP] * len(gaps)
    if max(floor, default=0) > arena_budget:
        return Relaxation("infeasible", math.inf, gaps, keep, solve_time_s=time.perf_counter() - t0)
    inner = np.zeros(n_nodes + 1, dtype=np.int64)  # keep-everything bytes inside gaps, per stage
    for g in gaps:
        inner[g.after + 1] += nodes[g.tensor].bytes
        inner[g.until] -= nodes[g.tensor].bytes
    inner = np.cumsum(inner)[:n_nodes]
    need = inner + np.array(floor, dtype=np.int64) - arena_budget  # bytes each stage must shed
    if raise_rows:
        for t, extra in raise_rows.items():
            need[t] += extra
    rows = [t for t in range(n_nodes) if need[t] > 0]
    if not rows and deadline_s >= graph.one_pass_s:
        return Relaxation("optimal", plain_j, gaps, keep, plain_j, time.perf_counter() - t0)
    entries = sum(int(np.searchsorted(rows, g.until) - np.searchsorted(rows, g.after + 1)) for g in gaps)
    if entries > MAX_ENTRIES:  # one plain pass is still a bound
        return Relaxation("no-solution", plain_j, gaps, keep, solve_time_s=time.perf_counter() - t0,
                          binding_stages=len(rows))

    cost: list[float] = []
    xr: dict[int, int] = {}
    xp: dict[int, int] = {}
    po: dict[int, int] = {}
    for k, g in enumerate(gaps):
        n = nodes[g.tensor]
        if recompute and n.recomputable and n.kind in PURE_KINDS:
            xr[k] = len(cost)
            cost.append(recompute_j[k] if recompute_j and k in recompute_j else n.compute_j)
        if paging:
            xp[k] = len(cost)
            cost.append(n.page_in_j)
            if g.tensor not in po:
                po[g.tensor] = len(cost)
                cost.append(n.page_out_j)
    # A recompute in gap g happens after a RAM row inside g, so after the first one, F. Each input d
    # it reads is resident then: if d's own reads ended before F, d was resident at F's main compute
    # (tail[d, F], counted in F's row) or was made again after F (ev: recomputed, which needs d's
    # inputs the same way, or paged in). Shared by every recompute after F that needs d: a bound
    # whatever the plan shares.
    last_read = list(range(n_nodes))
    for c in nodes:
        for d in c.deps:
            last_read[d] = max(last_read[d], c.id)
    tail: dict[tuple[int, int], int] = {}
    evr: dict[tuple[int, int], int] = {}
    evp: dict[tuple[int, int], int] = {}
    secs: dict[int, float] = {}  # extra seconds of a variable, for the deadline row
    needs: list[tuple[int, list[int]]] = []  # (variable, what it needs one of)

    def resident_after(d: int, first: int) -> list[int]:
        """The variables one of which holds if tensor d is resident at some stage after `first`."""
        key = (d, first)
        if key not in tail:
            nd = nodes[d]
            tail[key] = len(cost)
            cost.append(0.0)
            if paging:
                evp[key] = len(cost)
                cost.append(nd.page_in_j)
                secs[evp[key]] = nd.page_in_s if semantics.paging_in_deadline else 0.0
                if d not in po:
                    po[d] = len(cost)
                    cost.append(nd.page_out_j)
                needs.append((evp[key], [po[d]]))
            if recompute and nd.recomputable and nd.kind in PURE_KINDS:
                evr[key] = len(cost)
                cost.append(nd.compute_j)
                secs[evr[key]] = nd.compute_s
                for e in dict.fromkeys(nd.deps):
                    if nodes[e].bytes > 0 and last_read[e] < first:
                        needs.append((evr[key], resident_after(e, first)))
        return [v[key] for v in (tail, evr, evp) if key in v]

    for k, v in xr.items():
        g = gaps[k]
        at = int(np.searchsorted(rows, g.after + 1))
        if at == len(rows) or rows[at] >= g.until:
            continue  # no RAM row inside the gap: dropping it sheds nothing
        first = rows[at]
        for d in dict.fromkeys(nodes[g.tensor].deps):
            if nodes[d].bytes > 0 and last_read[d] < first:
                needs.append((v, resident_after(d, first)))
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    for option, value in (("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0), ("primal_feasibility_tolerance", 1e-9),
                          ("mip_feasibility_tolerance", 1e-9)):
        h.setOptionValue(option, value)
    nv = len(cost)
    # costs scaled to at most 1: at joules (1e-5 J a page-in) HiGHS took choices 1e-6 J apart for equal
    scale = max(cost, default=0.0) or 1.0
    inf = highspy.kHighsInf
    if nv:
        idx = np.arange(nv, dtype=np.int32)
        h.addVars(nv, np.zeros(nv), np.ones(nv))
        h.changeColsCost(nv, idx, np.array(cost) / scale)
        h.changeColsIntegrality(nv, idx, np.array([highspy.HighsVarType.kInteger] * nv))

    def row(lo: float, hi: float, cols: list[int], vals: list[float]) -> None:
        h.addRow(lo, hi, len(cols), np.array(cols, dtype=np.int32), np.array(vals, dtype=np.float64))

    for k in range(len(gaps)):
        if k in xr and k in xp:
            row(-inf, 1.0, [xr[k], xp[k]], [1.0, 1.0])
        if k in xp:
            row(-inf, 0.0, [xp[k], po[gaps[k].tensor]], [1.0, -1.0])
    for v, ways in needs:
        row(-inf, 0.0, [v, *ways], [1.0] + [-1.0] * len(ways))
    tails_at: dict[int, list[tuple[int, int]]] = {}
    for (d, t), tv in tail.items():
        tails_at.setdefault(t, []).append((tv, d))
    # the RAM rows: sum of bytes(i) x[g] over the gaps open at t >= what stage t must shed
    open_at: dict[int, list[int]] = {t: [] for t in rows}
    for k, g in enumerate(gaps):
        lo, hi = np.searchsorted(rows, g.after + 1), np.searchsorted(rows, g.until)
        for t in rows[lo:hi]:
            open_at[t].append(k)
    for t in rows:
        cols, vals = [], []
        for k in open_at[t]:
            for v in (xr.get(k), xp.get(k)):
                if v is not None:
                    cols.append(v)
                    vals.append(float(nodes[gaps[k].tensor].bytes))
        if not cols:  # nothing can shed these bytes
            return Relaxation("infeasible", math.inf, gaps, keep, solve_time_s=time.perf_counter() - t0,
                              binding_stages=len(rows))
        for tv, d in tails_at.get(t, []):
            cols.append(tv)
            vals.append(-float(nodes[d].bytes))
        row(float(need[t]), inf, cols, vals)
    cols, vals = [], []
    for k, g in enumerate(gaps):
        n = nodes[g.tensor]
        if k in xr:
            cols.append(xr[k])
            vals.append(n.compute_s)
        if k in xp and semantics.paging_in_deadline:
            cols.append(xp[k])
            vals.append(n.page_in_s)
    for v, sec in secs.items():
        cols.append(v)
        vals.append(sec)
    if semantics.paging_in_deadline:
        for i, v in po.items():
            cols.append(v)
            vals.append(nodes[i].page_out_s)
    slack = deadline_s - graph.one_pass_s
    if slack < 0:
        return Relaxation("infeasible", math.inf, gaps, keep, solve_time_s=time.perf_counter() - t0,
                          binding_stages=len(rows))
    if cols:  # scaled to 1 so the solver's tolerance is relative to the slack
        scale = max(slack, 1e-30)
        row(-inf, slack / scale, cols, [v / scale for v in vals])
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    ms = highspy.HighsModelStatus
    dt = time.perf_counter() - t0
    if status == ms.kInfeasible:
        return Relaxation("infeasible", math.inf, gaps, keep, solve_time_s=dt, binding_stages=len(rows))
    # the solver's bound less its own tolerance: a bound a hair above the optimum would call a plan
    # proven that is not
    dual = info.mip_dual_bound * scale * (1 - BOUND_MARGIN) if math.isfinite(info.mip_dual_bound) else -math.inf
    if info.primal_solution_status != 2:  # no solution in the time limit
        return Relaxation("no-solution", plain_j + max(dual, 0.0), gaps, keep, solve_time_s=dt,
                          binding_stages=len(rows))
    x = h.getSolution().col_value
    choice = [RECOMPUTE if k in xr and x[xr[k]] > 0.5 else PAGE if k in xp and x[xp[k]] > 0.5 else KEEP
              for k in range(len(gaps))]
    objective = plain_j + sum(cost[v] for v, val in enumerate(x) if val > 0.5)
    return Relaxation("optimal" if status == ms.kOptimal else "feasible",
                      plain_j + max(0.0, min(dual, objective - plain_j)), gaps, choice, objective, dt, len(rows))


@dataclass
class RowRelaxation:
    """The row relaxation's answer (relax_rows)."""

    status: str
    bound_j: float
    rows: list[int] = field(default_factory=list)  # the stages with a RAM row, ascending
    resident: dict[int, set[int]] = field(default_factory=dict)  # row stage -> tensors resident at it
    remade: dict[int, set[int]] = field(default_factory=dict)  # row index k -> tensors made again after row k
    paged: set[int] = field(default_factory=set)  # tensors paged out
    objective_j: float = math.inf
    solve_time_s: float = 0.0
    variables: int = 0


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


def relax_rows(graph: CostedGraph, arena_budget: int, deadline_s: float, semantics: Semantics = POET,
               recompute: bool = True, paging: bool = True, time_limit_s: float = 30.0,
               rows: list[int] | None = None, integer: bool = True) -> RowRelaxation:
    """The relaxation at RAM-row granularity (docs/planner.md, "The bound").

    rows: the binding stages to write RAM rows for (default: every stage whose keep-everything
    RAM is over the budget); fewer rows give a weaker bound, still a bound, from a smaller model.
    Per tensor d and row k: res[d,k] resident at row k's main compute, ev[d,k] = evr + evp made
    again (recomputed, paged in) between row k and row k+1 ("window k").
    """
    import highspy

    t0 = time.perf_counter()
    nodes, n_nodes = graph.nodes, len(graph)
    plain_j = sum(n.compute_j for n in nodes)
    floor = stage_floor(graph)
    if max(floor, default=0) > arena_budget or deadline_s < graph.one_pass_s * (1 - 1e-12):
        return RowRelaxation("infeasible", math.inf, solve_time_s=time.perf_counter() - t0)
    gaps = gaps_of(graph)
    if rows is None:
        rows = binding_rows(graph, arena_budget)
    if not rows:
        return RowRelaxation("optimal", plain_j, [], objective_j=plain_j, solve_time_s=time.perf_counter() - t0)
    n_rows = len(rows)
    reads: list[list[int]] = [[] for _ in nodes]
    for c in nodes:
        for d in dict.fromkeys(c.deps):
            if nodes[d].bytes > 0:
                reads[d].append(c.id)
    # per tensor, the sorted stages where it is resident for free: made, read
    points = [[i, *reads[i]] if nodes[i].bytes > 0 else [] for i in range(n_nodes)]
    point_set = [set(p) for p in points]

    def window_of(stage: int) -> int:
        """k such that rows[k] < stage <= rows[k+1] (-1: at or before the first row)."""
        return bisect.bisect_left(rows, stage) - 1

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
    # RAM rows
    for k, t in enumerate(rows):
        cols = [v for v, _ in at_row[k]]
        lp.row(-math.inf, float(arena_budget - floor[t]), cols, [float(b) for _, b in at_row[k]])
    slack = deadline_s - graph.one_pass_s
    if secs:
        scale = max(slack, 1e-30)
        cols = list(secs)
        lp.row(-math.inf, slack / scale, cols, [secs[c] / scale for c in cols])
    nv = len(lp.cost)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    for option, value in (("mip_rel_gap", 0.0), ("mip_abs_gap", 0.0), ("primal_feasibility_tolerance", 1e-9),
                          ("mip_feasibility_tolerance", 1e-9)):
        h.setOptionValue(option, value)
    cscale = max(lp.cost, default=0.0) or 1.0
    h.addVars(nv, np.zeros(nv), np.ones(nv))
    idx = np.arange(nv, dtype=np.int32)
    h.changeColsCost(nv, idx, np.array(lp.cost) / cscale)
    if integer:
        h.changeColsIntegrality(nv, idx, np.array([highspy.HighsVarType.kInteger] * nv))
    h.addRows(len(lp.lo), np.array(lp.lo), np.array(lp.hi), len(lp.index), np.array(lp.starts, dtype=np.int32),
              np.array(lp.index, dtype=np.int32), np.array(lp.value, dtype=np.float64))
    h.run()
    status, info = h.getModelStatus(), h.getInfo()
    ms = highspy.HighsModelStatus
    dt = time.perf_counter() - t0
    if status == ms.kInfeasible:
        return RowRelaxation("infeasible", math.inf, rows, solve_time_s=dt, variables=nv)
    raw = info.mip_dual_bound if integer else info.objective_function_value
    dual = raw * cscale * (1 - BOUND_MARGIN) if math.isfinite(raw) else 0.0
    if info.primal_solution_status != 2:
        return RowRelaxation("no-solution", plain_j + max(dual, 0.0), rows, solve_time_s=dt, variables=nv)
    x = h.getSolution().col_value
    on = {v for v in range(nv) if x[v] > 0.5}
    resident: dict[int, set[int]] = {t: set() for t in rows}
    for (d, k), v in res.items():
        if v in on:
            resident[rows[k]].add(d)
    remade: dict[int, set[int]] = {}
    for (d, k), v in [*evr.items(), *evp.items()]:
        if v in on:
            remade.setdefault(k, set()).add(d)
    objective = plain_j + sum(lp.cost[v] for v in on)
    return RowRelaxation("optimal" if status == ms.kOptimal else "feasible",
                         plain_j + max(0.0, min(dual, objective - plain_j)), rows, resident, remade,
                         {d for d, v in po.items() if v in on}, objective, dt, nv)
