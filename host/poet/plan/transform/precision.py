"""Precision: which saved activations the training step keeps at half size, which layers run in int8.

A saved activation (a forward tensor some backward node reads, `TrainingGraph.saved_ids`) may
be stored in fp16 or bf16 instead of fp32. Stored low, it is made in fp32 as before, cast to the
narrow type right after (a cast node: the fp32 tensor and its narrow copy are in RAM at once),
the narrow copy is what the plan keeps or pages between the forward and the backward pass (half
the bytes), and right before its first backward reader a cast back to fp32 makes the tensor the
backward kernels read (again both copies at once). A linear or conv2d forward may run in int8:
its input and weight are quantised (absmax scale, cast) and the int8 kernel writes the fp32
output; the backward pass reads the fp32 input and weight as before. `apply_storage` writes
exactly that into the training graph, so the planner, the simulator, the lowering and the
runtime need nothing new: they plan, replay, lower and run these nodes like any other forward op.

Three modes (docs/planner.md "Precision"):

- `fp32`: no transform; the plan is the one poet made before precision existed, bit for bit.
- `greedy`: every saved tensor and layer the rules allow goes low, whatever the casts cost (the
  baseline).
- `auto`: the choice that gives the least-energy plan at the same RAM budget and deadline, made
  inside the POET MILP: the graph with every allowed tensor's casts and every allowed layer's
  int8 form beside its fp32 one is planned with one switch each (poet_milp.Switch: the switch's
  nodes run only when it is on, the nodes it replaces only when off, and readers read whichever
  runs), so the precision and the plan are one optimum. fp32 and greedy are points of that MILP,
  and their own plans (planned first) start it, so auto is never worse than either, however the
  MILP's time limit ends.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from poet.boards import Board
from poet.errors import PoetError, UsageError
from poet.files import load_yaml, read_text
from poet.graph.dtypes import NARROW_STORAGE, converted_bytes
from poet.graph.training_graph import GraphNode, TrainingGraph, numel
from poet.plan.cost.costs import costed, op_key
from poet.plan.strategies import found, plan_with
from poet.plan.strategies.poet_milp import Switch, solve_switched
from poet.plan.types import CostedGraph, Plan
from poet.progress import Say

MODES = ("fp32", "greedy", "auto")
DEFAULT_RULES = Path(__file__).parents[2] / "data" / "precision.yaml"

@dataclass(frozen=True)
class Rules:
    """Which saved tensors may go low (host/poet/data/precision.yaml explains each field)."""

    dtypes: tuple[str, ...] = NARROW_STORAGE
    deny_producers: frozenset[str] = frozenset()
    deny_consumers: frozenset[str] = frozenset()
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    int8: tuple[str, ...] = ("linear", "conv2d")


def load_rules(path: str | Path | None = None) -> Rules:
    p = Path(path) if path else DEFAULT_RULES
    # once, a regular file only (a FIFO would be empty the second time a run reads it), and YAML without
    # aliases: a kilobyte of nested ones expands to all the memory there is (poet.files)
    what = f"--precision-rules {p}"
    text = read_text(p, "--precision-rules")
    try:
        raw = load_yaml(text, what) or {}
    except UsageError as exc:  # a tag (!!python/...), an alias or a syntax error: rules are plain YAML
        raise UsageError(str(exc).replace(f"{what}: not valid YAML", f"{what}: not plain YAML", 1)) from None
    if not isinstance(raw, dict):
        raise UsageError(f"--precision-rules {p}: expected a mapping (see {DEFAULT_RULES})")
    unknown = set(raw) - {"dtypes", "deny_producers", "deny_consumers", "allow", "deny", "int8"}
    if unknown:
        raise UsageError(f"--precision-rules {p}: unknown keys {', '.join(sorted(unknown))}")
    for key, v in raw.items():  # every field is a list of names (precision.yaml); anything else is a typo
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise UsageError(f"--precision-rules {p}: {key} must be a list of names, not {str(v)[:40]!r}")
    dtypes = tuple(raw.get("dtypes") or NARROW_STORAGE)
    bad = [d for d in dtypes if d not in NARROW_STORAGE]
    if bad:
        raise UsageError(f"--precision-rules {p}: dtypes {bad}: storage may be {', '.join(NARROW_STORAGE)}")
    int8 = tuple(raw.get("int8") or ()) if "int8" in raw else Rules.int8
    bad = [op for op in int8 if op not in I8_OPS]
    if bad:
        raise UsageError(f"--precision-rules {p}: int8 {bad}: the int8 kernels are {', '.join(I8_OPS)}")
    return Rules(dtypes, frozenset(raw.get("deny_producers") or ()), frozenset(raw.get("deny_consumers") or ()),
                 tuple(raw.get("allow") or ()), tuple(raw.get("deny") or ()), int8)


def allowed(g: TrainingGraph, rules: Rules) -> list[int]:
    """The saved tensors the rules let go low, ascending: fp32 forward tensors (or the input)."""
    readers: dict[int, set[str]] = {}
    for n in g.nodes:
        for d in n.deps:
            readers.setdefault(d, set()).add(n.op)
    out = []
    for i in sorted(g.saved_ids()):
        n = g.nodes[i]
        if n.kind not in ("input", "forward") or n.op == "cast" or n.bytes <= 0 or n.bytes % 4:
            continue  # only fp32 tensors (4 bytes an element) are narrowed
        if n.op in rules.deny_producers or readers.get(i, set()) & rules.deny_consumers:
            continue
        if any(fnmatch.fnmatchcase(n.name, pat) for pat in rules.deny):
            continue
        if rules.allow and not any(fnmatch.fnmatchcase(n.name, pat) for pat in rules.allow):
            continue
        out.append(i)
    return out


def int8_allowed(g: TrainingGraph, rules: Rules, stored: list[int] | None = None) -> list[int]:
    """The forward layers the rules let run in int8 (ops in rules.int8 with a weight), ascending. A
    layer whose output may be stored narrow is left out: the two choices would touch one tensor."""
    skip = set(allowed(g, rules) if stored is None else stored)
    out = []
    for n in g.nodes:
        if n.kind != "forward" or n.op not in rules.int8 or n.attrs.get("w", -1) < 0 or n.id in skip:
            continue
        if any(fnmatch.fnmatchcase(n.name, pat) for pat in rules.deny):
            continue
        if rules.allow and not any(fnmatch.fnmatchcase(n.name, pat) for pat in rules.allow):
            continue
        out.append(n.id)
    return out


def apply_storage(g: TrainingGraph, choice: dict[int, str], int8: set[int] | frozenset[int] = frozenset()
                  ) -> TrainingGraph:
    """g with each chosen saved tensor (node id of g -> "fp16" | "bf16") stored narrow: a cast right
    after its producer, a cast back to fp32 right before its first backward reader, and every backward
    reader reading the cast back. Forward readers still read the fp32 tensor. Each layer in int8 (a
    linear or conv2d forward of g) is replaced by its int8 form (_transform). Nothing chosen: g."""
    return _transform(g, choice, set(int8)).graph if choice or int8 else g


@dataclass
class _Made:
    """_transform's graph and where each node of g and each cast went in it."""

    graph: TrainingGraph
    new: dict[int, int]  # id in g -> id in graph (an int8 layer: its int8 output, unless both)
    low: dict[int, int]  # chosen tensor -> its narrow copy
    back: dict[int, int]  # chosen tensor -> its cast back to fp32
    # int8 layer -> its nodes (x scale, x int8, w scale, w int8, the layer; no weight nodes for a weight
    # stored int8)
    i8: dict[int, tuple[int, ...]]


