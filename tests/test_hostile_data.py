"""Hostile training input, as test_hostile.py's table: every array poet reads from a --data folder,
every number of `train` that reaches the board as float32, and every --weights file. Each case ends
in one line on stderr and exit 2, before a board is opened or a run folder made (test_hostile's `ws`
fixture and check). The classes, not only the instances issue 45 found: a file that is no .npy (an
.npz, a pickle, text, truncated, a header claiming terabytes), no regular file (/dev/zero, a FIFO, a
folder, a dangling link, past the size limit), arrays that disagree (lengths, test vs training
sample shapes, one-hot labels, 0-d), and tensors load_state_dict would choke on or load wrongly
(meta, sparse, quantized, complex, integer, float64 past float32, non-dicts, other keys).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from poet.models.datasets import MAX_NPY_BYTES, load_dataset
from poet.models.zoo import ModelChoice, get_model
from test_hostile import TRAIN, _config, _run
from test_hostile import test_hostile_input_is_refused_in_one_line_before_anything_runs as _refused_before_anything

RNG = np.random.default_rng(0)
X = RNG.random((80, 64)).astype(np.float32)
Y = RNG.integers(0, 10, 80)


def _folder(tmp: Path, **parts: np.ndarray | bytes | Callable[[Path], Any]) -> str:
    """A --data folder: each part (train_x, train_y, test_x, test_y) an array saved by np.save, raw
    bytes, or a maker given the path; train_x/train_y default to digits-like arrays."""
    d = tmp / "data"
    d.mkdir()
    for name, v in {"train_x": X, "train_y": Y, **parts}.items():
        f = d / f"{name}.npy"
        if isinstance(v, np.ndarray):
            np.save(f, v)
        elif isinstance(v, bytes):
            f.write_bytes(v)
        elif v is not None:
            v(f)
    return str(d)


def _npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def _claims(shape: tuple[int, ...]) -> bytes:
    """A .npy whose header says `shape` of float32 and whose body is 8 bytes: numpy would allocate
    what the header says before finding the body short."""
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return b.getvalue() + bytes(8)


def _npy_header(shape: tuple[int, ...], descr: str) -> bytes:
    """A .npy of `shape` whose values are `descr`, given as its header alone (as many zero-byte values
    as it claims take no bytes)."""
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": descr, "fortran_order": False, "shape": shape})
    return b.getvalue()


def _link(target: str) -> Callable[[Path], None]:
    return lambda f: f.symlink_to(target)


def _fifo(f: Path) -> None:
    os.mkfifo(f)


def _sparse(size: int) -> Callable[[Path], None]:
    """A file of `size` bytes that takes no disk (a hole): past a limit, it must be refused unread."""
    def make(f: Path) -> None:
        with open(f, "wb") as out:
            out.truncate(size)
    return make


def _data(t: Path, **parts: Any) -> list[str]:
    return [*TRAIN, "--data", _folder(t, **parts)]


def _pt(t: Path, obj: Any, **save: Any) -> str:
    path = t / "w.pt"
    torch.save(obj, path, **save)
    return str(path)


MLP = get_model("mlp-digits")[0].state_dict()
FIRST = next(iter(MLP))  # fc1.weight


def _state(**changes: Any) -> dict[str, Any]:
    """mlp-digits' state_dict with tensors replaced (a None drops one)."""
    out = {k: v.clone() for k, v in MLP.items()}
    for k, v in changes.items():
        if v is None:
            del out[k.replace("__", ".")]
        else:
            out[k.replace("__", ".")] = v
    return out


def _weights(t: Path, obj: Any, **save: Any) -> list[str]:
    return [*TRAIN, "--weights", _pt(t, obj, **save)]


def _deflated(t: Path) -> list[str]:
    """mlp-digits' weights as torch.save writes them, then zipped again with deflate."""
    raw = _pt(t, _state())
    out = t / "deflated.pt"
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for m in src.infolist():
            dst.writestr(m.filename, src.read(m.filename))
    return [*TRAIN, "--weights", str(out)]


def _weights_file(t: Path, make: Callable[[Path], Any]) -> list[str]:
    path = t / "w.pt"
    make(path)
    return [*TRAIN, "--weights", str(path)]


