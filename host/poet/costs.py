"""Op costs: measure them on the board (`poet profile`) and turn a graph into a costed graph.

A profile (profiles/<board>.yaml) maps each distinct (op, shape) to timer ticks
measured by the runtime itself, with the time and energy they mean on the real
board and where each number comes from. Paging costs come from the board's
storage model: semihosting I/O takes no virtual time in QEMU, so an emulated
page-out says nothing about an SD card.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from poet.boards import Board
from poet.errors import PoetError
from poet.graph import GraphNode, TrainingGraph
from poet.paths import profile_file
from poet.plan import CostedGraph, CostedNode


def op_key(n: GraphNode) -> str:
    """The identity of a kernel invocation for costing: op and shapes, not which parameter it uses."""
    attrs = {k: v for k, v in n.attrs.items() if k != "w"}
    if "b" in attrs:
        attrs["bias"] = int(attrs.pop("b") >= 0)
    return f"{n.op}(" + ",".join(f"{k}={v}" for k, v in sorted(attrs.items())) + ")"


def profile_path(board: str) -> Path:
    return profile_file(board)


def load_profile(board: str, path: Path | None = None) -> dict[str, Any]:
    path = path or profile_path(board)
    if not path.exists():
        raise PoetError(f"no profile for board {board!r} at {path}: run `poet profile --board {board}` first")
    return yaml.safe_load(path.read_text())


def profile_graphs(device: Any, graphs: list[tuple[TrainingGraph, list[np.ndarray]]], repeats: int = 3,
                   progress: Callable[[str], None] = print, existing: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """Run every op of every graph on the board under a keep-everything schedule and record its ticks."""
    from poet.lower import lower
    from poet.solve import keep_all

    board: Board = device.board
    ops: dict[str, Any] = dict((existing or {}).get("ops", {}))
    rng = np.random.default_rng(0)
    for g, weights in graphs:
        progress(f"profile {g.model}: {len(g.nodes)} ops x {repeats} runs")
        device.load_model(g, weights)
        cg = uncosted(g)
        device.load_schedule(lower(keep_all(cg), g).schedule.encode())
        samples: dict[int, list[int]] = {}
        for r in range(repeats):
            x = rng.random((g.batch, *g.input_shape), dtype=np.float32)
            y = rng.integers(0, g.classes, g.batch)
            res = device.step(x, y, lr=0.0)
            for rec in res.records:
                if rec.kind in ("forward", "backward", "optimizer"):
                    samples.setdefault(rec.node, []).append(rec.ticks)
            progress(f"  run {r + 1}/{repeats}: {res.step_ticks} ticks")
        for nid, ticks in samples.items():
            node = g.nodes[nid]
            med = statistics.median(ticks)
            t = board.compute_time_s(med, device.hello.tick_hz)
            ops[op_key(node)] = {
                "ticks": int(med),
                "spread": float((max(ticks) - min(ticks)) / med) if med else 0.0,
                "repeats": len(ticks),
                "time_s": t,
                "energy_j": board.compute_energy_j(t),
                "provenance": device.provenance,
            }
    return {
        "board": board.name,
        "firmware": device.hello.fw_version,
        "date": datetime.date.today().isoformat(),
        "tick_hz": device.hello.tick_hz,
        "runtime_static_bytes": device.runtime_static,
        "time_model": f"ticks -> instructions (-icount shift=0: 1 per virtual ns) x CPI {board.cpi} / "
                      f"{board.clock_hz / 1e6:g} MHz (emulated); energy = time x {board.cpu_active_w} W "
                      f"(datasheet)" if device.emulated else "measured on the board",
        "paging": {k: board.storage[k] for k in ("kind", "read_bytes_per_s", "write_bytes_per_s", "latency_s",
                                                 "read_w", "write_w", "source")},
        "ops": dict(sorted(ops.items())),
    }


def write_profile(profile: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("# poet op-cost profile; every number carries its provenance\n"
                   + yaml.safe_dump(profile, sort_keys=False))
    tmp.replace(path)


def uncosted(g: TrainingGraph) -> CostedGraph:
    """The graph with unit compute costs: enough for plans that do not optimise (keep-all, profiling)."""
    return CostedGraph(tuple(CostedNode(n.id, n.name, n.kind, tuple(n.deps), n.bytes, 1.0, 1.0,
                                        recomputable=n.recomputable) for n in g.nodes), name=g.model,
                       param_bytes=g.param_bytes)


def costed(g: TrainingGraph, board: Board, profile: dict[str, Any], estimate: bool = False,
           note: Callable[[str], None] | None = None) -> CostedGraph:
    """Attach measured compute costs and the board's paging model to every node.

    An op the profile lacks is an error, unless `estimate`: then its time is its work
    (FLOPs, at least one per output element) at the profile's measured seconds per unit of
    work (the median over the profile's ops with the same op name, else over all), and
    note() says how many nodes were estimated so.
    """
    ops = profile.get("ops", {})
    rates = _rates(g, ops) if estimate else {}
    nodes, guessed = [], 0
    for n in g.nodes:
        key = op_key(n)
        if key in ops:
            time_s, energy_j = float(ops[key]["time_s"]), float(ops[key]["energy_j"])
        elif estimate and rates:
            rate_s, rate_j = rates.get(n.op, rates[""])
            time_s, energy_j = _work(n) * rate_s, _work(n) * rate_j
            guessed += 1
        else:
            raise PoetError(f"profile for {board.name} has no cost for {key} ({n.name}): "
                            f"run `poet profile --board {board.name} --model {g.model}`")
        in_s, in_j = board.page_cost(n.bytes, "in")
        out_s, out_j = board.page_cost(n.bytes, "out")
        nodes.append(CostedNode(n.id, n.name, n.kind, tuple(n.deps), n.bytes, time_s, energy_j,
                                in_s, in_j, out_s, out_j, n.recomputable))
    if guessed and note:
        note(f"{guessed} of {len(g.nodes)} nodes of {g.model} are not in the {board.name} profile: their cost is "
             f"estimated from FLOPs at the profile's measured rate (estimated, not measured)")
    return CostedGraph(tuple(nodes), name=g.model, param_bytes=g.param_bytes)


def _work(n: GraphNode) -> int:
    return max(n.flops, n.bytes // 4, 1)


def _rates(g: TrainingGraph, ops: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Seconds and joules per unit of work, per op name ('' = all ops), from the profile's ops that
    occur in a graph of the same work measure (we only know an op's work from a graph node)."""
    from poet.models import get_model
    from poet.tracer import trace

    per: dict[str, list[tuple[float, float]]] = {}
    graphs = [g]
    for name in ("mlp-digits", "cnn-digits"):  # the models the default profile measures
        model, spec = get_model(name)
        graphs.append(trace(model, name, spec.input_shape, spec.classes, g.batch))
    for gg in graphs:
        for n in gg.nodes:
            c = ops.get(op_key(n))
            if c:
                per.setdefault(n.op, []).append((float(c["time_s"]) / _work(n), float(c["energy_j"]) / _work(n)))
    if not per:
        return {}
    out = {op: (statistics.median(s for s, _ in v), statistics.median(j for _, j in v)) for op, v in per.items()}
    everything = [x for v in per.values() for x in v]
    out[""] = (statistics.median(s for s, _ in everything), statistics.median(j for _, j in everything))
    return out
