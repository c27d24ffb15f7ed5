"""Whether a run keeps its frozen prefix's features after epoch 1, and which: the cuts of
plan/transform/feature_cache.py planned like any graph, at the same --ram, on the board's costs."""

from __future__ import annotations

from typing import Any

from poet.boards import Board
from poet.errors import PoetError
from poet.graph.training_graph import TrainingGraph
from poet.plan.pipeline import Planned, plan_step
from poet.plan.transform import rewrites
from poet.plan.transform.feature_cache import Choice, Cut, Step, choose, cuts
from poet.plan.types import CostedGraph
from poet.progress import Say
from poet.settings import PlanRequest
from poet.units import format_size, parse_deadline


def features_once(whole: Planned, board: Board, prof: dict[str, Any], request: PlanRequest, runtime_static: int,
                  epochs: int, say: Say = print) -> tuple[Choice, list[Choice]]:
    """The cheapest in energy over `epochs` epochs: the whole step every epoch, or the whole step and a
    write of a kept tensor in epoch 1 and its read and the suffix's plan after (feature_cache.choose).
    whole: the step as planned (solve_request's). Every choice priced comes back too, in the order tried."""
    g = whole.training
    if g is None:
        raise ValueError("features_once needs the planned graph (Planned.training)")
    best, priced, _ = plan_features(g, whole.graph, Step(whole.plan.energy_j, whole.plan.time_s), board, prof,
                                    request, runtime_static, epochs, say, lower_plan=False)
    return best, priced


def plan_features(g: TrainingGraph, whole: CostedGraph, whole_step: Step, board: Board, prof: dict[str, Any],
                  request: PlanRequest, runtime_static: int, epochs: int, say: Say = print,
                  lower_plan: bool = True) -> tuple[Choice, list[Choice], Planned | None]:
    """features_once on the planned graph g (costed as `whole`, its step's plan `whole_step`), with the
    chosen suffix's plan (lowered to its schedule unless lower_plan is False; None when nothing is kept)."""
    assert request.ram is not None
    plans: dict[int, Planned] = {}

    def suffix_step(c: Cut) -> Step | None:
        cg = rewrites.costed_for(c.suffix, board, prof, lambda _m: None)
        try:
            p = plan_step(c.suffix, cg, board, request.ram or 0, runtime_static,
                          parse_deadline(request.deadline, cg.one_pass_s), solver=request.solver,
                          time_limit_s=request.time_limit_s, progress=lambda _m: None, strategy=request.strategy,
                          gap=request.gap, lower_plan=lower_plan)
        except PoetError:
            return None
        plans[c.node] = p
        return Step(p.plan.energy_j, p.plan.time_s)

    best, priced = choose(whole, whole_step, cuts(g), epochs, suffix_step)
    if best.cut is not None:
        say(f"  features once: keep {best.cut.name} ({format_size(best.cut.sample_bytes)} a sample) after "
            f"epoch 1; a step then costs {best.later.energy_j * 1e6:.2f} uJ, {best.later.time_s * 1e3:.3f} ms "
            f"(epoch 1: {best.first.energy_j * 1e6:.2f} uJ, {best.first.time_s * 1e3:.3f} ms)")
    return best, priced, plans.get(best.cut.node) if best.cut is not None else None
