"""The one memory model: what `--ram` holds on the board, and what is left for activations.

`--ram` is everything the training step may hold in the board's RAM (DESIGN.md
"Memory"): the firmware's own static RAM (stack, serial and trace buffers, model
and schedule buffers), then the runtime's pool: the parameters, the gradients of
the trained ones, optimizer state, the staged batch, and the activation arena.
The planner plans the arena with what is left; the firmware lays out its pool in
the same order (docs/spec.md 6) and must grant exactly this arena, since the peak
it reports is compared with the planner's byte for byte. The planner, the CLI and
the model blob take every one of these sizes from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poet.errors import UsageError
from poet.graph.dtypes import F32, I32
from poet.units import format_size

if TYPE_CHECKING:
    from poet.graph.training_graph import TrainingGraph

POOL_ALIGN = 8  # the firmware aligns each pool region to 8 bytes
OPTIMIZER_WORDS = {"sgd": 0, "momentum": 1, "adam": 2}  # state floats per trained element


def _align(n: int) -> int:
    return (n + POOL_ALIGN - 1) // POOL_ALIGN * POOL_ALIGN


@dataclass(frozen=True)
class Pool:
    """The runtime's pool before the activation arena, region by region, each as the firmware sizes it."""

    params: int  # every parameter and statistic, trained or frozen: the weights blob
    grads: int  # the trained parameters' gradients
    optimizer_state: int
    staging: int  # the batch the host uploads before each step

    @classmethod
    def of(cls, param_elems: Sequence[int], trained: Sequence[bool], optimizer: str, batch: int,
           x_elems: int) -> Pool:
        """From what a model is: its parameters' element counts (upload order) and which are trained,
        the optimizer's name, the batch and its input elements."""
        trained_bytes = F32 * sum(n for n, t in zip(param_elems, trained, strict=True) if t)
        words = OPTIMIZER_WORDS[optimizer]
        # a u32 step counter and `words` floats per trained element (docs/spec.md 6); plain SGD keeps nothing
        state = I32 + words * trained_bytes if words else 0
        return cls(params=F32 * sum(param_elems), grads=trained_bytes, optimizer_state=state,
                   staging=F32 * x_elems + I32 * batch)  # inputs as fp32, one i32 label per sample

    @property
    def fixed(self) -> int:
        """The pool before the arena, each region 8-aligned (firmware/core/protocol.c)."""
        return sum(_align(b) for b in (self.params, self.grads, self.optimizer_state, self.staging))

    def arena(self, pool_bytes: int) -> int:
        """What a pool of `pool_bytes` leaves for the activation arena."""
        return pool_bytes - self.fixed


def pool_for(g: TrainingGraph) -> Pool:
    """The pool a training graph needs on the board (the model blob lowered from it asks the same)."""
    frozen = set(g.frozen)
    return Pool.of(g.param_elems, [name not in frozen for name, _ in g.params], g.optimizer["name"], g.batch,
                   g.x_elems)


def costed_fixed_bytes(param_bytes: int) -> int:
    """The fixed part of --ram for a costed graph file, which states only its trained parameters' bytes:
    those parameters and their gradients (no firmware, optimizer state or batch is known of it)."""
    return 2 * param_bytes


@dataclass(frozen=True)
class MemoryBudget:
    ram_bytes: int
    runtime_static: int
    pool: Pool

    @property
    def fixed(self) -> int:
        return self.runtime_static + self.pool.fixed

    @property
    def arena(self) -> int:
        return self.pool.arena(self.ram_bytes - self.runtime_static)

    def lines(self) -> list[tuple[str, int]]:
        p = self.pool
        return [("firmware static (stack, buffers, trace ring)", self.runtime_static),
                ("parameters (trained and frozen) and statistics", p.params), ("gradients", p.grads),
                ("optimizer state", p.optimizer_state), ("staged batch", p.staging),
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
    b = MemoryBudget(ram_bytes=ram_bytes, runtime_static=runtime_static, pool=pool_for(graph))
    if b.arena <= 0:
        raise UsageError(f"--ram {format_size(ram_bytes)} is below the fixed part "
                         f"{format_size(b.fixed)} (firmware {format_size(runtime_static)}, parameters, "
                         f"gradients, optimizer state, batch) before any activation; raise --ram")
    return b
