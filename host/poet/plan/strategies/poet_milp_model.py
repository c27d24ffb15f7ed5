"""The POET MILP's model: which activations to keep, recompute or page, as variables and rows; the plan
read out of a solution, and a plan set as a starting point. Solving it (time shares, the race with the
relaxations, the smallest budget) is poet_milp.py.

Formulation (T nodes, one stage t per node, semantics of docs/spec.md section 1).
Binaries, for tensors i with bytes_i > 0: R[t,i] recompute i in stage t (i < t;
R[t,t] = 1 is the first compute), S[t,i] kept in RAM from stage t-1, Min[t,i]
paged in, Mout[t,i] paged out (i <= t).
With P[t,i] = S[t,i] + Min[t,i] + R[t,i] (present in stage t):
  P[t,i] <= 1                   one source: kept, paged in or (re)computed
  R[t,i] <= P[t,j]              every dep j (bytes > 0) of a compute is resident
                                (computes run ascending, so R[t,j], j < i, counts)
  S[t+1,i] <= P[t,i]   Mout[t,i] <= P[t,i]   Min[t,i] <= Σ_{s<t} Mout[s,i] (in aux by then)
  Σ_t Mout[t,i] <= 1   (one page-out serves every later page-in: a dominance cut)
  R[t,i] = 0 for i < t unless node i is forward/loss (input, backward, optimizer)
  RAM at every compute k stage t may run (k = t or R[t,k] exists), a tensor leaving
  right after its last use unless retained (spec section 1):
    Σ_{i>k} b_i (S[t,i] + Min[t,i]) + b_k P[t,k] + Σ_{i<k} b_i L[t,i,k] <= budget
  with L[t,i,k] in {0,1}, L >= S[t+1,i], L >= Mout[t,i] and L >= R[t,j] for every
  j >= k of stage t that reads i (R[t,t] = 1: L = P[t,i] if t reads i). Each of
  these binaries implies P[t,i] = 1, and L only appears in <= rows, so L can always
  be their max: exactly "i is resident just before k" (a continuous L would be as
  exact; binary helps the solver's cuts, see _memory_rows). L is one
  variable per stretch of k between two readers of i stage t may recompute
  (chained L[.,g] >= L[.,g+1]). A tensor i > k counts if kept or paged in: the
  rule would free it before the computes only if the stage neither uses nor
  retains it, a dominated plan (drop the keep or the page-in). Stages with
  page-ins also get Σ_i b_i (S[t,i] + Min[t,i]) <= budget (RAM after the page-ins).
  Σ R compute_s + Min page_in_s + Mout page_out_s <= deadline
  minimise Σ R compute_j + Min page_in_j + Mout page_out_j.
Variables that can never pay off are not created: a tensor is needed at most
until last_need(i) (its last non-recomputable consumer, or the last need of a
recomputable one), so S/Min/R live in (i, last_need] and Mout in [i, last_need).
Nodes with bytes == 0 get no residency variables; deps on them impose nothing.
The deadline row is scaled to 1 and solved to 1e-9 (simulate.py accepts 1e-8).
The extracted plan drops keeps of tensors never read again and other useless
0 J decisions, so its simulated energy is exactly the MILP objective.

Defects of the reference MILP (Patil et al. 2022, commit 6e63098) not shared:
paging time counts in the deadline; a tensor may be paged out in the stage that
produces it; inputs are not recomputable (so not free to recompute); duplicated
edges are dropped (CostedGraph.from_json); frees inside a stage are implied by
the residency indicators L rather than modelled by free variables, so there is
no self-free term to get wrong; parameters, gradients and the staged
batch are outside the arena: the caller passes arena_budget = RAM - fixed part.
Every plan returned is replayed by simulate.py, an independent checker.

Switches (solve_switched; poet.plan.transform.precision stores saved tensors narrow and runs layers in int8
with them): a binary Z per switch chooses between two forms of the graph inside the same
MILP. A switch's nodes run in their own stage only when Z = 1 (R[t,t] = Z instead of 1,
their bytes and costs times Z) and are never present when Z = 0, the nodes it replaces
likewise with 1 - Z; a switched edge (j, d_off, d_on) makes
compute j read d_off when Z = 0 and d_on when Z = 1 (both are deps of j in the graph:
R <= P[d_off] + Z and R <= P[d_on] + 1 - Z; in the RAM rows a recompute of j keeps only
the one it reads resident: L >= R - Z for d_off, L >= R - (1 - Z) for d_on). Their stages run nothing else when Z = 0,
so removing the unchosen nodes leaves a plan of the chosen graph with the same energy.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulp

from poet.plan.types import POET, PURE_KINDS, CostedGraph, CostedNode, Plan, Semantics, Stage, rule_stage

Key = tuple[int, int]  # (stage t, tensor i)


def _recomputable(node: CostedNode) -> bool:
    return node.recomputable and node.kind in PURE_KINDS


def _last_need(graph: CostedGraph) -> list[int]:
    """Last stage in which tensor i can be needed (-1: never read by anyone)."""
    last = [-1] * len(graph)
    for c in reversed(graph.nodes):  # consumers come after their deps
        reach = max(c.id, last[c.id]) if _recomputable(c) else c.id
        for d in c.deps:
            last[d] = max(last[d], reach)
    return last


def milp_size(graph: CostedGraph) -> int:
    """About how many variables the MILP would have (S, Min, R per stage a tensor may be needed in)."""
    last = _last_need(graph)
    return sum(3 * max(0, last[i] - i) for i, n in enumerate(graph.nodes) if n.bytes > 0)


def lower_bound_bytes(graph: CostedGraph) -> int:
    """No plan fits below this: some node needs its output and all its inputs at once (its inputs alone when
    it may run in place: bound.stage_floor)."""
    from poet.plan.solver.bound import stage_floor

    return max(stage_floor(graph))


@dataclass
class Milp:
    prob: pulp.LpProblem
    R: dict[Key, pulp.LpVariable] = field(default_factory=dict)
    S: dict[Key, pulp.LpVariable] = field(default_factory=dict)
    Min: dict[Key, pulp.LpVariable] = field(default_factory=dict)
    Mout: dict[Key, pulp.LpVariable] = field(default_factory=dict)
    budget: pulp.LpVariable | None = None
    live: list[tuple[pulp.LpVariable, list[Any]]] = field(default_factory=list)  # var >= each bound
    Z: list[pulp.LpVariable] = field(default_factory=list)  # one per switch
    cond: dict[tuple[int, int], tuple[pulp.LpVariable, bool]] = field(default_factory=dict)  # switched edges
    own: dict[int, tuple[pulp.LpVariable, bool]] = field(default_factory=dict)  # switched node -> (Z, runs if Z=1)
    scale: float = 1.0  # joules per unit of the energy objective (one plain pass)
    # per stage t, ascending, the tensors i < t it may recompute (the keys (t, i) of R): scanning
    # range(t) for them in every stage was O(T^2), minutes for a long graph with short-lived tensors
    rec_at: list[list[int]] = field(default_factory=list)

    def runs(self, t: int) -> pulp.LpAffineExpression | pulp.LpVariable | int:
        """Whether node t exists: 1, or its switch's Z (1 - Z for a node the switch replaces)."""
        if t not in self.own:
            return 1
        z, on = self.own[t]
        return z if on else 1 - z

    def present(self, t: int, i: int) -> pulp.LpAffineExpression | pulp.LpVariable | int:
        if i == t:
            return self.runs(t)
        return pulp.lpSum(v[t, i] for v in (self.S, self.Min, self.R) if (t, i) in v)

    def energy_terms(self, graph: CostedGraph) -> list[tuple[pulp.LpVariable, float]]:
        n = graph.nodes
        return ([(v, n[i].compute_j) for (_, i), v in self.R.items()]
                + [(v, n[i].page_in_j) for (_, i), v in self.Min.items()]
                + [(v, n[i].page_out_j) for (_, i), v in self.Mout.items()]
                + [(z, n[t].compute_j if on else -n[t].compute_j) for t, (z, on) in self.own.items()])

    def time_terms(self, graph: CostedGraph, paging: bool = True) -> list[tuple[pulp.LpVariable, float]]:
        n = graph.nodes
        computes = [(v, n[i].compute_s) for (_, i), v in self.R.items()] + [
            (z, n[t].compute_s if on else -n[t].compute_s) for t, (z, on) in self.own.items()]
        if not paging:
            return computes
        return (computes + [(v, n[i].page_in_s) for (_, i), v in self.Min.items()]
                + [(v, n[i].page_out_s) for (_, i), v in self.Mout.items()])

    def fixed_j(self, graph: CostedGraph) -> float:
        """The energy_terms' constant: each node computed once in its own stage, but a switch's."""
        return sum(n.compute_j for n in graph.nodes if n.id not in self.own or not self.own[n.id][1])

    def fixed_s(self, graph: CostedGraph) -> float:
        return sum(n.compute_s for n in graph.nodes if n.id not in self.own or not self.own[n.id][1])


