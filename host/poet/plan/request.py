"""A plan request (what `--ram`, `--deadline`, `--strategy`... ask) solved for a board: costed,
planned, printed, lowered and written as the byte schedule. `poet solve`, `poet train` and the
Python API all plan through `solve_request`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from poet.boards import Board
from poet.errors import PoetError, UsageError
from poet.graph.training_graph import TrainingGraph
from poet.paths import schedule_file, shown, write_output
from poet.plan.pipeline import Planned, plan_step
from poet.plan.strategies import MILP
from poet.plan.transform import rewrites
from poet.plan.types import CostedGraph, Plan
from poet.progress import Say, above, ticker
from poet.settings import PlanRequest
from poet.units import format_size, parse_deadline


def solve_request(request: PlanRequest, g: TrainingGraph, cg: CostedGraph, board: Board, runtime_static: int,
                  deadline_s: float, say: Say, out: Path | None = None, need_schedule: bool = True,
                  bars: bool = False, *, prof: dict[str, Any]) -> Planned:
    """Plan, print the plan, write the schedule (default workspace/schedules/<model>.<board>.poet).

    prof: the profile cg was costed with (rewrites.profile_for), which costs the rewritten graphs too.
    need_schedule=False (plain `poet solve`): a graph the C runtime cannot run yet is
    planned and printed, and the reason no schedule is written is said. bars: the solve's elapsed
    time against its time limit, on stderr when it is a terminal (poet.progress).
    """
    from poet.plan.lowering.lower import check_runtime

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
    done = rewrites.decide(request, g, cg, board, prof, runtime_static, deadline_s, say)
    deadline_s = _of_planned(request.deadline, done.cg, deadline_s, say)

    def plan(g: TrainingGraph, cg: CostedGraph) -> Planned:
        # the solver reports nothing while it works: a ticker shows it is alive (heuristics have no time limit)
        limit = request.time_limit_s if request.strategy in MILP else None
        with ticker(f"solving ({request.strategy})", limit, shown=bars) as clock:
            return plan_step(g, cg, board, ram, runtime_static, deadline_s, solver=request.solver,
                             time_limit_s=request.time_limit_s, progress=above(clock, lambda m: say(f"  {m}")),
                             strategy=request.strategy, gap=request.gap, lower_plan=runnable)

    try:
        p = plan(done.graph, done.cg)
    except PoetError:
        # fp32 fits no plan at this --ram: the frozen prefix in static int8 may
        again = rewrites.after_no_fp32_plan(done, g, board, prof, ram, runtime_static, say)
        if again is None:
            raise
        done = again
        deadline_s = _of_planned(request.deadline, done.cg, deadline_s, say)
        p = plan(done.graph, done.cg)
    # the graph the schedule runs on and what the rewrites made of it, for the caller (poet train keeps
    # the record in plan.json and replays it on a fresh trace)
    p = replace(p, training=done.graph, rewrites=done.record, selection=done.selection, int8_prefix=done.prefix)
    print_plan(p, say)
    for line in done.lines():
        say(f"  {line}")
    if p.plan.peak_bytes >= p.keep_all_peak:
        say("  note: this budget holds every activation; nothing needs recomputing or paging")
    if p.lowered is None:
        say(f"\n[lower] no schedule written: {why}")
        return p
    sched = p.lowered.schedule.encode()
    if len(sched) > board.schedule_bytes:  # the board would refuse its upload (TOO_BIG): refused here first
        raise UsageError(f"the schedule is {len(sched):,} B ({len(p.lowered.schedule.instrs)} instructions), and the "
                         f"{board.name} firmware holds schedules of at most {board.schedule_bytes:,} B (its "
                         f"POET_SCHEDULE_BLOB_MAX; boards/{board.name}.yaml schedule_bytes): choose a model with "
                         "fewer ops, train fewer layers, or a board with a larger buffer")
    out = out or schedule_file(done.graph.model, board.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_output(out, sched)
    made_over = sum(1 for i in p.lowered.schedule.instrs if i.flags)
    over = f", {made_over} computes made in place over their input" if made_over else ""
    say(f"\n[lower] schedule: {len(sched)} bytes ({len(p.lowered.schedule.instrs)} instructions{over}, "
        f"version 1, model hash {p.lowered.schedule.model_hash:016x}, CRC-32) -> {shown(out)}")
    return p


def _of_planned(deadline: str, planned: CostedGraph, deadline_s: float, say: Say) -> float:
    """A deadline given as a multiple of one plain pass (`3x`), as a multiple of the pass of the graph planned
    (after a rewrite: the int8 prefix runs faster than the fp32 graph it replaces); a time, as it is."""
    if not str(deadline).strip().lower().endswith("x"):
        return deadline_s
    again = parse_deadline(deadline, planned.one_pass_s)
    if abs(again - deadline_s) > 1e-12 * deadline_s:
        say(f"  deadline {deadline} of the graph planned: {again * 1e3:.3f} ms (one plain pass "
            f"{planned.one_pass_s * 1e3:.3f} ms)")
    return again


def plan_for(g: TrainingGraph, board: Board, request: PlanRequest, say: Say = print,
             out: Path | None = None) -> Planned:
    """The Python API's one call: plan a traced graph for a board (costs from its profile, the
    firmware's own RAM from the profile too) and write its schedule."""
    prof = rewrites.profile_for(board, request, say)
    cg = rewrites.costed_for(g, board, prof, lambda _m: None)  # its estimates: named by decide(), once final
    deadline_s = parse_deadline(request.deadline, cg.one_pass_s)
    return solve_request(request, g, cg, board, int(prof["runtime_static_bytes"]), deadline_s, say, out=out,
                         prof=prof)


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
    from poet.plan.cost.costs import costed
    from poet.plan.cost.memory import budget_for
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


