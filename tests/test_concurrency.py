"""Two `poet train` and two `poet profile` at once on one workspace: nothing lost (each run whole in
a folder of its own, the profile with both models' ops), nothing shared that one could spoil for
the other (the plan cache is solved once, under its lock), and two runs asked into one folder: the
loser is told why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, needs_tools
from poet.run.folder import Run

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")

PROFILE = REPO / "profiles" / "nrf52840.yaml"
TRAIN = ["train", "--model", "mlp-digits", "--ram", "200k", "--epochs", "1", "--data-limit", "48",
         "--profile", str(PROFILE)]
PROFILE_CMD = ["profile", "--no-paging", "--repeats", "1", "--max-repeats", "1"]
RUN_FILES = ("config.json", "plan.json", "schedule.poet", "trace.json", "checkpoint.npz", "state.json",
             "report.txt", "weights.pt", "emissions.csv")


def _start(ws: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, POET_WORKSPACE=str(ws))
    return subprocess.Popen([sys.executable, "-m", "poet", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=900)
        finally:
            p.kill()
        out.append((p.returncode, o, e))
    return out


@pytest.mark.slow  # four QEMUs on two cores: about 30 s
def test_two_trains_and_two_profiles_at_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    procs = [_start(ws, *TRAIN), _start(ws, *TRAIN),
             _start(ws, *PROFILE_CMD, "--models", "mlp-digits"), _start(ws, *PROFILE_CMD, "--models", "cnn-digits")]
    results = _finish(procs)
    for code, _, err in results:
        assert code == 0, err
    runs = sorted(p for p in (ws / "runs").iterdir() if p.name != "plans")
    assert len(runs) == 2, runs  # a folder each, though started in the same second
    for r in runs:
        for name in RUN_FILES:
            assert (r / name).is_file(), f"{r.name} lacks {name}"
        state = json.loads((r / "state.json").read_text())
        assert state["finished"] and state["complete"]
    a, b = (Run(r).load_checkpoint() for r in runs)
    assert a is not None and b is not None
    for wa, wb in zip(a[0], b[0], strict=True):
        assert np.array_equal(wa, wb)  # the same configuration, the same weights: neither spoiled the other
    solved = sum("reusing the plan" not in out for _, out, _ in results[:2])
    assert solved == 1, "the plan cache is solved once; the other run waits for it and reuses it"
    prof = yaml.safe_load((ws / "profiles" / "nrf52840.yaml").read_text())
    assert {"mlp-digits", "cnn-digits"} <= {k.split()[0] for k in prof["models"]}, prof["models"]


def test_two_runs_into_one_folder_one_is_told_why(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = ws / "shared-run"
    results = _finish([_start(ws, *TRAIN, "--run-dir", str(folder)) for _ in range(2)])
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(err for code, _, err in results if code != 0).strip().splitlines()
    assert len(loser) == 1, loser
    assert "in use by another poet" in loser[0] or "already holds a run" in loser[0], loser
    state = json.loads((folder / "state.json").read_text())
    assert state["complete"] and state["global_step"] == 3  # the winner's run, whole
