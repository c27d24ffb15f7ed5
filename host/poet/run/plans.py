"""A run's plan and schedule: solved once per configuration and cached (runs/plans/<key>/, by graph,
board, profile, budget, deadline and strategy), so a second run of the same configuration skips the
solver; or a schedule file given with --schedule. The plan.json a run keeps records what the graph's
rewrites made of the traced graph (poet.plan.transform.rewrites), so every later use replays them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from poet.boards import Board
from poet.device.connect import Device
from poet.errors import PoetError, UsageError
from poet.files import SMALL, load_json, read_bytes, write_atomic
from poet.graph.training_graph import TrainingGraph
from poet.paths import runs_dir, shown
from poet.plan.lowering.lower import model_blob
from poet.plan.lowering.schedule import MEANINGS, NO_DETAIL, OK, SCHEDULE_FORMAT_MAX, peak_live_bytes, validate
from poet.plan.transform.rewrites import Rewrites
from poet.plan.transform.static_int8 import Int8Prefix
from poet.progress import Say
from poet.run.folder import LOCK_FILE, Run, is_count, is_real, lock
from poet.settings import PlanRequest, RunConfig
from poet.units import parse_deadline

SCHEDULE_LIMIT = SCHEDULE_FORMAT_MAX  # the longest file any board could take (a board's own: Board.schedule_bytes)
SUFFIX_FILE = "suffix.poet"  # a run that keeps features: the schedule of what trains from them


def _plan_key(g: TrainingGraph, board: Board, profile_bytes: bytes, request: PlanRequest) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(asdict(g), sort_keys=True).encode())
    h.update(profile_bytes)
    h.update(json.dumps([board.name, request.ram, request.deadline, request.strategy, request.solver,
                         request.gap]).encode())
    if request.precision != "fp32":  # fp32 runs keep the keys (and the cached plans) they had before --precision
        rules = request.precision_rules
        # a missing file: refused later
        text = read_bytes(rules, "--precision-rules").decode(errors="replace") if rules and rules.is_file() else ""
        h.update(json.dumps([request.precision, str(rules or ""), text]).encode())
    return h.hexdigest()[:16]


def run_graph(g: TrainingGraph, plan: dict) -> tuple[TrainingGraph, Int8Prefix | None]:
    """The graph the plan's schedule runs on, made again from g by the rewrites its plan.json records
    (poet.plan.transform.rewrites), and its static-int8 prefix if it has one."""
    return Rewrites.from_json(plan).apply(g)


def run_plan(run: Run) -> dict:
    """A run's plan.json ({} when it has none, or a damaged one: then the graph is the traced one). A link or
    a device there is refused (check_entries), never read."""
    p = run.dir / "plan.json"
    if not os.path.lexists(p):
        return {}
    try:
        plan = json.loads(read_bytes(p, follow=False, limit=SMALL))
    except (ValueError, RecursionError):
        return {}
    return plan if _plan_problem(plan) is None else {}


# a plan.json's counts, and its numbers the run computes with (predictions, the step's timeout)
PLAN_COUNTS = ("recomputes", "page_ins", "page_outs", "peak_bytes", "arena_budget")


PLAN_AMOUNTS = ("energy_j", "time_s")


def _plan_problem(info: object) -> str | None:
    """What is wrong with a plan.json's values (None: nothing): each of the kind the run uses it as, and
    the energy and time finite, so a damaged file is never computed with."""
    if not isinstance(info, dict):
        return "not an object"
    if "given" in info:  # a run of a given schedule: no plan
        return None if isinstance(info["given"], str) else "given is not a path"
    for k in PLAN_COUNTS:
        if not is_count(info.get(k)):
            return f"{k} is {json.dumps(info.get(k))[:20]}, not a count"
    for k in PLAN_AMOUNTS:
        v = info.get(k)
        if not (is_real(v) and math.isfinite(v) and v >= 0):
            return f"{k} is {json.dumps(v)[:20]}, not a finite amount"
    for k in ("streamed", "w8"):
        if k in info and not (isinstance(info[k], list) and all(isinstance(n, str) for n in info[k])):
            return f"{k} is not a list of names"
    if info.get("patches") is not None:
        from poet.plan.transform.patches import Patching

        try:
            Patching.from_json(info["patches"])
        except ValueError as e:
            return str(e)
    if "features" in info:
        from poet.run.features import record_problem

        why = record_problem(info["features"])
        if why:
            return why
    if not isinstance(info.get("int8_prefix", False), bool) or not isinstance(info.get("precision", {}), dict):
        return "int8_prefix or precision is of the wrong kind"
    return None


def read_given_schedule(path: Path, g: TrainingGraph, board: Board) -> bytes:
    """--schedule's bytes, checked by the host's twin of the firmware's validator (plan/lowering/schedule.py)
    against the model, and its length against the board's schedule buffer, before a board is touched: a
    schedule the board would refuse is a bad input (exit 2), not found after the emulator boots. Its arena
    against the board's pool is left to the board, whose pool it is."""
    data = read_bytes(path, "--schedule", limit=SCHEDULE_LIMIT)
    if len(data) > board.schedule_bytes:
        raise UsageError(f"--schedule {path}: {len(data):,} B, and the {board.name} firmware holds schedules of at "
                         f"most {board.schedule_bytes:,} B (boards/{board.name}.yaml schedule_bytes)")
    status, detail = validate(data, model_blob(run_graph(g, {})[0]), 0xFFFFFFFF)
    if status != OK:
        at = f" (instruction {detail})" if detail != NO_DETAIL else ""
        raise UsageError(f"--schedule {path}: {MEANINGS[status]}{at}")
    return data


