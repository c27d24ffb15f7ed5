"""The graph's rewrites, in one place: which ones a plan needs, applying them, and replaying them.

Four rewrites change the traced graph before it is planned, each decided from the graph, the board
and the request alone:

- the frozen prefix in static int8 (poet.plan.transform.static_int8), when the fp32 graph's fixed part, its
  flash part or one op cannot fit the board, or (after the fact) when no fp32 plan fits --ram;
- the precision selection (poet.plan.transform.precision): --precision greedy|auto, or the frozen layers that
  must run int8 for the model to fit flash;
- the placement (poet.plan.transform.placement): the largest static-int8 conv weights streamed from the SD card
  and the largest frozen fp32 weights stored int8 (`w8`) when flash still cannot hold them;
- the fp32 depthwise convs that run a channel at a time, so a plan may make them in place
  (poet.plan.transform.in_place_convs).

`decide` makes them and returns a `Rewritten` (the graph to plan, its costs, what each rewrite made);
its `record` (a `Rewrites`) is what a plan keeps of them, the plan.json fields `int8_prefix`,
`precision`, `streamed`, `w8`, `patches` and `in_place`, and `Rewrites.apply` makes the same graph again from a
fresh trace (`poet train`'s plan cache and --resume, which keep the record, not the graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poet.boards import Board
from poet.errors import PoetError
from poet.graph.quantise import i8_bytes
from poet.graph.training_graph import TrainingGraph, conv_window, numel
from poet.ops import STATIC_INT8_LAYERS
from poet.plan.cost.costs import costed, load_profile, with_in_place, with_stream_costs
from poet.plan.cost.memory import budget_for, pool_for
from poet.plan.transform.in_place_convs import eligible, in_place_lines, in_place_names, marked, with_in_place_convs
from poet.plan.transform.patches import Patching, choose, widest
from poet.plan.transform.placement import place, stream_lines, streamed, w8_lines, w8_params, weight_only_int8
from poet.plan.transform.precision import (
    Selection,
    apply_storage,
    costed_storage,
    flash_fit,
    graph_for,
    load_rules,
    select,
)
from poet.plan.transform.static_int8 import Int8Prefix, rewrite
from poet.plan.types import CostedGraph
from poet.progress import Say
from poet.settings import PlanRequest
from poet.units import format_size


class ForeignPlan(PoetError):
    """A record that names what the graph does not have: the plan was made for another graph."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: the plan is of another graph")


@dataclass(frozen=True)
class Rewrites:
    """What the rewrites decided, as a plan keeps it: enough to make the planned graph again from the
    traced one (apply). Its JSON form is plan.json's fields; an fp32 plan of a graph that fits has none."""

    int8_prefix: bool = False  # the frozen prefix runs in static int8 (the rewrite is a function of the graph)
    precision: dict[str, Any] | None = None  # Selection.to_json(): the tensors stored narrow, the int8 layers
    streamed: tuple[str, ...] = ()  # static-int8 conv weights read from the SD card
    w8: tuple[str, ...] = ()  # frozen fp32 weights stored int8 (weight-only)
    patches: Patching | None = None  # the int8 prefix's first stage run in strips of rows (patch-based)
    in_place: tuple[str, ...] = ()  # fp32 depthwise convs run a channel at a time, to run in place

    def to_json(self) -> dict[str, Any]:
        """plan.json's fields for these decisions: only those made (plans without them keep their keys)."""
        out: dict[str, Any] = {}
        if self.precision is not None:
            out["precision"] = self.precision
        if self.int8_prefix:
            out["int8_prefix"] = True
        if self.streamed:
            out["streamed"] = list(self.streamed)
        if self.w8:
            out["w8"] = list(self.w8)
        if self.patches is not None:
            out["patches"] = self.patches.to_json()
        if self.in_place:
            out["in_place"] = list(self.in_place)
        return out

    @classmethod
    def from_json(cls, info: dict[str, Any]) -> Rewrites:
        """The record in a plan.json (checked for kinds by its reader; {} for a run with no plan)."""
        return cls(int8_prefix=bool(info.get("int8_prefix")), precision=info.get("precision") or None,
                   streamed=tuple(info.get("streamed") or ()), w8=tuple(info.get("w8") or ()),
                   patches=Patching.from_json(info["patches"]) if info.get("patches") is not None else None,
                   in_place=tuple(info.get("in_place") or ()))

    def apply(self, g: TrainingGraph) -> tuple[TrainingGraph, Int8Prefix | None]:
        """The graph the plan's schedule runs on, made from g in the order decide made it, and the static-int8
        prefix (its weights are folded and calibrated from the model's). ForeignPlan when g lacks what the
        record names."""
        prefix = None
        run = g
        if self.int8_prefix:
            prefix = rewrite(g)
            if prefix is None:
                raise ForeignPlan(f"the plan runs {g.model}'s frozen prefix in static int8, but the graph has none")
            if self.patches is not None:
                try:
                    prefix = prefix.patched(self.patches)
                except ValueError as e:
                    raise ForeignPlan(str(e)) from None
            run = prefix.graph
        if self.precision:
            run = graph_for(run, self.precision)
        if not set(self.streamed) | set(self.w8) <= {name for name, _ in run.params}:
            raise ForeignPlan(f"the plan places weights {g.model} does not have")
        run = weight_only_int8(streamed(run, set(self.streamed)), set(self.w8))
        if self.in_place:
            can = {n.name for n in run.nodes if eligible(run, n)}
            if not set(self.in_place) <= can:
                raise ForeignPlan(f"the plan runs convs in place that {g.model} does not have")
            run = marked(run, set(self.in_place))
        return run, prefix


