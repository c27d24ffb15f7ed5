"""Training data for `poet train --data`: scikit-learn's digits, the synthetic `mfcc` and
`machine-sound` sets (models/synthetic.py: stand-ins for Speech Commands and ToyADMOS, made from a
seed), a folder of .npy arrays, or any torch Dataset made by `module:factory`. Each becomes fixed
train/test arrays the host batches and streams to the board one batch per step; the board never
holds more than the staged batch.

The digits are scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), shipped inside poet:
no download. data/digits.csv.gz is copied unchanged from scikit-learn 1.9.1 (BSD-3-Clause, see
data/COPYING.scikit-learn; the images are the UCI optical recognition of handwritten digits set).
Each row: 64 pixel values 0..16, then the label.
"""

from __future__ import annotations

import gzip
import importlib
import io
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from poet.errors import UsageError
from poet.files import MB, read_bytes
from poet.models.synthetic import NAMED, SAMPLE_SHAPES


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


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # float32 [N, *sample shape]
    y_train: np.ndarray  # int64 [N]
    x_test: np.ndarray
    y_test: np.ndarray

    def fitted(self, input_shape: tuple[int, ...], classes: int, model: str, loss: str = "cross_entropy",
               vocab: int | None = None) -> Dataset:
        """The data reshaped to the model's sample shape; refuse data the model cannot take. A model whose
        loss is not cross_entropy reconstructs its input: its labels are no classes (anomaly labels, or none).
        vocab: the model reads token ids 0..vocab-1 (TrainingGraph.vocab): the samples must be such ids, and
        stay int64 (PyTorch's embedding takes no floats); the digits are read as 64 tokens, each pixel's
        intensity 0..16."""
        for split, x, y in (("training", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            _check_values(self.name, split, x, y)
        if vocab is not None:
            return self._as_tokens(vocab, model)._shaped(input_shape, classes, model, loss, np.int64)
        want = int(np.prod(input_shape))
        got = int(np.prod(self.x_train.shape[1:]))
        if self.name == "digits" and got == 64 and got != want and _digits_scale(input_shape):
            return self._upsampled(input_shape).fitted(input_shape, classes, model, loss)
        if self.name == "digits" and loss == "cross_entropy" and 2 <= classes < 10 and len(self.y_train) \
                and int(self.y_train.max()) >= classes:
            # a model of fewer classes (visual wake words: 2) learns the digits folded into them: for 2,
            # even against odd, a balanced task
            return Dataset(self.name, self.x_train, self.y_train % classes, self.x_test,
                           self.y_test % classes).fitted(input_shape, classes, model, loss)
        return self._shaped(input_shape, classes, model, loss, np.float32)

    def _shaped(self, input_shape: tuple[int, ...], classes: int, model: str, loss: str,
                x_type: type[np.generic]) -> Dataset:
        """The samples reshaped to input_shape as x_type, the labels int64, once they fit the model."""
        want = int(np.prod(input_shape))
        got = int(np.prod(self.x_train.shape[1:]))
        if got != want:
            fits = [n for n, shape in SAMPLE_SHAPES.items() if int(np.prod(shape)) == want and n != self.name]
            raise UsageError(f"--data {self.name}: samples of shape {tuple(self.x_train.shape[1:])} ({got} values) "
                             f"do not fit model {model}, which takes {tuple(input_shape)} ({want} values)"
                             + (f"; --data {fits[0]} does" if fits else ""))
        for split, y in (("training", self.y_train), ("test", self.y_test)):
            if loss == "cross_entropy" and len(y) and (y.min() < 0 or y.max() >= classes):
                raise UsageError(f"--data {self.name}: {split} labels span {int(y.min())}..{int(y.max())}, "
                                 f"model {model} has {classes} classes (0..{classes - 1})")
        return Dataset(self.name, *(a.reshape((len(a), *input_shape)).astype(x_type) if i % 2 == 0
                                    else a.astype(np.int64)
                                    for i, a in enumerate((self.x_train, self.y_train, self.x_test, self.y_test))))

    def _as_tokens(self, vocab: int, model: str) -> Dataset:
        """The samples as token ids below vocab, refused when they are not such ids (the board would look
        a fraction or an id past the table up as another token, or past the table's end)."""
        ds = self
        if self.name == "digits":  # the pixels' intensities 0..16, as digits_split read them
            ds = Dataset(self.name, np.rint(self.x_train * 16.0), self.y_train, np.rint(self.x_test * 16.0),
                         self.y_test)
        for split, x in (("training", ds.x_train), ("test", ds.x_test)):
            bad = (x != np.round(x)) | (x < 0) | (x >= vocab)
            if bad.any():
                at = tuple(int(i) for i in np.argwhere(bad)[0])
                raise UsageError(f"--data {self.name}: {split} sample {at[0]} holds {x[at]!r}, not a token id of model "
                                 f"{model} (whole numbers 0..{vocab - 1})")
        return ds

    def _upsampled(self, input_shape: tuple[int, ...]) -> Dataset:
        """The 8x8 digits at the image model's size: each pixel repeated into a square (nearest
        neighbour) and the grey image copied into every channel, as a camera-sized stand-in that
        ships with scikit-learn."""
        c, h, _ = input_shape
        k = _digits_scale(input_shape)

        def up(x: np.ndarray) -> np.ndarray:
            img = x.reshape(len(x), 1, 8, 8).repeat(k, axis=2).repeat(k, axis=3)
            return np.ascontiguousarray(np.broadcast_to(img, (len(x), c, h, h)), dtype=np.float32)
        return Dataset(self.name, up(self.x_train), self.y_train, up(self.x_test), self.y_test)

    def epoch_order(self, epoch: int, seed: int, order_of: str = "host") -> np.ndarray:
        """The training samples' indices in the order epoch `epoch` visits them, fixed by (seed, epoch): a
        resumed run and the PyTorch reference see exactly the same batches. order_of "device": the order an
        exported device's poet_train_epoch visits its stored samples in (poet.export.order), not numpy's."""
        if order_of == "device":
            from poet.export.order import epoch_order

            return np.asarray(epoch_order(len(self.x_train), seed, epoch))
        return np.random.default_rng([seed, epoch]).permutation(len(self.x_train))

    def epoch_batches(self, batch: int, epoch: int, seed: int,
                      order_of: str = "host") -> list[tuple[np.ndarray, np.ndarray]]:
        """Full batches of one epoch, in epoch_order's order."""
        order = self.epoch_order(epoch, seed, order_of)
        return [(self.x_train[order[i:i + batch]], self.y_train[order[i:i + batch]])
                for i in range(0, len(order) - batch + 1, batch)]


# The board trains in fp32: inputs far from the usual -1..1 overflow activations or gradients and the
# weights turn to NaN without any error. Raw 16-bit sensor counts (65535) still pass.
MAX_ABS_INPUT = 1e6


def _digits_scale(input_shape: tuple[int, ...]) -> int:
    """How many times an image model's square input is the digits' 8x8 (0: not a square multiple)."""
    if len(input_shape) != 3 or input_shape[1] != input_shape[2] or input_shape[1] % 8:
        return 0
    return input_shape[1] // 8


def _check_values(name: str, split: str, x: np.ndarray, y: np.ndarray) -> None:
    """Refuse data that would train to NaN or on values other than those given (complex, fractional labels)."""
    if not len(y):
        return
    for what, a in (("samples", x), ("labels", y)):
        if np.iscomplexobj(a):
            raise UsageError(f"--data {name}: the {split} {what} are complex ({a.dtype}); poet trains on real numbers")
        if a.dtype.kind not in "biuf":
            raise UsageError(f"--data {name}: the {split} {what} are {a.dtype}, not numbers")
    xf = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(xf)
    if bad.any():
        at = int(np.argwhere(bad)[0][0])
        raise UsageError(f"--data {name}: {split} sample {at} has NaN or infinite values; remove or fix them")
    big = float(np.abs(xf).max()) if xf.size else 0.0
    if big > MAX_ABS_INPUT:
        raise UsageError(f"--data {name}: {split} samples reach {big:.3g}; the board trains in fp32 and values "
                         f"beyond {MAX_ABS_INPUT:g} turn its weights to NaN: scale the data (to about -1..1)")
    if y.dtype.kind == "f":
        # beyond int64 a whole float has no class number to cast to (the cast is undefined, not an error)
        frac = ~np.isfinite(y) | (y != np.round(y)) | (np.abs(y) >= 2.0**63)
        if frac.any():
            at = int(np.argwhere(frac)[0][0])
            raise UsageError(f"--data {name}: {split} label {at} is {y[at].item()!r}, not a whole class number")


def load_dataset(spec: str, limit: int | None = None) -> Dataset:
    """`digits`, `mfcc`, `machine-sound`, a folder with train_x.npy/train_y.npy (test_x.npy/test_y.npy
    optional), or `module:factory`."""
    if spec == "digits":
        ds = Dataset("digits", *digits_split())
    elif spec in NAMED:
        ds = Dataset(spec, *NAMED[spec]())
    elif ":" in spec and not Path(spec).exists():
        ds = _from_factory(spec)
    else:
        ds = _from_folder(Path(spec))
    if limit is not None:
        ds = Dataset(ds.name, ds.x_train[:limit], ds.y_train[:limit], ds.x_test, ds.y_test)
    if len(ds.x_train) == 0:
        raise UsageError(f"--data {spec}: no training samples")
    return ds


def _split(name: str, x: np.ndarray, y: np.ndarray) -> Dataset:
    """A fixed 80/20 split when the data has no test part of its own."""
    order = np.random.default_rng(0).permutation(len(x))
    n_test = len(x) // 5
    return Dataset(name, x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]])


