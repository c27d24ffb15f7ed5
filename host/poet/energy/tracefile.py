"""The per-op trace of a run, as read back from the board, saved as JSON (`poet report` reads it).

`Trace.load` refuses, in one line, anything the energy account could not charge
honestly: a file that is not a trace, one cut off mid-JSON, a step whose records
do not cover the schedule (a truncated trace), records that name nodes the trace's
graph does not have or that disagree with them (a trace from another graph), and
impossible values (negative ticks, records taking longer than their step). Nothing
is clamped: the message says which step and record is wrong.

Each step may carry `host_t0`/`host_t1`, the host's time.time() when its STEP was sent and its
DONE arrived (poet.device.TimedStep): how `poet report --meter` lines a power meter's recording
up with the steps. Traces from before them load as they are; only --meter needs them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poet.errors import PoetError
from poet.graph.training_graph import TrainingGraph
from poet.plan.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, RECOMPUTE, Schedule

FORMAT = "poet-trace/1"
RECORD_FIELDS = ("instr", "node", "kind", "op", "ticks", "bytes")
SCHEDULE_BESIDE = "schedule.poet"  # a run directory holds the schedule the trace ran (poet.train)

# which record kinds a node of each graph kind can produce (firmware/core/interp.c trace_kind)
_COMPUTE_KIND = {"input": "forward", "forward": "forward", "loss": "forward", "backward": "backward",
                 "optimizer": "optimizer"}
_MOVES = ("page_in", "page_out", "free")
_OP_KIND = {RECOMPUTE: "recompute", PAGE_IN: "page_in", PAGE_OUT: "page_out", FREE: "free"}


@dataclass
class Trace:
    board: str
    model: str
    provenance: str  # emulated | measured
    tick_hz: float
    nodes: list[dict[str, Any]]  # name, module, kind, op, bytes per graph node
    steps: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_graph(cls, g: TrainingGraph, board: str, provenance: str, tick_hz: float) -> Trace:
        from poet.plan.memory import streamed_reads

        reads = streamed_reads(g)  # a weight streamed from the SD card: its reads, for the account
        nodes = [{"name": n.name, "module": n.module, "kind": n.kind, "op": n.op, "bytes": n.bytes,
                  **({"sd_reads": reads[n.id]} if n.id in reads else {})} for n in g.nodes]
        return cls(board, g.model, provenance, tick_hz, nodes)

    def add_step(self, result: Any, lr: float) -> None:
        st: dict[str, Any] = {
            "step": len(self.steps), "lr": lr, "loss": result.loss, "peak_live_bytes": result.peak_live_bytes,
            "peak_extent_bytes": result.peak_extent_bytes, "step_ticks": result.step_ticks,
            "records": [[r.instr, r.node, r.kind, r.op, r.ticks, r.bytes] for r in result.records],
        }
        # When the step ran on the host clock (device.TimedStep; a bare link.StepResult has none):
        # what a power meter's recording is aligned with. Optional, so older traces still load.
        t0, t1 = getattr(result, "host_t0", None), getattr(result, "host_t1", None)
        if t0 is not None and t1 is not None and math.isfinite(t0) and math.isfinite(t1):
            st["host_t0"], st["host_t1"] = float(t0), float(t1)
        self.steps.append(st)

    def host_times(self) -> list[tuple[float, float]] | None:
        """Each step's (host_t0, host_t1) in time.time() seconds, or None when any step lacks them."""
        if not all("host_t0" in st and "host_t1" in st for st in self.steps):
            return None
        return [(float(st["host_t0"]), float(st["host_t1"])) for st in self.steps]

    def save(self, path: str | Path) -> None:
        """Write atomically (a temporary file renamed over it): a run stopped mid-write keeps the last trace."""
        data = {"format": FORMAT, "record_fields": list(RECORD_FIELDS), **self.__dict__}
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, p)

    @classmethod
    def load(cls, path: str | Path, check: bool = True) -> Trace:
        """Read a saved trace; with `check`, validate it against itself and the schedule beside it."""
        p = Path(path)
        if not p.is_file():
            raise PoetError(f"trace file {p} does not exist")
        try:
            text = p.read_text()
        except UnicodeDecodeError as exc:
            raise PoetError(f"{p} is not a poet trace (not text: {exc.reason})", status=2) from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if f'"{FORMAT}"' not in text[:200]:
                raise PoetError(f"{p} is not a poet trace (not JSON: {exc})", status=2) from exc
            if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
                raise PoetError(f"{p} is cut off after {len(text)} bytes (a truncated trace: the JSON ends "
                                f"early); re-run, or keep the steps a finished run saved", status=2) from exc
            raise PoetError(f"{p} is a damaged poet trace (not JSON at byte {exc.pos}: {exc.msg})",
                            status=2) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PoetError(f"{p} is not a poet trace (expected format {FORMAT})", status=2)
        missing = [k for k in ("board", "model", "provenance", "tick_hz", "nodes", "steps") if k not in data]
        if missing:
            raise PoetError(f"{p} is not a complete poet trace (no {', '.join(missing)})", status=2)
        tr = cls(**{k: data[k] for k in ("board", "model", "provenance", "tick_hz", "nodes", "steps")},
                 plan=data.get("plan") or {})
        if check:
            sched = p.with_name(SCHEDULE_BESIDE)
            tr.check(_read_schedule(sched) if sched.is_file() else None, where=str(p))
        return tr

    def check(self, schedule: Schedule | None = None, where: str = "trace") -> None:
        """Refuse what the account could not charge; see the module docstring. One PoetError, one line."""

        def bad(msg: str) -> PoetError:
            return PoetError(f"{where}: {msg}", status=2)

        if not isinstance(self.tick_hz, int | float) or not math.isfinite(self.tick_hz) or self.tick_hz <= 0:
            raise bad(f"tick_hz {self.tick_hz!r} is not a positive rate: the trace header is damaged")
        if not isinstance(self.nodes, list) or not all(_is_node(n) for n in self.nodes):
            raise bad("its node list is not the graph nodes poet writes (name, module, kind, bytes)")
        if not isinstance(self.steps, list) or not self.steps:
            raise bad("it holds no steps: nothing to account")
        expect = _expected(schedule, self.nodes, bad) if schedule is not None else None
        first: list[tuple[int, str]] | None = None
        for k, st in enumerate(self.steps):
            recs = st.get("records") if isinstance(st, dict) else None
            if not isinstance(recs, list) or not _is_count(st.get("step_ticks")):
                raise bad(f"step {k} has no records or step_ticks: the trace is damaged")
            seq = [self._record(k, i, r, bad) for i, r in enumerate(recs)]
            ref = expect if expect is not None else first
            if ref is not None and len(seq) != len(ref):
                what = "the schedule beside it has" if expect is not None else "step 0 has"
                raise bad(f"step {k} has {len(seq)} records, {what} {len(ref)} instructions: a truncated trace "
                          f"(the run stopped mid-step?)")
            if ref is not None and seq != ref:
                i = next(i for i, (a, b) in enumerate(zip(seq, ref, strict=True)) if a != b)
                src = "the schedule beside it" if expect is not None else "step 0"
                raise bad(f"step {k} record {i} is {seq[i][1]} of node {seq[i][0]}, {src} says {ref[i][1]} of "
                          f"node {ref[i][0]}: the trace and its schedule come from different plans or graphs")
            first = first if first is not None else seq
            if ("host_t0" in st) != ("host_t1" in st) or ("host_t0" in st and not (
                    _is_time(st["host_t0"]) and _is_time(st["host_t1"]) and st["host_t0"] <= st["host_t1"])):
                raise bad(f"step {k} has host times {st.get('host_t0')!r}..{st.get('host_t1')!r}: not a "
                          f"forward window of time.time() seconds; the trace is damaged")
            used = sum(r[4] for r in recs)
            if used > st["step_ticks"]:
                raise bad(f"step {k}: its records take {used} ticks, more than the step's {st['step_ticks']}: "
                          f"impossible (the runtime times records inside the step); the trace is damaged")

    def _record(self, k: int, i: int, r: Any, bad: Any) -> tuple[int, str]:
        """(node, kind) of one record after checking its fields against the trace's own graph."""
        if not (isinstance(r, list) and len(r) == len(RECORD_FIELDS) and isinstance(r[2], str)
                and all(_is_int(v) for v in (r[0], r[1], r[3]))):
            raise bad(f"step {k} record {i} is not [{', '.join(RECORD_FIELDS)}]")
        instr, node, kind, _op, ticks, nbytes = r
        if instr != i:
            raise bad(f"step {k} record {i} says it is instruction {instr}: records are missing or repeated")
        for name, v in (("ticks", ticks), ("bytes", nbytes)):
            if not _is_count(v):
                raise bad(f"step {k} record {i} has {name} {v!r}: impossible (must be a whole number >= 0)")
        if not 0 <= node < len(self.nodes):
            raise bad(f"step {k} record {i} names node {node}, the trace's graph has {len(self.nodes)}: "
                      f"a trace from another graph")
        n = self.nodes[node]
        if kind not in _MOVES and kind != "recompute" and kind != _COMPUTE_KIND.get(n["kind"]):
            raise bad(f"step {k} record {i} is a {kind} record of {n['name']} (a {n['kind']} node): "
                      f"a trace from another graph, or an unknown kind")
        if kind == "recompute" and n["kind"] not in ("forward", "loss"):
            raise bad(f"step {k} record {i} recomputes {n['name']} (a {n['kind']} node): impossible")
        if nbytes != n["bytes"]:
            raise bad(f"step {k} record {i} moved {nbytes} B for {n['name']}, which has {n['bytes']} B: "
                      f"the records come from another graph than the trace's nodes")
        return node, kind