@dataclass
class Rewritten:
    """A graph with its rewrites made: what is planned, and what made it."""

    graph: TrainingGraph  # what is planned, lowered and run
    cg: CostedGraph  # its costs
    prefix: Int8Prefix | None = None
    selection: Selection | None = None

    @property
    def record(self) -> Rewrites:
        g = self.graph
        return Rewrites(int8_prefix=self.prefix is not None,
                        precision=self.selection.to_json() if self.selection is not None else None,
                        streamed=tuple(sorted(g.streamed_params)),
                        w8=tuple(sorted(w8_params(g))),
                        patches=self.prefix.patching if self.prefix is not None else None,
                        in_place=in_place_names(g))

    def lines(self) -> list[str]:
        """What `poet solve` says of the rewrites, after the plan."""
        out = self.selection.lines() if self.selection is not None else []
        if self.prefix is not None:
            out += prefix_lines(self.prefix)
        return out + stream_lines(self.graph) + w8_lines(self.graph) + in_place_lines(self.graph)


def profile_for(board: Board, request: PlanRequest, say: Say) -> dict[str, Any]:
    """The request's profile (--profile, else the board's), read once for a whole solve or run: every
    costing of the graph and its rewrites takes it from the caller, so one solve parses one YAML."""
    return load_profile(board.name, request.profile, note=lambda m: say(f"note: {m}"))


def costed_for(g: TrainingGraph, board: Board, prof: dict[str, Any], say: Say) -> CostedGraph:
    """The graph with the profile's costs, estimating what it lacks (its notes said)."""
    return costed(g, board, prof, estimate=True, note=lambda m: say(f"note: {m}"))


def decide(request: PlanRequest, g: TrainingGraph, cg: CostedGraph, board: Board, prof: dict[str, Any],
           runtime_static: int, deadline_s: float, say: Say) -> Rewritten:
    """The rewrites g needs for the request on this board, made: the static-int8 prefix where fp32 cannot fit,
    then the precision selection, then the weights' placement. Each says what it decided as it decides."""
    assert request.ram is not None
    prefix = int8_prefix_for(g, board, request.ram, runtime_static)
    if prefix is not None:
        say(f"  the fp32 graph cannot fit --ram {format_size(request.ram)} or the flash: planning with the frozen "
            f"prefix in static int8 ({len(prefix.layers)} fp32 ops)")
        prefix = with_patches(prefix, request.ram, runtime_static, say)
        g = prefix.graph
        cg = costed_for(g, board, prof, lambda _m: None)  # its estimates are named once the graph is final
    sel = None
    # fp32 where the model's frozen weights fit flash: precision is not even consulted, the plan as before
    if request.precision != "fp32" or pool_for(g).flash.total > board.model_flash_bytes:
        sel = select_for(request, g, board, prof, runtime_static, deadline_s, say)
        g, cg = sel.graph, sel.cg
    placed = place(g, board)  # flash still too small: the largest int8 conv weights stream from the SD card
    if placed is not g:
        g = placed
        cg = with_stream_costs(cg, g, board, prof)
    g, cg = _in_place(g, cg, board, prof)
    # the estimates of the graph planned, named once it is final (the caller's costing of the traced graph
    # names none: a graph rewritten to its int8 prefix would list ops that never run; an unstreamed conv's
    # estimate that the placement replaced is no cost of the plan)
    costed_storage(g, board, prof, note=lambda m: say(f"  note: {m}"))
    return Rewritten(g, cg, prefix, sel)


