"""A second POET MILP on another core, racing the planner's own (strategies/poet_milp.py); where no
MILP is built, the relaxations' rounds by another path (strategies/relaxed.py, lp_first).

POET spends the first half of its time limit on the relaxations (plan/solver/bound.py) and gives the MILP
the rest. On a machine with a second core that core would idle; instead it solves the MILP for the
whole limit, from the best heuristic's plan (or, where none meets the deadline, from the first plan
the least-time MILP finds that does: race_worker.fastest) and with another HiGHS seed, while this
process runs the relaxations and then its own MILP from their plan. HiGHS's path through a big
MILP varies a lot with its start and seed (ResNet-18 at 25% of its keep-everything RAM on the
nRF52840's costs: 2.34 J or 2.70 J in 60 s from two seeds), so two paths find better plans than
one, and each one's proven bound bounds both: the planner keeps the better plan and the higher
bound.

The race runs in a subprocess (`python -m poet.plan.solver.race_worker IN OUT`: the problem pickled in, the
plan pickled out) rather than through multiprocessing: a fork would inherit HiGHS's thread pool
half-alive, and a spawn would import the caller's __main__ (torch, for the CLI).

The subprocess dies with this one: stop() kills it on every way out poet controls (a plan, an error, a
Ctrl-C or the CLI's SIGTERM and SIGHUP), and the kernel kills it when poet dies any other way (SIGKILL,
a crash: device/children.py die_with_poet); it ignores a terminal's Ctrl-C itself, which the terminal
sends its whole process group: its end is this process's to decide.
"""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from poet.device.children import spawn
from poet.plan.solver import clock
from poet.plan.solver.milp import proven
from poet.plan.types import CostedGraph, Plan, Semantics

# Below this size (milp_size units) the MILP solves in seconds: a second process would only
# add its start-up (about 0.3 s) to every small solve
RACE_ABOVE = 10_000

# Reading the plan back after its time limit: extraction and the simulator's replay
GRACE_S = 10.0


def cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class Problem:
    """What the second core solves: solve_poet's MILP for `time_limit_s` from `start`, counted from
    when the Race starts (its start-up and imports included: `ends_at`, on the shared monotonic clock)."""

    graph: CostedGraph
    arena_budget: int
    deadline_s: float
    recompute: bool
    paging: bool
    semantics: Semantics
    start: Plan | None
    time_limit_s: float
    seed: int = 1
    bound_file: str = ""  # where the racer shares the relaxations' bound (Race sets it)
    ends_at: float = 0.0  # clock.ends_at: when the MILP must end (Race sets it; inf: no limits)
    what: str = "MILP"  # or "row relaxation": where no MILP is built, the relaxations' rounds by another path


@dataclass
class Result:
    """The second core's plan (no stages if it found none) and its MILP's proven bound in joules."""

    plan: Plan
    bound_j: float | None
    error: str = ""
    by: str = "MILP"  # what made it: Problem.what


class Race:
    """The MILP of `problem` in a subprocess, started at once; result() waits for it, stop() ends it."""

    def __init__(self, problem: Problem) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="poet-race-")
        self._in, self._out = Path(self._dir.name) / "problem.pickle", Path(self._dir.name) / "result.pickle"
        self._bound = Path(self._dir.name) / "bound"
        self._bound_j: float | None = None
        self._t_end = clock.ends_at(problem.time_limit_s)
        self._what = problem.what
        problem = replace(problem, bound_file=str(self._bound), ends_at=self._t_end)
        self._in.write_bytes(pickle.dumps(problem))
        self._done: Result | None = None
        self._err = Path(self._dir.name) / "stderr"  # a file, not a pipe nobody reads until the end
        argv = [sys.executable, "-m", "poet.plan.solver.race_worker", str(self._in), str(self._out)]
        try:
            with self._err.open("wb") as err:
                # die_with_poet ties the child to the forking thread: a Race is started and stopped in one
                # thread (solve_poet's: the main thread in the CLI and in a sweep's worker), which outlives it
                self._proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        except BaseException:  # a Ctrl-C as it starts: the caller, holding no Race, cannot stop() it
            if hasattr(self, "_proc"):
                self.stop()
            else:
                self._dir.cleanup()
            raise

    def share_bound(self, bound_j: float) -> None:
        """A lower bound proven here: the other MILP stops once its plan meets it."""
        self._bound_j = bound_j
        # Not files.write_atomic: this is a message to a live process in our own private folder, not a file
        # anyone keeps. The rename alone is what the worker needs (it never reads half a number); an fsync
        # would stall the MILP's bound callback on a busy disk for a durability the folder, deleted at the
        # end, never uses, and no link can be planted in a folder only we can write.
        part = self._bound.with_suffix(".part")
        part.write_text(repr(bound_j))
        part.rename(self._bound)

    def proved(self) -> bool:
        """It has ended with a plan proven optimal by its own bound or the shared one (checked often
        while this process's MILP runs: cheap until it ends)."""
        if self._proc.poll() is None or not self._out.exists():
            return False
        if self._done is None:
            self._done = pickle.loads(self._out.read_bytes())
        plan = self._done.plan
        return plan.status == "optimal" or (bool(plan.stages) and self._bound_j is not None
                                            and proven(plan.energy_j, self._bound_j))

    def result(self) -> Result | None:
        """Its result, waiting until its time limit (and the read-back) at most; None if it has none."""
        try:
            left = clock.left(self._t_end)
            self._proc.wait(timeout=None if math.isinf(left) else max(0.0, left) + GRACE_S)
        except subprocess.TimeoutExpired:
            return None
        if self._proc.returncode != 0 or not self._out.exists():
            err = self._err.read_text(errors="replace").strip()
            return Result(Plan("poet", [], "no-solution"), None,
                          err.splitlines()[-1] if err else f"exit {self._proc.returncode}", self._what)
        result: Result = pickle.loads(self._out.read_bytes())
        return result

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._dir.cleanup()
