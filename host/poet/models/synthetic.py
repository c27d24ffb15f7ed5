"""Synthetic stand-ins for MLPerf Tiny's audio data, made from a seed with numpy: `--data mfcc` and
`--data machine-sound`. MLPerf Tiny trains keyword spotting on Google Speech Commands and anomaly
detection on ToyADMOS / MIMII (DCASE 2020 Task 2); neither can be downloaded here, and both are
gigabytes of audio. These sets have the same sample shapes, label meaning and value ranges, and a
structure a network has to learn, so `poet train` runs those networks end to end; accuracies and
AUCs on them say that training works, not how the networks do on real sound.

`mfcc` (keyword spotting, DS-CNN's input): 3,000 clips of 49 frames x 10 MFCCs, shape [1, 49, 10],
12 classes in MLPerf's order: ten keywords (0 down, 1 go, 2 left, 3 no, 4 off, 5 on, 6 right, 7 stop,
8 up, 9 yes), 10 silence, 11 unknown word. A keyword is a sequence of four "phones" (MFCC vectors
whose magnitude falls with the coefficient's index, as real cepstra do), glided between over the
word, with silence (low energy c0) before and after. Each clip moves the word's onset by up to
+-4 frames (of a 1 s window), stretches it by up to 15% (speaking rate), changes its loudness and
timbre a little and adds background noise. Silence clips are background noise only; an unknown
word is one of 20 other words. Values are clipped to -1..1 (normalised MFCCs). Fixed split: 2,400
training and 600 test clips, every class equally often.

`machine-sound` (anomaly detection, the autoencoder's input): 640 values = 5 consecutive frames x
128 log-mel bins (0-8 kHz, HTK mel, 16 kHz audio as in DCASE 2020), frames concatenated as
MLPerf Tiny's AD does. A "normal" machine is a motor: a 120 Hz fundamental and nine harmonics
above a noise floor that falls with frequency, with a casing resonance near 2 kHz; each sample
jitters its speed (0.5%), harmonic levels, floor level and every frame's bins a little. Anomalies
are a speed fault (every harmonic shifted by 1.5-4%), a bearing whine (an extra tone at 1.5-6 kHz)
or a rattle (a band of the floor raised). Levels are in dB, mapped so -70..-20 dB is -1..1 and
clipped there. Training split: 2,000 normal samples (an autoencoder trains on normal sound only),
labels all 0; test split: 250 normal (label 0) and 250 anomalous (label 1), interleaved at random.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # x_train, y_train, x_test, y_test

# --------------------------------------------------------------------------------------- mfcc (KWS)

MFCC_FRAMES, MFCC_COEFFS, KWS_CLASSES = 49, 10, 12
SILENCE, UNKNOWN = 10, 11
PHONES = 4  # MFCC vectors a word glides through
UNKNOWN_WORDS = 20
MFCC_TRAIN_PER_CLASS, MFCC_TEST_PER_CLASS = 200, 50


def _word_templates(rng: np.random.Generator, n: int) -> np.ndarray:
    """[n, PHONES, COEFFS] words: c0 (energy) above silence's, the rest falling with their index."""
    spread = 0.45 * 0.8 ** np.arange(MFCC_COEFFS)
    words = rng.normal(0.0, 1.0, (n, PHONES, MFCC_COEFFS)) * spread
    words[:, :, 0] = rng.uniform(0.1, 0.7, (n, PHONES))
    return words


def _silence_vector() -> np.ndarray:
    v = np.zeros(MFCC_COEFFS)
    v[0] = -0.7  # low energy; the higher cepstra of quiet noise are near zero
    return v


def _clips(rng: np.random.Generator, labels: np.ndarray, keywords: np.ndarray, others: np.ndarray) -> np.ndarray:
    """[N, 1, 49, 10] clips of the given labels, each with its own onset, rate, loudness and noise."""
    n = len(labels)
    # which word each clip says: its keyword, one of the unknown words, or none (silence: index unused)
    words = np.concatenate([keywords, others])
    which = np.where(labels == UNKNOWN, len(keywords) + rng.integers(0, len(others), n), np.minimum(labels, 9))
    timbre = 1.0 + rng.normal(0.0, 0.08, (n, 1, MFCC_COEFFS))
    template = words[which] * timbre  # [N, PHONES, COEFFS]
    length = 27.0 * rng.uniform(0.85, 1.15, (n, 1))
    onset = (MFCC_FRAMES - length) / 2 + rng.uniform(-4, 4, (n, 1))
    u = (np.arange(MFCC_FRAMES)[None, :] - onset) / length  # [N, T]: where in the word each frame is
    pos = np.clip(u, 0.0, 1.0) * (PHONES - 1)
    lo = np.minimum(pos.astype(int), PHONES - 2)
    frac = (pos - lo)[..., None]
    rows = np.arange(n)[:, None]
    voiced = template[rows, lo] * (1 - frac) + template[rows, lo + 1] * frac  # [N, T, COEFFS]
    voiced[..., 0] += rng.normal(0.0, 0.1, (n, 1))  # loudness
    # a word fades in and out over a tenth of its length; silence clips have no word at all
    w = np.clip(np.minimum(u, 1 - u) / 0.1, 0.0, 1.0)[..., None] * (labels != SILENCE)[:, None, None]
    noise_level = rng.uniform(0.03, 0.12, (n, 1, 1))
    x = _silence_vector() * (1 - w) + voiced * w + rng.normal(0.0, 1.0, (n, MFCC_FRAMES, MFCC_COEFFS)) * noise_level
    return np.clip(x, -1.0, 1.0).astype(np.float32)[:, None]