def _quantized() -> torch.Tensor:
    return torch.quantize_per_tensor(MLP[FIRST].clone(), 0.01, 0, torch.qint8)


# (id, argv maker given tmp_path, words the one line must hold)
CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    # --data: arrays that disagree with each other
    ("data-test-lengths", lambda t: _data(t, test_x=X[:20], test_y=Y[:10]), ("test_x has 20 samples", "test_y 10")),
    ("data-train-lengths", lambda t: _data(t, train_y=Y[:79]), ("train_x has 80 samples", "train_y 79")),
    ("data-test-x-alone", lambda t: _data(t, test_x=X[:20]), ("test_x.npy without test_y.npy",)),
    ("data-test-y-alone", lambda t: _data(t, test_y=Y[:20]), ("test_y.npy without test_x.npy",)),
    ("data-test-other-shape", lambda t: _data(t, test_x=X[:20, :32], test_y=Y[:20]),
     ("test samples of shape (32,)", "(64,)")),
    ("data-x-0d", lambda t: _data(t, train_x=np.array(3.0)), ("train_x", "0-d")),
    ("data-y-0d", lambda t: _data(t, train_y=np.array(3)), ("train_y", "0-d")),
    ("data-test-x-0d", lambda t: _data(t, test_x=np.array(1.0), test_y=Y[:1]), ("test_x", "0-d")),
    ("data-one-hot", lambda t: _data(t, train_y=np.eye(10)[Y]), ("train_y has shape (80, 10)", "one-hot")),
    ("data-test-one-hot", lambda t: _data(t, test_x=X[:20], test_y=np.eye(10)[Y[:20]]), ("test_y has shape",)),
    ("data-labels-3d", lambda t: _data(t, train_y=Y.reshape(80, 1, 1)), ("train_y has shape (80, 1, 1)",)),
    ("data-no-samples", lambda t: _data(t, train_x=X[:0], train_y=Y[:0]), ("no training samples",)),
    # --data: arrays that disagree with the model
    ("data-labels-past-classes", lambda t: _data(t, train_y=Y + 1), ("labels span", "10 classes")),
    ("data-labels-negative", lambda t: _data(t, train_y=Y - 1), ("labels span -1..",)),
    ("data-test-labels-past-classes", lambda t: _data(t, test_x=X[:20], test_y=Y[:20] + 10), ("test labels span",)),
    ("data-float-labels-past-int64", lambda t: _data(t, train_y=np.full(80, 1e300)), ("not a whole class number",)),
    ("data-features-other-size", lambda t: _data(t, train_x=X[:, :63]), ("do not fit model mlp-digits",)),
    ("data-structured", lambda t: _data(t, train_x=np.zeros(80, dtype=[("a", "<f4"), ("b", "<f4")])),
     ("not numbers",)),
    ("data-datetimes", lambda t: _data(t, train_y=np.zeros(80, dtype="datetime64[s]")), ("not numbers",)),
    # --data: files that are no .npy array
    ("data-npz-named-npy", lambda t: _data(t, train_x=lambda f: np.savez(open(f, "wb"), a=X)), (".npz archive",)),
    ("data-object-array", lambda t: _data(t, train_y=lambda f: np.save(f, np.array([{}, 1], dtype=object))),
     ("Python objects",)),
    ("data-pickle", lambda t: _data(t, train_x=b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."),
     ("not a .npy array",)),
    ("data-text", lambda t: _data(t, train_x=b"1,2,3\n4,5,6\n"), ("not a .npy array",)),
    ("data-empty-file", lambda t: _data(t, train_x=b""), ("not a .npy array",)),
    ("data-truncated", lambda t: _data(t, train_x=_npy(X)[:-100]), ("truncated",)),
    ("data-header-claims-terabytes", lambda t: _data(t, train_x=_claims((10**12, 64))), ("truncated",)),
    ("data-empty-samples", lambda t: _data(t, train_x=np.zeros((80, 0), np.float32)), ("holds no values",)),
    ("data-zero-byte-dtype", lambda t: _data(t, train_y=_npy_header((10**12,), "|V0")), ("take no bytes",)),
    ("data-bad-header", lambda t: _data(t, train_x=b"\x93NUMPY\x01\x00\x10\x00{'descr': 1}    \n"),
     ("not a .npy array",)),
    # --data: files that are no regular file, or too large to be one
    ("data-dev-zero", lambda t: _data(t, train_x=_link("/dev/zero")), ("character device",)),
    ("data-fifo", lambda t: _data(t, train_y=_fifo), ("pipe",)),
    ("data-folder", lambda t: _data(t, train_x=lambda f: f.mkdir()), ("is a folder",)),
    ("data-dangling-link", lambda t: _data(t, test_x=_link("/nonexistent/x.npy"), test_y=Y), ("does not exist",)),
    ("data-huge", lambda t: _data(t, train_x=_sparse(MAX_NPY_BYTES + 1)), ("MB, more than",)),
    # numbers the board takes as float32: the STEP's learning rate, the model blob's optimizer settings
    ("lr-past-float32", lambda t: [*TRAIN, "--lr", "1e308"], ("--lr", "beyond float32")),
    ("lr-just-past-float32", lambda t: [*TRAIN, "--lr", "3.5e38"], ("--lr", "beyond float32")),
    ("lr-subnormal", lambda t: [*TRAIN, "--lr", "1e-40"], ("--lr", "smallest normal")),
    ("lr-rounds-to-0", lambda t: [*TRAIN, "--lr", "1e-50"], ("--lr", "smallest normal")),
    ("demo-lr-past-float32", lambda t: ["demo", "--lr", "1e39"], ("--lr", "beyond float32")),
    ("momentum-rounds-to-1", lambda t: [*TRAIN, "--optimizer", "momentum:0.999999999999"], ("momentum", "is 1")),
    ("beta2-rounds-to-1", lambda t: [*TRAIN, "--optimizer", "adam:0.9,0.99999999999"], ("beta2", "is 1")),
    ("beta1-1", lambda t: [*TRAIN, "--optimizer", "adam:1"], ("beta1", "[0, 1)")),
    ("eps-rounds-to-0", lambda t: [*TRAIN, "--optimizer", "adam:0.9,0.999,1e-50"], ("eps", "smallest normal")),
    ("eps-subnormal", lambda t: [*TRAIN, "--optimizer", "adam:0.9,0.999,1e-40"], ("eps", "smallest normal")),
    ("momentum-subnormal", lambda t: [*TRAIN, "--optimizer", "momentum:1e-42"], ("momentum", "give 0")),
    ("optimizer-unknown", lambda t: [*TRAIN, "--optimizer", "rmsprop"], ("--optimizer", "adam")),
    ("optimizer-too-many", lambda t: [*TRAIN, "--optimizer", "momentum:0.9,0.9"], ("momentum takes",)),
    ("config-lr-past-float32", lambda t: ["train", "--resume", _run(t, _config(lr=1e308))],
     ("config.json", "--lr", "float32")),
    ("config-eps-rounds-to-0", lambda t: ["train", "--resume", _run(t, _config(optimizer="adam:0.9,0.999,1e-50"))],
     ("config.json", "eps")),
    # whole numbers past what the protocol packs (the model blob's batch is u16)
    ("batch-past-u16", lambda t: [*TRAIN, "--batch", "65536"], ("--batch", "65535")),
    ("epochs-past-limit", lambda t: [*TRAIN, "--epochs", "100001"], ("--epochs", "100000")),
    ("checkpoint-every-past-limit", lambda t: [*TRAIN, "--checkpoint-every", "100001"], ("--checkpoint-every",)),
    ("input-shape-past-u32", lambda t: [*TRAIN[:3], "mod:f", *TRAIN[3:], "--input-shape", "70000,70000"],
     ("--input-shape", "u32")),
    # --weights: files that are no state_dict torch.save wrote
    ("weights-dev-zero", lambda t: _weights_file(t, _link("/dev/zero")), ("--weights", "character device")),
    ("weights-fifo", lambda t: _weights_file(t, _fifo), ("--weights",)),
    ("weights-huge", lambda t: _weights_file(t, _sparse(1 << 30)), ("--weights", "MB, more than")),
    ("weights-dangling-link", lambda t: _weights_file(t, _link("/nonexistent.pt")), ("--weights", "does not exist")),
    ("weights-empty", lambda t: _weights_file(t, lambda f: f.write_bytes(b"")), ("not a state_dict",)),
    ("weights-text", lambda t: _weights_file(t, lambda f: f.write_text("fc1.weight = 1\n")), ("not a state_dict",)),
    ("weights-legacy-format", lambda t: _weights(t, _state(), _use_new_zipfile_serialization=False),
     ("before PyTorch 1.6",)),
    ("weights-zip-of-junk", lambda t: _weights_file(t, lambda f: zipfile.ZipFile(f, "w").writestr("a", "b")),
     ("not a state_dict",)),
    ("weights-deflated", _deflated, ("compressed",)),
    ("weights-a-list", lambda t: _weights(t, list(MLP.values())), ("not a state_dict",)),
    ("weights-a-tensor", lambda t: _weights(t, MLP[FIRST]), ("not a state_dict",)),
    ("weights-int-keys", lambda t: _weights(t, dict(enumerate(MLP.values()))), ("not a state_dict",)),
    ("weights-a-module", lambda t: _weights(t, get_model("mlp-digits")[0]), ("more than tensors", "Sequential")),
    # --weights: a state_dict, of other keys or tensors than the model's
    ("weights-extra-key", lambda t: _weights(t, {**_state(), "extra": torch.zeros(1)}), ("has extra",)),
    ("weights-missing-key", lambda t: _weights(t, _state(fc4__bias=None)), ("lacks fc4.bias",)),
    ("weights-other-model", lambda t: _weights(t, get_model("cnn-digits")[0].state_dict()),
     ("not a state_dict of mlp-digits",)),
    ("weights-wrong-shape", lambda t: _weights(t, _state(fc1__weight=torch.zeros(3, 3))), ("fc1.weight has shape",)),
    ("weights-meta", lambda t: _weights(t, _state(fc1__weight=torch.empty(32, 64, device="meta"))), ("meta tensor",)),
    ("weights-sparse", lambda t: _weights(t, _state(fc1__weight=MLP[FIRST].to_sparse())), ("sparse",)),
    ("weights-sparse-csr", lambda t: _weights(t, _state(fc1__weight=MLP[FIRST].to_sparse_csr())), ("sparse_csr",)),
    ("weights-quantized", lambda t: _weights(t, _state(fc1__weight=_quantized())), ("quantized",)),
    ("weights-complex", lambda t: _weights(t, _state(fc1__weight=MLP[FIRST].to(torch.complex64))),
     ("complex64", "float values")),
    ("weights-int", lambda t: _weights(t, _state(fc1__weight=MLP[FIRST].to(torch.int64))), ("int64", "float values")),
    ("weights-bool", lambda t: _weights(t, _state(fc1__weight=MLP[FIRST] > 0)), ("bool",)),
    ("weights-nan", lambda t: _weights(t, _state(fc1__weight=torch.full((32, 64), float("nan")))), ("NaN",)),
    ("weights-float64-past-float32", lambda t: _weights(t, _state(fc1__weight=torch.full((32, 64), 1e300,
                                                                                        dtype=torch.float64))),
     ("NaN or infinite", "as float32")),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's notes while a case's file is made (quantized, legacy)
@pytest.mark.parametrize("make,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_training_input_is_refused_in_one_line_before_anything_runs(
        ws: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], list[str]],
        words: tuple[str, ...]) -> None:
    _refused_before_anything(ws, capsys, make, words)