def _transform(g: TrainingGraph, choice: dict[int, str], int8: set[int], both: bool = False) -> _Made:
    """The narrow storage of `choice` and the int8 layers of `int8`. An int8 layer quantises its input
    (absmax scale, cast to int8) and its weight (the same, every step: the weight changes) and runs
    the int8 kernel (int32 accumulate, fp32 out: op 51-52); its readers read that output; its backward
    still reads the fp32 input and weight (so the gradient is the fp32 layer's at the int8 output).
    both: keep each int8 layer's fp32 node too, before its int8 nodes (the MILP's switched graph)."""
    saved = g.saved_ids()
    first_reader: dict[int, int] = {}
    for i, dt in choice.items():
        src = g.nodes[i]
        if i not in saved or src.kind not in ("input", "forward") or src.bytes % 4 or src.op == "cast":
            raise PoetError(f"{src.name}: only an fp32 forward tensor the backward pass reads can be stored narrow")
        if dt not in NARROW_STORAGE:
            raise PoetError(f"{src.name}: storage type {dt!r}; the planner stores {', '.join(NARROW_STORAGE)}")
        first_reader[i] = min(n.id for n in g.nodes if n.kind == "backward" and i in n.deps)
    for k in int8:
        if g.nodes[k].op not in I8_OPS or g.nodes[k].kind != "forward" or k in choice:
            raise PoetError(f"{g.nodes[k].name}: only a linear or conv2d forward whose output is stored fp32 "
                            f"runs in int8")
    before: dict[int, list[int]] = {}
    for i, r in first_reader.items():
        before.setdefault(r, []).append(i)
    nodes: list[GraphNode] = []
    new: dict[int, int] = {}  # id in g -> id in the new graph
    low: dict[int, int] = {}  # chosen tensor -> its narrow copy
    back: dict[int, int] = {}  # chosen tensor -> its cast back to fp32
    i8: dict[int, tuple[int, ...]] = {}

    def add(name: str, src: GraphNode, op: str, deps: list[int], nbytes: int, attrs: dict[str, Any],
            flops: int) -> int:
        shape = list(src.shape) if op not in ("absmax",) else [1]
        nodes.append(GraphNode(len(nodes), name, src.module, "forward", op, deps, nbytes, shape, attrs, flops=flops))
        return len(nodes) - 1

    def cast(src: GraphNode, dep: int, frm: str, to: str) -> int:
        elems = src.bytes // 4
        name = f"{src.name}/{to}"  # e.g. "conv1/forward/fp16", and "conv1/forward/fp16/fp32" for the way back
        if frm != "fp32":
            name = f"{nodes[dep].name}/fp32"
        return add(name, src, "cast", [dep], converted_bytes(src.bytes, "fp32", to),
                   {"n": elems, "from": frm, "to": to, "w": -1}, elems)

    storable = int8_storable(g)

    def int8_layer(n: GraphNode, x: int) -> tuple[int, ...]:
        xe, we = nodes[x].bytes // 4, numel(g.params[n.attrs["w"]][1])
        w = int(n.attrs["w"])
        ax = add(f"{n.name}/int8/x_scale", n, "absmax", [x], 4, {"n": xe, "w": -1}, xe)
        qx = add(f"{n.name}/int8/x", n, "cast", [x, ax], xe, {"n": xe, "from": "fp32", "to": "int8", "w": -1}, xe)
        if w in storable:
            return ax, qx, add(n.name, n, I8_OPS[n.op], [qx, ax], n.bytes, dict(n.attrs), n.flops)
        aw = add(f"{n.name}/int8/w_scale", n, "absmax", [], 4, {"n": we, "w": w}, we)
        qw = add(f"{n.name}/int8/w", n, "cast", [aw], we, {"n": we, "from": "fp32", "to": "int8", "w": w}, we)
        y = add(n.name, n, I8_OPS[n.op], [qx, ax, qw, aw], n.bytes, dict(n.attrs), n.flops)
        return ax, qx, aw, qw, y

    for n in g.nodes:
        for i in sorted(before.get(n.id, ())):
            back[i] = cast(g.nodes[i], low[i], choice[i], "fp32")
        bwd = n.kind == "backward"
        deps = [back[d] if bwd and d in back else new[d] for d in n.deps]
        kept = [back[d] if d in back else new[d] for d in n.saved]
        if n.id not in int8 or both:
            nodes.append(replace(n, id=len(nodes), deps=deps, saved=kept, attrs=dict(n.attrs), shape=list(n.shape)))
            new[n.id] = len(nodes) - 1
        if n.id in int8:
            i8[n.id] = int8_layer(n, deps[0])
            if not both:
                new[n.id] = i8[n.id][-1]
        if n.id in choice:
            low[n.id] = cast(n, new[n.id], "fp32", choice[n.id])
    return _Made(replace(g, nodes=nodes), new, low, back, i8)