@dataclass(frozen=True)
class Switch:
    """A yes/no choice made in the MILP with the plan (module docstring, "Switches").

    nodes: run (in their own stage) and exist only when chosen; replaced: only when not chosen;
    edges: (reader j, d_off, d_on), j reads d_off when not chosen and d_on when chosen, both
    listed in j's deps.
    """

    name: str
    nodes: tuple[int, ...]
    edges: tuple[tuple[int, int, int], ...] = ()
    replaced: tuple[int, ...] = ()


Realise = Callable[[list[bool]], tuple[CostedGraph, list[int | None]]]


def build(graph: CostedGraph, arena_budget: int | None, deadline_s: float, recompute: bool = True,
           paging: bool = True, semantics: Semantics = POET, switches: tuple[Switch, ...] = ()) -> Milp:
    """The MILP; arena_budget None makes the budget an integer variable to minimise.

    recompute=False or paging=False leave those variables out (the remat-only and page-only
    restrictions; remat-only without a deadline is Checkmate's MILP under our cost model).
    """
    nodes, n_nodes = graph.nodes, len(graph)
    if any(min(n.compute_j, n.page_in_j, n.page_out_j, n.compute_s, n.page_in_s, n.page_out_s) < 0
           for n in nodes):
        raise ValueError("costs must be non-negative")
    m = Milp(pulp.LpProblem(f"poet_{re.sub(r'[^A-Za-z0-9_]', '_', graph.name)}", pulp.LpMinimize))
    last = _last_need(graph)

    def binary(name: str, t: int, i: int) -> pulp.LpVariable:
        return m.prob.add_variable(f"{name}_{t}_{i}", cat=pulp.LpBinary)

    for i, node in enumerate(nodes):
        if node.bytes == 0:
            continue
        for t in range(i + 1, last[i] + 1):
            m.S[t, i] = binary("S", t, i)
            if paging:
                m.Min[t, i] = binary("Min", t, i)
            if recompute and _recomputable(node):
                m.R[t, i] = binary("R", t, i)
        if paging:
            for t in range(i if semantics.page_out_when_made else i + 1, last[i]):
                m.Mout[t, i] = binary("Mout", t, i)

    m.rec_at = [[] for _ in range(n_nodes)]
    for t, i in m.R:  # inserted by ascending i, so each list is ascending
        m.rec_at[t].append(i)
    prob = m.prob
    cond = m.cond  # (reader, dep) -> (Z, read when Z = 1)
    for n_sw, sw in enumerate(switches):
        z = prob.add_variable(f"Z_{n_sw}", cat=pulp.LpBinary)
        m.Z.append(z)
        for t, on in [(t, True) for t in sw.nodes] + [(t, False) for t in sw.replaced]:
            if t in m.own or nodes[t].kind not in PURE_KINDS:
                raise ValueError(f"switch {sw.name}: node {t} is in another switch or not a forward node")
            m.own[t] = (z, on)
        for j, off, on in sw.edges:
            if off not in nodes[j].deps or on not in nodes[j].deps:
                raise ValueError(f"switch {sw.name}: {j} does not read both {off} and {on}")
            cond[j, off], cond[j, on] = (z, False), (z, True)
    for t in m.own:  # the stage of a node that does not run runs nothing, and its tensor never exists
        for v in (m.R, m.Min, m.Mout):
            for key in [k for k in v if k[0] == t]:
                prob += v[key] <= m.runs(t), f"idle_{v[key].name}"
    outs: dict[int, list[tuple[int, pulp.LpVariable]]] = {}
    for (t, i), v in sorted(m.Mout.items()):
        outs.setdefault(i, []).append((t, v))
    for i, vs in outs.items():
        if len(vs) > 1:
            prob += pulp.lpSum(v for _, v in vs) <= 1, f"pageout_once_{i}"
    for (t, i), v in m.Min.items():
        prob += v <= pulp.lpSum(o for s, o in outs.get(i, []) if s < t), f"pagein_{t}_{i}"
    for (t, i) in m.S:
        prob += m.present(t, i) <= m.runs(i), f"one_{t}_{i}"
        prob += m.S[t, i] <= m.present(t - 1, i), f"keep_{t}_{i}"
    for (t, i), v in m.Mout.items():
        if t > i:
            prob += v <= m.present(t, i), f"pageout_{t}_{i}"
    for t in range(n_nodes):
        computed = [(t, m.runs(t))] + [(i, m.R[t, i]) for i in m.rec_at[t]]
        for i, r in computed:
            for d in dict.fromkeys(nodes[i].deps):  # a hand-made graph may repeat an edge
                if nodes[d].bytes > 0:
                    if (i, d) not in cond:
                        prob += r <= m.present(t, d), f"dep_{t}_{i}_{d}"
                        continue
                    z, when = cond[i, d]
                    prob += r <= m.present(t, d) + (1 - z if when else z), f"dep_{t}_{i}_{d}"

    if arena_budget is None:
        m.budget = prob.add_variable("budget", lowBound=lower_bound_bytes(graph), cat=pulp.LpInteger)
    limit = m.budget if m.budget is not None else arena_budget
    resident: list[list[int]] = [[] for _ in range(n_nodes)]
    for t, i in m.S:
        resident[t].append(i)
    reads = [{d for d in n.deps if nodes[d].bytes > 0} for n in nodes]
    for t in range(n_nodes):
        _memory_rows(m, graph, t, sorted(resident[t]), reads, limit)

    # the deadline row is scaled to 1 so solver tolerances are relative to the deadline
    fixed_s = m.fixed_s(graph)
    if deadline_s <= 0:
        raise ValueError("deadline_s must be positive")
    prob += (pulp.lpSum(c / deadline_s * v for v, c in m.time_terms(graph, semantics.paging_in_deadline) if c)
             <= 1 - fixed_s / deadline_s), "deadline"
    if m.budget is not None:
        prob += m.budget
    else:  # energy scaled by one plain pass so the objective is O(1)
        m.scale = sum(n.compute_j for n in nodes) or 1.0
        prob += pulp.lpSum(c / m.scale * v for v, c in m.energy_terms(graph) if c)
    return m


