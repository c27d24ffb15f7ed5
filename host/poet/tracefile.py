"""The per-op trace of a run, as read back from the board, saved as JSON (`poet report` reads it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poet.errors import PoetError
from poet.graph import TrainingGraph

FORMAT = "poet-trace/1"
RECORD_FIELDS = ("instr", "node", "kind", "op", "ticks", "bytes")


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
        nodes = [{"name": n.name, "module": n.module, "kind": n.kind, "op": n.op, "bytes": n.bytes}
                 for n in g.nodes]
        return cls(board, g.model, provenance, tick_hz, nodes)

    def add_step(self, result: Any, lr: float) -> None:
        self.steps.append({
            "step": len(self.steps), "lr": lr, "loss": result.loss, "peak_live_bytes": result.peak_live_bytes,
            "peak_extent_bytes": result.peak_extent_bytes, "step_ticks": result.step_ticks,
            "records": [[r.instr, r.node, r.kind, r.op, r.ticks, r.bytes] for r in result.records],
        })

    def save(self, path: str | Path) -> None:
        data = {"format": FORMAT, "record_fields": list(RECORD_FIELDS), **self.__dict__}
        Path(path).write_text(json.dumps(data, separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        p = Path(path)
        if not p.exists():
            raise PoetError(f"trace file {p} does not exist")
        try:
            data = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PoetError(f"{p} is not a poet trace (not JSON: {exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PoetError(f"{p} is not a poet trace (expected format {FORMAT})")
        data.pop("format")
        data.pop("record_fields", None)
        return cls(**data)
