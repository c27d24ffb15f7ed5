"""The synthetic stand-ins for MLPerf Tiny's audio data (`--data mfcc`, `--data machine-sound`): made
the same from the same seed, in the stated shapes and splits, in range, and with structure a network
can learn; and the anomaly metrics `poet train` reports for an autoencoder."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from poet.errors import UsageError
from poet.graph.reference import reconstruction_errors
from poet.models.datasets import load_dataset
from poet.models.metrics import anomaly_labels, roc_auc
from poet.models.synthetic import SAMPLE_SHAPES, machine_sound, mfcc_keywords
from torch import nn


@pytest.fixture(scope="module")
def mfcc() -> tuple[np.ndarray, ...]:
    return mfcc_keywords()


@pytest.fixture(scope="module")
def sound() -> tuple[np.ndarray, ...]:
    return machine_sound()


# ------------------------------------------------------------------------------------------ datasets

@pytest.mark.parametrize("make", [mfcc_keywords, machine_sound])
def test_same_seed_same_data_other_seed_other_data(make) -> None:
    a, b, c = make(0), make(0), make(1)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


def test_mfcc_shapes_classes_and_balanced_split(mfcc: tuple[np.ndarray, ...]) -> None:
    x_train, y_train, x_test, y_test = mfcc
    assert x_train.shape == (2400, 1, 49, 10) and x_test.shape == (600, 1, 49, 10)
    assert x_train.dtype == x_test.dtype == np.float32 and y_train.dtype == y_test.dtype == np.int64
    assert np.array_equal(np.bincount(y_train), [200] * 12) and np.array_equal(np.bincount(y_test), [50] * 12)
    assert len(set(y_train[:24].tolist())) > 3  # shuffled, not sorted by class


def test_machine_sound_trains_on_normal_and_tests_on_both(sound: tuple[np.ndarray, ...]) -> None:
    x_train, y_train, x_test, y_test = sound
    assert x_train.shape == (2000, 640) and x_test.shape == (500, 640) and x_train.dtype == np.float32
    assert not y_train.any()  # an autoencoder learns normal sound only
    assert np.array_equal(np.bincount(y_test), [250, 250]) and anomaly_labels(y_test)
    assert not anomaly_labels(y_train)


@pytest.mark.parametrize("which", ["mfcc", "sound"])
def test_values_are_finite_in_range_and_rarely_clipped(which: str, request: pytest.FixtureRequest) -> None:
    for x in request.getfixturevalue(which)[0::2]:
        assert np.isfinite(x).all() and x.min() >= -1.0 and x.max() <= 1.0
        assert (np.abs(x) == 1.0).mean() < 0.01  # the range is used, not saturated
        assert x.std() > 0.1


def test_mfcc_classes_are_told_apart_by_their_mean_clip(mfcc: tuple[np.ndarray, ...]) -> None:
    """Nearest class mean, fitted on the training clips: far above chance (1/12) on the test clips,
    so the classes differ in their spectral-temporal pattern, not in noise."""
    x_train, y_train, x_test, y_test = (a.reshape(len(a), -1) if a.ndim > 1 else a for a in mfcc)
    means = np.stack([x_train[y_train == c].mean(axis=0) for c in range(12)])
    guess = ((x_test[:, None, :] - means[None]) ** 2).sum(axis=2).argmin(axis=1)
    assert (guess == y_test).mean() > 0.8
    # every class on its own, silence (10) and unknown words (11) included
    assert min((guess[y_test == c] == c).mean() for c in range(12)) > 0.5


def test_mfcc_clips_of_a_class_differ(mfcc: tuple[np.ndarray, ...]) -> None:
    x_train, y_train = mfcc[0], mfcc[1]
    first = x_train[y_train == 3]
    assert not np.allclose(first[0], first[1], atol=0.05)  # onset, rate, noise: no two clips alike


def test_machine_sound_anomalies_stand_out_from_normal_sound(sound: tuple[np.ndarray, ...]) -> None:
    """Distance from the mean normal training vector, as anomaly score: well above chance, though
    not perfect (an autoencoder has something to learn)."""
    x_train, _, x_test, y_test = sound
    score = ((x_test - x_train.mean(axis=0)) ** 2).mean(axis=1)
    assert 0.8 < roc_auc(score, y_test) < 0.995
    assert score[y_test == 0].mean() < score[y_test == 1].mean()


def test_the_named_sets_load_and_fit_their_models() -> None:
    kws = load_dataset("mfcc").fitted((1, 49, 10), 12, "mlperf-kws")
    assert kws.name == "mfcc" and kws.x_train.shape == (2400, 1, 49, 10)
    ad = load_dataset("machine-sound", limit=64).fitted((640,), 640, "mlperf-ad", "mse")
    assert ad.x_train.shape == (64, 640) and ad.x_test.shape == (500, 640)
    with pytest.raises(UsageError, match="do not fit model"):
        load_dataset("mfcc").fitted((640,), 640, "mlperf-ad", "mse")


def test_the_stated_sample_shapes_are_those_made(mfcc: tuple[np.ndarray, ...], sound: tuple[np.ndarray, ...]) -> None:
    assert SAMPLE_SHAPES == {"mfcc": mfcc[0].shape[1:], "machine-sound": sound[0].shape[1:]}


def test_data_that_does_not_fit_names_the_set_that_does() -> None:
    with pytest.raises(UsageError, match=r"takes \(640,\) \(640 values\); --data machine-sound does$"):
        load_dataset("digits").fitted((640,), 640, "mlperf-ad", "mse")
    with pytest.raises(UsageError, match=r"--data mfcc does$"):
        load_dataset("machine-sound").fitted((1, 49, 10), 12, "mlperf-kws")


def test_a_reconstructing_model_takes_any_labels_a_classifier_does_not() -> None:
    """An autoencoder's labels are no classes (they may be anomaly labels): not refused against
    its output width; a classifier's still are."""
    ds = load_dataset("mfcc")
    assert ds.fitted((490,), 2, "ae", "mse").y_train.max() == 11
    with pytest.raises(UsageError, match="2 classes"):
        ds.fitted((490,), 2, "classifier")