def same_graph(a: Trace, b: Trace) -> str | None:
    """Why two traces cannot be compared tensor by tensor, or None when they ran the same graph."""
    if a.model != b.model:
        return f"they trace different models ({a.model} and {b.model})"
    if len(a.nodes) != len(b.nodes):
        return f"their graphs differ ({len(a.nodes)} and {len(b.nodes)} nodes)"
    for x, y in zip(a.nodes, b.nodes, strict=True):
        if (x["name"], x["module"], x["kind"], x["bytes"]) != (y["name"], y["module"], y["kind"], y["bytes"]):
            return f"their graphs differ at {x['name']} ({x['bytes']} B) / {y['name']} ({y['bytes']} B)"
    return None


def _read_schedule(path: Path) -> Schedule:
    try:
        return Schedule.decode(path.read_bytes())
    except ValueError as exc:
        raise PoetError(f"{path} (the schedule beside the trace) is unreadable: {exc}", status=2) from exc


def _expected(s: Schedule, nodes: list[dict[str, Any]], bad: Any) -> list[tuple[int, str]]:
    """The (node, kind) record each schedule instruction makes (firmware/core/interp.c trace_kind)."""
    if s.n_nodes != len(nodes):
        raise bad(f"the schedule beside it is for a graph of {s.n_nodes} nodes, the trace's has {len(nodes)}: "
                  f"a trace from another graph")
    out = []
    for k, ins in enumerate(s.instrs):
        if ins.node >= len(nodes):
            raise bad(f"instruction {k} of the schedule beside it names node {ins.node} of {len(nodes)}: "
                      f"a trace from another graph")
        if ins.op == COMPUTE:
            out.append((ins.node, _COMPUTE_KIND.get(nodes[ins.node]["kind"], "?")))
        else:
            out.append((ins.node, _OP_KIND.get(ins.op, "?")))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_time(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_node(n: Any) -> bool:
    return (isinstance(n, dict) and all(isinstance(n.get(k), str) for k in ("name", "module", "kind"))
            and _is_count(n.get("bytes"))
            and (isinstance(n.get("sd_reads", []), list) and all(_is_count(b) for b in n.get("sd_reads", []))))
