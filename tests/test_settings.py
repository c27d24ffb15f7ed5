"""A run's settings have one form, the typed records (poet.settings): the command line parses into them,
config.json is them flat, and `poet train --resume` makes them again from it through train's options.
Run folders written before this form resume with the settings they were started with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from poet import cli
from poet.errors import UsageError
from poet.models.zoo import ModelChoice
from poet.settings import CONFIG_KEYS, FIRST_KEYS, PlanRequest, RunConfig, config_json

ARGV = ["train", "--model", "mlp-digits", "--ram", "200k", "--epochs", "2", "--data-limit", "64", "--lr", "0.05",
        "--optimizer", "momentum:0.9", "--input-shape", "1,8,8", "--checkpoint-every", "2"]
ASKED = RunConfig(model=ModelChoice("mlp-digits", input_shape=(1, 8, 8)), plan=PlanRequest(ram=200 * 1024),
                  data_limit=64, epochs=2, lr=0.05, optimizer="momentum:0.9", checkpoint_every=2)

# config.json as poet wrote it before the records were its one form (train.py's CONFIG_KEYS and
# config_argv), for ARGV: a folder of then resumes with what it was started with
BEFORE = {"board": "nrf52840", "model": "mlp-digits", "batch": 16, "seed": 0, "train": "all", "data": "digits",
          "data_limit": 64, "epochs": 2, "ram": 204800, "deadline": "3x", "lr": 0.05, "optimizer": "momentum:0.9",
          "strategy": "poet", "solver": "highs", "time_limit": 60.0, "gap": 0.0, "profile": None, "budget_j": None,
          "battery_mah": None, "volts": None, "force": False, "country": None, "carbon_intensity": None,
          "checkpoint_every": 2, "schedule": None, "input_shape": [1, 8, 8], "classes": None, "layers": None,
          "hidden": None, "meter": None, "precision": "fp32", "precision_rules": None, "weights": None}
# what poet writes now: the keys of before and those added since (order: poet train --order, issue 47;
# no_feature_cache: --no-feature-cache, issue 48)
NOW = {**BEFORE, "order": "host", "no_feature_cache": False}


def _resumed(config: dict[str, Any], tmp: Path) -> RunConfig:
    run = tmp / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config))
    args = cli.build_parser().parse_args(["train", "--resume", str(run)])
    args.given = {"resume"}
    return cli.resumed(args)


def test_the_command_line_parses_into_the_records() -> None:
    assert cli._run_config(cli.build_parser().parse_args(ARGV)) == ASKED


def test_config_json_is_the_records_flat_as_before() -> None:
    assert config_json(ASKED) == NOW
    assert set(NOW) == set(CONFIG_KEYS)


def test_a_run_folder_of_before_resumes_with_its_settings(tmp_path: Path) -> None:
    assert _resumed(BEFORE, tmp_path) == ASKED


def test_a_folder_from_before_weights_resumes_without_them(tmp_path: Path) -> None:
    """--weights came after the first run folders: theirs lack the key, and resume from the seed's weights."""
    older = {k: v for k, v in BEFORE.items() if k != "weights"}
    assert set(older) == set(FIRST_KEYS)
    assert _resumed(older, tmp_path) == ASKED


def test_a_bad_value_in_config_json_is_one_line_naming_its_option(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        _resumed({**BEFORE, "strategy": "best"}, tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and "config.json" in msg and "--strategy" in msg and "invalid choice" in msg, msg
    assert exc.value.status == 2


def test_paths_are_kept_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(plan=PlanRequest(ram=1, profile=Path("p.yaml")), meter="file:rec.csv")
    flat = config_json(cfg)
    assert flat["profile"] == str(tmp_path / "p.yaml") and flat["meter"] == f"file:{tmp_path / 'rec.csv'}"
    assert "run_dir" not in flat and "made_by" not in flat
    assert config_json(RunConfig(made_by="demo"))["made_by"] == "demo"
