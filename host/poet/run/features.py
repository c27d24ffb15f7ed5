"""A run that keeps its frozen prefix's features: epoch 1 runs the whole step and writes each batch's kept
tensor to the board's aux storage (FEATURES KEEP); from epoch 2 the board holds only the suffix (the rest
of the step, plan/transform/feature_cache.py) and each step reads its batch's features from there (STAGE).

Sample i's features lie at its place in epoch 1's order, so a later epoch's shuffle, a resume and a
rebuild all read and write the same slot for the same sample: samples are never mixed. The cache lies on
the card past every area the whole model's and the suffix's pagers and streamed weights use.

The checkpoint, the trace and the report stay the whole model's: the suffix's weights are put back among
the frozen ones it does not hold, its trace's nodes are the whole graph's (suffix node j is node c + j),
so a resume, `poet report` and the accounting see one run.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from poet.boards import Board
from poet.device.connect import Device, TimedStep
from poet.device.protocol import OPT_STATE
from poet.files import read_bytes, write_atomic
from poet.graph.training_graph import TrainingGraph
from poet.paths import runs_dir, shown
from poet.plan.lowering.lower import model_blob
from poet.plan.lowering.schedule import OK, peak_live_bytes, validate
from poet.plan.transform.feature_cache import Step, suffix_of
from poet.plan.transform.rewrites import Rewrites
from poet.progress import Say
from poet.settings import RunConfig
from poet.units import format_size

SECTOR = 512  # the cache starts on a card sector: its writes never share one with the pager's
RECORD = ("node", "base", "sample_bytes", "peak_bytes", "arena_budget")  # plan.json's "features": counts


def cache_base(*graphs: TrainingGraph) -> int:
    """The cache's first byte on the aux storage: past every graph's swap area and streamed weights."""
    end = max(model_blob(g).aux_at + model_blob(g).aux_bytes for g in graphs)
    return -(-end // SECTOR) * SECTOR


def planned_features(cfg: RunConfig, g: TrainingGraph, info: dict[str, Any], board: Board, runtime_static: int,
                     prof: dict[str, Any], samples: int, say: Say) -> tuple[dict[str, Any], bytes] | None:
    """What the run keeps after epoch 1 (plan.json's "features") and the suffix's schedule, or None: the
    planner's choice (plan/features.py) for this plan and number of epochs, kept beside the plan in its
    cache entry (features-<epochs>.json, suffix-<epochs>.poet) so a second run or a resume reuses it."""
    g_run, _ = Rewrites.from_json(info).apply(g)  # the graph the plan runs (run.plans.run_graph)
    if samples % g.batch:
        say(f"  features once: not kept ({samples} training samples are not whole batches of {g.batch}: the "
            f"{samples % g.batch} epoch 1 leaves out would have none); the frozen layers run every epoch")
        return None
    entry = runs_dir() / "plans" / str(info["key"])
    rec_path, sched_path = entry / f"features-{cfg.epochs}.json", entry / f"suffix-{cfg.epochs}.poet"
    got = _cached(rec_path, sched_path, g_run)
    if got is None:
        got = _decided(cfg, g_run, info, board, runtime_static, prof, say)
        write_atomic(sched_path, got[1])
        write_atomic(rec_path, json.dumps(got[0], indent=1).encode())  # last: it marks the entry whole
    rec, sched = got
    if rec["node"] is None:
        return None
    suffix = suffix_of(g_run, rec["node"])
    base = cache_base(g_run, suffix)
    end = base + samples * rec["sample_bytes"]
    if board.aux_bytes is not None and end > board.aux_bytes:
        say(f"  features once: not kept ({samples} samples of {format_size(rec['sample_bytes'])} end at byte {end:,}, "
            f"past the {format_size(board.aux_bytes)} of the {board.name}'s storage)")
        return None
    say(f"  features once: keeping {rec['name']} ({format_size(rec['sample_bytes'])} a sample, "
        f"{format_size(samples * rec['sample_bytes'])} on the board's storage) after epoch 1; a step then "
        f"costs {rec['later'][0] * 1e3:.4g} mJ, {rec['later'][1] * 1e3:.4g} ms, against "
        f"{info['energy_j'] * 1e3:.4g} mJ, {info['time_s'] * 1e3:.4g} ms (planned)")
    return {**rec, "base": base}, sched


def _decided(cfg: RunConfig, g_run: TrainingGraph, info: dict[str, Any], board: Board, runtime_static: int,
             prof: dict[str, Any], say: Say) -> tuple[dict[str, Any], bytes]:
    from poet.plan.features import plan_features
    from poet.plan.transform.rewrites import costed_for

    cg = costed_for(g_run, board, prof, lambda _m: None)
    best, _, p = plan_features(g_run, cg, Step(info["energy_j"], info["time_s"]), board, prof, cfg.plan,
                               runtime_static, cfg.epochs, lambda _m: None)
    if best.cut is None or p is None or p.lowered is None:
        return {"node": None}, b""
    rec = {"node": best.cut.node, "name": best.cut.name, "sample_bytes": best.cut.sample_bytes,
           "first": [best.first.energy_j, best.first.time_s], "later": [best.later.energy_j, best.later.time_s],
           "peak_bytes": p.plan.peak_bytes, "arena_budget": p.budget.arena}
    return rec, p.lowered.schedule.encode()


def record_problem(rec: object) -> str | None:
    """What is wrong with plan.json's "features" (None: nothing)."""
    if not isinstance(rec, dict):
        return "features is not an object"
    for k in RECORD:
        v = rec.get(k)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return f"features' {k} is {json.dumps(v)[:20]}, not a count"
    for k in ("first", "later"):
        v = rec.get(k)
        if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                           and math.isfinite(x) and x >= 0 for x in v)):
            return f"features' {k} is not an energy and a time"
    return None


