"""How much the planner's searches may do, counted in their own work, not in seconds.

A search stopped by the clock returns what it had when the time ran out, so its result depends on how
fast and how busy the machine is: DS-CNN `--train all` at 256 KB planned 12.94 mJ a step on a quiet
machine and 190.18 mJ with its two cores shared, because the walk that finds the optimum was cut off.
The searches that find the plan the MILP then proves (the walks over resident sets, the row
relaxations' rounds, the least-time walk) are given budgets in units of their own work instead, so
the same command finds the same plan on any machine, quiet or loaded:

- a walk over resident sets (resident_sets.py) counts the windows' costings: each prices making a set
  of tensors again from one state, a few dozen Python steps;
- a HiGHS MIP counts its branch-and-bound nodes times the nonzeros of its matrix (a node's LPs grow
  with it), read at HiGHS's own callback, which stops it at the first callback past the budget: the
  same point on every run, HiGHS's search being deterministic (its MIP callbacks report no simplex
  iterations, only nodes); an LP counts its simplex iterations times the nonzeros the same way.

A budget is a share of --time-limit, in seconds of the reference machine (RATES: the 2-core x86-64
this project is developed on), so --time-limit still says how hard to look, as the number it is, not as
time that passes. Only the MILP that follows is stopped by the clock (clock.py), and a plan it was
still improving says so. On a slower or busier machine the searches take longer, never less far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poet.plan.solver import clock

# Units of each kind of work the reference machine does in a second, measured with the other core busy:
# the walk on DS-CNN (`--train all` at 256 KB, 455k costings in 2.5 s); HiGHS over MobileNetV2-0.35's row
# relaxations at 25% of keep-everything (102 to 2,133 nodes of 25k nonzeros in 23 to 86 s, the root node
# weighing most in the fewest; LPs 1e8)
RATES = {"walk": 180_000.0, "mip": 1.0e5, "lp": 1.0e8}


@dataclass
class Effort:
    """A budget of work, in seconds of the reference machine: `seconds` in all, `spent` so far (inf: no
    budget, every search runs to its end, as clock.unlimited() asks)."""

    seconds: float
    spent: float = 0.0

    @classmethod
    def of(cls, seconds: float) -> Effort:
        return cls(math.inf if clock.unlimited() or math.isinf(seconds) else max(0.0, seconds))

    def spend(self, kind: str, units: float) -> None:
        """`units` of work of `kind` (RATES) done."""
        self.spent += units / RATES[kind]

    def units_left(self, kind: str) -> float:
        """How much more work of `kind` the budget allows (inf: no budget)."""
        return (self.seconds - self.spent) * RATES[kind] if math.isfinite(self.seconds) else math.inf

    @property
    def left(self) -> float:
        return self.seconds - self.spent

    @property
    def over(self) -> bool:
        return self.spent >= self.seconds