# ------------------------------------------------------------------------------------------ metrics

def _pairwise_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The AUC by its definition: over every (anomaly, normal) pair, 1 if the anomaly scores higher,
    1/2 for a tie."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auc_of_a_hand_computed_case_with_ties() -> None:
    # anomalies 0.35, 0.8, 0.4 against normals 0.1, 0.4: of the 6 pairs, 0.35 beats 0.1 only, 0.8
    # beats both, 0.4 beats 0.1 and ties 0.4: (1 + 2 + 1.5) / 6
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.4])
    labels = np.array([0, 0, 1, 1, 1])
    assert roc_auc(scores, labels) == pytest.approx(0.75)


def test_auc_at_its_ends_and_without_both_kinds() -> None:
    labels = np.array([0, 0, 1, 1])
    assert roc_auc(np.array([1.0, 2.0, 3.0, 4.0]), labels) == 1.0
    assert roc_auc(np.array([4.0, 3.0, 2.0, 1.0]), labels) == 0.0
    assert roc_auc(np.full(4, 7.0), labels) == 0.5  # all tied: no better than a coin
    assert np.isnan(roc_auc(np.array([1.0, 2.0]), np.array([0, 0])))
    assert not anomaly_labels(np.array([0, 1, 2])) and not anomaly_labels(np.array([], dtype=np.int64))


def test_auc_equals_the_pairwise_definition_on_random_scores_with_ties() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        labels = rng.permutation(np.r_[0, 1, rng.integers(0, 2, n)])
        scores = rng.integers(0, 6, len(labels)).astype(np.float64)  # few values: many ties
        assert roc_auc(scores, labels) == pytest.approx(_pairwise_auc(scores, labels), abs=1e-12)


def test_reconstruction_errors_are_the_loss_of_each_sample() -> None:
    x = np.random.default_rng(0).normal(size=(6, 1, 4, 5)).astype(np.float32)
    zeros = nn.Sequential(nn.Flatten(), nn.Linear(20, 20))
    with torch.no_grad():
        zeros[1].weight.zero_()
        zeros[1].bias.zero_()
    flat = x.reshape(6, -1).astype(np.float64)
    assert np.allclose(reconstruction_errors(zeros, x, "mse"), (flat ** 2).mean(axis=1))
    assert np.allclose(reconstruction_errors(zeros, x, "l1"), np.abs(flat).mean(axis=1))
    assert not reconstruction_errors(nn.Identity(), x, "mse").any()


def test_digits_fold_into_a_model_of_fewer_classes() -> None:
    """Visual wake words has 2 classes: the digits become even (0) against odd (1), upsampled to its
    96x96x3; a model of 10 or more classes keeps the digits' labels."""
    from poet.models.datasets import load_dataset

    ds = load_dataset("digits", 40)
    two = ds.fitted((3, 96, 96), 2, "mlperf-vww")
    assert two.x_train.shape == (40, 3, 96, 96)
    assert np.array_equal(two.y_train, ds.y_train % 2) and set(two.y_test.tolist()) == {0, 1}
    assert np.array_equal(ds.fitted((64,), 10, "mlp").y_train, ds.y_train)