def after_no_fp32_plan(done: Rewritten, g: TrainingGraph, board: Board, prof: dict[str, Any], ram: int,
                       runtime_static: int, say: Say) -> Rewritten | None:
    """When no fp32 plan of g fits --ram: g with its frozen prefix in static int8, to plan again. None when
    `done` already rewrote g (nothing else to try) or g has no int8 prefix."""
    if done.prefix is not None or done.selection is not None:
        return None
    prefix = rewrite(g)
    if prefix is None:
        return None
    say("  no fp32 plan fits: planning again with the frozen prefix in static int8")
    prefix = with_patches(prefix, ram, runtime_static, say)
    g, cg = _in_place(prefix.graph, costed_for(prefix.graph, board, prof, lambda m: say(f"  {m}")), board, prof)
    return Rewritten(g, cg, prefix)


def _in_place(g: TrainingGraph, cg: CostedGraph, board: Board, prof: dict[str, Any]) -> tuple[TrainingGraph,
                                                                                                   CostedGraph]:
    """g with the fp32 depthwise convs that pay for it marked to run in place, and its costs so."""
    out = with_in_place_convs(g)
    return (g, cg) if out is g else (out, with_in_place(cg, out, board, prof))


def for_profile(g: TrainingGraph, board: Board, runtime_static: int) -> tuple[TrainingGraph, Int8Prefix] | None:
    """The graph `poet solve` would plan g as at the board's whole RAM when its fp32 form cannot fit: its
    frozen prefix in static int8, the frozen fp32 layers' weights stored int8 where flash needs it (as
    the default precision selects them: flash_fit), its weights placed (None: g as it is), for `poet
    profile` to measure the ops such a run executes; and the prefix, whose weights are folded and calibrated."""
    prefix = int8_prefix_for(g, board, board.ram_bytes, runtime_static)
    if prefix is None:
        return None
    prefix = with_patches(prefix, board.ram_bytes, runtime_static, lambda _m: None)
    q = prefix.graph
    return with_in_place_convs(place(apply_storage(q, {}, set(flash_fit(q, board.model_flash_bytes))), board)), prefix


def as_planned(g: TrainingGraph, model: Any, weights: list, board: Board, say: Say) -> tuple[TrainingGraph, list]:
    """A graph to profile (and its weights) as `poet solve` plans it: where its fp32 form cannot fit the
    board, with its frozen prefix in static int8 (the int8 layers' weights folded, their scales calibrated
    on the profile's own kind of input) and its weights placed, so the profile measures the ops a run of
    it executes."""
    import numpy as np

    from poet.graph.reference import state_tensors

    rewritten = for_profile(g, board, int(load_profile(board.name)["runtime_static_bytes"]))
    if rewritten is None:
        return with_in_place_convs(g), weights
    placed, prefix = rewritten
    say(f"{g.model}: its fp32 graph cannot fit {board.name}; profiling it with its frozen prefix in static int8, "
        "as `poet solve` plans it")
    calib = np.random.default_rng(0).random((64, *g.input_shape), dtype=np.float32)
    return placed, prefix.weights(dict(zip((n for n, _ in state_tensors(model)), weights, strict=True)), calib)


def int8_prefix_for(g: TrainingGraph, board: Board, ram: int, runtime_static: int) -> Int8Prefix | None:
    """The frozen prefix in static int8 (poet.plan.transform.static_int8) when the fp32 graph cannot fit: its fixed
    part or flash part is too big for the board, or one op alone needs more than the arena. None when
    fp32 may fit (the plan as before) or no layer of g has an int8 form."""
    pool = pool_for(g)
    arena = pool.arena(ram - runtime_static)
    byid = {n.id: n for n in g.nodes}
    # the input counted as an arena tensor, and no op in place: a conservative test, the fp32 graph tried only
    # where it surely has room
    most = max(n.bytes + sum(byid[d].bytes for d in set(n.deps)) for n in g.nodes)
    if pool.flash.total <= board.model_flash_bytes and most <= arena:
        return None
    return rewrite(g)


def with_patches(prefix: Int8Prefix, ram: int, runtime_static: int, say: Say) -> Int8Prefix:
    """The prefix with its first stage run patch by patch where its widest op cannot fit the arena of `ram`
    otherwise (poet.plan.transform.patches.choose: the fewest MACs that fit, else the least memory)."""
    opt = choose(prefix.graph, ram, runtime_static)
    if opt.patching is None:
        return prefix
    before = widest(prefix.graph)
    macs = sum(n.flops for n in prefix.graph.nodes)
    say(f"  its first stage runs in {opt.patching.strips} strips of rows up to {opt.patching.cut} (patch-based): "
        f"its widest op needs {format_size(opt.need)} of the arena, not {format_size(before)}, for "
        f"{(opt.flops - macs) / max(macs, 1):.0%} more MACs (the strips' overlapping rows)")
    return prefix.patched(opt.patching)