I8_OPS = {"linear": "linear_i8", "conv2d": "conv2d_i8"}  # the fp32 layers with an int8 kernel


def int8_storable(g: TrainingGraph) -> set[int]:
    """Parameters an int8 layer would read stored int8 in flash: frozen weights (never written) that
    nothing but their layer's forward reads. Quantised once on the host instead of every step, they
    need no absmax or cast node and no int8 copy in the arena, and take a quarter of the flash."""
    readers: dict[int, int] = {}
    for n in g.nodes:
        if n.attrs.get("w", -1) >= 0 and n.kind != "optimizer":
            readers[n.attrs["w"]] = readers.get(n.attrs["w"], 0) + 1
    fixed = set(g.frozen) - g.moved
    return {n.attrs["w"] for n in g.nodes if n.kind == "forward" and n.op in I8_OPS and n.attrs.get("w", -1) >= 0
            and g.params[n.attrs["w"]][0] in fixed and readers[n.attrs["w"]] == 1}


def flash_fit(g: TrainingGraph, flash_bytes: int | None) -> frozenset[int]:
    """The frozen layers (forward node ids) to run in int8 so that the model's flash part fits
    `flash_bytes`: none when fp32 fits, else the layers with the largest storable weights first (a
    weight stored int8 takes a quarter of its fp32 bytes), as few as fit. A model that does not fit
    even with every storable weight in int8 gets them all (poet.plan.transform.placement streams from there)."""
    from poet.plan.cost.memory import pool_for

    if flash_bytes is None or pool_for(g).flash.total <= flash_bytes:
        return frozenset()
    storable = int8_storable(g)
    layers = sorted((n for n in g.nodes if n.kind == "forward" and n.attrs.get("w", -1) in storable),
                    key=lambda n: (-numel(g.params[n.attrs["w"]][1]), n.id))
    chosen: set[int] = set()
    total = pool_for(g).flash.total
    for n in layers:
        chosen.add(n.id)
        total = pool_for(apply_storage(g, {}, chosen)).flash.total
        if total <= flash_bytes:
            return frozenset(chosen)
    # every storable weight int8 and still too big: the largest int8 conv weights stream from the SD card
    # instead (poet.plan.transform.placement.place), which says so when even that cannot fit
    return frozenset(chosen)


