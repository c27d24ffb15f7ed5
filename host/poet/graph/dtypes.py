"""The element types poet's tensors are stored in: one table, for the graph, the planner, the model blob and
the report alike.

Every tensor of a training graph is fp32 except what a cast node makes (docs/spec.md section 2): a
saved activation kept in fp16 or bf16 (poet.plan.transform.precision) and the int8 operands of an int8 layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    name: str  # as graphs, precision rules, plans and reports spell it
    code: int  # as the model blob stores a cast's `from` and `to` (docs/spec.md section 2)
    bytes: int


DT_F32, DT_F16, DT_BF16, DT_I8 = 0, 1, 2, 3
ELEMENT_TYPES = {t.name: t for t in (ElementType("fp32", DT_F32, 4), ElementType("fp16", DT_F16, 2),
                                     ElementType("bf16", DT_BF16, 2), ElementType("int8", DT_I8, 1))}
BY_CODE = {t.code: t for t in ELEMENT_TYPES.values()}
NARROW_STORAGE = ("fp16", "bf16")  # what a saved activation may be stored in instead of fp32

F32 = ELEMENT_TYPES["fp32"].bytes
I32 = 4  # a class label in the staged batch; not a type any cast makes


def converted_bytes(nbytes: int, frm: str, to: str) -> int:
    """The size of a tensor of `nbytes` in type `frm` once converted to `to`."""
    return nbytes // ELEMENT_TYPES[frm].bytes * ELEMENT_TYPES[to].bytes