def select_for(request: PlanRequest, g: TrainingGraph, board: Board, prof: dict[str, Any], runtime_static: int,
               deadline_s: float, say: Say) -> Selection:
    """A plan request's `precision` and `precision_rules` for g (poet.plan.transform.precision.select)."""
    assert request.ram is not None
    arena = budget_for(g, request.ram, runtime_static).arena
    flash = flash_fit(g, board.model_flash_bytes)
    if flash:
        say(f"\n[precision] {len(flash)} frozen layers run in int8, their weights stored int8, for the model to "
            f"fit {board.name}'s flash ({format_size(board.model_flash_bytes)} for the model and frozen weights)")
    if request.precision == "fp32":
        return select("fp32", g, board, prof, arena, deadline_s, flash=flash)
    say(f"\n[precision] {request.precision} for {g.model}: which saved activations to store in 16 bits")
    if not prof.get("casts"):
        say(f"  note: the {board.name} profile has no casts section: cast costs are estimated like any op it "
            f"lacks (poet.plan.cost.costs.estimate_op), not measured; `poet profile --board {board.name} --casts` "
            "measures them")
    return select(request.precision, g, board, prof, arena, deadline_s, load_rules(request.precision_rules),
                  strategy=request.strategy, solver=request.solver, time_limit_s=request.time_limit_s,
                  gap=request.gap, progress=lambda m: say(f"  {m}"), estimate=True, flash=flash)


def prefix_lines(prefix: Int8Prefix) -> list[str]:
    """What `poet solve` says of a static-int8 prefix: which layers, and what became of them."""
    g = prefix.unpatched or prefix.graph
    n_q = sum(1 for n in g.nodes if n.op in STATIC_INT8_LAYERS)
    p = prefix.patching
    strips = [] if p is None else [
        f"  patch-based: the layers up to {p.cut} run in {p.strips} strips of its output's rows, each from the "
        f"rows of the input it needs (the strips' overlap computed twice), the strips joined into its output: "
        f"{sum(1 for n in prefix.graph.nodes if n.op in STATIC_INT8_LAYERS) - n_q} more int8 layers run, "
        f"{sum(1 for n in prefix.graph.nodes if n.op in ('slice_q', 'cat_q'))} row copies"]
    return [f"frozen prefix in static int8 (the fp32 graph cannot fit): {len(prefix.layers)} fp32 ops run as "
            f"{n_q} int8 layers (conv + frozen batch norm folded + ReLU, ReLU6 or hard activation fused; adds; "
            "max pools), every int8 tensor's scale fixed once from calibration data", *strips,
            f"  int8 from {prefix.layers[0]} to {prefix.layers[-1]}, layer by layer:",
            *(f"    {line}" for line in layer_lines(prefix))]


def layer_lines(prefix: Int8Prefix) -> list[str]:
    """One line per int8 layer of the prefix: what it was made of, its shapes, its weight in flash, and
    whether its output stays int8 (another int8 layer reads it) or leaves as fp32."""
    g = prefix.unpatched or prefix.graph
    out = []
    for n in g.nodes:
        if n.op not in STATIC_INT8_LAYERS:
            continue
        a = n.attrs
        if n.op == "maxpool2d_q":
            shapes = f"{a['C']}x{a['H']}x{a['W']} -> {'x'.join(map(str, n.shape[1:]))}"
            out.append(f"{n.name:<30} maxpool2d_q {shapes:<20} {a['kh']}x{a['kw']} s{a['sh']}, at its input's scale")
            continue
        dest = "int8 out" if a["out_scale"] >= 0 else "fp32 out"
        relu = {1: " + ReLU", 2: " + ReLU6", 3: " + hardswish", 4: " + hardsigmoid"}.get(a.get("relu", 0), "")
        if n.op in ("add_q", "mean_q", "mul_q"):
            what = {"add_q": "residual add", "mean_q": f"mean of {a.get('r')}", "mul_q": "scaled by its SE gate"}[n.op]
            out.append(f"{n.name:<30} {n.op:<9} {'x'.join(map(str, n.shape[1:])):<22} {what}{relu}, {dest}")
            continue
        fold = prefix.folds.get(g.params[a["w"]][0])
        made = fold.w.rsplit(".", 1)[0] if fold else n.module
        if fold is not None and fold.bn is not None:
            made += " + " + fold.bn[2].rsplit(".", 1)[0]
        dw = " depthwise" if a["groups"] == a["C"] == a["O"] and a["groups"] > 1 else ""
        shapes = f"{a['C']}x{a['H']}x{a['W']} -> {'x'.join(map(str, n.shape[1:]))}"
        kh, kw, _, _ = conv_window(a)
        window = kh if kh == kw else f"{kh}x{kw}"
        out.append(f"{n.name:<30} conv2d_q  {shapes:<22} k{window} s{a['stride']}{dw}, {made}{relu}, "
                   f"{format_size(i8_bytes(numel(g.params[a['w']][1])))} weights, {dest}")
    return out
