"""Test metrics the host computes from the board's weights: the ROC AUC of anomaly scores (numpy
only: poet does not depend on scikit-learn)."""

from __future__ import annotations

import numpy as np


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve of `scores` (higher: more anomalous) for labels 0 (normal) and 1
    (anomaly): the chance that a random anomaly scores above a random normal sample, ties counting
    half (Mann-Whitney U from average ranks). NaN without both kinds of samples."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    pos = np.asarray(labels).ravel() == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # 1-based rank of each distinct score's last copy
    mean_rank = last - (counts - 1) / 2.0  # tied scores share the mean of their ranks
    ranks = mean_rank[inverse]
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def anomaly_labels(y: np.ndarray) -> bool:
    """Whether test labels say normal (0) or anomaly (1), with both present: then an AUC means something."""
    return bool(len(y)) and set(np.unique(y).tolist()) == {0, 1}