def _given_schedule(path: Path, data: bytes, run: Run, say: Say) -> dict:
    """--schedule: run this file (read and checked by read_given_schedule) instead of planning. No plan, so
    no prediction."""
    write_atomic(run.dir / "schedule.poet", data)
    say(f"\n[plan] running the schedule {shown(path)} as given ({len(data)} bytes)")
    info = {"given": str(path)}
    write_atomic(run.dir / "plan.json", json.dumps(info, indent=1).encode())
    return info


def plan_for_run(cfg: RunConfig, g: TrainingGraph, board: Board, dev: Device, run: Run, say: Say,
                 bars: bool = False, given: bytes | None = None,
                 prof: dict[str, Any] | None = None, samples: int = 0, resuming: bool = False) -> tuple[dict, bytes]:
    """The plan and schedule for this run (given: --schedule's bytes; prof: the run's profile, as
    train checked it, None with --schedule): from the cache when the same configuration was solved
    before and the cached entry verifies. The run's folder keeps both, and when the run keeps its
    frozen prefix's features after epoch 1 (poet.run.features; samples: the training set's), plan.json
    says which and suffix.poet is the schedule of the rest."""
    if cfg.schedule:
        assert given is not None
        return _given_schedule(cfg.schedule, given, run, say), given
    assert prof is not None
    # a resumed run keeps features only as it started: a cache it never wrote is not read
    before = run_plan(run).get("features") if resuming else None
    info, sched = cached_or_solved(cfg.plan, g, board, dev.runtime_static, say, bars, prof)
    if cfg.epochs > 1 and not cfg.no_feature_cache and (before is not None or not resuming):
        from poet.run.features import planned_features

        kept = planned_features(cfg, g, info, board, dev.runtime_static, prof, samples, say)
        if kept is not None and before not in (None, kept[0]):
            say("  features once: not kept (this run started keeping other features; it goes on without)")
            kept = None
        if kept is not None:
            info = {**info, "features": kept[0]}
            write_atomic(run.dir / SUFFIX_FILE, kept[1])
    if "features" not in info:
        (run.dir / SUFFIX_FILE).unlink(missing_ok=True)
    write_atomic(run.dir / "schedule.poet", sched)
    write_atomic(run.dir / "plan.json", json.dumps(info, indent=1).encode())  # last: the suffix is there before it
    return info, sched