def _cached(rec_path: Path, sched_path: Path, g_run: TrainingGraph) -> tuple[dict[str, Any], bytes] | None:
    """A decision cached beside the plan, when it verifies (its suffix schedule passes the validator against
    the suffix, peaking where its record says); else None, and it is made again."""
    if not os.path.lexists(rec_path):
        return None
    try:
        rec = json.loads(read_bytes(rec_path, follow=False))
        if isinstance(rec, dict) and rec.get("node", 0) is None:
            return rec, b""
        if record_problem({**rec, "base": 0}) is not None or not 0 < rec["node"] < len(g_run.nodes):
            return None
        sched = read_bytes(sched_path, follow=False)
        blob = model_blob(suffix_of(g_run, rec["node"]))
        if validate(sched, blob, rec["arena_budget"])[0] != OK or peak_live_bytes(sched, blob) != rec["peak_bytes"]:
            return None
    except Exception:  # noqa: BLE001 - anything wrong with a cache entry: decide again
        return None
    return rec, sched


@dataclass(frozen=True)
class Kept:
    """A run's feature cache, as its epochs use it."""

    whole: TrainingGraph  # the graph epoch 1 trains (the plan's)
    suffix: TrainingGraph
    node: int  # the kept tensor, in the whole graph
    base: int
    sample_bytes: int
    schedule: bytes  # the suffix's
    peak_bytes: int
    time_s: float  # a suffix step's, as planned (the link waits for it)
    slots: np.ndarray  # slots[i]: sample i's place in the cache (its position in epoch 1's order)

    @classmethod
    def of_run(cls, plan: dict[str, Any], whole: TrainingGraph, schedule: bytes, first: np.ndarray) -> Kept:
        rec = plan["features"]
        slots = np.empty(len(first), np.int64)
        slots[first] = np.arange(len(first))
        return cls(whole, suffix_of(whole, rec["node"]), rec["node"], rec["base"], rec["sample_bytes"], schedule,
                   rec["peak_bytes"], rec["later"][1], slots)

    def keep_at(self, step: int) -> int:
        """Where epoch 1's step `step` writes its batch (its samples' slots, one after another)."""
        return self.base + step * self.whole.batch * self.sample_bytes

    def offsets(self, samples: np.ndarray) -> list[int]:
        return [self.base + int(self.slots[i]) * self.sample_bytes for i in samples]

    def end(self) -> int:
        return self.base + len(self.slots) * self.sample_bytes

    def to_suffix(self, dev: Device, weights: list[np.ndarray], opt_state: bytes) -> None:
        """The board from the whole model to the suffix: its weights (the whole's, by name), the optimizer's
        state as it was (the trained parameters are the same, in the same order) and its schedule."""
        by_name = {name: w for w, (name, _) in zip(weights, self.whole.params, strict=True)}
        dev.load_model(self.suffix, [by_name[name] for name, _ in self.suffix.params])
        if opt_state:
            dev.link.upload(OPT_STATE, opt_state)
        dev.load_schedule(self.schedule, planned_peak=self.peak_bytes, planned_time_s=self.time_s)

    def whole_weights(self, weights: list[np.ndarray], suffix_weights: list[np.ndarray]) -> list[np.ndarray]:
        """The whole model's weights: the suffix's as trained, the rest (frozen) as they were."""
        by_name = {name: w for w, (name, _) in zip(suffix_weights, self.suffix.params, strict=True)}
        return [by_name.get(name, w) for w, (name, _) in zip(weights, self.whole.params, strict=True)]

    def as_whole(self, res: TimedStep) -> TimedStep:
        """A suffix step's result in the whole graph's node ids (suffix node j is node c + j)."""
        return replace(res, records=[replace(r, node=r.node + self.node) for r in res.records])

    def on_card(self, dev: Device) -> bool:
        """Whether the board's storage still holds epoch 1's features: an emulated board's card is the run's
        file, which must still be there and long enough; a board's own card is trusted to stay in it."""
        if dev.card is None:
            return True
        try:
            return dev.card.stat().st_size >= self.end()
        except OSError:
            return False

    def rebuild(self, dev: Device, batches: list[tuple[np.ndarray, np.ndarray]], lr: float, say: Say,
                where: Path) -> None:
        """Write epoch 1's features again (a card that lost them): each of its batches through the whole
        model (loaded, with its schedule) with KEEP. Its updates are thrown away: the caller loads the
        checkpoint's weights and optimizer state after. These steps are not the run's, and not in its trace."""
        say(f"  features once: the card in {shown(where)} lacks epoch 1's features: writing them again "
            f"({len(batches)} whole steps, not counted in the run's trace)")
        for k, (x, y) in enumerate(batches):
            dev.link.keep_features(self.node, self.keep_at(k))
            dev.step(x, y, lr)