# ---------------------------------------------------------------- what is still taken


@pytest.mark.parametrize("change", [
    lambda x, y: (x, y.reshape(80, 1)),  # labels as a column, as Keras keeps them
    lambda x, y: (np.asfortranarray(x.reshape(80, 8, 8)), y),
    lambda x, y: (x.astype(">f8"), y.astype(">i2")),  # big-endian, other widths
    lambda x, y: (x.astype(np.float16), y.astype(np.uint8)),
    lambda x, y: (x, y.astype(np.float32)),  # whole-number float labels
], ids=["column-labels", "fortran-order", "big-endian", "narrow", "float-labels"])
def test_other_layouts_and_dtypes_of_the_same_data_are_the_same_data(tmp_path: Path, change) -> None:
    x, y = change(X, Y)
    ds = load_dataset(_folder(tmp_path, train_x=x, train_y=y, test_x=x[:20], test_y=y[:20])).fitted((64,), 10, "m")
    np.testing.assert_array_equal(ds.x_train, X.reshape(80, 64).astype(x.dtype).astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, Y)
    np.testing.assert_array_equal(ds.y_test, Y[:20])


def test_an_empty_test_set_is_taken(tmp_path: Path) -> None:
    ds = load_dataset(_folder(tmp_path, test_x=X[:0], test_y=Y[:0])).fitted((64,), 10, "m")
    assert len(ds.x_train) == 80 and ds.x_test.shape == (0, 64)


