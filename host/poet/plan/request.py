"""A plan request (what `--ram`, `--deadline`, `--strategy`... ask) solved for a board: costed,
planned, printed, lowered and written as the byte schedule. `poet solve`, `poet train` and the
Python API all plan through `solve_request`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poet.boards import Board
from poet.errors import PoetError
from poet.graph.quantise import i8_bytes
from poet.graph.training_graph import TrainingGraph, conv_window, numel
from poet.paths import schedule_file, shown, write_output
from poet.plan.memory import pool_for
from poet.plan.pipeline import Planned, plan_step
from poet.plan.placement import place, stream_lines, w8_lines
from poet.plan.static_int8 import Int8Prefix, rewrite
from poet.plan.strategies import MILP
from poet.plan.types import CostedGraph, Plan
from poet.progress import above, ticker
from poet.units import format_size, parse_deadline

Say = Callable[[str], None]


@dataclass(frozen=True)
class PlanRequest:
    """What to plan for: the options `poet solve` and `poet train` share."""

    ram: int | None = None  # bytes the training step may hold in RAM in all (DESIGN.md "Memory")
    deadline: str = "3x"  # a multiple of one plain pass (1.5x) or a time (45ms)
    strategy: str = "poet"
    solver: str = "highs"
    time_limit_s: float = 60.0
    gap: float = 0.0
    profile: Path | None = None  # None: the board's (workspace, else shipped)
    precision: str = "fp32"  # fp32 | greedy | auto
    precision_rules: Path | None = None  # None: poet's data/precision.yaml


def costed_for(g: TrainingGraph, board: Board, request: PlanRequest, say: Say) -> tuple[CostedGraph, dict]:
    """The graph with the costs of the request's profile (its notes said), and the profile."""
    from poet.plan.costs import costed, load_profile

    prof = load_profile(board.name, request.profile, note=lambda m: say(f"note: {m}"))
    return costed(g, board, prof, estimate=True, note=lambda m: say(f"note: {m}")), prof


