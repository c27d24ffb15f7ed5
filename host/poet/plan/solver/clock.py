"""The planner's clock: every time limit a solve keeps is measured here, and only here.

A limit decides what a solve returns (the incumbent HiGHS holds when it stops), so under a limit the
plan depends on how fast and how busy the machine is. Only the MILP keeps one: the searches before it
(walks, relaxations' rounds) are budgeted in work (effort.py), the same on every machine.
With POET_NO_TIME_LIMITS=1 in the environment the clock stands still: no limit is
ever reached and HiGHS is given none, so every solve runs to its end and its result depends on its
inputs alone (reproducible plans; the test suite runs this way, tests/conftest.py). A limit still
shapes what is tried (whether the MILP is built after the relaxations: strategies/poet_milp.py),
as the number it is, not as time that passes. The race's second process inherits the setting with
the environment.
"""

from __future__ import annotations

import math
import os
import time

NO_LIMITS = "POET_NO_TIME_LIMITS"


def unlimited() -> bool:
    """No time limit applies: every solve runs to its end."""
    return os.environ.get(NO_LIMITS, "") not in ("", "0")


def ends_at(limit_s: float) -> float:
    """The moment a limit of limit_s seconds from now ends (time.monotonic, shared across processes);
    inf when there are no limits."""
    return math.inf if unlimited() else time.monotonic() + limit_s


def left(end: float) -> float:
    """Seconds until `end` (ends_at's), below zero once past it; inf when there are no limits."""
    return math.inf if unlimited() or math.isinf(end) else end - time.monotonic()


def past(end: float) -> bool:
    return left(end) < 0


def solver_limit(limit_s: float) -> float | None:
    """What a solver is told of a limit of limit_s seconds: None, no limit, when there are none."""
    return None if unlimited() or math.isinf(limit_s) else limit_s