def deadline_for(text: str, cg: CostedGraph) -> float:
    """--deadline in seconds; refuse one below the compute-only time of a plain pass."""
    deadline_s = parse_deadline(text, cg.one_pass_s)
    if deadline_s < cg.one_pass_s * (1 - 1e-12):
        raise UsageError(f"--deadline {text} ({deadline_s * 1e3:.6g} ms) is below the compute-only time of one "
                         f"plain pass ({cg.one_pass_s * 1e3:.6g} ms); no plan can meet it: use 1x or more")
    return deadline_s


def solve_costed(cg: CostedGraph, ram: int, request: PlanRequest, semantics_name: str, say: Say) -> Plan:
    """Plan a costed graph file (the POET reference's instances): no board, no lowering (the file has no
    ops to run). Under the reference's semantics --ram is the arena; under poet's the parameters and
    their gradients come out of it first."""
    from poet.plan.cost.memory import costed_fixed_bytes
    from poet.plan.pipeline import check_found
    from poet.plan.strategies import plan_with
    from poet.plan.strategies.checkpoint_all import keep_all
    from poet.plan.types import POET, REFERENCE

    semantics = REFERENCE if semantics_name == "reference" else POET
    fixed = 0 if semantics_name == "reference" else costed_fixed_bytes(cg.param_bytes)
    arena = ram - fixed
    if arena <= 0:
        raise UsageError(f"--ram {format_size(ram)} does not hold this graph's parameters and gradients "
                         f"({format_size(fixed)}); the reference's budgets count activations only: "
                         f"add --semantics reference")
    deadline_s = deadline_for(request.deadline, cg)
    say(f"[solve] {request.strategy} for {cg.name} ({len(cg)} nodes): arena {arena} B"
        + (f" (--ram {ram} B - parameters and gradients {fixed} B)" if fixed else "")
        + f", deadline {deadline_s:.6g} s ({deadline_s / cg.one_pass_s:.3g}x one pass), {semantics_name} semantics")
    limit = request.time_limit_s if request.strategy in MILP else None
    with ticker(f"solving ({request.strategy})", limit, shown=True) as clock:
        plan = plan_with(request.strategy, cg, arena, deadline_s, solver=request.solver,
                         time_limit_s=request.time_limit_s, gap=request.gap,
                         progress=above(clock, lambda m: say(f"  {m}")), semantics=semantics)
    ka = keep_all(cg).peak_bytes
    say(plan_line(plan))
    check_found(plan, cg, arena, fixed, deadline_s, request.strategy, request.solver, request.time_limit_s, semantics)
    say(f"    energy      {plan.energy_j:.6g} J per step")
    say(f"    peak arena  {plan.peak_bytes} B of {arena} B (keep-everything needs {ka} B)")
    say(f"    time        {plan.time_s:.6g} s of {deadline_s:.6g} s deadline")
    say(f"    decisions   {plan.recomputes} recomputes, {plan.page_ins} page-ins, {plan.page_outs} page-outs")
    return plan
