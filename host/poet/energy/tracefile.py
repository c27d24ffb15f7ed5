"""The per-op trace of a run, as read back from the board, saved as JSON (`poet report` reads it).

`Trace.load` refuses, in one line, anything the energy account could not charge
honestly: a file that is not a trace, one cut off mid-JSON, a step whose records
do not cover the schedule (a truncated trace), records that name nodes the trace's
graph does not have or that disagree with them (a trace from another graph), and
impossible values (negative ticks, records taking longer than their step). Nothing
is clamped: the message says which step and record is wrong.

Every number is checked against what a board can produce (firmware/core/interp.h's
poet_trace_t and poet_step_result_t): ticks, step_ticks and bytes are 32-bit counters, instr
and node 16-bit, op 8-bit, the timer rate the 32-bit `port_tick_hz()`; a bool is not a
number, and a loss, a learning rate or a host time is finite. A trace is a file a user hands
over: one holding 1e30 ticks, a tick rate of `true` or a denormal would otherwise be reported
as if measured, and one of 10^400 ticks would fail inside the arithmetic. Names are printable
text (they reach one-line messages and plot labels), the board one poet knows.

Each step may carry `host_t0`/`host_t1`, the host's time.time() when its STEP was sent and its
DONE arrived (poet.device.TimedStep): how `poet report --meter` lines a power meter's recording
up with the steps. Traces from before them load as they are; only --meter needs them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poet.errors import PoetError, UsageError
from poet.files import MB, load_json, read_bytes, read_text, write_atomic
from poet.graph.training_graph import TrainingGraph
from poet.plan.lowering.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, RECOMPUTE, Schedule

FORMAT = "poet-trace/1"
RECORD_FIELDS = ("instr", "node", "kind", "op", "ticks", "bytes")
SCHEDULE_BESIDE = "schedule.poet"  # a run directory holds the schedule the trace ran (poet.train)
SUFFIX_BESIDE = "suffix.poet"  # and, when it keeps features, the schedule of the steps that read them
# A trace holds every record of every step, ~30 bytes each: ResNet-18's ~2,000 records a step for
# 1,000 steps is 60 MB. 512 MB is far past any run poet makes, and short of what parsing it would
# need of a small host's memory (Python holds a parsed record in ~10x its text).
TRACE_LIMIT = 512 * MB
# A schedule is 8 bytes an instruction, at most 65,536 of them (instr is a u16): half a megabyte
SCHEDULE_LIMIT = 1 * MB

# The widths of the firmware's trace fields (firmware/core/interp.h poet_trace_t, poet_step_result_t,
# port.h port_tick_hz): nothing a board sends can lie outside them
U32 = 2**32 - 1
U16 = 2**16 - 1
U8 = 2**8 - 1
MAX_NODES = 0xFFFE  # firmware/core/model.h POET_MAX_NODES
# A board's timer: the slowest a port could use is a 32 kHz RTC, 1 kHz leaves room below it; the
# fastest is what a u32 holds (Linux ports report 1 GHz)
MIN_TICK_HZ = 1_000
# time.time() seconds of a step's host window: after 1970 and before 2286 (1e10 s), far past any run
MAX_HOST_TIME = 1e10
MAX_NAME = 1_000  # characters of a node, module or model name (the longest zoo name is under 100)
PROVENANCES = ("emulated", "measured")

# which record kinds a node of each graph kind can produce (firmware/core/interp.c trace_kind)
_COMPUTE_KIND = {"input": "forward", "forward": "forward", "loss": "forward", "backward": "backward",
                 "optimizer": "optimizer"}
_MOVES = ("page_in", "page_out", "free")
# the feature cache's records (docs/spec.md 6, FEATURES): a kept forward tensor written after its compute, the
# batch's features read into the staging region (the input's record) before the first instruction; no
# schedule instruction makes them
# a read names the suffix's input, or in a run's trace (poet.run.features) the whole graph's kept forward tensor
_CACHE = {"cache_write": ("forward",), "cache_read": ("input", "forward")}
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
        from poet.plan.cost.memory import streamed_reads

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
        if t0 is not None and t1 is not None and _is_time(t0) and _is_time(t1):
            st["host_t0"], st["host_t1"] = float(t0), float(t1)
        self.steps.append(st)

    def host_times(self) -> list[tuple[float, float]] | None:
        """Each step's (host_t0, host_t1) in time.time() seconds, or None when any step lacks them."""
        if not all("host_t0" in st and "host_t1" in st for st in self.steps):
            return None
        return [(float(st["host_t0"]), float(st["host_t1"])) for st in self.steps]

    def save(self, path: str | Path) -> None:
        """Write atomically (files.write_atomic: a fresh temporary renamed over it, never through a planted
        link): a run stopped mid-write keeps the last trace. A loss that is not finite (a diverged step) is
        written as null: JSON has no NaN, and `load` refuses what JSON has not."""
        steps = [{**st, "loss": st["loss"] if _is_finite(st.get("loss")) else None} if "loss" in st else st
                 for st in self.steps]
        data = {"format": FORMAT, "record_fields": list(RECORD_FIELDS), **{**self.__dict__, "steps": steps}}
        write_atomic(path, json.dumps(data, separators=(",", ":"), allow_nan=False))

    @classmethod
    def load(cls, path: str | Path, check: bool = True) -> Trace:
        """Read a saved trace; with `check`, validate it against itself and the schedule beside it.
        A regular file only (files.read_text: a link to /dev/zero or a FIFO is refused, not read forever)."""
        p = Path(path)
        text = read_text(p, "trace file", limit=TRACE_LIMIT)
        data = _parse(p, text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PoetError(f"{p} is not a poet trace (expected format {FORMAT})", status=2)
        missing = [k for k in ("board", "model", "provenance", "tick_hz", "nodes", "steps") if k not in data]
        if missing:
            raise PoetError(f"{p} is not a complete poet trace (no {', '.join(missing)})", status=2)
        tr = cls(**{k: data[k] for k in ("board", "model", "provenance", "tick_hz", "nodes", "steps")},
                 plan=data.get("plan") if data.get("plan") is not None else {})
        if check:
            sched, suffix = p.with_name(SCHEDULE_BESIDE), p.with_name(SUFFIX_BESIDE)
            tr.check(_read_schedule(sched) if sched.exists() or sched.is_symlink() else None, where=str(p),
                     suffix=_read_schedule(suffix) if suffix.exists() or suffix.is_symlink() else None)
        return tr

    def check(self, schedule: Schedule | None = None, where: str = "trace", suffix: Schedule | None = None) -> None:
        """Refuse what the account could not charge; see the module docstring. One PoetError, one line.
        suffix: a run that keeps features (poet.run.features): the schedule its steps that read them ran,
        its node j the trace's node c + j (c: the kept tensor, plan's "features")."""

        def bad(msg: str) -> PoetError:
            return PoetError(f"{where}: {msg}", status=2)

        self._check_header(bad)
        if not isinstance(self.nodes, list) or not self.nodes:
            raise bad("its nodes are not a list of the graph's nodes: the trace is damaged")
        if len(self.nodes) > MAX_NODES:
            raise bad(f"it has {len(self.nodes)} nodes, more than a model can ({MAX_NODES}, a u16 node index)")
        for j, n in enumerate(self.nodes):
            _check_node(j, n, bad)
        if not isinstance(self.steps, list) or not self.steps:
            raise bad("it holds no steps: nothing to account")
        kept = self.plan.get("features") if isinstance(self.plan, dict) else None
        cut = kept.get("node") if isinstance(kept, dict) else None
        expects = {False: _expected(schedule, self.nodes, bad) if schedule is not None else None,
                   True: _expected(suffix, self.nodes[cut:], bad, cut) if suffix is not None and _is_count(cut)
                   and 0 < cut < len(self.nodes) else None}
        firsts: dict[bool, list[tuple[int, str]] | None] = {False: None, True: None}
        for k, st in enumerate(self.steps):
            recs = st.get("records") if isinstance(st, dict) else None
            if not isinstance(recs, list) or "step_ticks" not in st:
                raise bad(f"step {k} has no records or step_ticks: the trace is damaged")
            _check_step(k, st, bad)
            every = [self._record(k, i, r, bad) for i, r in enumerate(recs)]
            seq = [rec for rec in every if rec[1] not in _CACHE]
            read = any(rec[1] == "cache_read" for rec in every)  # a step of the suffix, from its features
            expect, first = expects[read], firsts[read]
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
            firsts[read] = first if first is not None else seq
            if ("host_t0" in st) != ("host_t1" in st) or ("host_t0" in st and not (
                    _is_time(st["host_t0"]) and _is_time(st["host_t1"]) and st["host_t0"] <= st["host_t1"])):
                raise bad(f"step {k} has host times {_shown(st.get('host_t0'))}..{_shown(st.get('host_t1'))}: not a "
                          f"forward window of time.time() seconds (0 to {MAX_HOST_TIME:g}); the trace is damaged")
            used = sum(r[4] for r in recs)
            if used > st["step_ticks"]:
                raise bad(f"step {k}: its records take {used} ticks, more than the step's {st['step_ticks']}: "
                          f"impossible (the runtime times records inside the step); the trace is damaged")

    def _check_header(self, bad: Any) -> None:
        from poet.boards import board_names

        if not isinstance(self.board, str) or self.board not in board_names():
            raise bad(f"board {_shown(self.board)} is not a board poet knows ({', '.join(board_names())})")
        if not _is_name(self.model):
            raise bad(f"model {_shown(self.model)} is not a model name (printable text, 1 to {MAX_NAME} "
                      f"characters)")
        if self.provenance not in PROVENANCES:
            raise bad(f"provenance {_shown(self.provenance)} is not {' or '.join(PROVENANCES)}")
        hz = self.tick_hz
        if not (_is_finite(hz) and float(hz).is_integer() and MIN_TICK_HZ <= hz <= U32):
            raise bad(f"tick_hz {_shown(hz)} is not a board timer's rate (a whole number of Hz from "
                      f"{MIN_TICK_HZ:,} to {U32:,}, the firmware's 32-bit port_tick_hz): the trace header is "
                      f"damaged")
        if not isinstance(self.plan, dict):
            raise bad(f"plan is {type(self.plan).__name__}, not the plan's summary (an object)")

    def _record(self, k: int, i: int, r: Any, bad: Any) -> tuple[int, str]:
        """(node, kind) of one record after checking its fields against the trace's own graph."""
        if not (isinstance(r, list) and len(r) == len(RECORD_FIELDS) and isinstance(r[2], str)
                and all(_is_int(v) for v in (r[0], r[1], r[3]))):
            raise bad(f"step {k} record {i} is not [{', '.join(RECORD_FIELDS)}]")
        instr, node, kind, op, ticks, nbytes = r
        if instr != i:
            raise bad(f"step {k} record {i} says it is instruction {_shown(instr)}: records are missing or "
                      f"repeated")
        if i > U16:
            raise bad(f"step {k} has more than {U16 + 1} records: more than a schedule holds (instr is a u16)")
        if not 0 <= op <= U8:
            raise bad(f"step {k} record {i} has op {_shown(op)}: not an op code the firmware has (0 to {U8})")
        for name, v in (("ticks", ticks), ("bytes", nbytes)):
            _check_u32(f"step {k} record {i} has {name}", v, bad)
        if not 0 <= node < len(self.nodes):
            raise bad(f"step {k} record {i} names node {_shown(node)}, the trace's graph has {len(self.nodes)}: "
                      f"a trace from another graph")
        n = self.nodes[node]
        if kind in _CACHE:
            if n["kind"] not in _CACHE[kind]:
                raise bad(f"step {k} record {i} is a {kind} record of {n['name']} (a {n['kind']} node): the feature "
                          f"cache writes and reads forward tensors (or reads the input)")
        elif kind not in _MOVES and kind != "recompute" and kind != _COMPUTE_KIND.get(n["kind"]):
            raise bad(f"step {k} record {i} is a {_shown(kind)} record of {n['name']} (a {n['kind']} node): "
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
    data = read_bytes(path, "the schedule beside the trace:", limit=SCHEDULE_LIMIT)
    try:
        return Schedule.decode(data)
    except ValueError as exc:
        raise PoetError(f"{path} (the schedule beside the trace) is unreadable: {exc}", status=2) from exc


def _parse(p: Path, text: str) -> Any:
    """The trace's JSON (files.load_json: no NaN, no infinities, no bottomless nesting), or one line saying
    whether the file is no trace at all, a trace cut off mid-write, or a damaged one."""
    try:
        return load_json(text, str(p))
    except UsageError as exc:
        detail = str(exc).removeprefix(f"{p}: ")
        if f'"{FORMAT}"' not in text[:200]:
            raise PoetError(f"{p} is not a poet trace ({detail})", status=2) from None
        try:
            json.loads(text)
        except json.JSONDecodeError as cut:
            if cut.pos >= len(text.rstrip()) or cut.msg.startswith("Unterminated string"):
                raise PoetError(f"{p} is cut off after {len(text)} bytes (a truncated trace: the JSON ends "
                                f"early); re-run, or keep the steps a finished run saved", status=2) from None
        except (ValueError, RecursionError):
            pass
        raise PoetError(f"{p} is a damaged poet trace ({detail})", status=2) from None


def _shown(v: Any) -> str:
    """A value from the file for a one-line message: its repr, cut short (a 4,000-digit number, a long name)."""
    text = repr(v) if not (isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30) else \
        f"a number of {len(str(abs(v)))} digits"
    return text if len(text) <= 40 else text[:37] + "..."


def _check_u32(what: str, v: Any, bad: Any) -> None:
    if not _is_count(v) or v > U32:
        raise bad(f"{what} {_shown(v)}: impossible (the firmware's 32-bit counters hold a whole number from 0 "
                  f"to {U32})")


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_NAME and v.isprintable()


def _check_node(j: int, n: Any, bad: Any) -> None:
    if not isinstance(n, dict):
        raise bad(f"node {j} is {type(n).__name__}, not a graph node (name, module, kind, op, bytes)")
    for key in ("name", "module", "kind"):
        if not _is_name(n.get(key)):
            raise bad(f"node {j} has {key} {_shown(n.get(key))}: not a name poet writes (printable text, "
                      f"1 to {MAX_NAME} characters)")
    if n["kind"] not in _COMPUTE_KIND:
        raise bad(f"node {j} ({n['name']}) has kind {_shown(n['kind'])}: not a graph node kind "
                  f"({', '.join(_COMPUTE_KIND)})")
    if "op" in n and not (_is_name(n["op"]) or _is_int(n["op"])):
        raise bad(f"node {j} ({n['name']}) has op {_shown(n['op'])}: not an op name")
    _check_u32(f"node {j} ({n['name']}) has bytes", n.get("bytes"), bad)
    reads = n.get("sd_reads", [])
    if not isinstance(reads, list):
        raise bad(f"node {j} ({n['name']}) has sd_reads {_shown(reads)}: not a list of reads' bytes")
    for b in reads:
        if not _is_count(b) or not 0 < b <= U32:
            raise bad(f"node {j} ({n['name']}) has an SD read of {_shown(b)} bytes: not a read the firmware "
                      f"makes (1 to {U32} bytes)")
    # the reads of one record together read the layer's weight once, at 32-bit aux-storage addresses
    if sum(reads) > U32:
        raise bad(f"node {j} ({n['name']}) has {len(reads)} SD reads of {sum(reads)} bytes in all: more than "
                  f"the 32-bit aux storage addresses; the trace is damaged")


def _check_step(k: int, st: dict[str, Any], bad: Any) -> None:
    """A step's own numbers (its records are checked one by one in Trace._record)."""
    _check_u32(f"step {k} has step_ticks", st.get("step_ticks"), bad)
    for key in ("peak_live_bytes", "peak_extent_bytes"):
        if key in st:
            _check_u32(f"step {k} has {key}", st[key], bad)
    if "step" in st and not _is_count(st["step"]):
        raise bad(f"step {k} has step {_shown(st['step'])}: not a step number")
    if st.get("loss") is not None and not _is_finite(st["loss"]):
        raise bad(f"step {k} has loss {_shown(st['loss'])}: not a finite number")
    if "lr" in st and not (_is_finite(st["lr"]) and st["lr"] > 0):
        raise bad(f"step {k} has lr {_shown(st['lr'])}: not a learning rate (a finite number > 0)")


def _expected(s: Schedule, nodes: list[dict[str, Any]], bad: Any, at: int = 0) -> list[tuple[int, str]]:
    """The (node, kind) record each schedule instruction makes (firmware/core/interp.c trace_kind); with
    `at`, a suffix's schedule over nodes[at:], its records named by the whole graph's nodes."""
    if s.n_nodes != len(nodes):
        raise bad(f"the schedule beside it is for a graph of {s.n_nodes} nodes, the trace's has {len(nodes)}: "
                  f"a trace from another graph")
    out = []
    for k, ins in enumerate(s.instrs):
        if ins.node >= len(nodes):
            raise bad(f"instruction {k} of the schedule beside it names node {ins.node} of {len(nodes)}: "
                      f"a trace from another graph")
        if ins.op == COMPUTE:
            out.append((at + ins.node, _COMPUTE_KIND.get(nodes[ins.node]["kind"], "?")))
        else:
            out.append((at + ins.node, _OP_KIND.get(ins.op, "?")))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_finite(v: Any) -> bool:
    """A number (a bool is not one) that is finite; an int too large for a float is not."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _is_time(v: Any) -> bool:
    return _is_finite(v) and 0 <= v <= MAX_HOST_TIME