def solve_request(request: PlanRequest, g: TrainingGraph, cg: CostedGraph, board: Board, runtime_static: int,
                  deadline_s: float, say: Say, out: Path | None = None, need_schedule: bool = True,
                  bars: bool = False) -> Planned:
    """Plan, print the plan, write the schedule (default workspace/schedules/<model>.<board>.poet).

    need_schedule=False (plain `poet solve`): a graph the C runtime cannot run yet is
    planned and printed, and the reason no schedule is written is said. bars: the solve's elapsed
    time against its time limit, on stderr when it is a terminal (poet.progress).
    """
    from poet.plan.lower import check_runtime

    if request.ram is None:
        raise ValueError("a plan request needs ram")
    ram = request.ram
    say(f"\n[solve] {request.strategy} for {g.model} on {board.name}: --ram {format_size(ram)}, deadline "
        f"{deadline_s * 1e3:.3f} ms ({deadline_s / cg.one_pass_s:.2f}x one pass), solver {request.solver}")
    runnable = True
    if not need_schedule:
        try:
            check_runtime(g)
        except PoetError as exc:
            runnable = False
            why = str(exc)
    prefix = int8_prefix_for(g, board, ram, runtime_static)
    if prefix is not None:
        say(f"  the fp32 graph cannot fit --ram {format_size(ram)} or the flash: planning with the frozen prefix in "
            f"static int8 ({len(prefix.layers)} fp32 ops)")
        g = prefix.graph
        cg, _ = costed_for(g, board, request, lambda _m: None)
    sel = None
    # fp32 where the model's frozen weights fit flash: not even imported, the plan as before
    if request.precision != "fp32" or pool_for(g).flash.total > board.model_flash_bytes:
        from poet.plan.precision import select_for
        sel = select_for(request, g, board, runtime_static, deadline_s, say)
        g, cg = sel.graph, sel.cg
    placed = place(g, board)  # flash still too small: the largest int8 conv weights stream from the SD card
    if placed is not g:
        from poet.plan.costs import load_profile, with_stream_costs
        g = placed
        cg = with_stream_costs(cg, g, board, load_profile(board.name, request.profile))
    def plan(g: TrainingGraph, cg: CostedGraph) -> Planned:
        # the solver reports nothing while it works: a ticker shows it is alive (heuristics have no time limit)
        limit = request.time_limit_s if request.strategy in MILP else None
        with ticker(f"solving ({request.strategy})", limit, shown=bars) as clock:
            return plan_step(g, cg, board, ram, runtime_static, deadline_s, solver=request.solver,
                             time_limit_s=request.time_limit_s, progress=above(clock, lambda m: say(f"  {m}")),
                             strategy=request.strategy, gap=request.gap, lower_plan=runnable)

    try:
        p = plan(g, cg)
    except PoetError:
        if prefix is not None or sel is not None:
            raise
        # fp32 fits no plan at this --ram: the frozen prefix in static int8 may
        prefix = rewrite(g)
        if prefix is None:
            raise
        say("  no fp32 plan fits: planning again with the frozen prefix in static int8")
        g = prefix.graph
        cg, _ = costed_for(g, board, request, lambda _m: None)
        p = plan(g, cg)
    if sel is not None:
        from poet.plan.precision import with_selection
        p = with_selection(p, sel)
    print_plan(p, say)
    if sel is not None:
        for line in sel.lines():
            say(f"  {line}")
    if prefix is not None:
        p.int8_prefix = prefix  # type: ignore[attr-defined]
        for line in prefix_lines(prefix):
            say(f"  {line}")
    p.streamed = sorted(g.streamed_params)  # type: ignore[attr-defined]
    p.w8 = sorted({g.params[n.attrs["w"]][0] for n in g.nodes if n.attrs.get("w8")})  # type: ignore[attr-defined]
    for line in stream_lines(g) + w8_lines(g):
        say(f"  {line}")
    if p.plan.peak_bytes >= p.keep_all_peak:
        say("  note: this budget holds every activation; nothing needs recomputing or paging")
    if p.lowered is None:
        say(f"\n[lower] no schedule written: {why}")
        return p
    sched = p.lowered.schedule.encode()
    out = out or schedule_file(g.model, board.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_output(out, sched)
    say(f"\n[lower] schedule: {len(sched)} bytes ({len(p.lowered.schedule.instrs)} instructions, "
        f"version 1, model hash {p.lowered.schedule.model_hash:016x}, CRC-32) -> {shown(out)}")
    return p


def int8_prefix_for(g: TrainingGraph, board: Board, ram: int, runtime_static: int) -> Int8Prefix | None:
    """The frozen prefix in static int8 (poet.plan.static_int8) when the fp32 graph cannot fit: its fixed
    part or flash part is too big for the board, or one op alone needs more than the arena. None when
    fp32 may fit (the plan as before) or no layer of g has an int8 form."""
    pool = pool_for(g)
    arena = pool.arena(ram - runtime_static)
    byid = {n.id: n for n in g.nodes}
    widest = max(n.bytes + sum(byid[d].bytes for d in set(n.deps)) for n in g.nodes)
    if pool.flash.total <= board.model_flash_bytes and widest <= arena:
        return None
    return rewrite(g)


def prefix_lines(prefix: Int8Prefix) -> list[str]:
    """What `poet solve` says of a static-int8 prefix: which layers, and what became of them."""
    g = prefix.graph
    n_q = sum(1 for n in g.nodes if n.op in ("conv2d_q", "add_q"))
    return [f"frozen prefix in static int8 (the fp32 graph cannot fit): {len(prefix.layers)} fp32 ops run as "
            f"{n_q} int8 layers (conv + frozen batch norm folded + ReLU fused; adds), every int8 tensor's scale "
            "fixed once from calibration data",
            f"  int8 from {prefix.layers[0]} to {prefix.layers[-1]}, layer by layer:",
            *(f"    {line}" for line in layer_lines(prefix))]


def layer_lines(prefix: Int8Prefix) -> list[str]:
    """One line per int8 layer of the prefix: what it was made of, its shapes, its weight in flash, and
    whether its output stays int8 (another int8 layer reads it) or leaves as fp32."""
    g = prefix.graph
    out = []
    for n in g.nodes:
        if n.op not in ("conv2d_q", "add_q"):
            continue
        a = n.attrs
        dest = "int8 out" if a["out_scale"] >= 0 else "fp32 out"
        relu = " + ReLU" if a.get("relu") else ""
        if n.op == "add_q":
            out.append(f"{n.name:<30} add_q     {'x'.join(map(str, n.shape[1:])):<22} residual add{relu}, {dest}")
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


def plan_for(g: TrainingGraph, board: Board, request: PlanRequest, say: Say = print,
             out: Path | None = None) -> Planned:
    """The Python API's one call: plan a traced graph for a board (costs from its profile, the
    firmware's own RAM from the profile too) and write its schedule."""
    cg, prof = costed_for(g, board, request, say)
    deadline_s = parse_deadline(request.deadline, cg.one_pass_s)
    return solve_request(request, g, cg, board, int(prof["runtime_static_bytes"]), deadline_s, say, out=out)


def plan_line(plan: Plan) -> str:
    """How a plan was made and what the maker says of it: one line."""
    return (f"  plan: {plan.strategy} via {plan.solver}, status {plan.status}, made in {plan.solve_time_s:.2f} s"
            + (f", within {plan.gap:.2%} of the lower bound {plan.bound_j:.6g} J"
               if plan.status == "feasible" and plan.bound_j is not None else "")
            + (f" ({plan.note})" if plan.note else ""))


def print_plan(p: Planned, say: Say) -> None:
    plan = p.plan
    say("  memory (--ram):")
    say(p.budget.table())
    say(plan_line(plan))
    say(f"    energy      {plan.energy_j * 1e6:10.2f} uJ per step (modelled)")
    say(f"    peak arena  {plan.peak_bytes:10d} B of {p.budget.arena} B budget (keep-everything needs "
        f"{p.keep_all_peak} B)" + (f"; placed extent {p.lowered.extent_bytes} B" if p.lowered else ""))
    say(f"    runtime     {plan.time_s * 1e3:10.3f} ms of {p.deadline_s * 1e3:.3f} ms deadline")
    say(f"    decisions   {plan.recomputes} recomputes, {plan.page_ins} page-ins, {plan.page_outs} page-outs")


def auto_budget(g: TrainingGraph, board: Board, prof: dict, runtime_static: int, deadline: str, say: Say) -> int:
    """A --ram a quarter of the way from the smallest feasible budget to what keeping every activation needs.

    Tight enough that the plan must both recompute and page on the zoo's MLP, with room
    to spare for the solver.
    """
    from poet.plan.costs import costed
    from poet.plan.memory import budget_for
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.strategies.poet_milp import min_arena_budget

    cg = costed(g, board, prof)
    fixed = budget_for(g, board.ram_bytes, runtime_static).fixed
    full = fixed + keep_all(cg).peak_bytes
    smallest_arena = min_arena_budget(cg, parse_deadline(deadline, cg.one_pass_s))
    if smallest_arena is None:
        raise PoetError(f"no plan meets deadline {deadline} for {g.model}; relax --deadline", status=2)
    smallest = fixed + smallest_arena
    ram = min(board.ram_bytes, smallest + (full - smallest) // 4)
    say(f"\n[budget] {g.model}: keeping every activation needs {full} B of RAM in all, the smallest feasible "
        f"budget at deadline {deadline} is {smallest} B; the demo plans for --ram {ram} (a quarter of the way)")
    return ram
