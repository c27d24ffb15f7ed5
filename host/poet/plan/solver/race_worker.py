"""The second core's side of plan/solver/race.py: `python -m poet.plan.solver.race_worker IN OUT` solves the pickled
race.Problem in IN and pickles a race.Result to OUT. Apart from race.py, which poet_milp imports."""

from __future__ import annotations

import math
import os
import pickle
import signal
import sys
import time
from pathlib import Path

from poet.plan.solver import clock
from poet.plan.solver.milp import proven
from poet.plan.solver.race import Problem, Result
from poet.plan.strategies import best_heuristic
from poet.plan.strategies.base import Options
from poet.plan.strategies.fastest import on_graph, timed
from poet.plan.strategies.poet_milp import run_milp
from poet.plan.strategies.relaxed import relaxed
from poet.plan.types import CostedGraph, Plan, Semantics
from poet.progress import Say

FASTEST_SHARE = 0.9  # of the time, at most, for a plan under the deadline where no heuristic has one
MIN_MILP_S = 3.0  # less left than this after it: its plan is the result (the energy MILP takes ~2 s to build)


def fastest(graph: CostedGraph, arena_budget: int, deadline_s: float, recompute: bool, paging: bool,
            semantics: Semantics, time_limit_s: float, say: Say | None = None) -> Plan | None:
    """A plan that fits `arena_budget` and meets `deadline_s` where no heuristic's does (strategies/fastest.py):
    the POET MILP minimising time from the heuristics' plan that fits (the least energy among them,
    whatever its time), stopped at the first under the deadline; None if there is no plan to start
    from or none met it in time."""
    say = say or (lambda _msg: None)
    start = best_heuristic(graph, arena_budget, math.inf, recompute, paging, semantics)
    if start is None:
        return None
    say(f"no heuristic meets the deadline: the least time from {start.strategy}'s plan ({start.time_s:.6g} s)")
    plan, _ = run_milp(timed(graph, semantics), arena_budget, start.time_s * (1 + 1e-6), recompute, paging, semantics,
                       start, time_limit_s, strategy="fastest", stop=lambda s: s <= deadline_s)
    out = on_graph(graph, plan, "least-time MILP", arena_budget, deadline_s, semantics)
    if not plan.stages or out.status != "feasible":
        say(f"none under the deadline in {time_limit_s:.0f} s" + (f" (the fastest: {plan.energy_j:.6g} s)"
                                                                  if plan.stages else ""))
        return None
    say(f"a plan under the deadline: {out.time_s:.6g} s, {out.energy_j:.6g} J")
    return out


def _main(src: str, dst: str) -> None:
    p: Problem = pickle.loads(Path(src).read_bytes())
    shared = Path(p.bound_file)
    bound = -math.inf
    next_look = 0.0

    def stop(incumbent_j: float) -> bool:
        """The incumbent meets the latest bound the racer shared (each round's is higher): proven, stop.
        The file is read twice a second at most: HiGHS asks far more often."""
        nonlocal bound, next_look
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + 0.5
            if shared.exists():
                bound = max(bound, float(shared.read_text()))
        return math.isfinite(bound) and proven(incumbent_j, bound)

    if p.what == "row relaxation":  # the relaxations' rounds from their LP (strategies/relaxed.py)
        # their budget is work, not time (plan/solver/effort.py): the same rounds however busy this core is
        opts = Options(time_limit_s=p.time_limit_s)
        plan = relaxed(p.graph, p.arena_budget, p.deadline_s, p.semantics, opts, p.recompute, p.paging, p.start,
                       lp_first=True)
        bound_j = plan.bound_j
    else:
        start = p.start
        if start is None:  # no heuristic meets the deadline: a plan that does first
            start = fastest(p.graph, p.arena_budget, p.deadline_s, p.recompute, p.paging, p.semantics,
                            FASTEST_SHARE * clock.left(p.ends_at))
        left = clock.left(p.ends_at)
        if start is not None and start.strategy == "fastest" and left <= MIN_MILP_S:
            plan, bound_j = start, None  # no time left to improve it
        else:
            plan, bound_j = run_milp(p.graph, p.arena_budget, p.deadline_s, p.recompute, p.paging, p.semantics, start,
                                     left, seed=p.seed, stop=stop)
            if not plan.stages and start is not None and start.strategy == "fastest":
                plan = start  # out of time before HiGHS took up the start (a heuristic's stays this core's)
    by = plan.solver if plan.strategy == "fastest" else p.what  # the energy MILP had no time for it
    # Not files.write_atomic: the result is a message to the racer, in its private folder (race.Race), which
    # polls for it (Race.proved) and waits only GRACE_S past the time limit; the rename is all it needs to
    # never read half a pickle, and an fsync on a busy disk could spend that grace on a durability the
    # folder, deleted when the race ends, never uses.
    tmp = Path(dst + ".part")
    tmp.write_bytes(pickle.dumps(Result(plan, bound_j, by=by)))
    tmp.rename(dst)


if __name__ == "__main__":
    # the racer stops this process (race.Race.stop) or the kernel does when the racer dies; a Ctrl-C,
    # which a terminal sends to the racer's whole process group, is the racer's to act on
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _main(sys.argv[1], sys.argv[2])
    # the result is out: exit now, not when a HiGHS solve left past its limit next calls back
    # (milp.py), which the planner waiting for this process would wait for too
    sys.stdout.flush()
    os._exit(0)