def _memory_rows(m: Milp, graph: CostedGraph, t: int, tensors: list[int], reads: list[set[int]],
                 limit: pulp.LpVariable | int) -> None:
    """RAM rows of stage t: at its page-ins and at every compute k it may run (spec section 1).

    Just before compute k a tensor i present in the stage is resident
      i > k:  if it came kept or paged in (S + Min); it is then needed in the stage, else the
              plan is dominated (drop the keep or the page-in) and the row merely overcounts it;
      i == k: never (k's own output is counted: S + Min + R[t,k] = present);
      i < k:  if it is retained (S[t+1,i] or Mout[t,i]) or read by a compute j >= k of the stage
              (R[t,j]; R[t,t] = 1); each of these binaries implies i present. The indicator is a
              live variable >= each of them (the optimum may set it to their max), one per
              stretch of k between two readers of i that stage t may recompute, chained.
    live is declared binary although continuous would be as exact: with only binaries in
    the memory rows HiGHS derives knapsack cover cuts from them (vgg16_cifar.a72 at 0.71x
    its keep-all peak, 2x: proven optimal in 142 s, continuous: 37% gap after 300 s).
    """
    nodes, prob = graph.nodes, m.prob
    cands = [*m.rec_at[t], t]  # computes stage t may run
    pieces: dict[int, list[tuple[int, Any]]] = {t: [(len(cands) - 1, nodes[t].bytes * m.runs(t))]}
    lives: dict[int, tuple[list[int], list[Any]]] = {}  # tensor -> (its readers among cands, their live vars)
    for i in tensors:
        b = nodes[i].bytes
        early = m.S[t, i] + m.Min.get((t, i), 0)
        present = m.present(t, i)
        if i in reads[t]:  # read by t itself: resident from its source to the end of the stage
            at = bisect.bisect_left(cands, i)
            pieces[i] = [(0, b * early)] if at > 0 else []
            pieces[i].append((at, b * present))
            continue
        readers = [j for j in cands[:-1] if i in reads[j]]  # all > i
        # live[g]: resident at a compute k with exactly readers[g:] left to run (k <= readers[g])
        # (None: 0, nothing can keep i resident there)
        live: list[Any] = [None] * (len(readers) + 1)
        bounds: list[Any] = [v[key] for v, key in ((m.S, (t + 1, i)), (m.Mout, (t, i))) if key in v]
        for g in reversed(range(len(readers) + 1)):
            if g < len(readers):
                bounds = [x for x in (live[g + 1], _read(m, t, readers[g], i)) if x is not None]
            if len(bounds) == 1 and isinstance(bounds[0], pulp.LpVariable):
                live[g] = bounds[0]
            elif bounds:
                live[g] = prob.add_variable(f"live_{t}_{i}_{g}", cat=pulp.LpBinary)
                m.live.append((live[g], bounds))
                for n_lb, x in enumerate(bounds):
                    prob += live[g] >= x, f"live_{t}_{i}_{g}_{n_lb}"
        pieces[i] = _pieces(cands, i, b, early, present, readers, live)
        lives[i] = (readers, live)
    _in_place_terms(m, graph, t, cands, set(tensors), lives, pieces)
    if len(cands) * len(tensors) > CHAIN_ABOVE:
        _chained_rows(m, t, cands, pieces, limit)
    else:
        _dense_rows(m, t, cands, pieces, limit)
    if any((t, i) in m.Min for i in tensors):  # after the page-ins, before anything is freed
        prob += (pulp.lpSum(nodes[i].bytes * (m.S[t, i] + m.Min.get((t, i), 0)) for i in tensors)
                 <= limit), f"mem_{t}_pagein"