# What one .npy array of a --data folder may hold: far above what a board fine-tunes on (CIFAR-10's
# 50,000 training images are 600 MB as float32), below what the host cannot hold while it loads one
# (the file's bytes and the array are both in memory then, and the checks make a float64 copy).
MAX_NPY_BYTES = 2048 * MB
PARTS = ("train_x", "train_y", "test_x", "test_y")


def _read_npy(folder: Path, f: Path) -> np.ndarray:
    """One array of a --data folder: read once as a regular file (a link to /dev/zero, a FIFO or a file
    past MAX_NPY_BYTES is refused before it is read), its header checked against its size before numpy
    allocates what the header claims, and no pickled objects (allow_pickle=False: nothing runs)."""
    data = read_bytes(f, "--data", limit=MAX_NPY_BYTES)
    head = io.BytesIO(data)
    what = f"--data {folder}: {f.name}"
    if data.startswith(b"PK\x03\x04"):
        raise UsageError(f"{what} is a .npz archive (np.savez), not one .npy array: save each array with np.save")
    try:
        version = np.lib.format.read_magic(head)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
        else:  # 3.0: written only for structured arrays with non-Latin-1 field names, no numbers poet trains on
            raise ValueError(f"format version {version[0]}.{version[1]}, which poet does not read")
    except ValueError as exc:
        raise UsageError(f"{what} is not a .npy array as np.save writes one ({' '.join(str(exc).split())[:100]})") \
            from None
    if dtype.hasobject:
        raise UsageError(f"{what} holds Python objects ({dtype}), which poet does not unpickle: save an array of "
                         "numbers")
    if dtype.itemsize == 0:  # any count of nothing fits in no bytes: a header could claim 10**12 samples
        raise UsageError(f"{what} is of {dtype}, whose values take no bytes: not numbers")
    want = math.prod(shape) * dtype.itemsize  # Python ints: a header's shape cannot overflow the product
    have = len(data) - head.tell()
    if want != have:
        raise UsageError(f"{what}: its header says {shape} of {dtype} ({want:,} bytes), the file holds {have:,}: "
                         "truncated or not written by np.save")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:  # a dtype numpy cannot rebuild from the header
        raise UsageError(f"{what} is not a plain .npy array ({' '.join(str(exc).split())[:100]})") from None


