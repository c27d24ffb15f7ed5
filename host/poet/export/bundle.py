"""The device bundle (PBDL, docs/spec.md section 7): model, frozen weights, initial weights and the two
schedules in one read-only blob that firmware/core/device.c reads in place.

Byte-exact, like the other blob encoders (poet.plan.lowering.modelblob): the C side refuses whatever
this module would not write.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poet.plan.cost.memory import Pool
from poet.plan.lowering.modelblob import ModelBlob
from poet.plan.lowering.schedule import FORWARD, Schedule

MAGIC = b"PBDL"
VERSION = 1
HEADER_BYTES = 64
SECTION_ALIGN = 8
_HEADER = struct.Struct("<4sBBHIfII10I")
SECTIONS = ("model", "frozen", "weights", "train", "forward")
NO_SNAPSHOT = 0x01  # header flag: the pool keeps no snapshot to undo a diverged step (docs/spec.md 7)


def _align(n: int, to: int = SECTION_ALIGN) -> int:
    return -(-n // to) * to


def device_pool_bytes(pool: Pool, train: Schedule, forward: Schedule, snapshot: bool = True) -> int:
    """The RAM pool poet_init needs: section 6's regions, the snapshot a diverged step is undone from
    (unless the bundle says it keeps none), the instructions' ticks, and the larger arena
    (firmware/core/pool_layout.c)."""
    n_ticks = max(len(train.instrs), len(forward.instrs))
    return (pool.fixed + (pool.snapshot if snapshot else 0) + _align(4 * n_ticks)
            + max(train.arena_bytes, forward.arena_bytes))


@dataclass(frozen=True)
class Bundle:
    """What a device trains and predicts from."""

    model: bytes
    frozen: bytes
    weights: bytes
    train: bytes
    forward: bytes
    lr: float
    pool_bytes: int
    snapshot: bool = True  # the pool keeps a copy that undoes a diverged step

    def encode(self) -> bytes:
        parts = [self.model, self.frozen, self.weights, self.train, self.forward]
        body = bytearray(HEADER_BYTES)
        table: list[int] = []
        for part in parts:
            off = _align(len(body))
            body += bytes(off - len(body)) + part
            table += [off, len(part)]
        total = _align(len(body), 4) + 4
        body += bytes(total - 4 - len(body))
        flags = 0 if self.snapshot else NO_SNAPSHOT
        body[:HEADER_BYTES] = _HEADER.pack(MAGIC, VERSION, flags, 0, total, self.lr, self.pool_bytes, 0, *table)
        return bytes(body) + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Bundle:
        """Parse (checking the header, the sections' places and the CRC), for tests and `poet export`'s check."""
        if len(data) < HEADER_BYTES + 4:
            raise ValueError(f"a bundle is at least {HEADER_BYTES + 4} bytes; this is {len(data)}")
        magic, version, flags, _, total, lr, pool_bytes, _, *table = _HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION or flags & ~NO_SNAPSHOT:
            raise ValueError(f"not a version-{VERSION} poet bundle (magic {magic!r}, version {version})")
        if total != len(data):
            raise ValueError(f"the bundle is {len(data)} bytes, its header says {total}")
        if zlib.crc32(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
            raise ValueError("the bundle's CRC-32 does not match its bytes: it is damaged")
        parts, end = [], HEADER_BYTES
        for name, off, n in zip(SECTIONS, table[::2], table[1::2], strict=True):
            if off % SECTION_ALIGN or off < end or off + n > total - 4:
                raise ValueError(f"the bundle's {name} section is out of place")
            parts.append(data[off:off + n])
            end = off + n
        return cls(*parts, lr=lr, pool_bytes=pool_bytes, snapshot=not flags & NO_SNAPSHOT)


def make_bundle(blob: ModelBlob, params: Sequence[np.ndarray], train: Schedule, forward: Schedule,
                lr: float, snapshot: bool = True) -> Bundle:
    """The bundle of a model blob, its parameters in param-table order (as the board is given them) and
    its two schedules; `snapshot`: whether the pool keeps a copy to undo a diverged step. Weights on aux
    storage are not in it: they go on the card (blob.split_weights)."""
    if forward.flags != FORWARD or train.flags:
        raise ValueError("a bundle takes a training schedule and a forward one, in that order")
    weights, frozen, _aux = blob.split_weights(params)
    return Bundle(blob.encode(), frozen, weights, train.encode(), forward.encode(), float(np.float32(lr)),
                  device_pool_bytes(blob.pool, train, forward, snapshot), snapshot)
