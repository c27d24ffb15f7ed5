"""Casts and int8 kernels (`poet profile --casts`): every cast direction over sizes, fitted as
cycles = r n + c, then the int8 linear and conv2d forward against fp32 at the given graphs' layer
shapes, with the quantising each needs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poet.boards import Board
from poet.device.link import LinkClosed, LinkTimeout
from poet.device.profile.file import write_profile
from poet.device.profile.ops import spread_of
from poet.device.profile.provenance import board_seconds, op_times, provenance_of
from poet.device.profile.stopped import ProfileInterrupted, exit_status, went
from poet.errors import PoetError
from poet.graph.dtypes import DT_F32, DT_I8, ELEMENT_TYPES
from poet.graph.training_graph import TrainingGraph
from poet.ops import CODE
from poet.paths import shown
from poet.plan.lowering.modelblob import KIND_FORWARD, KIND_INPUT, KIND_OPTIMIZER, BlobNode, ModelBlob
from poet.plan.lowering.schedule import COMPUTE, FREE, RECOMPUTE, Instr, Schedule
from poet.progress import Say

# the cast sweep: 64 .. 16384 elements, doubling (capped by what the board's pool holds)
CAST_SIZES = tuple(64 << k for k in range(9))
CAST_ROUNDS = 3  # each cast runs once as a compute and CAST_ROUNDS - 1 times as a recompute per step
NARROW = ("fp16", "bf16", "int8")
ABSMAX = "absmax"  # the int8 scale (max |x| / 127), which every fp32 -> int8 cast of an activation needs


def cast_directions() -> list[str]:
    """Every measured conversion, as `from->to`, and the absmax that makes an int8 scale."""
    return [ABSMAX] + [d for t in NARROW for d in (f"fp32->{t}", f"{t}->fp32")]


def cast_model(n: int) -> tuple[ModelBlob, dict[str, int]]:
    """input x (n fp32), its absmax scale, then for each narrow type a cast there and one back; the
    node of each direction. Nothing is trained: the step's SGD has no parameters."""
    nodes = [BlobNode(CODE["input"], KIND_INPUT, (), 4 * n, (n,)),
             BlobNode(CODE["absmax"], KIND_FORWARD, (0,), 4, (n, -1))]
    where = {ABSMAX: 1}
    for t in NARROW:
        code, q = ELEMENT_TYPES[t].code, t == "int8"
        nodes.append(BlobNode(CODE["cast"], KIND_FORWARD, (0, 1) if q else (0,), ELEMENT_TYPES[t].bytes * n,
                              (n, DT_F32, code, -1)))
        where[f"fp32->{t}"] = len(nodes) - 1
        nodes.append(BlobNode(CODE["cast"], KIND_FORWARD, (len(nodes) - 1, 1) if q else (len(nodes) - 1,), 4 * n,
                              (n, code, DT_F32, -1)))
        where[f"{t}->fp32"] = len(nodes) - 1
    nodes.append(BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ()))
    return ModelBlob(batch=1, x_elems=n, param_elems=[], nodes=nodes), where


def _placed(blob: ModelBlob, ops: list[tuple[int, int]]) -> Schedule:
    from poet.plan.lowering.lower import place

    sizes = [nd.arena_bytes for nd in blob.nodes]  # the input none: the staged batch, read in place
    offsets, extent, _ = place(ops, sizes)
    return Schedule(len(blob.nodes), blob.hash(), extent,
                    [Instr(op, node, offsets[k]) for k, (op, node) in enumerate(ops)])


def cast_schedule(blob: ModelBlob, rounds: int = CAST_ROUNDS) -> Schedule:
    """The scale is made `rounds` times, then each pair (there and back) `rounds` times, the pair
    freed before the next: RAM holds x, the scale and one pair at a time."""
    ops: list[tuple[int, int]] = [(COMPUTE, 0), (COMPUTE, 1)]
    for _ in range(rounds - 1):
        ops += [(FREE, 1), (RECOMPUTE, 1)]
    last = len(blob.nodes) - 1
    for a in range(2, last, 2):
        b = a + 1
        ops += [(COMPUTE, a), (COMPUTE, b), (FREE, b)]
        for _ in range(rounds - 1):
            ops += [(FREE, a), (RECOMPUTE, a), (RECOMPUTE, b), (FREE, b)]
        ops.append((FREE, a))
    ops += [(COMPUTE, last), (FREE, 1)]
    return _placed(blob, ops)


def _fits(blob: ModelBlob, sched: Schedule, pool_bytes: int) -> bool:
    return sched.arena_bytes + 64 <= blob.pool_free(pool_bytes)


def _cast_fits(n: int, pool_bytes: int) -> bool:
    blob = cast_model(n)[0]
    return _fits(blob, cast_schedule(blob), pool_bytes)


