"""The main job, one function per arrow of DESIGN.md's data flow, shared by the CLI commands."""

from __future__ import annotations

from dataclasses import dataclass

from poet.boards import Board
from poet.errors import PoetError
from poet.graph.training_graph import TrainingGraph
from poet.plan.cost.memory import MemoryBudget, budget_for, check_ram
from poet.plan.lowering.lower import ALIGN, Lowered, lower
from poet.plan.strategies import MILP, found, plan_with
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget
from poet.plan.transform.precision import Selection
from poet.plan.transform.rewrites import Rewrites
from poet.plan.transform.static_int8 import Int8Prefix
from poet.plan.types import POET, CostedGraph, Plan, Semantics
from poet.progress import Say
from poet.units import format_size


@dataclass
class Planned:
    budget: MemoryBudget
    graph: CostedGraph
    plan: Plan
    lowered: Lowered | None  # None: planned only (the runtime cannot run this graph yet)
    keep_all_peak: int
    deadline_s: float
    # what the graph's rewrites (poet.plan.transform.rewrites) made of the traced graph before it was planned
    training: TrainingGraph | None = None  # the graph the schedule runs on (its model blob); None: not rewritten
    rewrites: Rewrites = Rewrites()  # their record, as plan.json keeps it
    selection: Selection | None = None  # --precision's choice, or the layers flash needs in int8
    int8_prefix: Int8Prefix | None = None  # the frozen prefix in static int8


def plan_step(g: TrainingGraph, cg: CostedGraph, board: Board, ram_bytes: int, runtime_static: int,
              deadline_s: float, solver: str = "highs", time_limit_s: float = 60.0,
              progress: Say = print, strategy: str = "poet", gap: float = 0.0,
              lower_plan: bool = True) -> Planned:
    """Plan with `strategy` for the arena left by --ram, lower it, and make sure the placed arena fits.

    A plan bounds the bytes resident at once; placing tensors at offsets can need a
    little more (fragmentation). If it does, the plan is made again with its live
    bytes bounded by its own peak less the overshoot, so each attempt's peak is
    strictly lower (lowering only the budget can return the same plan forever when
    the plan's peak sat below it). Where that bound has no plan, the bound halfway between it and the last
    plan's peak is tried, while the two are more than a word apart.
    """
    check_ram(ram_bytes, board.ram_bytes, board.name)
    budget = budget_for(g, ram_bytes, runtime_static, board.model_flash_bytes, board.name)
    ka = keep_all(cg)
    arena = budget.arena
    placed: list[int] = []  # the arena each plan needed placed, where it overshot
    peak = 0  # the live bytes of the last plan that overshot
    none = 0  # the largest live-bytes bound proven to have no plan
    for _attempt in range(8):
        plan = plan_with(strategy, cg, arena, deadline_s, solver=solver, time_limit_s=time_limit_s, gap=gap,
                         progress=progress)
        if plan.status == "infeasible" and placed:
            none = max(none, arena)
            if peak - none > 2 * ALIGN:  # the tightened bound had no plan: loosen it halfway
                arena = _halfway(none, peak)
                progress(f"no plan keeps that few bytes live; re-solving with live bytes at most {arena} B")
                continue
        if plan.status not in ("optimal", "feasible") and strategy not in MILP:
            raise PoetError(f"{strategy} finds no plan for --ram {format_size(ram_bytes)} (arena {arena} B) "
                            f"within the deadline: {plan.note or plan.status}; try --strategy poet", status=1)
        if plan.status == "no-solution" and plan.solver == "none":  # the MILP was too big to build
            raise PoetError(f"no plan: {plan.note}, and no heuristic's plan fits --ram {format_size(ram_bytes)} "
                            "within the deadline; raise --ram or relax --deadline", status=1)
        if plan.status == "no-solution":
            raise PoetError(f"the solver found no plan in {time_limit_s:g} s (not proven infeasible); "
                            f"raise --time-limit or --ram", status=1)
        if plan.status == "infeasible" and placed:  # infeasible only under a bound tightened for fragmentation
            raise _fragmented(ram_bytes, budget, placed)
        if plan.status == "infeasible":
            smallest = min_arena_budget(cg, deadline_s, solver=solver, time_limit_s=time_limit_s)
            if smallest is None:
                raise PoetError(f"no plan meets the deadline {deadline_s * 1e3:.3f} ms even with unlimited RAM; "
                                f"relax --deadline", status=1)
            raise PoetError(f"--ram {format_size(ram_bytes)} is below the smallest feasible budget for this "
                            f"deadline: {format_size(budget.fixed + smallest)} ({budget.fixed + smallest} B = "
                            f"fixed {budget.fixed} B + arena {smallest} B); raise --ram or relax --deadline",
                            status=1)
        if not lower_plan:
            return Planned(budget, cg, plan, None, ka.peak_bytes, deadline_s)
        lowered = lower(plan, g)
        if lowered.extent_bytes <= budget.arena:
            return Planned(budget, cg, plan, lowered, ka.peak_bytes, deadline_s)
        over = lowered.extent_bytes - budget.arena
        placed.append(lowered.extent_bytes)
        progress(f"placed arena {lowered.extent_bytes} B overshoots {budget.arena} B by {over} B "
                 f"(fragmentation); re-solving with a tighter live-bytes bound")
        peak = min(arena, plan.peak_bytes or arena)
        arena = peak - over if peak - over > none else _halfway(none, peak)
    raise _fragmented(ram_bytes, budget, placed)


def _fragmented(ram_bytes: int, budget: MemoryBudget, placed: list[int]) -> PoetError:
    """The error of a --ram whose plans fit their live bytes but whose tensors never placed within the arena."""
    least = min(placed)
    return PoetError(f"--ram {format_size(ram_bytes)} holds this step's live tensors but not once they are placed at "
                     f"offsets (fragmentation): the plans found need an arena of {least} B placed, {budget.arena} B "
                     f"is left; --ram {format_size(budget.fixed + least)} holds the best of them", status=1)


def _halfway(low: int, high: int) -> int:
    """A live-bytes bound between one with no plan and a plan's peak, word-aligned."""
    return (low + high) // 2 // ALIGN * ALIGN


def check_found(plan: Plan, cg: CostedGraph, arena: int, fixed: int, deadline_s: float, strategy: str,
                solver: str = "highs", time_limit_s: float = 60.0, semantics: Semantics = POET) -> None:
    """A plan of a costed graph file (`poet solve --graph`: no board, no lowering) that found none: one
    line saying why and what to change, as plan_step says it for a traced graph."""
    if found(plan):
        return
    if strategy in MILP and plan.status == "infeasible":
        smallest = min_arena_budget(cg, deadline_s, solver=solver, time_limit_s=time_limit_s, semantics=semantics)
        if smallest is None:
            raise PoetError("no plan meets this deadline even with unlimited RAM; relax --deadline")
        raise PoetError(f"arena {arena} B is below the smallest feasible for this deadline, {smallest} B "
                        f"(--ram {fixed + smallest}); raise --ram or relax --deadline")
    hint = "raise --ram or relax --deadline" if strategy in MILP else "try --strategy poet or more --ram"
    raise PoetError(f"{strategy} found no plan ({plan.status}{': ' + plan.note if plan.note else ''}); {hint}")