def test_float64_and_half_weights_load_as_the_model_holds_them(tmp_path: Path) -> None:
    """Any float dtype is a float weight: cast on load, as load_state_dict does."""
    for dtype in (torch.float64, torch.bfloat16):
        path = tmp_path / f"{dtype}.pt"
        torch.save({k: v.to(dtype) if v.is_floating_point() else v for k, v in MLP.items()}, path)
        model, _ = ModelChoice("mlp-digits", weights=path).build()
        for k, v in model.state_dict().items():
            assert v.dtype == torch.float32 and torch.equal(v, MLP[k].to(dtype).float()), k


def test_a_state_dict_with_an_integer_buffer_loads(tmp_path: Path) -> None:
    """Batch norm's num_batches_tracked is int64: an integer for an integer is taken."""
    bn = torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.BatchNorm1d(10))
    state = bn.state_dict()
    assert state["1.num_batches_tracked"].dtype == torch.int64
    path = tmp_path / "bn.pt"
    torch.save(state, path)
    from poet.models.zoo import load_state
    load_state(torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.BatchNorm1d(10)), "bn", path)


# ---------------------------------------------------------------- a module:factory Dataset


class _Pairs(torch.utils.data.Dataset):
    def __init__(self, xs: list[Any], ys: list[Any]) -> None:
        self.xs, self.ys = xs, ys

    def __len__(self) -> int:
        return len(self.xs)

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        return self.xs[i], self.ys[i]


