"""The one memory model: what `--ram` holds on the board, and what is left for activations.

`--ram` is everything the training step may hold in the board's RAM (DESIGN.md
"Memory"): the firmware's own static RAM (stack, serial and trace buffers, model
and schedule buffers), the trainable parameters, their gradients, optimizer
state, the staged batch, and the activation arena. The planner plans the arena
with what is left; the firmware lays out its pool in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from poet.errors import UsageError
from poet.units import format_size

if TYPE_CHECKING:  # graph.py uses this module's layout functions
    from poet.graph.training_graph import TrainingGraph

POOL_ALIGN = 8  # the firmware aligns each pool region to 8 bytes
OPTIMIZER_WORDS = {"sgd": 0, "momentum": 1, "adam": 2}  # state floats per trained element


def _align(n: int) -> int:
    return (n + POOL_ALIGN - 1) // POOL_ALIGN * POOL_ALIGN


def optimizer_state_bytes(words: int, trained_bytes: int) -> int:
    """A step counter and `words` floats per trained element; plain SGD keeps nothing."""
    return 4 + words * trained_bytes if words else 0


def pool_fixed_bytes(params: int, grads: int, optimizer_state: int, staging: int) -> int:
    """The pool before the arena, laid out as firmware/core/protocol.c does (docs/spec.md 6)."""
    return sum(_align(b) for b in (params, grads, optimizer_state, staging))


@dataclass(frozen=True)
class MemoryBudget:
    ram_bytes: int
    runtime_static: int
    params: int
    grads: int
    optimizer_state: int
    staging: int

    @property
    def fixed(self) -> int:
        return self.runtime_static + pool_fixed_bytes(self.params, self.grads, self.optimizer_state, self.staging)

    @property
    def arena(self) -> int:
        return self.ram_bytes - self.fixed

    def lines(self) -> list[tuple[str, int]]:
        return [("firmware static (stack, buffers, trace ring)", self.runtime_static),
                ("parameters (trained and frozen) and statistics", self.params), ("gradients", self.grads),
                ("optimizer state", self.optimizer_state), ("staged batch", self.staging),
                ("activation arena", self.arena)]

    def table(self) -> str:
        rows = [f"  {label:<46} {format_size(n):>11}" for label, n in self.lines()]
        rows.append(f"  {'total (--ram)':<46} {format_size(self.ram_bytes):>11}")
        return "\n".join(rows)


def check_ram(ram_bytes: int, board_ram_bytes: int, board: str) -> int:
    if ram_bytes > board_ram_bytes:
        raise UsageError(f"--ram {format_size(ram_bytes)} is more than {board} has ({format_size(board_ram_bytes)})")
    return ram_bytes


def budget_for(graph: TrainingGraph, ram_bytes: int, runtime_static: int) -> MemoryBudget:
    """Split --ram; refuse a budget that cannot even hold the fixed part."""
    b = MemoryBudget(ram_bytes=ram_bytes, runtime_static=runtime_static, params=graph.resident_param_bytes,
                     grads=graph.param_bytes, optimizer_state=graph.optimizer_state_bytes,
                     staging=graph.staging_bytes)
    if b.arena <= 0:
        raise UsageError(f"--ram {format_size(ram_bytes)} is below the fixed part "
                         f"{format_size(b.fixed)} (firmware {format_size(runtime_static)}, parameters, "
                         f"gradients, optimizer state, batch) before any activation; raise --ram")
    return b
