"""Op costs: the cost model the planner reads, from a profile (profiles/<board>.yaml).

A profile (written by `poet profile`, poet.profile) maps each distinct (op, shape) to
its time and energy on the board and where each number comes from. An op the profile
lacks can be estimated from the nearest measured shape of the same op. Paging costs
come from the profile's `paging` section: the measured fit on a real board, the board
file's storage model on an emulated one (semihosting I/O takes no virtual time in QEMU,
so an emulated page-out says nothing about an SD card).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from poet.boards import Board
from poet.errors import PoetError
from poet.graph import GraphNode, TrainingGraph
from poet.paths import profile_to_read
from poet.plan import CostedGraph, CostedNode


def op_key(n: GraphNode) -> str:
    """The identity of a kernel invocation for costing: op and shapes, not which parameter it uses."""
    attrs = {k: v for k, v in n.attrs.items() if k != "w"}
    if "b" in attrs:
        attrs["bias"] = int(attrs.pop("b") >= 0)
    return f"{n.op}(" + ",".join(f"{k}={v}" for k, v in sorted(attrs.items())) + ")"


def profile_path(board: str) -> Path:
    return profile_to_read(board)


def load_profile(board: str, path: Path | None = None) -> dict[str, Any]:
    path = path or profile_path(board)
    if not path.exists():
        raise PoetError(f"no profile for board {board!r} at {path}: run `poet profile --board {board}` first")
    return yaml.safe_load(path.read_text())


def uncosted(g: TrainingGraph) -> CostedGraph:
    """The graph with unit compute costs: enough for plans that do not optimise (keep-all, profiling)."""
    return CostedGraph(tuple(CostedNode(n.id, n.name, n.kind, tuple(n.deps), n.bytes, 1.0, 1.0,
                                        recomputable=n.recomputable) for n in g.nodes), name=g.model,
                       param_bytes=g.param_bytes)


@dataclass(frozen=True)
class Estimate:
    """How the cost of an op the profile lacks was made."""
    key: str
    source: str        # the measured op key it was scaled from, or "" for the profile's FLOP rate
    ratio: float       # this op's work / the source's
    time_s: float
    energy_j: float

    @property
    def provenance(self) -> str:
        if self.source:
            return f"estimated from {self.source} (x{self.ratio:.3g} FLOPs)"
        return "estimated from FLOPs at the profile's median rate (no shape of this op was measured)"


def work(n: GraphNode) -> int:
    """An op's work for scaling costs: its FLOPs, at least one per output element."""
    return max(n.flops, n.bytes // 4, 1)


def op_name(key: str) -> str:
    return key.split("(", 1)[0]


def estimate_op(n: GraphNode, ops: dict[str, Any]) -> Estimate | None:
    """The cost of an unprofiled op: the measured shape of the same op with the closest work,
    scaled by the work ratio; else the median seconds (and joules) per unit of work of every
    measured op. None when the profile has no op with its work recorded."""
    key, w = op_key(n), work(n)
    known = {k: v for k, v in ops.items() if v.get("work")}
    same = [k for k in known if op_name(k) == n.op]
    if same:
        src = min(same, key=lambda k: (abs(math.log(w / float(known[k]["work"]))), k))
        r = w / float(known[src]["work"])
        return Estimate(key, src, r, float(known[src]["time_s"]) * r, float(known[src]["energy_j"]) * r)
    if not known:
        return None
    rate_s = statistics.median(float(v["time_s"]) / float(v["work"]) for v in known.values())
    rate_j = statistics.median(float(v["energy_j"]) / float(v["work"]) for v in known.values())
    return Estimate(key, "", 1.0, w * rate_s, w * rate_j)


def page_cost(board: Board, profile: dict[str, Any], nbytes: int, direction: str) -> tuple[float, float]:
    """(seconds, joules) to page nbytes out or in: the profile's measured fit when it says the planner
    uses it (a real board), else the board file's storage model."""
    p = profile.get("paging") or {}
    if p.get("used") != "measured":
        return board.page_cost(nbytes, direction)
    rate, lat, power = ((p["write_bytes_per_s"], p["write_latency_s"], p["write_w"]) if direction == "out"
                        else (p["read_bytes_per_s"], p["read_latency_s"], p["read_w"]))
    t = float(lat) + nbytes / float(rate)
    return t, t * (float(power) + board.cpu_active_w)


def costed(g: TrainingGraph, board: Board, profile: dict[str, Any], estimate: bool = False,
           note: Callable[[str], None] | None = None) -> CostedGraph:
    """Attach the profile's compute costs and paging model to every node.

    An op the profile lacks is an error, unless `estimate`: then it is estimated (see
    `estimate_op`) and note() gets one line per estimated op shape, saying from what.
    """
    ops = profile.get("ops", {})
    nodes, guessed = [], {}
    for n in g.nodes:
        key = op_key(n)
        if key in ops:
            time_s, energy_j = float(ops[key]["time_s"]), float(ops[key]["energy_j"])
        else:
            est = estimate_op(n, ops) if estimate else None
            if est is None:
                raise PoetError(f"profile for {board.name} has no cost for {key} ({n.name}): "
                                f"run `poet profile --board {board.name} --model {g.model}`")
            time_s, energy_j = est.time_s, est.energy_j
            guessed.setdefault(key, (est, n.name))
        in_s, in_j = page_cost(board, profile, n.bytes, "in")
        out_s, out_j = page_cost(board, profile, n.bytes, "out")
        nodes.append(CostedNode(n.id, n.name, n.kind, tuple(n.deps), n.bytes, time_s, energy_j,
                                in_s, in_j, out_s, out_j, n.recomputable))
    if guessed and note:
        note(f"{len(guessed)} op shapes of {g.model} are not in the {board.name} profile; their costs are estimated, "
             f"not measured:")
        for key, (est, name) in guessed.items():
            note(f"  {key} ({name}): {est.provenance}")
    return CostedGraph(tuple(nodes), name=g.model, param_bytes=g.param_bytes)


def __getattr__(name: str) -> Any:
    """Profiling moved to poet.profile; these names stay importable from here."""
    if name in ("profile_graphs", "write_profile"):
        from poet import profile

        return getattr(profile, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
