"""The order a device visits its collected samples in, epoch by epoch: poet_epoch_order's twin
(firmware/core/device_samples.c), so a host-driven run can train on the same batches as a standalone one.

A 4-round Feistel permutation of 2h-bit numbers keyed by (seed, epoch), walked until it lands below n:
a bijection of 0..n-1 the device computes per index, with no table in RAM. Its round function is
murmur3's finaliser, the one dropout's masks use (poet.graph.dropout.mix32, C's poet_mix32).
"""

from __future__ import annotations

import numpy as np

from poet.graph.dropout import mix32

M32 = 0xFFFFFFFF


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """Sample indices in the order poet_train_epoch visits them in epoch `epoch` (0-based)."""
    if n < 2:
        return np.zeros(n, np.int64)
    h = 1
    while h < 16 and (1 << (2 * h)) < n:
        h += 1
    mask = np.uint32((1 << h) - 1)
    keys = mix32(np.array([(seed * 0x9E3779B9 + epoch * 0x85EBCA6B + j) & M32 for j in range(4)], np.uint32))
    x = np.arange(n, dtype=np.uint32)
    walking = np.ones(n, bool)
    while walking.any():  # cycle-walking: each index steps again until it lands below n
        left, right = x[walking] >> np.uint32(h), x[walking] & mask
        for key in keys:
            left, right = right, left ^ (mix32(right ^ key) & mask)
        x[walking] = (left << np.uint32(h)) | right
        walking = x >= n
    return x.astype(np.int64)
