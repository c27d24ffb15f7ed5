"""The row relaxation's plan (plan/solver/bound.py, relax_rows), made into stages, refined until it fits.

The row relaxation decides, at some of the stages where RAM is short (its rows), which tensors are
resident, and which are made again between rows. This strategy builds that as a plan with the
builder: a tensor is kept from one stage to the next while it is read before the next row or
resident at it; a tensor the relaxation pages is paged out when made; whatever a stage needs
and is missing is recomputed or paged in on demand. Where a stage the relaxation had no row
for is over the budget, the builder evicts the tensor that frees bytes cheapest, and that
stage becomes a row of the next round (cutting planes: the relaxation sees RAM where its plan
broke). Every round's relaxation, whatever its rows, bounds every plan: the best plan comes
with the highest of those bounds.

The relaxation does not see RAM inside a stage: a tensor "made again between rows" may need a
long recompute chain, and made where it is read that chain can overflow the stage whatever is
evicted (ResNet-18 at 25% of keep-everything). The builder then keeps a link of that chain from
where it was first made (Rows.hold) and builds again. An evicted tensor is priced at its whole
recompute chain, not its own op.

Before the rounds, on chains, the row relaxation walked exactly over resident sets
(plan/solver/resident_sets.py): often a higher bound than the rounds' MILPs prove, and its walk built
as a plan holds at each row only what the walk has resident there (Rows exact), which on DS-CNN
at 25% of keep-everything is a plan at the bound: optimal in seconds.

Starting rows: evenly spread over the binding stages, few enough that the first solve takes
seconds (bert-base at 50% of its keep-everything RAM: 11 rows, proven in 4 s).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from poet.plan.solver.bound import RowRelaxation, relax, relax_rows, shortfall
from poet.plan.solver.effort import Effort
from poet.plan.solver.milp import PROVEN_REL_TOL
from poet.plan.solver.resident_sets import walk
from poet.plan.strategies.base import Options
from poet.plan.strategies.builder import Builder, Policy, Stuck, better, checked, recomputable
from poet.plan.types import POET, CostedGraph, Plan, Semantics

FIRST_ROWS = 16  # rows of the first round
ROUNDS = 12
HOLDS = 64  # links of recompute chains held per plan before giving up
RESIDENT_SETS_SHARE = 0.5  # of the time limit, at most, for the walk over resident sets (plan/solver/resident_sets.py)
MIN_ROUND = 0.5  # s of work left at least to start a round
GAP_RELAXATION_S = 20.0  # at most, for the gap relaxation (milliseconds, mostly)
# (each a budget of work, not of time, that the reference machine does in so long: plan/solver/effort.py)


class Rows(Policy):
    """Keep what the relaxation has resident at the next row; page out what it pages."""

    name = "relaxed"

    def __init__(self, graph: CostedGraph, rel: RowRelaxation, deadline_s: float, semantics: Semantics,
                 exact: bool = False, follow_pages: bool = False) -> None:
        nodes = graph.nodes
        self.nodes = nodes
        self.rows = rel.rows
        self.resident = rel.resident
        # exact: at a row's stage hold nothing the relaxation has not resident there (a tensor recomputed
        # on the way to the stage's input and read again at the next row is made again there, as the walk
        # over resident sets priced it, not held through this row's main compute beside the rest)
        self.exact_rows = set(rel.rows) if exact else set()
        # follow_pages: at row k+1 page in only what the walk pages in its window k, recompute the rest
        self.paged_in = rel.paged_in if exact and follow_pages else None
        self.reads: list[list[int]] = [[] for _ in nodes]
        for c in nodes:
            for d in dict.fromkeys(c.deps):
                self.reads[d].append(c.id)
        self.outs: dict[int, set[int]] = {}
        for d in rel.paged:
            self.outs.setdefault(d if semantics.page_out_when_made else d + 1, set()).add(d)
        self.time_slack = deadline_s - graph.one_pass_s  # for recomputes and, if it counts, paging
        self.slack = self.time_slack if semantics.paging_in_deadline else math.inf
        self.evicted_at: set[int] = set()  # stages over the budget the relaxation did not see
        self.held: dict[int, int] = {}  # tensor -> the stage it is kept for (see hold)

    def hold(self, stuck: Stuck) -> bool:
        """A stage that cannot fit even with everything unused evicted recomputes a chain whose
        live tensors are too many at once (the relaxation does not see RAM inside a stage: it
        makes a tensor again "between rows", however long the chain). Keep one link of the chain
        from where it was made until that stage: the one whose own chain in the stage costs most
        (usually the stage's missing input itself; a cheaper link left the rest of the chain in
        place on ResNet-18). False: nothing left to hold."""
        t, nodes = stuck.stage, self.nodes
        if t is None:
            return False
        chain = stuck.recomputed
        best: tuple[float, int] | None = None
        for x in chain:
            if x in self.held or nodes[x].bytes == 0:
                continue
            saved, todo, seen = 0.0, [x], {x}
            while todo:  # x and what the stage recomputes to make x
                y = todo.pop()
                saved += nodes[y].compute_j
                for d in nodes[y].deps:
                    if d in chain and d not in seen:
                        seen.add(d)
                        todo.append(d)
            if best is None or saved > best[0]:
                best = (saved, x)
        if best is None:
            return False
        self.held[best[1]] = t
        return True

    def retain(self, b: Builder, i: int, t: int) -> bool:
        if t < self.held.get(i, -1):
            return True
        if t in self.exact_rows and i != t and i not in self.resident[t] and t not in self.reads[i]:
            return False
        k = bisect.bisect_left(self.rows, t + 1)
        if k == len(self.rows):
            return True  # past the last row: kept until read
        r = self.rows[k]
        reads = self.reads[i]
        at = bisect.bisect_left(reads, t + 1)
        if at < len(reads) and reads[at] <= r:
            return True  # read before (or at) the next row
        return i in self.resident.get(r, ())

    def fetch(self, b: Builder, t: int, i: int) -> bool:
        if self.paged_in is None or t not in self.exact_rows:
            return True  # between rows the walk priced nothing: the nearest source
        k = bisect.bisect_left(self.rows, t) - 1
        return k < 0 or i in self.paged_in.get(k, ())

    def page_out(self, b: Builder, t: int, present: set[int]) -> set[int]:
        return self.outs.get(t, set()) & present

    def evict(self, b: Builder, t: int, candidates: list[int]) -> tuple[int, bool] | None:
        """Over the budget where the relaxation has no row (or its choice did not fit): evict what
        frees bytes cheapest, and remember the stage. A held tensor is paged rather than dropped
        (its recompute chain is what did not fit), and dropped only when nothing else frees bytes."""
        self.evicted_at.add(t)
        nodes = self.nodes
        best: tuple[bool, float, int, bool] | None = None  # (drops a held tensor, J per byte, tensor, page)
        resident = b.kept[t]
        for i in candidates:
            n = nodes[i]
            held = t < self.held.get(i, -1)
            ways = []
            if recomputable(n):
                remake_j, remake_s = self._remake(b, i, resident)
                if b.extra_s + remake_s <= self.time_slack:
                    ways.append((held, remake_j, False))
            if i in b.aux or (b.may_page_out(t, i) and b.extra_s + n.page_out_s + n.page_in_s <= self.slack):
                ways.append((False, n.page_in_j + (0.0 if i in b.aux else n.page_out_j), True))
            for last_resort, cost, page in ways:
                key = (last_resort, cost / max(n.bytes, 1), i, page)
                if best is None or key[:2] < best[:2]:
                    best = key
        return None if best is None else (best[2], best[3])

    def _remake(self, b: Builder, i: int, resident: set[int]) -> tuple[float, float]:
        """What recomputing i costs from `resident`, in joules and seconds: i and each missing input
        it needs, recursively (a cheap op at the end of a dropped chain is not cheap to make again)."""
        nodes, joules, seconds, todo, seen = self.nodes, 0.0, 0.0, [i], {i}
        while todo:
            y = todo.pop()
            joules, seconds = joules + nodes[y].compute_j, seconds + nodes[y].compute_s
            for d in nodes[y].deps:
                if d not in seen and d not in resident and d not in b.aux and nodes[d].bytes > 0:
                    seen.add(d)
                    if recomputable(nodes[d]):
                        todo.append(d)
        return joules, seconds


def _denser(rows: list[int], every: list[int]) -> list[int]:
    """`rows` and every binding stage at a stride of the next power of two below the rows' own:
    every binding stage in about log2 rounds, each a uniform grid (resnet18_cifar.m4: 18 rows,
    then 39 with the exact bound, then 64, then all 112 with the optimal plan)."""
    stride = 1
    while 2 * stride < len(every) / max(1, len(rows)):
        stride *= 2
    return sorted(set(rows) | set(every[::stride]))


def _spread(rows: list[int], n: int) -> list[int]:
    """n of `rows`, evenly spread, the first and last included."""
    if len(rows) <= n:
        return list(rows)
    step = (len(rows) - 1) / (n - 1)
    return sorted({rows[round(k * step)] for k in range(n)})


def relaxed(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics = POET,
            options: Options | None = None, recompute: bool = True, paging: bool = True,
            start: Plan | None = None, densify: int = ROUNDS, on_bound: Callable[[float], None] | None = None,
            stop: Callable[[], bool] | None = None, lp_first: bool = False) -> Plan:
    """The best plan of a few rounds of relaxation and repair, with the best bound they proved
    (bound_j; None with status infeasible: a relaxation proved that no plan exists).

    start: a plan that fits and meets the deadline (another strategy's); the rounds stop as soon
    as the best plan, this one included, is within options.gap of the bound.
    densify: how many rounds may add rows where the plan did not break, only to tighten the bound
    (poet_milp passes 0 when its MILP follows alone: on resnet18_cifar.m4 one such round makes the
    bound exact in 5-14 s, but the MILP then took 40 s to find the plan under the reference's rules,
    178 s under poet's, against 90 s and 108 s proving it from the plain rounds' start; 1 when a
    second MILP races it from the heuristic's plan, plan/solver/race.py).
    on_bound: told each round's bound (a MILP racing on another core stops when its plan meets it);
    stop(): the rounds end when it says so (that MILP has a proven plan).
    lp_first: first a round of the rows' LP relaxation (milliseconds; its optimum a bound too), whose
    plan and the stages where it broke seed the first integer round: another path through the rounds, the one the second
    core takes where no MILP is built (MobileNetV2 at 25% on the nRF52840: 18 rows proven in 47 s
    against 16 in 33 s then 22 in 55 s, and a better first plan; plan/solver/race.py).
    """
    opts = options or Options()
    say = opts.progress or (lambda _msg: None)
    # opts.time_limit_s is a budget of work, not of time (plan/solver/effort.py): the rounds end where their
    # work does, on a quiet machine or a busy one
    gap_work = Effort.of(min(opts.time_limit_s, GAP_RELAXATION_S))
    quick = relax(graph, budget, deadline_s, semantics, recompute, paging, gap_work)
    best = Plan(strategy="relaxed", stages=[], status="infeasible", arena_budget=budget, deadline_s=deadline_s,
                solver="row relaxation", bound_j=None if quick.status == "infeasible" else quick.bound_j)
    if quick.status == "infeasible":
        best.note = "no plan fits: the gap relaxation (plan/solver/bound.py) has no solution"
        return best
    say(f"lower bound {quick.bound_j:.6g} J (the gap relaxation, {quick.status} in {quick.solve_time_s:.2f} s)")
    bound = quick.bound_j
    if start is not None and start.stages and start.status in ("optimal", "feasible"):
        best = start
        if _within(best, bound, opts.gap):
            return _as_relaxed(best, bound)
    walking = Effort.of(RESIDENT_SETS_SHARE * opts.time_limit_s)
    walked = None if lp_first else walk(graph, budget, recompute, paging, walking)
    # (the racer that takes the LP's path leaves the walk to the other core); a walk below the gap
    # relaxation saw too few rows to be worth building (MobileNetV1 at 25%: seconds of builds that fail)
    if walked is not None and walked.bound_j >= bound:
        bound = walked.bound_j
        if on_bound is not None:
            on_bound(bound)
        plan = walked_plan(graph, budget, deadline_s, walked, semantics)
        best = _better(plan, best)
        say(f"lower bound {walked.bound_j:.6g} J (the resident sets, in {walked.solve_time_s:.1f} s), their plan "
            + (f"{plan.energy_j:.6g} J" if plan.status == "feasible" else plan.status))
        if _within(best, bound, opts.gap):
            return _as_relaxed(best, bound)
    # the rounds: what is left of the limit after the gap relaxation and the walk, at the reference machine's rates
    work = Effort.of(opts.time_limit_s - gap_work.spent - walking.spent)
    short = shortfall(graph, budget)
    every = [int(t) for t in np.flatnonzero(short > 0)]
    # half where the most bytes must go, half spread over the rest
    top = sorted(every, key=lambda t: -short[t])[: FIRST_ROWS // 2]
    rows = sorted(set(top) | set(_spread(every, FIRST_ROWS // 2)))
    if lp_first:
        rel = relax_rows(graph, budget, deadline_s, semantics, recompute, paging, work, rows, integer=False)
        if rel.status in ("optimal", "feasible"):
            plan, best, more = _round(graph, budget, deadline_s, semantics, rel, best, rows)
            if rel.status == "optimal":  # the LP's optimum bounds the relaxation's, so every plan
                bound = max(bound, rel.bound_j)
            rows = sorted(set(rows) | set(more))
            say("row relaxation, its LP: plan " + (f"{plan.energy_j:.6g} J" if plan.status == "feasible"
                                                   else plan.status) + f", {len(rows)} RAM rows next")
    for n_round in range(ROUNDS):
        if work.left < MIN_ROUND or (stop is not None and stop()):
            break
        rel = relax_rows(graph, budget, deadline_s, semantics, recompute, paging, work, rows)
        if rel.status == "infeasible":
            best.note, best.bound_j = "no plan fits: the row relaxation (plan/solver/bound.py) has no solution", None
            return best
        bound = max(bound, rel.bound_j)
        if on_bound is not None:
            on_bound(bound)
        if rel.status == "no-solution":
            break
        plan, best, more = _round(graph, budget, deadline_s, semantics, rel, best, rows)
        gap = 1 - bound / best.energy_j if best.status in ("optimal", "feasible") and best.energy_j > 0 else math.inf
        say(f"row relaxation, round {n_round + 1}: {len(rows)} RAM rows, bound {bound:.6g} J ({rel.status} in "
            f"{rel.solve_time_s:.1f} s), plan "
            + (f"{plan.energy_j:.6g} J" if plan.status == "feasible" else plan.status)
            + (f", best within {gap:.2%}" if math.isfinite(gap) else ""))
        if _within(best, bound, opts.gap):
            break
        if more:
            rows = sorted(set(rows) | set(more))
        else:  # the plan broke nowhere the rows do not see: the bound is what is loose
            denser = _denser(rows, every)
            if denser == rows or densify <= 0:
                break
            rows, densify = denser, densify - 1
    return _as_relaxed(best, bound)


def _round(graph: CostedGraph, budget: int, deadline_s: float, semantics: Semantics, rel: RowRelaxation,
           best: Plan, rows: list[int]) -> tuple[Plan, Plan, list[int]]:
    """A round's plan from its relaxation, the better of it and `best`, and (thinned to about
    FIRST_ROWS) the stages it broke at that `rows` do not have: the next round's new rows."""
    policy = Rows(graph, rel, deadline_s, semantics)
    plan = _build(graph, budget, deadline_s, policy, semantics)
    best = _better(plan, best)
    more = sorted(policy.evicted_at - set(rows))
    return plan, best, more[:: max(1, len(more) // FIRST_ROWS)]


def _better(plan: Plan, best: Plan) -> Plan:
    """`plan`, as this strategy's, if it is feasible and costs less than `best` (or `best` has no plan); else `best`."""
    if plan.status == "feasible" and (best.status not in ("optimal", "feasible") or plan.energy_j < best.energy_j):
        return replace(plan, strategy="relaxed", solver="row relaxation")
    return best


def _build(graph: CostedGraph, budget: int, deadline_s: float, policy: Rows, semantics: Semantics) -> Plan:
    """The builder's plan under `policy`, holding links of recompute chains that do not fit."""
    plan = Plan(strategy=policy.name, stages=[], status="infeasible", arena_budget=budget, deadline_s=deadline_s,
                solver="heuristic", note=f"recompute chains still too long after {HOLDS} held tensors")
    for _ in range(HOLDS):
        try:
            plan.stages = Builder(graph, budget, policy, semantics).run()
        except Stuck as exc:
            if policy.hold(exc):
                continue
            plan.note = str(exc)
            return plan
        plan.note = ""
        return checked(graph, plan, budget, deadline_s, semantics)
    return plan


def walked_plan(graph: CostedGraph, budget: int, deadline_s: float, rel: RowRelaxation, semantics: Semantics) -> Plan:
    """The walk over resident sets (plan/solver/resident_sets.py) built as a plan, holding at each row only what the
    walk has resident there; built twice, paging in at each row only what the walk pages in its window and
    recomputing the rest, and paging in whatever is paged out, and the better kept. A tensor paged out is not
    the cheapest source in every window (MobileNetV1's least-time walk, built the second way, paged one 73 KB
    tensor in three times, 0.8% over its deadline; the first way, 0.9% under), but a recompute chain the walk
    priced need not fit its stage (on `deep` the first way can find no plan where the second does)."""
    plans = [_build(graph, budget, deadline_s, Rows(graph, rel, deadline_s, semantics, True, follow), semantics)
             for follow in (True, False)]
    return plans[0] if better(plans[0], plans[1]) or not plans[1].stages else plans[1]


def _within(plan: Plan, bound_j: float, gap: float) -> bool:
    ok = plan.status in ("optimal", "feasible")
    return ok and plan.energy_j - bound_j <= max(gap, PROVEN_REL_TOL) * plan.energy_j


def _as_relaxed(plan: Plan, bound_j: float) -> Plan:
    """The plan with the bound it is measured against (a copy: a start belongs to its strategy)."""
    out = replace(plan, bound_j=bound_j)
    if plan.status in ("optimal", "feasible"):
        out.gap = max(0.0, 1 - bound_j / plan.energy_j) if plan.energy_j > 0 else 0.0
    return out