def fit_cycles(n: list[int], cycles: list[float]) -> dict[str, Any]:
    """Least squares cycles = r n + c, with R² (None when every sample is the same)."""
    x = np.asarray(n, dtype=float)
    y = np.asarray(cycles, dtype=float)
    a = np.stack([x, np.ones_like(x)], axis=1)
    (r, c), *_ = np.linalg.lstsq(a, y, rcond=None)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - a @ np.array([r, c])) ** 2).sum())
    return {"cycles_per_elem": round(float(r), 4), "cycles_fixed": round(float(c), 1),
            "r2": round(1.0 - ss_res / ss_tot, 6) if ss_tot > 0 else None, "samples": len(n)}


def _stage(device: Any, blob: ModelBlob, sched: Schedule, weights: Sequence[np.ndarray] = ()) -> None:
    device.link.load_model(blob, list(weights))
    device.x_scale = blob.x_scale(list(weights))  # how device.step stages this model's inputs
    device.load_schedule(sched.encode())  # no plan behind it: no earlier plan's peak or time applies


def _node_ticks(res: Any, node: int) -> list[int]:
    return [r.ticks for r in res.records if r.node == node and r.kind in ("forward", "recompute")]


def profile_casts(device: Any, prof: dict[str, Any], graphs: list[tuple[TrainingGraph, list[np.ndarray]]],
                  progress: Say = print, save: Path | None = None) -> None:
    """Measure every cast direction over sizes and fit cycles = r n + c; then the int8 linear and conv
    forward against fp32 at the given graphs' layer shapes (prof['ops'], op keys)."""
    board: Board = device.board
    if prof.get("casts", {}).get("done"):
        progress("casts: already in the profile, skipped")
        return
    sizes = [n for n in CAST_SIZES if _cast_fits(n, device.hello.pool_bytes)]
    if not sizes:
        raise PoetError(f"casts: not even {CAST_SIZES[0]} elements fit the board's pool "
                        f"({device.hello.pool_bytes} B)")
    progress(f"casts: {len(sizes)} sizes {sizes[0]} .. {sizes[-1]} elements, {CAST_ROUNDS} runs of each direction")
    seen: dict[str, tuple[list[int], list[float]]] = {d: ([], []) for d in cast_directions()}
    rng = np.random.default_rng(0)
    try:
        for n in sizes:
            blob, where = cast_model(n)
            _stage(device, blob, cast_schedule(blob))
            x = (rng.standard_normal((1, n)) * 10).astype(np.float32)  # ordinary values: no special-case paths
            res = device.step(x, np.zeros(1, np.int32), lr=0.0)
            line = []
            for d, node in where.items():
                ticks = _node_ticks(res, node)
                cyc = [board_seconds(board, device, t) * board.clock_hz for t in ticks]
                seen[d][0].extend([n] * len(cyc))
                seen[d][1].extend(cyc)
                line.append(f"{d} {statistics.median(cyc) / n:.1f}")
            progress(f"  {n:6d} elements, cycles per element: " + ", ".join(line))
        ops = _profile_int8_layers(device, graphs, progress) if graphs else {}
    except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
        raise ProfileInterrupted(f"{went(exc)} while measuring casts (the rest is saved"
                                 + (f" to {shown(save)}" if save else "") + "); run the same command again to "
                                 "resume", exit_status(exc)) from exc
    section: dict[str, Any] = {
        "done": True, "provenance": provenance_of(board, device), "clock_hz": board.clock_hz,
        "model": "cycles = cycles_per_elem x n + cycles_fixed (board cycles; time_s = cycles / clock_hz, "
                 "energy_j = time_s x cpu_active_w); absmax is the int8 scale an fp32 -> int8 cast of an "
                 "activation needs first",
        "sizes": sizes, "rounds": CAST_ROUNDS}
    for d, (ns, cyc) in seen.items():
        section[d] = fit_cycles(ns, cyc)
    prof["casts"] = section
    prof["ops"].update(ops)
    if save is not None:
        write_profile(prof, save)
    progress("  direction      cycles/elem   fixed cycles   R²")
    for d in cast_directions():
        f = section[d]
        progress(f"  {d:14s} {f['cycles_per_elem']:11.2f} {f['cycles_fixed']:14.0f}   {f['r2']}")