def _in_place_terms(m: Milp, graph: CostedGraph, t: int, cands: list[int], tensors: set[int],
                    lives: dict[int, tuple[list[int], list[Any]]], pieces: dict[int, list[tuple[int, Any]]]) -> None:
    """Each in-place compute k of stage t (spec section 1, "In place"): at k's row, k's output is made in its dep
    d's bytes when d leaves right after k, so the row takes b_k back times (d resident just before k) - (d
    resident after k). Just before k, d's indicator is its live var up to reader k (or its presence when t itself
    reads it, k = t), after it the next reader's (or whether the stage retains it). Its coefficient in the row,
    b_d - b_k >= 0 (in place needs b_k <= b_d), keeps the solver minimising it; the one after it is +b_k."""
    nodes, prob = graph.nodes, m.prob
    for p, k in enumerate(cands):
        node = nodes[k]
        d = node.deps[0] if node.inplace and k not in m.own else -1
        if d not in tensors or (k, d) in m.cond:  # a switched read: counted whole (never below the plan's RAM)
            continue
        if d in lives:
            readers, live = lives[d]
            g = bisect.bisect_left(readers, k)
            before, after = live[g], live[g + 1] if g + 1 < len(live) else None
        elif k == t:  # t reads d: d is present to the end of the stage; after t only if retained
            before = m.present(t, d)
            keep = [v[key] for v, key in ((m.S, (t + 1, d)), (m.Mout, (t, d))) if key in v]
            if not keep:
                after = None
            elif len(keep) == 1:
                after = keep[0]
            else:
                after = prob.add_variable(f"kept_{t}_{d}", cat=pulp.LpBinary)
                for n_lb, x in enumerate(keep):
                    prob += after >= x, f"kept_{t}_{d}_{n_lb}"
        else:  # t reads d after k: d stays
            continue
        if before is None:
            continue
        term = -node.bytes * (before - after) if after is not None else -node.bytes * before
        pieces[-1 - k] = [(p, term)] + ([(p + 1, None)] if p + 1 < len(cands) else [])