def _from_folder(folder: Path) -> Dataset:
    if not folder.is_dir():
        raise UsageError(f"--data {folder}: not `digits`, {', '.join(f'`{n}`' for n in NAMED)}, a folder of .npy "
                         "arrays, or module:factory")
    # lexists: a dangling link is a file given (refused by read_bytes, saying where it points), not one left out
    arrays = {part: _read_npy(folder, folder / f"{part}.npy") for part in PARTS
              if os.path.lexists(folder / f"{part}.npy")}
    if "train_x" not in arrays or "train_y" not in arrays:
        raise UsageError(f"--data {folder}: needs train_x.npy and train_y.npy (test_x.npy/test_y.npy optional)")
    if ("test_x" in arrays) != ("test_y" in arrays):
        has, lacks = ("test_x", "test_y") if "test_x" in arrays else ("test_y", "test_x")
        raise UsageError(f"--data {folder}: {has}.npy without {lacks}.npy: give both, or neither for a split of "
                         "the training data")
    x, y = _checked(str(folder), "train", arrays["train_x"], arrays["train_y"])
    if "test_x" in arrays:
        xt, yt = _checked(str(folder), "test", arrays["test_x"], arrays["test_y"], x)
        return Dataset(str(folder), x, y, xt, yt)
    return _split(str(folder), x, y)