# ---------------------------------------------------------------- cast costs


def cast_cost(board: Board, profile: dict[str, Any], n: int, frm: str, to: str) -> tuple[float, float] | None:
    """(seconds, joules) of casting n elements by the profile's `casts:` fit (cycles = r n + c, from
    `poet profile --casts`); None when the profile has no fit for that direction."""
    section = profile.get("casts") or {}
    fit = section.get(f"{frm}->{to}")
    if not fit:
        return None
    cycles = float(fit["cycles_per_elem"]) * n + float(fit["cycles_fixed"])
    t = cycles / float(section.get("clock_hz") or board.clock_hz)
    return t, t * board.cpu_active_w


def with_cast_costs(g: TrainingGraph, board: Board, profile: dict[str, Any]) -> dict[str, Any]:
    """The profile with an `ops` entry for every cast of g its `casts:` fit can cost."""
    ops = dict(profile.get("ops") or {})
    for n in g.nodes:
        if n.op != "cast" or op_key(n) in ops:
            continue
        c = cast_cost(board, profile, n.attrs["n"], n.attrs["from"], n.attrs["to"])
        if c is not None:
            # no "work": an entry made for this graph's casts must not move the estimates of the ops the
            # profile lacks (costs.estimate_op scales measured entries), or a node would cost differently
            # in graphs with other casts, and the switched MILP's costs would not be the realised graph's
            ops[op_key(n)] = {"time_s": c[0], "energy_j": c[1],
                              "provenance": "the profile's casts fit (cycles = r n + c)"}
    return dict(profile, ops=ops)


