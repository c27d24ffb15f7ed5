"""The order a device visits its collected samples in, epoch by epoch: poet_epoch_order's twin
(firmware/core/device_samples.c), so a host-driven run can train on the same batches as a standalone one.

A 4-round Feistel permutation of 2h-bit numbers keyed by (seed, epoch), walked until it lands below n:
a bijection of 0..n-1 the device computes per index, with no table in RAM.
"""

from __future__ import annotations

import numpy as np

M32 = 0xFFFFFFFF


def _mix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """Sample indices in the order poet_train_epoch visits them in epoch `epoch` (0-based)."""
    if n < 2:
        return np.zeros(n, np.int64)
    h = 1
    while h < 16 and (1 << (2 * h)) < n:
        h += 1
    mask = (1 << h) - 1
    keys = [_mix32((seed * 0x9E3779B9 + epoch * 0x85EBCA6B + j) & M32) for j in range(4)]
    out = np.empty(n, np.int64)
    for k in range(n):
        x = k
        while True:
            left, right = x >> h, x & mask
            for key in keys:
                left, right = right, left ^ (_mix32(right ^ key) & mask)
            x = (left << h) | right
            if x < n:
                break
        out[k] = x
    return out