def _read(m: Milp, t: int, j: int, i: int) -> Any:
    """R[t,j] as a bound on tensor i's residency: a recompute of j holds i only if j reads i, which on
    a switched edge depends on the switch (R - Z, or R - (1 - Z): at most 0 when j reads the other)."""
    if (j, i) not in m.cond:
        return m.R[t, j]
    z, when = m.cond[j, i]
    return m.R[t, j] - (1 - z) if when else m.R[t, j] - z


def _pieces(cands: list[int], i: int, b: int, early: Any, present: Any, readers: list[int],
            live: list[pulp.LpVariable | None]) -> list[tuple[int, Any]]:
    """Tensor i's term in the RAM row of each compute cands[p], as (first p, term) pieces: early
    (kept or paged in) before i, present at i, then live[g] with g = readers of i before k."""
    def term(k: int) -> tuple[Any, Any]:  # (identity, term) so equal terms are not re-added
        if k < i:
            return "early", b * early
        if k == i:
            return "present", b * present
        g = bisect.bisect_left(readers, k)
        return (g, None if live[g] is None else b * live[g])

    at = bisect.bisect_left(cands, i)
    starts = sorted({0, at, at + 1, *(bisect.bisect_right(cands, r) for r in readers)} & set(range(len(cands))))
    out: list[tuple[int, Any]] = []
    last = object()
    for p in starts:
        key, expr = term(cands[p])
        if key != last:
            out.append((p, expr))
            last = key
    return out