def costed_storage(g: TrainingGraph, board: Board, profile: dict[str, Any], estimate: bool = True,
                   note: Say | None = None) -> CostedGraph:
    """costs.costed with the casts costed from the profile's fits. Without a `casts:` section a cast
    is an error, or with `estimate` estimated like any op the profile lacks (and said so)."""
    prof = with_cast_costs(g, board, profile)
    missing = [n for n in g.nodes if n.op == "cast" and op_key(n) not in prof["ops"]]
    if missing and not estimate:
        raise PoetError(f"the {board.name} profile has no cast costs: run `poet profile --board {board.name} --casts`")
    return costed(g, board, prof, estimate=estimate, note=note)


def cheaper_dtype(board: Board, profile: dict[str, Any], n: int, dtypes: tuple[str, ...]) -> str:
    """The storage type whose casts there and back cost the least energy for n elements; the first
    listed when the profile cannot tell (no fits, or a tie)."""
    best, best_j = dtypes[0], math.inf
    for dt in dtypes:
        there, back = cast_cost(board, profile, n, "fp32", dt), cast_cost(board, profile, n, dt, "fp32")
        if there is None or back is None:
            continue
        if there[1] + back[1] < best_j:
            best, best_j = dt, there[1] + back[1]
    return best


# ---------------------------------------------------------------- choosing


@dataclass(frozen=True)
class Change:
    """One saved tensor stored narrow: its node in the fp32 graph, name, type and the bytes it saves."""

    id: int
    name: str
    dtype: str
    fp32_bytes: int
    low_bytes: int

    @property
    def bytes_saved(self) -> int:
        return self.fp32_bytes - self.low_bytes


@dataclass
class Selection:
    """What a precision mode chose: the storage per tensor, the int8 layers, the graph that carries
    them, its costs."""

    mode: str
    choice: dict[int, str]
    graph: TrainingGraph
    cg: CostedGraph
    changes: list[Change]
    plan: Plan | None = None  # the plan the choice was scored by (auto), if any
    tried: int = 0  # MILPs solved to choose (auto: fp32's, greedy's and the joint one)
    scores: dict[str, float] = field(default_factory=dict)  # energy of each plan solved (auto)
    int8: dict[int, str] = field(default_factory=dict)  # layer (node id of the fp32 graph) -> its name

    @property
    def int8_weights(self) -> list[str]:
        """The parameters stored int8 in flash (frozen weights read only by their int8 layer)."""
        return sorted(self.graph.int8_params)

    def lines(self) -> list[str]:
        if not self.changes and not self.int8:
            return [f"precision {self.mode}: every tensor stays fp32, every layer computes in fp32"]
        total = sum(c.bytes_saved for c in self.changes)
        out = [f"precision {self.mode}: {len(self.changes)} saved tensors stored narrow ({total} B saved), "
               f"{len(self.int8)} layers in int8" + (f" ({self.tried} MILP solves)" if self.tried else "")]
        out += [f"  {c.name:40s} {c.dtype}  {c.fp32_bytes} B -> {c.low_bytes} B (saves {c.bytes_saved} B)"
                for c in self.changes]
        out += [f"  {name:40s} int8 forward (int32 accumulate), fp32 backward" for name in self.int8.values()]
        out += [f"  {name:40s} weight stored int8 in flash" for name in self.int8_weights]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "stored": [{"id": c.id, "name": c.name, "dtype": c.dtype,
                                               "bytes_saved": c.bytes_saved} for c in self.changes],
                "int8": [{"id": i, "name": name} for i, name in sorted(self.int8.items())]}


def changes_of(g: TrainingGraph, choice: dict[int, str]) -> list[Change]:
    return [Change(i, g.nodes[i].name, dt, g.nodes[i].bytes, converted_bytes(g.nodes[i].bytes, "fp32", dt))
            for i, dt in sorted(choice.items())]


def graph_for(g: TrainingGraph, stored: dict[str, Any] | None) -> TrainingGraph:
    """The graph a plan was made for, from its precision record (Selection.to_json; None: fp32)."""
    if not stored:
        return g
    return apply_storage(g, {int(s["id"]): str(s["dtype"]) for s in stored.get("stored", ())},
                         {int(s["id"]) for s in stored.get("int8", ())})


Pick = tuple[dict[int, str], frozenset[int]]  # (storage type per saved tensor, layers in int8)
Build = Callable[[Pick], tuple[TrainingGraph, CostedGraph]]


