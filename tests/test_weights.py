"""`poet train --weights FILE.pt`: fine-tuning starts from a state_dict, not from --seed's weights; a
file that is no state_dict of the model is one line before anything runs; the board trains on from
exactly those weights (checked against the same step in PyTorch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import needs_qemu, refused
from poet.cli import main
from poet.errors import UsageError
from poet.graph.agreement import reference
from poet.graph.reference import weights_of
from poet.graph.tracer import traced
from poet.models.datasets import load_dataset
from poet.models.zoo import ModelChoice, get_model
from poet.run.folder import read_back


def _saved(tmp_path: Path, name: str = "mlp-digits", seed: int = 7, scale: float = 1.0) -> Path:
    model, _ = get_model(name, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    path = tmp_path / f"{name}-{seed}.pt"
    torch.save(model.state_dict(), path)
    return path


def test_the_model_starts_from_the_file(tmp_path: Path) -> None:
    path = _saved(tmp_path, seed=7, scale=0.5)
    model, g = traced(ModelChoice("mlp-digits", seed=0, weights=path))
    want = torch.load(path, weights_only=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, want[k]), k
    seeded, _ = traced(ModelChoice("mlp-digits", seed=0))
    assert not all(np.array_equal(a, b) for a, b in zip(weights_of(model), weights_of(seeded), strict=True))
    assert g.param_bytes == traced(ModelChoice("mlp-digits"))[1].param_bytes  # the graph is the model's either way


@pytest.mark.parametrize("make,words", [
    (lambda d: _saved(d, name="cnn-digits"), ("not a state_dict of mlp-digits", "lacks")),
    (lambda d: d.joinpath("junk.pt").write_bytes(b"not a torch file") and d / "junk.pt", ("not a state_dict",)),
    (lambda d: (torch.save({"fc1.weight": 3}, d / "int.pt"), d / "int.pt")[1], ("not a state_dict",)),
    (lambda d: (torch.save(get_model("mlp-digits")[0], d / "module.pt"), d / "module.pt")[1],
     ("not a state_dict",)),  # a whole pickled module: weights_only refuses to unpickle it
], ids=["other-model", "junk", "not-tensors", "pickled-module"])
def test_a_file_that_is_no_state_dict_of_the_model_is_one_line(tmp_path: Path, make, words) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError) as exc:
        ModelChoice("mlp-digits", weights=path).build()
    assert "\n" not in str(exc.value) and all(w in str(exc.value) for w in words), str(exc.value)


def test_a_wrong_shape_and_a_nan_are_named(tmp_path: Path) -> None:
    state = get_model("mlp-digits")[0].state_dict()
    key = next(iter(state))
    bad = dict(state, **{key: torch.zeros(3, 3)})
    torch.save(bad, tmp_path / "shape.pt")
    with pytest.raises(UsageError, match=f"{key} has shape"):
        ModelChoice("mlp-digits", weights=tmp_path / "shape.pt").build()
    nan = dict(state, **{key: torch.full_like(state[key], float("nan"))})
    torch.save(nan, tmp_path / "nan.pt")
    with pytest.raises(UsageError, match="NaN"):
        ModelChoice("mlp-digits", weights=tmp_path / "nan.pt").build()


def test_train_refuses_another_model_s_weights_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    path = _saved(tmp_path, name="cnn-digits")
    refused(capsys, ["train", "--ram", "200k", "--weights", str(path)], 2, "not a state_dict of mlp-digits")
    assert not (tmp_path / "ws" / "runs").exists() or not any((tmp_path / "ws" / "runs").iterdir())


@needs_qemu
def test_the_board_trains_on_from_the_file_s_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path / "ws"))
    path = _saved(tmp_path, seed=11, scale=0.8)
    run_dir = tmp_path / "run"
    lr = 0.05
    assert main(["train", "--ram", "200k", "--epochs", "1", "--data-limit", "32", "--lr", str(lr),
                 "--weights", str(path), "--run-dir", str(run_dir)]) == 0
    assert json.loads((run_dir / "config.json").read_text())["weights"] == str(path.resolve())
    choice = ModelChoice("mlp-digits", weights=path)
    model, g = traced(choice)
    data = load_dataset("digits", 32).fitted(tuple(g.input_shape), g.classes, g.model)
    # as close to float64 PyTorch's same steps from the file's weights as float32 PyTorch is (poet.graph.agreement)
    ref = reference(model, data.epoch_batches(g.batch, 0, 0), lr)
    agreed = ref.agree(read_back(run_dir, g), names=[n for n, _ in g.params])
    assert agreed.ok, agreed.report()