# A stage whose RAM rows would hold more terms than this gets them as a running sum
# (_chained_rows). Dense rows over binaries give HiGHS knapsack cover cuts, and win
# where they fit: resnet18_cifar.m4 (reference rules, largest stage 4,900 terms) is
# proven in 60-70 s with dense rows and has a 4.4% gap after 300 s chained. Chained rows
# halve mobilenetv2-cifar-0.35's nonzeros (8.6 M -> 4.3 M) and let HiGHS find a bound.
CHAIN_ABOVE = 20_000


def _dense_rows(m: Milp, t: int, cands: list[int], pieces: dict[int, list[tuple[int, Any]]],
                limit: pulp.LpVariable | int) -> None:
    """RAM at each compute cands[p] of stage t within the limit, one row per compute."""
    rows: list[list[Any]] = [[] for _ in cands]
    for seq in pieces.values():
        for n, (p, expr) in enumerate(seq):
            end = seq[n + 1][0] if n + 1 < len(seq) else len(cands)
            if expr is not None:
                for q in range(p, end):
                    rows[q].append(expr)
    for p, k in enumerate(cands):
        m.prob += pulp.lpSum(rows[p]) <= limit, f"mem_{t}_{k}"


def _chained_rows(m: Milp, t: int, cands: list[int], pieces: dict[int, list[tuple[int, Any]]],
                  limit: pulp.LpVariable | int) -> None:
    """RAM at each compute cands[p] of stage t within the limit, written as a running sum:
    use[p] = use[p-1] + (the terms that change between cands[p-1] and cands[p]). Exactly the
    rows sum(term of every tensor) <= limit, with O(tensors + reads) nonzeros per stage instead
    of O(tensors x computes)."""
    prob = m.prob
    change: list[list[Any]] = [[] for _ in cands]
    for seq in pieces.values():
        prev = None
        for p, expr in seq:
            if expr is not None:
                change[p].append(expr)
            if prev is not None:
                change[p].append(-prev)
            prev = expr
    use_prev = None
    for p, k in enumerate(cands):
        terms = pulp.lpSum(change[p])
        if use_prev is None:
            expr = terms
        else:
            expr = use_prev + terms
        if p < len(cands) - 1:  # a running-use variable only where a later row builds on it
            use = prob.add_variable(f"use_{t}_{k}")
            prob += use == expr, f"use_{t}_{k}"
            prob += use <= limit, f"mem_{t}_{k}"
            use_prev = use
        else:
            prob += expr <= limit, f"mem_{t}_{k}"


