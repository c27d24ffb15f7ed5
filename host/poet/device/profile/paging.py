"""Paging: a tiny synthetic model whose only work is paging one tensor out and back in, run at sizes
from 256 B up; `t = latency + bytes / throughput` fitted per direction, and which paging model the
planner uses (measured, or the board file's datasheet one where the measurement says nothing)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from poet.boards import Board
from poet.device.link import LinkClosed, LinkTimeout
from poet.device.profile.file import write_profile
from poet.device.profile.provenance import SEEDS, datasheet_paging, is_linux, provenance_of
from poet.device.profile.stopped import ProfileInterrupted, exit_status, went
from poet.device.protocol import MODEL, WEIGHTS
from poet.ops import CODE
from poet.paths import shown
from poet.plan.lowering.modelblob import KIND_FORWARD, KIND_INPUT, KIND_OPTIMIZER, BlobNode, ModelBlob
from poet.plan.lowering.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, Instr, Schedule
from poet.progress import Say

# the paging sweep: 256 B .. 64 KiB, doubling (capped by what the board's pool holds)
PAGE_SIZES = tuple(256 << k for k in range(9))
PAGE_ROUNDS = 6  # page-out + page-in round trips per size in one step; the first is dropped (cold file/cache)


def paging_model(nbytes: int) -> ModelBlob:
    """A model whose only arena tensor is a copy of its input (nbytes; the input itself is the staged batch,
    read in place, never paged: docs/spec.md section 1) and whose step is an SGD over no parameters: the
    schedule around it does nothing but page that copy."""
    n = nbytes // 4
    nodes = [BlobNode(CODE["input"], KIND_INPUT, (), nbytes, (n,)),
             BlobNode(CODE["reshape"], KIND_FORWARD, (0,), nbytes, (n,)),
             BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ())]
    return ModelBlob(batch=1, x_elems=n, param_elems=[], nodes=nodes)


def paging_schedule(blob: ModelBlob, rounds: int = PAGE_ROUNDS) -> Schedule:
    nbytes = blob.nodes[1].bytes
    instrs = [Instr(COMPUTE, 0, 0), Instr(COMPUTE, 1, 0)]
    for _ in range(rounds):
        instrs += [Instr(PAGE_OUT, 1), Instr(FREE, 1), Instr(PAGE_IN, 1, 0)]
    instrs += [Instr(COMPUTE, 2), Instr(FREE, 1)]
    return Schedule(len(blob.nodes), blob.hash(), nbytes, instrs)


def page_sizes(pool_bytes: int) -> list[int]:
    # the pool holds the staged batch (nbytes + a label) and the arena (nbytes), each 8-byte aligned
    return [s for s in PAGE_SIZES if 2 * s + 64 <= pool_bytes]


def fit_line(nbytes: list[int], seconds: list[float]) -> dict[str, Any]:
    """Least squares t = latency + bytes / throughput, with R² (None when every time is the same)."""
    x = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    a = np.stack([np.ones_like(x), x], axis=1)
    (latency, per_byte), *_ = np.linalg.lstsq(a, t, rcond=None)
    ss_tot = float(((t - t.mean()) ** 2).sum())
    ss_res = float(((t - a @ np.array([latency, per_byte])) ** 2).sum())
    grows = per_byte * (x.max() - x.min()) > 1e-9  # more than a nanosecond over the sizes: finer than any timer
    return {"latency_s": float(latency),
            "bytes_per_s": float(1.0 / per_byte) if grows else None,  # None: no time grows with size
            "r2": round(1.0 - ss_res / ss_tot, 6) if ss_tot > 0 else None,
            "samples": len(nbytes)}


def profile_paging(device: Any, prof: dict[str, Any], progress: Say = print, save: Path | None = None) -> None:
    """Page out and in at every size, fit each direction, and say which model the planner uses."""
    board: Board = device.board
    if prof.get("paging", {}).get("fit", {}).get("done"):
        progress("paging: already in the profile, skipped")
        return
    sizes = page_sizes(device.hello.pool_bytes)
    progress(f"paging: {len(sizes)} sizes {sizes[0]} B .. {sizes[-1]} B, {PAGE_ROUNDS - 1} round trips each")
    seen: dict[str, tuple[list[int], list[float]]] = {"out": ([], []), "in": ([], [])}
    try:
        for nbytes in sizes:
            blob = paging_model(nbytes)
            device.link.upload(MODEL, blob.encode())
            device.link.upload(WEIGHTS, b"")
            device.x_scale = None  # this model's input is fp32, whatever the model before it staged
            # load_schedule, not a bare upload: a plan's peak and time held for an earlier schedule on this device
            # would otherwise be checked against these steps
            device.load_schedule(paging_schedule(blob).encode())
            res = device.step(np.zeros((1, nbytes // 4), np.float32), np.zeros(1, np.int32), lr=0.0)
            for direction, kind in (("out", "page_out"), ("in", "page_in")):
                recs = [r for r in res.records if r.kind == kind][1:]  # the first: cold file and caches
                seen[direction][0].extend(r.bytes for r in recs)
                seen[direction][1].extend(r.ticks / device.hello.tick_hz for r in recs)
            progress(f"  {nbytes:6d} B: out {_median_us(res, 'page_out', device):9.1f} us, "
                     f"in {_median_us(res, 'page_in', device):9.1f} us (board timer)")
    except (LinkClosed, LinkTimeout, KeyboardInterrupt) as exc:
        raise ProfileInterrupted(f"{went(exc)} while measuring paging (the ops are saved"
                                 + (f" to {shown(save)}" if save else "") + "); run the same command again to "
                                 "resume", exit_status(exc)) from exc
    fit = {d: {**fit_line(*seen[d]), "sizes": sizes} for d in ("out", "in")}
    prof["paging"] = _paging_section(board, device, fit)
    if save is not None:
        write_profile(prof, save)
    for d in ("out", "in"):
        f = fit[d]
        rate = f"{f['bytes_per_s'] / 1e6:.3g} MB/s" if f["bytes_per_s"] else "no growth with size"
        progress(f"  page-{d}: latency {f['latency_s'] * 1e6:.1f} us, {rate}, R² {f['r2']}")
    progress(f"  the planner uses the {prof['paging']['used']} paging model: {prof['paging']['reason']}")


def _median_us(res: Any, kind: str, device: Any) -> float:
    ticks = [r.ticks for r in res.records if r.kind == kind][1:]
    return statistics.median(ticks) / device.hello.tick_hz * 1e6 if ticks else 0.0


def _paging_section(board: Board, device: Any, fit: dict[str, dict[str, Any]]) -> dict[str, Any]:
    prov = provenance_of(board, device)
    fit_out = {"done": True, "provenance": prov, **fit}
    if device.emulated:
        why = ("the stand-in pages to a file on this computer through qemu-user: its times are this computer's"
               if is_linux(board) else
               "the emulator pages through semihosting, outside QEMU's virtual clock (near-zero ticks): "
               "it says nothing about an SD card")
        section = {**datasheet_paging(board, why + f"; the board file's storage model ({board.storage['kind']}, "
                                       f"{board.storage.get('source', '?')}) is used"), "fit": fit_out}
        seed = SEEDS.get(board.name)
        if seed and seed.paper_paging:
            section["poet_paper"] = {**dict(seed.paper_paging), "used": False,
                                     "source": "poet-paper (POET reference poet/chipsets.py)"}
        return section
    usable = all(fit[d]["bytes_per_s"] for d in ("out", "in"))
    if not usable:
        return {**datasheet_paging(board, "the measured times did not grow with size (no throughput to fit)"),
                "fit": fit_out}
    s = board.storage
    return {"used": "measured", "reason": "fitted on this board (time = latency + bytes / throughput, board timer)",
            "kind": s["kind"], "read_bytes_per_s": fit["in"]["bytes_per_s"],
            "write_bytes_per_s": fit["out"]["bytes_per_s"], "read_latency_s": max(0.0, fit["in"]["latency_s"]),
            "write_latency_s": max(0.0, fit["out"]["latency_s"]), "read_w": s["read_w"], "write_w": s["write_w"],
            "source": "measured (powers: datasheet)", "fit": fit_out}