def select(mode: str, g: TrainingGraph, board: Board, profile: dict[str, Any], arena_budget: int,
           deadline_s: float, rules: Rules | None = None, strategy: str = "poet", solver: str = "highs",
           time_limit_s: float = 60.0, gap: float = 0.0, progress: Say | None = None,
           estimate: bool = True, flash: frozenset[int] = frozenset()) -> Selection:
    """The storage and compute precision of `mode` for g at this arena budget and deadline (module
    docstring); the `flash` layers (flash_fit: their weights must be stored int8 for the model to fit
    the board's flash) run in int8 whatever the mode."""
    if mode not in MODES:
        raise UsageError(f"--precision {mode}: give one of {', '.join(MODES)}")
    rules = rules or load_rules()
    say = progress or (lambda _m: None)

    def cost(g2: TrainingGraph) -> CostedGraph:
        return costed_storage(g2, board, profile, estimate=estimate)

    def build(pick: Pick) -> tuple[TrainingGraph, CostedGraph]:
        g2 = apply_storage(g, *pick)
        return g2, cost(g2)

    def selection(pick: Pick, plan: Plan | None = None, tried: int = 0,
                  scores: dict[str, float] | None = None) -> Selection:
        g2, cg2 = build(pick)
        return Selection(mode, pick[0], g2, cg2, changes_of(g, pick[0]), plan, tried, scores or {},
                         {k: g.nodes[k].name for k in sorted(pick[1])})

    if mode == "fp32":
        return selection(({}, flash))
    cands = allowed(g, rules)
    greedy = ({i: cheaper_dtype(board, profile, g.nodes[i].bytes // 4, rules.dtypes) for i in cands},
              frozenset(int8_allowed(g, rules, cands)) | flash)
    if flash and mode == "auto":
        raise UsageError(f"--precision auto: {len(flash)} frozen layers must run in int8 for the model to fit "
                         f"{board.name}'s flash, and auto cannot fix layers yet: use --precision fp32 (int8 only "
                         "where flash needs it) or greedy")
    if mode == "greedy" or not (greedy[0] or greedy[1]):  # nothing allowed: auto is fp32, planned by the caller
        return selection(greedy)
    return _auto(g, arena_budget, deadline_s, greedy, build, cost, selection, strategy, solver, time_limit_s, gap,
                 say)


def _auto(g: TrainingGraph, arena_budget: int, deadline_s: float, greedy: Pick, build: Build,
          cost: Callable[[TrainingGraph], CostedGraph], selection: Callable[..., Selection], strategy: str,
          solver: str, time_limit_s: float, gap: float, say: Say) -> Selection:
    """The least-energy choice: one MILP with a switch per tensor and per layer the rules allow (the
    planner's own variables decide them), or for a heuristic strategy the better of fp32 and greedy."""
    fp32: Pick = ({}, frozenset())

    def scored(pick: Pick) -> tuple[float, Plan]:
        _, cg2 = build(pick)
        plan = plan_with(strategy, cg2, arena_budget, deadline_s, solver=solver, time_limit_s=time_limit_s, gap=gap)
        return (plan.energy_j if found(plan) else math.inf), plan

    if strategy not in JOINT:
        (e32, p32), (eg, pg) = scored(fp32), scored(greedy)
        pick, plan = (fp32, p32) if e32 <= eg else (greedy, pg)
        say(f"precision auto ({strategy}): fp32 {_uj(e32)}, greedy {_uj(eg)}: {'fp32' if e32 <= eg else 'greedy'}")
        return selection(pick, plan if found(plan) else None, 2, {"fp32": e32, "greedy": eg})
    stores, layers = sorted(greedy[0]), sorted(greedy[1])
    sup = _transform(g, greedy[0], set(layers), both=True)
    sup_cg = cost(sup.graph)  # costs by op and shape: each node costs what it does in the graph it ends up in
    nodes = list(sup_cg.nodes)
    switches = []

    def also_read(readers: list[int], dep: int) -> None:
        for j in readers:
            nodes[j] = replace(nodes[j], deps=(*nodes[j].deps, dep))

    for i in stores:  # a backward reader reads the fp32 tensor or its cast back, as the switch says
        readers = [j.id for j in sup.graph.nodes if j.kind == "backward" and sup.back[i] in j.deps]
        also_read(readers, sup.new[i])
        switches.append(Switch(g.nodes[i].name, (sup.low[i], sup.back[i]),
                               tuple((j, sup.new[i], sup.back[i]) for j in readers)))
    for k in layers:  # every reader of the layer reads the fp32 output or the int8 layer's
        fp, q = sup.new[k], sup.i8[k][-1]
        readers = [j.id for j in sup.graph.nodes if fp in j.deps and j.id not in sup.i8[k]]
        also_read(readers, q)
        switches.append(Switch(g.nodes[k].name, sup.i8[k], tuple((j, fp, q) for j in readers), replaced=(fp,)))
    sup_cg = replace(sup_cg, nodes=tuple(nodes))
    realised: dict[tuple[bool, ...], tuple[Pick, CostedGraph, list[int | None]]] = {}

    def realise(chosen: list[bool]) -> tuple[CostedGraph, list[int | None]]:
        key = tuple(chosen)
        if key not in realised:
            on_s, on_l = chosen[:len(stores)], chosen[len(stores):]
            pick: Pick = ({i: greedy[0][i] for i, c in zip(stores, on_s, strict=True) if c},
                          frozenset(k for k, c in zip(layers, on_l, strict=True) if c))
            g2, cg2 = build(pick)
            gone = {t for sw, c in zip(switches, chosen, strict=True) for t in (sw.replaced if c else sw.nodes)}
            where: list[int | None] = [None] * len(sup_cg)
            for w, t in enumerate(t for t in range(len(sup_cg)) if t not in gone):
                where[t] = w
                if g2.nodes[w].name != sup.graph.nodes[t].name or g2.nodes[w].op != sup.graph.nodes[t].op:
                    raise AssertionError(f"{g2.nodes[w].name} != {sup.graph.nodes[t].name}")
            realised[key] = (pick, cg2, where)
        return realised[key][1], realised[key][2]

    # fp32's and greedy's own POET plans first (each MILP is small and usually proven in seconds): the
    # better one starts the joint MILP, which then returns nothing worse, however its time limit ends
    scores: dict[str, float] = {}
    starts: list[tuple[float, str, list[bool], Pick, Plan]] = []
    for name, chosen in (("fp32", [False] * len(switches)), ("greedy", [True] * len(switches))):
        realise(chosen)
        e, p = scored(realised[tuple(chosen)][0])
        scores[name] = e
        if found(p):
            starts.append((e, name, chosen, realised[tuple(chosen)][0], p))
    say(f"precision auto: fp32 {_uj(scores['fp32'])}, greedy {_uj(scores['greedy'])}; one MILP decides "
        f"{len(stores)} saved tensors (16-bit or not) and {len(layers)} layers (int8 or not) with the plan")
    best = min(starts, key=lambda x: x[0]) if starts else None
    plan, chosen, _ = solve_switched(sup_cg, tuple(switches), realise, arena_budget, deadline_s, solver=solver,
                                     time_limit_s=time_limit_s, gap=gap, progress=say,
                                     recompute=strategy != "page-only", paging=strategy != "remat-only",
                                     warm_start=(best[2], best[4]) if best else None, strategy=strategy)
    scores["joint"] = plan.energy_j if found(plan) else math.inf
    pick = realised[tuple(chosen)][0] if found(plan) else fp32
    if best is not None and best[0] < scores["joint"]:  # the solver could not use the start, or found nothing
        say(f"precision auto: the MILP ended {plan.status} at {_uj(scores['joint'])}: {best[1]}'s plan is better")
        pick, plan = best[3], best[4]
    energy = plan.energy_j if found(plan) else math.inf
    say(f"precision auto: {len(pick[0])} stored narrow, {len(pick[1])} layers int8, {_uj(energy)}")
    return selection(pick, plan if found(plan) else None, len(scores), scores)


JOINT = ("poet", "remat-only", "page-only")  # the strategies whose MILP takes the switches


def _uj(energy_j: float) -> str:
    return "infeasible" if math.isinf(energy_j) else f"{energy_j * 1e6:.2f} uJ"