@pytest.mark.parametrize("make,words", [
    (lambda: _Pairs(list(X), list(np.eye(10)[Y])), ("train_y has shape (80, 10)", "one-hot")),
    (lambda: (_Pairs(list(X), list(Y)), _Pairs(list(X[:20, :32]), list(Y[:20]))), ("test samples of shape (32,)",)),
    (lambda: (_Pairs(list(X), list(Y)), _Pairs([], [])), ("test Dataset has no samples",)),
    (lambda: _Pairs([], []), ("training Dataset has no samples",)),
    (lambda: _Pairs([{} for _ in range(80)], list(Y)), ("not numbers",)),
], ids=["one-hot", "test-other-shape", "empty-test", "empty", "objects"])
def test_a_factory_s_dataset_is_checked_as_a_folder_is(ws: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any],
                                                       words: tuple[str, ...]) -> None:
    import sys
    import types

    mod = types.ModuleType("hostile_data_factory")
    mod.make = make  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hostile_data_factory", mod)
    _refused_before_anything(ws, capsys, lambda t: [*TRAIN, "--data", "hostile_data_factory:make"], words)


def test_the_weights_limit_is_the_model_s_size_not_a_fixed_one(tmp_path: Path) -> None:
    """A larger model takes a larger file: the limit scales with the model's own tensors."""
    from poet.models.zoo import WEIGHTS_OVERHEAD, WEIGHTS_SLACK
    model, _ = get_model("mlp-digits")
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    path = tmp_path / "w.pt"
    _sparse(WEIGHTS_SLACK * size + WEIGHTS_OVERHEAD + 1)(path)
    with pytest.raises(Exception, match="more than"):
        ModelChoice("mlp-digits", weights=path).build()
    _sparse(WEIGHTS_SLACK * size + WEIGHTS_OVERHEAD)(path)  # at the limit: read, and refused only as no zip
    with pytest.raises(Exception, match="zip archive"):
        ModelChoice("mlp-digits", weights=path).build()
