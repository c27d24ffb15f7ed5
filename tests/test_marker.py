"""The op marker (port_mark): the firmware holds a pin high while each schedule instruction runs, so a
power meter's logic input sees one pulse per trace record. The native runtime has no pin; with
POET_MARK_LOG it appends each edge ("<level> <ticks>") to a file instead, which is what is checked here:
one rising and one falling edge per record, alternating, each pulse spanning its record's ticks; then
the edges, replayed as a PPK2 sample stream (logic inputs in bits 24-31), must give
align.events_from_markers one event per record, in order, each as long as its pulse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_tools
from fwhelpers import native_link
from poet.device.protocol import BATCH, MODEL, SCHEDULE, WEIGHTS, StepResult
from poet.energy.meters import align as al
from poet.energy.meters import ppk2
from poet.energy.meters.base import MeterError
from poet.energy.tracefile import Trace
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch, encode_weights
from poet.plan.lowering.schedule import PAGE_IN, PAGE_OUT, RECOMPUTE
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.types import Plan
from test_runtime_ops import _poet_plans

pytestmark = needs_tools("cc", "make")

MODEL_NAME = "cnn-digits"
BATCH_SIZE = 8
STEPS = 2
LR = 0.05
CHANNEL = 0  # PPK2 D0, where docs/energy.md wires the marker
# How much longer a logged pulse may be than its record: the two extra clock reads around the
# record's own (measured: 30-70 ns at the linux port's 1 GHz ticks), with room for a slow machine.
SLACK_S = 2e-6
# Stretches with the marker low longer than this (the host's upload between steps) are shortened in
# the replayed stream; pulses are replayed tick for tick.
IDLE_CAP_TICKS = 100_000


def _graph() -> tuple[Any, TrainingGraph]:
    model, spec = get_model(MODEL_NAME, seed=0)
    return model, trace(model, MODEL_NAME, spec.input_shape, spec.classes, BATCH_SIZE, spec.input_dtype)


def _plans(g: TrainingGraph) -> dict[str, Plan]:
    paging = [p for p in _poet_plans(g)
              if {PAGE_IN, PAGE_OUT, RECOMPUTE} & {i.op for i in lower(p, g).schedule.instrs}]
    return {"keep-all": keep_all(uncosted(g)), **({"poet": paging[0]} if paging else {})}


def _run(tmp_path: Path, g: TrainingGraph, model: Any, plan: Plan) -> tuple[Trace, list[StepResult], Path]:
    log = tmp_path / "mark.log"
    rng = np.random.default_rng(3)
    with native_link(tmp_path, "linux", env={"POET_MARK_LOG": str(log)}) as link:
        tr = Trace.for_graph(g, "linux", "emulated", link.hello().tick_hz)
        link.upload(MODEL, model_blob(g).encode())
        link.upload(WEIGHTS, encode_weights(weights_of(model)))
        link.upload(SCHEDULE, lower(plan, g).schedule.encode())
        results = []
        for _ in range(STEPS):
            x = rng.standard_normal((g.batch, *g.input_shape)).astype(np.float32)
            y = rng.integers(0, g.classes, size=g.batch).astype(np.int32)
            link.upload(BATCH, encode_batch(x, y))
            res = link.step(LR)
            tr.add_step(res, LR)
            results.append(res)
    return tr, results, log


def _edges(log: Path) -> tuple[list[int], np.ndarray]:
    """Levels and unwrapped tick times (port_ticks wraps at 2^32) of the logged edges."""
    rows = [line.split() for line in log.read_text().splitlines()]
    assert rows and all(len(r) == 2 and r[0] in ("0", "1") for r in rows), f"malformed marker log: {rows[:3]}"
    levels = [int(r[0]) for r in rows]
    raw = np.array([int(r[1]) for r in rows], dtype=np.int64)
    return levels, np.concatenate([[0], np.cumsum(np.diff(raw) % 2**32)])


def _ppk2_stream(levels: list[int], t: np.ndarray) -> tuple[bytes, np.ndarray]:
    """PPK2 words, one per tick, the marker on logic input CHANNEL; and each edge's sample index."""
    at = np.empty(len(t), dtype=np.int64)
    at[0] = 1000  # low samples before the first rise
    for k in range(1, len(t)):
        dt = int(t[k] - t[k - 1])
        at[k] = at[k - 1] + (min(dt, IDLE_CAP_TICKS) if levels[k - 1] == 0 else dt)
    delta = np.zeros(int(at[-1]) + 1000, dtype=np.int8)
    np.add.at(delta, at, np.where(np.asarray(levels) == 1, 1, -1).astype(np.int8))
    level = np.cumsum(delta, dtype=np.int8).astype(np.uint32)
    adc = np.uint32(1000) + np.uint32(500) * level  # more current while an op runs
    words = adc | (level << np.uint32(24 + CHANNEL))
    return words.astype("<u4").tobytes(), at


@pytest.mark.parametrize("which", ["keep-all", "poet"])
def test_marker_pulses_one_per_record_and_align_recovers_them(tmp_path: Path, which: str) -> None:
    model, g = _graph()
    plans = _plans(g)
    if which not in plans:
        pytest.skip(f"no {which} plan that pages or recomputes for {MODEL_NAME}")
    plan = plans[which]
    tr, results, log = _run(tmp_path, g, model, plan)
    records = [r for res in results for r in res.records]
    assert len(records) == STEPS * len(lower(plan, g).schedule.instrs)
    if which == "poet":
        assert {"page_in", "page_out", "recompute"} & {r.kind for r in records}

    levels, t = _edges(log)
    assert levels == [1, 0] * len(records), (
        f"{len(levels)} edges for {len(records)} records; first ones {levels[:8]}")
    rise, fall = t[0::2], t[1::2]
    assert np.all(rise[1:] >= fall[:-1])
    span = fall - rise
    ticks = np.array([r.ticks for r in records], dtype=np.int64)
    slack = SLACK_S * tr.tick_hz
    bad = np.flatnonzero((span < ticks) | (span > ticks + slack))
    assert not bad.size, (f"record {int(bad[0])} ({records[bad[0]].kind}) took {ticks[bad[0]]} ticks but its "
                          f"pulse spans {span[bad[0]]}")
    # the pulses of one step lie within its step_ticks
    n = len(results[0].records)
    for s, res in enumerate(results):
        assert fall[(s + 1) * n - 1] - rise[s * n] <= res.step_ticks

    data, at = _ppk2_stream(levels, t)
    rec = ppk2.recording_from_bytes(data, ppk2.Calibration(), vdd_v=3.0)
    events = al.events_from_markers(tr, rec, CHANNEL)
    assert [e.key for e in events] == al.record_keys(tr)
    start = np.array([e.start_s for e in events]) / ppk2.PERIOD_S
    end = np.array([e.end_s for e in events]) / ppk2.PERIOD_S
    # an edge lies half a sample before the first sample showing the new level
    np.testing.assert_allclose(start, at[0::2] - 0.5, atol=1e-6)
    np.testing.assert_allclose(end, at[1::2] - 0.5, atol=1e-6)
    np.testing.assert_allclose(end - start, span, atol=1e-6)
    # and nothing on another channel
    with pytest.raises(MeterError):
        al.events_from_markers(tr, rec, CHANNEL + 1)
