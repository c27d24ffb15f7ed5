"""Where the joules of a run went: every trace record charged to a tensor, a module and a kind.

Modelled energy (the only source until a power meter backend lands): compute
records cost their ticks converted to board time times the CPU's active power;
page-in and page-out records cost the board's storage model for the bytes they
moved (emulated paging has no timing of its own); frees cost nothing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from poet.boards import Board
from poet.tracefile import Trace

KINDS = ("forward", "backward", "recompute", "page_in", "page_out", "optimizer")


@dataclass(frozen=True)
class Charge:
    step: int
    tensor: str  # qualified tensor name, e.g. "conv1/forward"
    module: str
    kind: str
    time_s: float
    energy_j: float


def charges(trace: Trace, board: Board) -> list[Charge]:
    out = []
    for st in trace.steps:
        for _instr, node, kind, _op, ticks, nbytes in st["records"]:
            if kind == "free":
                continue
            n = trace.nodes[node]
            if kind in ("page_in", "page_out"):
                t, e = board.page_cost(nbytes, "in" if kind == "page_in" else "out")
            else:
                t = board.compute_time_s(ticks, trace.tick_hz)
                e = board.compute_energy_j(t)
            out.append(Charge(st["step"], n["name"], n["module"], kind, t, e))
    return out


@dataclass
class Account:
    steps: int
    total_j: float
    total_s: float
    by_kind: dict[str, tuple[float, float]]  # kind -> (joules, seconds)
    by_module: dict[str, tuple[float, float]]
    by_tensor: dict[str, dict[str, float]]  # tensor -> kind -> joules


def account(trace: Trace, board: Board) -> Account:
    by_kind: dict[str, list[float]] = {k: [0.0, 0.0] for k in KINDS}
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    by_tensor: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for c in charges(trace, board):
        for acc in (by_kind[c.kind], by_module[c.module]):
            acc[0] += c.energy_j
            acc[1] += c.time_s
        by_tensor[c.tensor][c.kind] += c.energy_j
    total_j = sum(v[0] for v in by_kind.values())
    total_s = sum(v[1] for v in by_kind.values())
    return Account(len(trace.steps), total_j, total_s, {k: (v[0], v[1]) for k, v in by_kind.items()},
                   {k: (v[0], v[1]) for k, v in by_module.items()},
                   {k: dict(v) for k, v in by_tensor.items()})


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def render(trace: Trace, board: Board, top: int = 5) -> str:
    a = account(trace, board)
    n = max(a.steps, 1)
    src = (f"modelled: {trace.provenance} op ticks x {board.name} CPU power (datasheet), "
           f"paging bytes x storage model ({board.storage.get('source', '?')})")
    lines = [f"energy of {a.steps} training step(s) of {trace.model} on {board.name} ({src})",
             f"  total {a.total_j * 1e3:.4f} mJ, {a.total_s * 1e3:.3f} ms; per step {a.total_j / n * 1e6:.2f} uJ, "
             f"{a.total_s / n * 1e3:.3f} ms", "", "  by kind            energy      share    time"]
    for k in KINDS:
        e, t = a.by_kind[k]
        lines.append(f"  {k:<14} {e * 1e6:10.2f} uJ {_pct(e, a.total_j)} {t * 1e3:9.3f} ms")
    lines += ["", "  by module          energy      share    time"]
    for mod, (e, t) in sorted(a.by_module.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {mod:<14} {e * 1e6:10.2f} uJ {_pct(e, a.total_j)} {t * 1e3:9.3f} ms")
    lines += ["", f"  top {top} tensors       energy   (of which recompute / paging)"]
    ranked = sorted(a.by_tensor.items(), key=lambda kv: -sum(kv[1].values()))[:top]
    for name, kinds in ranked:
        tot = sum(kinds.values())
        extra = kinds.get("recompute", 0.0)
        paging = kinds.get("page_in", 0.0) + kinds.get("page_out", 0.0)
        lines.append(f"  {name:<22} {tot * 1e6:10.2f} uJ   ({extra * 1e6:.2f} / {paging * 1e6:.2f} uJ)")
    return "\n".join(lines)