def extract(graph: CostedGraph, m: Milp) -> list[Stage]:
    n_nodes = len(graph)

    def per_stage(v: dict[Key, pulp.LpVariable]) -> list[set[int]]:
        """Per stage (and one past the last), the tensors whose variable is 1 once rounded."""
        out: list[set[int]] = [set() for _ in range(n_nodes + 1)]
        for (t, i), var in v.items():
            if round(var.varValue or 0.0) == 1:
                out[t].add(i)
        return out

    rec, kept, pin, pout = per_stage(m.R), per_stage(m.S), per_stage(m.Min), per_stage(m.Mout)
    _drop_pointless(graph, rec, kept, pin, pout)
    return [rule_stage(graph, t, sorted(rec[t] | {t}), kept[t] | pin[t], pin[t], pout[t], kept[t + 1])
            for t in range(n_nodes)]


def _drop_pointless(graph: CostedGraph, rec: list[set[int]], kept: list[set[int]],
                    pin: list[set[int]], pout: list[set[int]]) -> None:
    """Drop keeps of tensors never used again, and other useless decisions that cost 0 J.

    Only zero-energy decisions go, so the energy stays the MILP objective; a useless
    decision that costs energy is the solver's (it is not optimal) and is left visible.
    """
    nodes, n_nodes = graph.nodes, len(graph)
    changed = True
    while changed:
        changed = False
        # the stages paging each tensor out and in, gathered once per pass (a scan of every stage
        # per tensor was O(T^2)); the loop below only drops tensor i's own entries while at i
        outs_of: dict[int, list[int]] = {}
        ins_of: dict[int, list[int]] = {}
        for t in range(n_nodes):
            for i in pout[t]:
                outs_of.setdefault(i, []).append(t)
            for i in pin[t]:
                ins_of.setdefault(i, []).append(t)
        for i, node in enumerate(nodes):  # one page-out serves every later page-in
            outs = outs_of.get(i, [])
            ins = ins_of.get(i, [])
            for k, t in enumerate(outs):
                useful = k == 0 and any(s > t for s in ins)
                if not useful and node.page_out_j == 0:
                    pout[t].discard(i)
                    changed = True
        needed_next: set[int] = set()  # tensors stage t+1 reads from what stage t keeps
        for t in reversed(range(n_nodes)):
            useless = kept[t + 1] - needed_next
            if useless:
                kept[t + 1] -= useless
                changed = True
            need = set(pout[t]) | kept[t + 1]
            for c in sorted(rec[t] | {t}, reverse=True):
                if c != t and c not in need and nodes[c].compute_j == 0:
                    rec[t].discard(c)
                    changed = True
                    continue
                need |= {d for d in nodes[c].deps if nodes[d].bytes > 0}
            for i in list(pin[t]):
                if i not in need and nodes[i].page_in_j == 0:
                    pin[t].discard(i)
                    changed = True
            needed_next = need & kept[t]


def milp_problem(graph: CostedGraph, arena_budget: int, deadline_s: float,
                 semantics: Semantics = POET) -> tuple[pulp.LpProblem, float, float]:
    """The POET MILP as a PuLP problem, to hand to another solver (benchmarks/solvers_hard_rows.py), and
    how its objective maps to joules: energy = fixed_j + objective x scale_j."""
    m = build(graph, arena_budget, deadline_s, semantics=semantics)
    return m.prob, m.fixed_j(graph), m.scale