def cached_or_solved(request: PlanRequest, g: TrainingGraph, board: Board, runtime_static: int, say: Say,
                     bars: bool, prof: dict[str, Any]) -> tuple[dict, bytes]:
    """The plan (plan.json's dict) and schedule of this request, from the cache when the same
    configuration was solved before and the cached entry verifies, else solved and cached. Shared by
    `poet train` (runtime_static from the board's HELLO) and `poet export` (from the profile), so an
    exported bundle trains with the schedule a host-driven run of the same options uses."""
    from poet.paths import profile_to_read
    from poet.plan.cost.costs import costed
    from poet.plan.request import solve_request

    prof_path = request.profile or profile_to_read(board.name)
    key = _plan_key(g, board, read_bytes(prof_path, "profile") if prof_path.exists() else b"", request)
    cache = runs_dir() / "plans" / key
    cache.mkdir(parents=True, exist_ok=True)
    # one solve per configuration: a second poet asking for it waits, then reuses the plan
    fd = lock(cache / LOCK_FILE, "the plan cache's lock", say,
              "another poet is solving the same plan: waiting for it to reuse its plan")
    try:
        cached = cached_plan(cache, g, key, say)
        if cached is not None:
            info, sched = cached
            say(f"\n[plan] reusing the plan solved for the same graph, board, profile and budget ({shown(cache)}): "
                f"{info['recomputes']} recomputes, {info['page_ins']} page-ins, peak arena {info['peak_bytes']} B")
            return info, sched
        # what did not verify goes: solve_request writes the schedule where it is, through whatever is there
        (cache / "schedule.poet").unlink(missing_ok=True)
        cg = costed(g, board, prof, estimate=True)  # what it estimates: named by decide(), once final
        deadline_s = parse_deadline(request.deadline, cg.one_pass_s)
        # plan.json, written last, marks the entry whole: a schedule without it is solved again
        p = solve_request(request, g, cg, board, runtime_static, deadline_s, say, out=cache / "schedule.poet",
                          bars=bars, prof=prof)
        if p.lowered is None:
            raise PoetError(f"model {g.model} cannot run on the board yet")
        sched = p.lowered.schedule.encode()
        info = {"strategy": p.plan.strategy, "status": p.plan.status, "energy_j": p.plan.energy_j,
                "time_s": p.plan.time_s, "peak_bytes": p.plan.peak_bytes, "arena_budget": p.budget.arena,
                "keep_all_peak": p.keep_all_peak, "recomputes": p.plan.recomputes, "page_ins": p.plan.page_ins,
                "page_outs": p.plan.page_outs, "ram_bytes": request.ram, "key": key,
                # what the rewrites made of the traced graph: replayed on it by every run of this plan
                **p.rewrites.to_json()}
        write_atomic(cache / "plan.json", json.dumps(info, indent=1).encode())  # last: it marks the entry whole
        return info, sched
    finally:
        os.close(fd)


def cached_plan(cache: Path, g: TrainingGraph, key: str, say: Say) -> tuple[dict, bytes] | None:
    """A cache entry's plan and schedule when they verify: plan.json's values are of their kinds, it is
    this key's, and its schedule passes the host's twin of the firmware's validator (CRC, graph hash,
    every instruction, the plan's arena) against the graph the plan runs, peaking where the plan says.
    Else None, and the plan is solved again: a damaged or foreign schedule would be refused by the board
    in every later run, and a wrong peak would fail the first step."""
    if not os.path.lexists(cache / "plan.json"):  # never solved, or stopped before its plan was whole
        return None
    try:
        info = load_json(read_bytes(cache / "plan.json", follow=False), "plan.json")
        sched = read_bytes(cache / "schedule.poet", follow=False, limit=SCHEDULE_LIMIT)
    except UsageError as exc:
        why: str | None = str(exc)
    else:
        why = _plan_problem(info) or (None if info.get("key") == key else "it is of another configuration") \
            or _schedule_problem(sched, g, info)
    if why:
        say(f"note: the cached plan in {shown(cache)} does not verify ({why}): solving it again")
        return None
    return info, sched


def _schedule_problem(sched: bytes, g: TrainingGraph, info: dict) -> str | None:
    """What is wrong with a cached schedule for the graph its plan runs (None: nothing)."""
    try:
        blob = model_blob(run_graph(g, info)[0])
    except (PoetError, ValueError, KeyError, TypeError, AttributeError, IndexError):  # a precision record of
        return "its plan places or casts tensors this model does not have"  # another graph, or a damaged one
    status, detail = validate(sched, blob, info["arena_budget"])
    if status != OK:
        return f"its schedule: {MEANINGS[status]}" + (f" (instruction {detail})" if detail != NO_DETAIL else "")
    peak = peak_live_bytes(sched, blob)
    if peak != info["peak_bytes"]:
        return f"its schedule peaks at {peak} B, its plan.json says {info['peak_bytes']} B"
    return None