def mfcc_keywords(seed: int = 0) -> Arrays:
    """The `mfcc` set: [2400, 1, 49, 10] training and [600, 1, 49, 10] test clips, 12 balanced classes."""
    rng = np.random.default_rng([seed, 49, 10])
    keywords, others = _word_templates(rng, 10), _word_templates(rng, UNKNOWN_WORDS)

    def split(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.permutation(np.repeat(np.arange(KWS_CLASSES), per_class)).astype(np.int64)
        return _clips(rng, y, keywords, others), y

    x_train, y_train = split(MFCC_TRAIN_PER_CLASS)
    x_test, y_test = split(MFCC_TEST_PER_CLASS)
    return x_train, y_train, x_test, y_test


# ------------------------------------------------------------------------------ machine sound (AD)

MEL_BINS, AD_FRAMES = 128, 5
SAMPLE_RATE_HZ = 16000
F0_HZ, HARMONICS = 120.0, 10
AD_TRAIN, AD_TEST_NORMAL, AD_TEST_ANOMALOUS = 2000, 250, 250
DB_LOW, DB_HIGH = -70.0, -20.0  # mapped to -1..1


def _mel(f_hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f_hz) / 700.0)


# centres of the 128 mel bands, evenly spaced in mel from 0 Hz to Nyquist
_MEL_CENTRES = np.linspace(0.0, float(_mel(SAMPLE_RATE_HZ / 2)), MEL_BINS + 2)[1:-1]
_MEL_STEP = float(_MEL_CENTRES[1] - _MEL_CENTRES[0])


def _tones(f_hz: np.ndarray, level_db: np.ndarray) -> np.ndarray:
    """Power in each mel band of tones at f_hz [N, K] with levels [N, K]: a peak about a band wide."""
    d = (_MEL_CENTRES[None, None, :] - _mel(f_hz)[..., None]) / (0.7 * _MEL_STEP)
    return (10 ** (level_db[..., None] / 10) * np.exp(-0.5 * d * d)).sum(axis=1)


def _machine(rng: np.random.Generator, n: int, kind: np.ndarray) -> np.ndarray:
    """[N, 640] scaled log-mel vectors; kind 0 normal, 1 speed fault, 2 bearing whine, 3 rattle."""
    band = np.arange(MEL_BINS)[None, :]
    floor_db = -50.0 - 8.0 * band / MEL_BINS + rng.normal(0.0, 1.0, (n, 1))
    floor_db = floor_db + 6.0 * np.exp(-0.5 * ((_MEL_CENTRES[None, :] - _mel(2000.0)) / 150.0) ** 2)
    speed = 1.0 + rng.normal(0.0, 0.005, (n, 1))
    fault = 1.0 + rng.choice([-1.0, 1.0], (n, 1)) * rng.uniform(0.015, 0.04, (n, 1))
    speed = speed * np.where(kind[:, None] == 1, fault, 1.0)
    h = np.arange(1, HARMONICS + 1)[None, :]
    level_db = -24.0 - 1.5 * (h - 1) + rng.normal(0.0, 1.0, (n, HARMONICS))
    power = 10 ** (floor_db / 10) + _tones(F0_HZ * speed * h, level_db)
    whine = _tones(rng.uniform(1500.0, 6000.0, (n, 1)), rng.uniform(-46.0, -40.0, (n, 1)))
    power += np.where(kind[:, None] == 2, whine, 0.0)
    start = rng.integers(20, MEL_BINS - 30, (n, 1))
    rattle = ((band >= start) & (band < start + 20)) * 10 ** (rng.uniform(-49.0, -45.0, (n, 1)) / 10)
    power += np.where(kind[:, None] == 3, rattle, 0.0)
    frames_db = 10 * np.log10(power)[:, None, :] + rng.normal(0.0, 1.5, (n, AD_FRAMES, MEL_BINS))
    scaled = (frames_db - (DB_LOW + DB_HIGH) / 2) / ((DB_HIGH - DB_LOW) / 2)
    return np.clip(scaled, -1.0, 1.0).reshape(n, AD_FRAMES * MEL_BINS).astype(np.float32)


def machine_sound(seed: int = 0) -> Arrays:
    """The `machine-sound` set: [2000, 640] normal training vectors (labels 0) and [500, 640] test
    vectors, half normal (0), half anomalous (1)."""
    rng = np.random.default_rng([seed, 640])
    x_train = _machine(rng, AD_TRAIN, np.zeros(AD_TRAIN, dtype=np.int64))
    y_test = rng.permutation(np.repeat([0, 1], [AD_TEST_NORMAL, AD_TEST_ANOMALOUS])).astype(np.int64)
    kind = np.where(y_test == 1, rng.integers(1, 4, len(y_test)), 0)
    return x_train, np.zeros(AD_TRAIN, dtype=np.int64), _machine(rng, len(y_test), kind), y_test


# --data NAME: the sets made here, each from seed 0, and the shape of one sample (known without making them)
NAMED: dict[str, Callable[[], Arrays]] = {"mfcc": mfcc_keywords, "machine-sound": machine_sound}
SAMPLE_SHAPES: dict[str, tuple[int, ...]] = {"mfcc": (1, MFCC_FRAMES, MFCC_COEFFS),
                                             "machine-sound": (AD_FRAMES * MEL_BINS,)}
