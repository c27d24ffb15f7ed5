"""Run one of the planner's MILPs with HiGHS or CBC, and repeat only what the solver proved.

A solver's "optimal" is a claim about two numbers: the objective of the solution it returns
and a lower bound on every solution's objective. poet checks both before it says "optimal":
the objective is recomputed here from the returned (rounded) values, and the status is
`optimal` only when that objective is within a hair of the bound the solver reports; else
`feasible`, with the gap. Where the solver's own account of its solution disagrees with the
solution (its objective is not the solution's), its bound is not trusted either.

HiGHS 1.16.0 gives such an account when it is handed a start (`setSolution`) and its presolve
moves part of the objective into a constant: it evaluates the start in the reduced problem
without that constant ("MIP start solution is feasible in the reduced space: objective value
is ..."), takes it for better than anything the search can find, and returns the start as
optimal, gap 0 (the POET reference's linear.m0 at 3300 B, 1x: the start is capuchin's plan at
0.105627 J, the optimum 0.105044 J). HiGHS 1.15.1 handles the same start correctly. When a
warm solve's account is inconsistent, poet solves again without the start, and keeps the start
if that solve, stopped by its time limit, finds nothing better. constraints.txt pins 1.15.1.

HiGHS checks its time limit between steps, and one step can run long: at the root of a large MILP
it computes an analytic centre, an interior-point solve that neither the limit nor a callback
stops (1.15.1, HighsMipSolverData::startAnalyticCenterComputation: up to 200 IPX iterations, 15-17
s on MobileNetV1's 44k-variable MILP at 25% of keep-everything on the nRF52840). So HiGHS runs on
a thread of its own, and OVERRUN_S past its limit poet takes the best solution HiGHS reported and
the last bound it told, and goes on; that thread stops at HiGHS's next callback. One HiGHS solve
runs at a time: a new one waits for such a thread first (settle()), as does the interpreter's exit.

A signal (Ctrl-C, or the CLI's SIGTERM and SIGHUP) reaches Python only in the main thread and only
between bytecodes: a HiGHS solve run in the main thread held it until the solve returned (a round of
the row relaxation: 50 s). So every HiGHS solve poet runs, the relaxations' too, runs on a thread of
its own (run_highs) while the main thread waits on an event, which a signal interrupts at once: the
KeyboardInterrupt goes on up (the CLI exits 130, 143 or 129) and HiGHS, told to stop, stops at its
next callback. At exit poet waits for that a moment (STOP_WAIT_S), not for a step no callback ends.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import math
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulp

from poet.errors import signal_of
from poet.plan.solver import clock
from poet.progress import Say

# The solution's objective may exceed the bound by this much (relative) and still be optimal:
# the solvers work to 1e-9 feasibility, and the bound is an LP value.
PROVEN_REL_TOL = 1e-7

# How long past its time limit HiGHS may run before poet goes on with its best solution so far
OVERRUN_S = 1.0

# How long the interpreter's exit waits for a HiGHS solve a signal left (told to stop: it stops at its
# next callback, within milliseconds) before it exits without finalising: a step no callback ends (the
# analytic centre, above) would otherwise hold a Ctrl-C'd poet for seconds
STOP_WAIT_S = 0.5


@dataclass
class _Left:
    """A HiGHS solve poet went on without, told to stop; `done` is set once it has."""

    done: threading.Event
    status: int | None = None  # the exit status of the signal that left it (130: Ctrl-C); None: its limit


_running: list[_Left] = []


def settle() -> None:
    """Wait until every HiGHS solve left running (past its limit, or by a signal) has stopped (at its
    next callback): one still running when the interpreter finalises aborts the process as it calls back."""
    while _running:
        _running[-1].done.wait()
        _running.pop()


def _settle_at_exit() -> None:
    signalled = [left.status for left in _running if left.status is not None]
    try:
        if signalled:
            # poet is stopping on a signal: a moment for HiGHS to see its stop, then out without the
            # finalisation its thread would abort (the status is the one the CLI returned for that signal)
            end = time.monotonic() + STOP_WAIT_S
            if not all(left.done.wait(max(0.0, end - time.monotonic())) for left in _running):
                _exit_now(signalled[0])
        elif _running:
            print("poet: waiting for HiGHS, left past its time limit, to stop", file=sys.stderr, flush=True)
        settle()
    except KeyboardInterrupt as exc:  # a second Ctrl-C while waiting: go now
        _exit_now(signal_status(exc))


def _exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def signal_status(exc: BaseException) -> int:
    """The exit status of a process stopped by `exc`: 128 + the signal (the CLI's Terminated carries
    its signum; a plain KeyboardInterrupt is a Ctrl-C, SIGINT: 130)."""
    return 128 + signal_of(exc)


atexit.register(_settle_at_exit)


def run_highs(h: Any, wait_s: float | None = None) -> bool:
    """h.run() (a highspy.Highs) on a thread of its own, waited for `wait_s` seconds at most (None: until
    it ends); True if it ended, False if poet goes on without it (it stops at its next callback: settle()).

    A KeyboardInterrupt while waiting (a Ctrl-C, the CLI's Terminated) tells HiGHS to stop the same way
    and goes on up at once: HiGHS run in the main thread would hold the signal until it returned."""
    stopping = threading.Event()

    def interrupt(e: Any) -> None:
        if stopping.is_set():
            e.interrupt()

    # every kind of solve HiGHS runs asks its own: a MIP between nodes, the simplex and IPX per iteration
    h.cbSimplexInterrupt += interrupt
    h.cbIpmInterrupt += interrupt
    h.cbMipInterrupt += interrupt
    done = threading.Event()  # not Thread.join: once a Ctrl-C interrupts that, it stops waiting (3.11)

    def run() -> None:
        try:
            h.run()
        finally:
            done.set()

    thread = threading.Thread(target=run, name="highs", daemon=True)
    try:  # the thread starts inside the try: a signal just after it starts still stops it
        thread.start()
        if done.wait(wait_s):
            return True
    except BaseException as exc:
        stopping.set()
        if isinstance(exc, KeyboardInterrupt):
            _running.append(_Left(done, signal_status(exc)))
        elif thread.is_alive():  # (not a thread that failed to start: it would never be done)
            _running.append(_Left(done))
        raise
    stopping.set()
    _running.append(_Left(done))
    return False


@dataclass
class Outcome:
    """What a solve established, in the MILP's own objective units."""

    status: str  # optimal (proven) | feasible | infeasible | no-solution
    solve_time_s: float
    solver: str
    objective: float | None = None  # of the solution the variables now hold, recomputed here
    bound: float | None = None  # no solution's objective is below this (None: the solver gave none)
    note: str = ""  # why the status is weaker than the solver said, if it is

    @property
    def gap(self) -> float:
        """1 - bound / objective (0 when proven, inf when nothing bounds it)."""
        return relative_gap(self.objective, self.bound)


def relative_gap(objective: float | None, bound: float | None) -> float:
    if objective is None or bound is None:
        return math.inf
    if objective <= 0 or bound >= objective:
        return 0.0
    return 1.0 - max(bound, 0.0) / objective


def proven(objective: float, bound: float | None) -> bool:
    return bound is not None and objective - bound <= PROVEN_REL_TOL * max(abs(objective), 1e-12)


def objective_value(prob: pulp.LpProblem) -> float:
    """The objective of the values the variables hold, integers rounded as the plan reads them."""
    total = prob.objective.constant
    for v, c in prob.objective.items():
        x = v.varValue or 0.0
        total += c * (round(x) if v.cat == pulp.LpInteger else x)
    return float(total)


def solve(prob: pulp.LpProblem, solver: str, time_limit_s: float, gap: float = 0.0, warm: bool = False,
          say: Say | None = None, stop_at: float | None = None, seed: int = 0,
          stop: Callable[[float], bool] | None = None) -> Outcome:
    """Solve `prob` (minimising); warm: start from the values the variables hold (setInitialValue).

    stop_at: an objective no solution can beat, known from elsewhere (a relaxation's bound): HiGHS
    stops as soon as its incumbent reaches it (objective_target), instead of proving it with its
    own bound; CBC runs on. The caller proves the plan by the outside bound either way.
    seed: HiGHS's random seed (two solves of one MILP racing on two cores take different paths).
    stop: HiGHS asks it as it searches, with its incumbent's objective (inf: none yet), and stops
    with that incumbent when it says so (plan/solver/race.py)."""
    say = say or (lambda _msg: None)
    if solver not in ("highs", "cbc"):
        raise ValueError(f"unknown solver {solver!r} (highs or cbc)")
    start = {v.name: v.varValue for v in prob.variables()} if warm else {}
    start_obj = objective_value(prob) if warm else math.inf
    t0 = time.perf_counter()
    limit = clock.solver_limit(time_limit_s)  # None: no limit (POET_NO_TIME_LIMITS)

    def run(warm: bool) -> Outcome:
        if solver == "highs":
            return _highs(prob, limit, gap, warm, stop_at, seed, stop)
        return _cbc(prob, limit, gap, warm)

    out = run(warm)
    if warm and out.note.startswith("inconsistent"):
        say(f"{out.solver}: {out.note}; solving again without the start")
        out = run(False)
        out.note = f"{solver} mis-read the start (poet/milp.py: highspy 1.16.0 does); solved again without it"
    if warm and (out.objective is None or out.objective > start_obj):
        # a cold solve stopped by its time limit: the start is still the best plan known
        for v in prob.variables():
            v.varValue = start.get(v.name)
        out.objective = start_obj
        out.status = "optimal" if proven(start_obj, out.bound) else "feasible"
    out.solve_time_s = time.perf_counter() - t0
    return out


def _finish(out: Outcome, gap: float) -> Outcome:
    """Call the solution optimal only if its objective meets the bound."""
    if out.status == "optimal" and (out.objective is None or not proven(out.objective, out.bound)):
        out.status = "feasible"
        if not out.note:
            out.note = ("stopped within the requested gap" if gap > 0 else
                        f"the solver said optimal, but its bound {out.bound!r} is below the plan's {out.objective!r}")
    return out


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS 1.16 prints its banner on creation, before output_flag can be set."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (a captured one): nothing to silence
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


@dataclass
class _Reported:
    """What HiGHS has told the callbacks so far: its best solution (column values, in the order of
    prob.variables()) and its bound."""

    values: list[float] | None = None
    bound: float | None = None


class _Overran(Exception):
    """HiGHS ran OVERRUN_S past its time limit; what it had reported by then."""

    def __init__(self, reported: _Reported) -> None:
        super().__init__("HiGHS ran past its time limit")
        self.reported = reported


class _Highs(pulp.HiGHS):  # type: ignore[misc,valid-type]
    """PuLP's HiGHS API, quiet, with the variables' values handed to HiGHS as a start if warm, run
    on a thread that poet leaves OVERRUN_S past the time limit (module docstring)."""

    def __init__(self, warm: bool, stop: Callable[[float], bool] | None = None, **kw: object) -> None:
        super().__init__(**kw)
        self.warm = warm
        self.stop = stop

    def createAndConfigureSolver(self, lp: pulp.LpProblem) -> None:
        with _quiet_stdout():
            super().createAndConfigureSolver(lp)

    def callSolver(self, lp: pulp.LpProblem) -> None:
        h = lp.solverModel
        if self.warm:
            import highspy

            sol = highspy.HighsSolution()
            sol.col_value = [float(v.varValue or 0.0) for v in lp.variables()]
            sol.value_valid = True
            h.setSolution(sol)
        reported, stop = _Reported(), self.stop

        def improving(e: Any) -> None:
            reported.values = [float(x) for x in e.data_out.mip_solution]
            reported.bound = _finite(e.data_out.mip_dual_bound)

        def interrupt(e: Any) -> None:
            reported.bound = _finite(e.data_out.mip_dual_bound)
            if stop is not None and stop(e.data_out.mip_primal_bound):
                e.interrupt()

        h.cbMipImprovingSolution += improving
        h.cbMipInterrupt += interrupt
        # past the limit poet goes on with what HiGHS reported; a Ctrl-C goes on up (run_highs)
        if not run_highs(h, self.timeLimit + OVERRUN_S if self.timeLimit is not None else None):
            raise _Overran(reported)


def _highs(prob: pulp.LpProblem, time_limit_s: float | None, gap: float, warm: bool,
           stop_at: float | None = None, seed: int = 0, stop: Callable[[float], bool] | None = None) -> Outcome:
    opts: dict[str, float] = {"mip_abs_gap": 0.0, "primal_feasibility_tolerance": 1e-9,
                              "mip_feasibility_tolerance": 1e-9, "random_seed": seed}
    if stop_at is not None:  # HiGHS stops with kObjectiveTarget once its incumbent is at or below it
        opts["objective_target"] = stop_at
    api = _Highs(warm, stop, msg=False, timeLimit=time_limit_s, gapRel=gap, **opts)
    if not api.available():  # fallback: the highs executable through PuLP, no start, no bound
        prob.solve(pulp.HiGHS_CMD(msg=False, timeLimit=time_limit_s, gapRel=gap))
        return _finish(_from_pulp(prob, "highs-cmd"), gap)
    import highspy

    settle()
    try:
        prob.solve(api)
    except _Overran as over:
        return _finish(_overran(prob, over.reported, time_limit_s), gap)
    h = prob.solverModel
    status, info = h.getModelStatus(), h.getInfo()
    ms = highspy.HighsModelStatus
    if status in (ms.kInfeasible, ms.kUnboundedOrInfeasible):
        return Outcome("infeasible", 0.0, "highs")
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible
        return Outcome("no-solution", 0.0, "highs", bound=_finite(info.mip_dual_bound))
    out = Outcome("optimal" if status == ms.kOptimal else "feasible", 0.0, "highs",
                  objective=objective_value(prob), bound=_finite(info.mip_dual_bound))
    claimed = info.objective_function_value
    assert out.objective is not None
    if not math.isclose(claimed, out.objective, rel_tol=1e-6, abs_tol=1e-12):
        out.status, out.bound = "feasible", None
        out.note = (f"inconsistent: highspy {_version('highspy')} reported objective {claimed!r} for a solution "
                    f"whose objective is {out.objective!r}")
    return _finish(out, gap)


def _overran(prob: pulp.LpProblem, reported: _Reported, time_limit_s: float | None) -> Outcome:
    note = f"HiGHS ran past its {time_limit_s or 0:.0f} s limit (milp.py, OVERRUN_S): its best solution by then"
    if reported.values is None:
        return Outcome("no-solution", 0.0, "highs", bound=reported.bound, note=note)
    for v, x in zip(prob.variables(), reported.values, strict=True):
        v.varValue = x
    return Outcome("feasible", 0.0, "highs", objective=objective_value(prob), bound=reported.bound, note=note)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _cbc(prob: pulp.LpProblem, time_limit_s: float | None, gap: float, warm: bool) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cbc.log"
        with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC, still the one we have
            warnings.simplefilter("ignore", DeprecationWarning)
            cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=gap, logPath=str(log), warmStart=warm,
                                    options=["primalTolerance 1e-9", "integerTolerance 1e-9"])
        prob.solve(cmd)
        text = log.read_text() if log.exists() else ""
    out = _from_pulp(prob, "cbc")
    if out.status not in ("optimal", "feasible"):
        return out
    # CBC's log: "Search completed - best objective X" when it proved X optimal (to its gap),
    # "Lower bound: B" when it stopped early; "Objective value:" is its incumbent
    claimed = re.search(r"^Objective value:\s+(\S+)", text, re.M)
    if claimed and out.objective is not None and not math.isclose(float(claimed.group(1)), out.objective,
                                                                   rel_tol=1e-5, abs_tol=1e-12):
        out.status, out.note = "feasible", (f"inconsistent: CBC reported objective {claimed.group(1)} for a "
                                            f"solution whose objective is {out.objective!r}")
        return out
    bound = re.search(r"^Lower bound:\s+(\S+)", text, re.M)
    if out.status == "optimal" and gap == 0:
        out.bound = out.objective  # CBC proved it; its log prints the bound only when it stops early
    elif bound:
        out.bound = float(bound.group(1))
    elif out.objective is not None and gap > 0:
        out.bound = out.objective * (1 - gap)  # stopped within the requested gap: a bound at least that good
    return _finish(out, gap)


def _from_pulp(prob: pulp.LpProblem, name: str) -> Outcome:
    sol = prob.sol_status
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return Outcome("optimal" if sol == pulp.LpSolutionOptimal else "feasible", 0.0, name,
                       objective=objective_value(prob))
    if sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        return Outcome("infeasible", 0.0, name)
    return Outcome("no-solution", 0.0, name)
