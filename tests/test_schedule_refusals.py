"""The four refusals a user meets most (issue: bad CRC, another graph's hash, an offset outside the
arena, overlapping live tensors), end to end through the native runtime: each a distinct code, and
the host's message says what it means."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import needs_tools
from fwhelpers import native_link
from poet.device.protocol import MODEL, SCHEDULE, DeviceError
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.cost.memory import arena_bytes
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.schedule import COMPUTE, Instr
from poet.plan.strategies.checkpoint_all import keep_all

pytestmark = needs_tools("cc", "make")


def test_refusals_are_distinct_and_explained(tmp_path: Path) -> None:
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 4)
    other = trace(model, "mlp-digits", spec.input_shape, spec.classes, 2)  # another graph, same node count
    sched = lower(keep_all(uncosted(g)), g).schedule
    good = sched.encode()
    bad_crc = good[:-1] + bytes([good[-1] ^ 0xFF])
    foreign = replace(sched, model_hash=model_blob(other).hash()).encode()
    # the first arena allocation (the input takes none: it is the staged batch, read in place)
    k, first = next((k, i) for k, i in enumerate(sched.instrs) if i.op == COMPUTE and arena_bytes(g.nodes[i.node]))
    outside = replace(sched, instrs=[*sched.instrs[:k], Instr(first.op, first.node, sched.arena_bytes),
                                     *sched.instrs[k + 1:]]).encode()
    # the second allocation placed on top of the first while the first is live
    k2 = next(j for j in range(k + 1, len(sched.instrs))
              if sched.instrs[j].op == COMPUTE and arena_bytes(g.nodes[sched.instrs[j].node])
              and not sched.instrs[j].flags)  # not one made in place, whose offset is the first's by right
    clash = replace(sched, instrs=[*sched.instrs[:k2], replace(sched.instrs[k2], offset=first.offset),
                                   *sched.instrs[k2 + 1:]]).encode()
    seen: dict[int, str] = {}
    with native_link(tmp_path) as link:
        link.upload(MODEL, model_blob(g).encode())
        link.upload(SCHEDULE, good)
        for label, data, words in (("crc", bad_crc, "damaged"), ("hash", foreign, "another model"),
                                   ("bounds", outside, "outside the arena"), ("overlap", clash, "still live")):
            with pytest.raises(DeviceError) as err:
                link.upload(SCHEDULE, data)
            assert words in str(err.value), (label, str(err.value))
            seen[err.value.code] = label
    assert sorted(seen.values()) == ["bounds", "crc", "hash", "overlap"]  # four distinct codes
