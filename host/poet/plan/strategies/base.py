"""What a strategy is: a name, a line of help, and one function from (graph, budget, deadline,
semantics, options) to a Plan. Apart from the registry (strategies/__init__.py) so a strategy's
module can declare itself without importing the list it is entered in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from poet.plan.types import CostedGraph, Plan, Semantics
from poet.progress import Say

# the best plan of the heuristics that uses only the decisions allowed (recompute, paging)
Start = Callable[[bool, bool], Plan | None]


@dataclass(frozen=True)
class Options:
    """How a MILP strategy searches; a heuristic's plan does not depend on any of it.

    start: where the MILP may take a starting plan from (None: it starts cold). A callable
    rather than a plan because each variant allows other decisions, and one that starts
    from nothing should not pay for the heuristics' runs.
    """

    solver: str = "highs"
    time_limit_s: float = 60.0
    gap: float = 0.0
    progress: Say | None = None
    start: Start | None = None


PlanFn = Callable[[CostedGraph, int, float, Semantics, Options], Plan]


@dataclass(frozen=True)
class Strategy:
    """One entry of the registry. milp: solved by poet.plan.solver.milp, so its `infeasible` is a proof
    and its plan sets its own solve time; the others are heuristics, which the MILPs start from."""

    name: str
    help: str  # one line, for --help
    plan: PlanFn
    milp: bool = False


# here rather than in the registry: the MILP strategies judge their own plans by it
def found(plan: Plan) -> bool:
    """The plan fits the budget and meets the deadline."""
    return plan.status in ("optimal", "feasible")