def _checked(name: str, part: str, x: np.ndarray, y: np.ndarray,
             x_train: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A part's samples and labels, refused in one line unless they are as many, each label one number
    (one-hot rows would pass the host and be refused by the board), and the test samples shaped as the
    training ones (the model is fitted to the training samples' shape). (N, 1) labels are taken as (N,)."""
    for what, a in ((f"{part}_x", x), (f"{part}_y", y)):
        if a.ndim == 0:
            raise UsageError(f"--data {name}: {what} is a single value (a 0-d array), not one per sample")
    if 0 in x.shape[1:]:  # no bytes per sample: as many samples as a header says, and nothing to train on
        raise UsageError(f"--data {name}: {part}_x's samples have shape {x.shape[1:]}, which holds no values")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.reshape(len(y))
    if y.ndim != 1:
        hint = " (one-hot rows? np.argmax(y, axis=1) gives the class numbers)" if y.ndim == 2 else ""
        raise UsageError(f"--data {name}: {part}_y has shape {y.shape}; the labels are one class number per sample, "
                         f"shape ({len(y)},){hint}")
    if len(x) != len(y):
        raise UsageError(f"--data {name}: {part}_x has {len(x)} samples, {part}_y {len(y)}")
    if x_train is not None and x.shape[1:] != x_train.shape[1:]:
        raise UsageError(f"--data {name}: test samples of shape {x.shape[1:]}, training samples of shape "
                         f"{x_train.shape[1:]}: the model takes one shape")
    return x, y


def _array(v: object) -> np.ndarray:
    """A sample or label of a torch Dataset as a numpy array (tensors, numbers, lists)."""
    detach = getattr(v, "detach", None)
    return np.asarray(detach().cpu().numpy() if callable(detach) else v)


def _from_factory(spec: str) -> Dataset:
    """`module:factory` returning a torch Dataset, or a (train, test) pair of them."""
    mod_name, _, fn_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--data {spec}: cannot import {fn_name} from {mod_name} ({exc})") from exc
    try:
        made = factory()
        parts = made if isinstance(made, tuple) and len(made) == 2 else (made,)
        arrays = []
        for part, ds in zip(("training", "test"), parts, strict=False):
            xs, ys = [], []
            for i in range(len(ds)):
                x, y = ds[i]
                xs.append(_array(x))
                ys.append(_array(y))
            if not xs:  # np.stack would say only "need at least one array"
                raise UsageError(f"--data {spec}: the {part} Dataset has no samples")
            # the values as given (no cast yet): fitted() refuses complex data and fractional labels
            arrays.append((np.stack(xs), np.stack(ys)))
    except UsageError:
        raise
    except Exception as exc:  # a user's factory or Dataset can raise anything: one line, where and what
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise UsageError(f"--data {spec}: reading the dataset failed: {type(exc).__name__}: {msg}") from exc
    x, y = _checked(spec, "train", *arrays[0])
    if len(arrays) == 2:
        return Dataset(spec, x, y, *_checked(spec, "test", *arrays[1], x))
    return _split(spec, x, y)