def set_start(graph: CostedGraph, m: Milp, plan: Plan) -> bool:
    """Set the MILP variables' initial values to `plan`'s decisions; False if some decision
    has no variable here (then nothing is set)."""
    nodes = graph.nodes
    ones: set[tuple[str, int, int]] = set()
    kept: set[int] = set()
    for t, st in enumerate(plan.stages):
        ones |= {("S", t, i) for i in kept}
        ones |= {("Min", t, i) for i in st.page_in} | {("Mout", t, i) for i in st.page_out}
        ones |= {("R", t, i) for i in st.compute if i < t and nodes[i].bytes > 0}
        present = kept | set(st.page_in) | {c for c in st.compute if nodes[c].bytes > 0}
        freed = set(st.free_before) | set(st.free) | {i for f in st.free_after.values() for i in f}
        kept = present - freed
    table = {"S": m.S, "Min": m.Min, "Mout": m.Mout, "R": m.R}
    if any((t, i) not in table[k] for k, t, i in ones):
        return False
    for k, v in table.items():
        for (t, i), var in v.items():
            var.setInitialValue(1.0 if (k, t, i) in ones else 0.0)
    for var, bounds in m.live:
        var.setInitialValue(max(0.0, *(float(pulp.value(b) or 0.0) for b in bounds)))
    return True


def value_of(terms: list[tuple[pulp.LpVariable, float]]) -> float:
    return sum(c * round(v.varValue or 0.0) for v, c in terms)


def extract_switched(graph: CostedGraph, m: Milp, sub: CostedGraph, where: list[int | None]) -> list[Stage]:
    """The MILP's decisions as stages of the realised graph: an unchosen node's stage decides
    nothing but which tensors it lets go, so the next stage that exists keeps what it keeps."""
    n_sub = len(sub)
    sets: list[list[set[int]]] = []
    for v in (m.R, m.S, m.Min, m.Mout):
        out: list[set[int]] = [set() for _ in range(n_sub + 1)]
        for (t, i), var in v.items():
            if round(var.varValue or 0.0) != 1:
                continue
            wt, wi = where[t] if t < len(where) else n_sub, where[i]
            if wi is None:
                raise AssertionError(f"the MILP used node {i} of an unchosen switch in stage {t}")
            if wt is not None:
                out[wt].add(wi)
            elif v is not m.S:
                raise AssertionError(f"the MILP decided something in the idle stage {t}")
        sets.append(out)
    rec, _, pin, pout = sets
    # S of the stage after an unchosen one: what the realised stage before it keeps is what
    # survives every idle stage up to the next realised one
    kept: list[set[int]] = [set() for _ in range(n_sub + 1)]
    for (t, i), var in m.S.items():
        wt = where[t] if t < len(where) else None
        if wt is not None and round(var.varValue or 0.0) == 1:
            kept[wt].add(where[i])  # type: ignore[arg-type]
    _drop_pointless(sub, rec, kept, pin, pout)
    return [rule_stage(sub, t, sorted(rec[t] | {t}), kept[t] | pin[t], pin[t], pout[t], kept[t + 1])
            for t in range(n_sub)]


def set_switched_start(graph: CostedGraph, m: Milp, realise: Realise, chosen: list[bool], plan: Plan) -> bool:
    """Start from `plan`, a plan of realise(chosen)'s graph: its stages spread over `graph`'s, an
    unchosen node's stage empty (it keeps what the stage before it kept)."""
    _, where = realise(chosen)
    back = {w: t for t, w in enumerate(where) if w is not None}
    stages = [Stage() for _ in graph.nodes]
    for w, st in enumerate(plan.stages):
        stages[back[w]] = Stage([back[i] for i in st.page_in], [back[i] for i in st.compute],
                                [back[i] for i in st.page_out], [back[i] for i in st.free],
                                {back[c]: [back[i] for i in f] for c, f in st.free_after.items()},
                                [back[i] for i in st.free_before])
    spread = Plan(plan.strategy, stages, plan.status, plan.energy_j)
    if not set_start(graph, m, spread):
        return False
    for z, c in zip(m.Z, chosen, strict=True):
        z.setInitialValue(1.0 if c else 0.0)
    return True