def int8_layer_model(node: Any, g: TrainingGraph) -> tuple[ModelBlob, dict[str, int], list[np.ndarray]]:
    """One linear or conv2d forward of graph g run both ways: fp32, and int8 with what it needs (the
    input's absmax and quantisation, the weight's absmax and quantisation, as a training step does
    every step since the weight changes). The parameters are frozen: nothing here trains."""
    from poet.plan.lowering.lower import blob_attrs

    conv = node.op == "conv2d"
    attrs = dict(node.attrs)
    wshape = g.params[attrs["w"]][1]
    has_b = attrs.get("b", -1) >= 0
    attrs["w"], attrs["b"] = 0, 1 if has_b else -1
    shapes = [wshape] + ([g.params[node.attrs["b"]][1]] if has_b else [])
    xe, we = int(np.prod(g.nodes[node.deps[0]].shape)), int(np.prod(wshape))
    a = blob_attrs(node.op, attrs)
    fp_op, q_op = (CODE["conv2d"], CODE["conv2d_i8"]) if conv else (CODE["linear"], CODE["linear_i8"])
    nodes = [BlobNode(CODE["input"], KIND_INPUT, (), 4 * xe, (xe,)),
             BlobNode(CODE["absmax"], KIND_FORWARD, (0,), 4, (xe, -1)),
             BlobNode(CODE["cast"], KIND_FORWARD, (0, 1), xe, (xe, DT_F32, DT_I8, -1)),
             BlobNode(CODE["absmax"], KIND_FORWARD, (), 4, (we, 0)),
             BlobNode(CODE["cast"], KIND_FORWARD, (3,), we, (we, DT_F32, DT_I8, 0)),
             BlobNode(q_op, KIND_FORWARD, (2, 1, 4, 3), node.bytes, a),
             BlobNode(fp_op, KIND_FORWARD, (0,), node.bytes, a),
             BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ())]
    blob = ModelBlob(batch=g.batch, x_elems=xe, param_elems=[int(np.prod(s)) for s in shapes], nodes=nodes,
                     param_frozen=[True] * len(shapes))
    rng = np.random.default_rng(1)
    weights = [(rng.standard_normal(s) / np.sqrt(max(1, int(np.prod(s[1:]))))).astype(np.float32) for s in shapes]
    roles = {"x_absmax": 1, "x_quantise": 2, "w_absmax": 3, "w_quantise": 4, "int8": 5, "fp32": 6}
    return blob, roles, weights


def _key(node: Any, op: str | None = None, **attrs: Any) -> str:
    from poet.graph.training_graph import GraphNode
    from poet.plan.cost.costs import op_key

    return op_key(GraphNode(node.id, node.name, node.module, node.kind, op or node.op, node.deps, node.bytes,
                            node.shape, attrs or node.attrs, node.flops))


def _profile_int8_layers(device: Any, graphs: list[tuple[TrainingGraph, list[np.ndarray]]], progress: Say
                         ) -> dict[str, Any]:
    """Every distinct linear / conv2d forward shape of the graphs, int8 against fp32; op entries by key."""
    board: Board = device.board
    out: dict[str, Any] = {}
    done: set[str] = set()
    progress("  int8 layers (cycles): layer | fp32 | int8 kernel | + quantise x (absmax, cast) "
             "| + quantise w | int8 total / fp32")
    for g, _ in graphs:
        for node in g.nodes:
            if node.kind != "forward" or node.op not in ("linear", "conv2d") or _key(node) in done:
                continue
            done.add(_key(node))
            blob, roles, weights = int8_layer_model(node, g)
            sched = _placed(blob, [(COMPUTE, i) for i in range(len(blob.nodes))]
                            + [(FREE, i) for i, nd in enumerate(blob.nodes) if nd.arena_bytes])
            if not _fits(blob, sched, device.hello.pool_bytes):
                progress(f"  {_key(node)}: does not fit the pool ({device.hello.pool_bytes} B), skipped")
                continue
            _stage(device, blob, sched, weights)
            rng = np.random.default_rng(2)
            ticks: dict[str, list[int]] = {r: [] for r in roles}
            for _ in range(3):
                x = rng.standard_normal((g.batch, blob.x_elems // g.batch)).astype(np.float32)
                res = device.step(x, np.zeros(g.batch, np.int32), lr=0.0)
                for role, nid in roles.items():
                    ticks[role] += _node_ticks(res, nid)
            med = {r: statistics.median(t) for r, t in ticks.items()}
            cyc = {r: board_seconds(board, device, t) * board.clock_hz for r, t in med.items()}
            xe, we = blob.x_elems, blob.param_elems[0]
            entries = {
                _key(node, node.op + "_i8"): ("int8", node.flops),
                _key(node, "absmax", n=xe): ("x_absmax", xe),
                _key(node, "cast", n=xe, **{"from": "fp32", "to": "int8"}): ("x_quantise", xe),
                _key(node, "absmax", n=we): ("w_absmax", we),
                _key(node, "cast", n=we, **{"from": "fp32", "to": "int8"}): ("w_quantise", we),
            }
            if _key(node) not in out:  # the fp32 twin, measured in the same image beside it
                entries[_key(node)] = ("fp32", node.flops)
            for key, (role, w) in entries.items():
                t = ticks[role]
                out[key] = {"work": max(int(w), 1), "ticks": int(med[role]), "spread": round(spread_of(t), 6),
                            "repeats": 3, "samples": len(t), "provenance": provenance_of(board, device),
                            **op_times(board, device, med[role], max(int(w), 1))}
            total = cyc["int8"] + cyc["x_absmax"] + cyc["x_quantise"] + cyc["w_absmax"] + cyc["w_quantise"]
            progress(f"  {_key(node)} | {cyc['fp32']:.0f} | {cyc['int8']:.0f} | "
                     f"{cyc['x_absmax'] + cyc['x_quantise']:.0f} | {cyc['w_absmax'] + cyc['w_quantise']:.0f} | "
                     f"{total / cyc['fp32']:.2f}")
    return out
