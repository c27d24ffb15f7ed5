"""scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), shipped inside poet: no download.

data/digits.csv.gz is copied unchanged from scikit-learn 1.9.1 (BSD-3-Clause, see
data/COPYING.scikit-learn; the images are the UCI optical recognition of handwritten
digits set). Each row: 64 pixel values 0..16, then the label.
"""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """All images as float32 in [0, 1], shape [1797, 64], and int64 labels."""
    with resources.files("poet").joinpath("data/digits.csv.gz").open("rb") as raw, gzip.open(raw) as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return table[:, :-1] / 16.0, table[:, -1].astype(np.int64)


def digits_split(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A fixed shuffled train/test split, the same on every machine."""
    x, y = load_digits()
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def batches(x: np.ndarray, y: np.ndarray, batch: int, input_shape: tuple[int, ...]):
    """Consecutive full batches in the given order, inputs reshaped to the model's input shape."""
    for start in range(0, len(x) - batch + 1, batch):
        xb = x[start : start + batch].reshape((batch, *input_shape)).astype(np.float32)
        yield xb, y[start : start + batch]
