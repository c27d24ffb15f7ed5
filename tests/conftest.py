import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "benchmarks" / "poet-reference"


def have_qemu_toolchain() -> bool:
    return bool(shutil.which("qemu-system-arm") and shutil.which("arm-none-eabi-gcc"))


needs_qemu = pytest.mark.skipif(not have_qemu_toolchain(), reason="qemu-system-arm / arm-none-eabi-gcc missing")


def needs_tools(*tools: str) -> pytest.MarkDecorator:
    """Skip when a toolchain is missing on a developer's machine; under CI (`CI` set), where
    `make setup` installed everything, a missing tool is an install bug and must fail, not skip."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing and os.environ.get("CI"):
        raise RuntimeError(f"CI is missing {', '.join(missing)}: `make setup` should have installed it")
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed (run `make setup`)")


# A solve's result decides many verdicts (optimal, an exact energy, what auto picks); under a time
# limit such a verdict would depend on how fast and how busy the machine is. So in tests the
# planner's clock stands still (plan/solver/clock.py): every solve, relaxation and walk runs to its end,
# in this process and in any it starts (the race's second core, a CLI in a subprocess). Tests
# marked `time_limited` keep the limits: those that test a limit force it (a limit of zero, a clock
# that jumps), and the rest need only some plan, whichever the limit lets them have.
NO_LIMIT = 3600.0  # a nominal limit that leaves room for every step a solve may try (the MILP after the relaxations)


@pytest.fixture(autouse=True)
def _solves_run_to_their_end(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    from poet.plan.solver.clock import NO_LIMITS

    if request.node.get_closest_marker("time_limited"):
        monkeypatch.delenv(NO_LIMITS, raising=False)
    else:
        monkeypatch.setenv(NO_LIMITS, "1")


@contextlib.contextmanager
def without_limits() -> Iterator[None]:
    """Within a test marked time_limited, a stretch whose solves run to their end."""
    from poet.plan.solver.clock import NO_LIMITS

    was = os.environ.get(NO_LIMITS)
    os.environ[NO_LIMITS] = "1"
    try:
        yield
    finally:
        if was is None:
            del os.environ[NO_LIMITS]
        else:
            os.environ[NO_LIMITS] = was


def run(argv: list[str]) -> int:
    """poet's CLI in-process: its exit status, argparse's refusals (SystemExit) included."""
    from poet.cli import main

    try:
        return main(argv)
    except SystemExit as exc:  # argparse's refusals exit from inside parse_args
        return int(exc.code or 0)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], status: int, *words: str) -> str:
    """Run the CLI and check it ended in one line `poet: ...` holding `words`, with `status`."""
    code = run(argv)
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    assert code == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poet: "), err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace, with cwd in tmp_path (where a hostile run folder's module would sit), in which
    opening a device fails the test: the hostile tables' (test_hostile*.py), whose refusals come first."""
    from typing import Any

    import poet.train

    workspace = tmp_path / "workspace"
    (workspace / "profiles").mkdir(parents=True)
    shutil.copyfile(REPO / "profiles" / "nrf52840.yaml", workspace / "profiles" / "nrf52840.yaml")
    monkeypatch.setenv("POET_WORKSPACE", str(workspace))
    monkeypatch.chdir(tmp_path)

    def no_board(*a: Any, **k: Any) -> None:
        raise AssertionError("a board was opened: the refusal must come before")
    monkeypatch.setattr(poet.train, "open_device", no_board)
    monkeypatch.setattr(poet.train, "_ensure_firmware", no_board)
    return workspace


# ---------------------------------------------------------------- steps on a board, for the device tests

def digits_batches(x, y, batch: int, input_shape: tuple[int, ...]):
    """Consecutive full batches in the given order, inputs reshaped to the model's input shape."""
    import numpy as np

    for start in range(0, len(x) - batch + 1, batch):
        xb = x[start : start + batch].reshape((batch, *input_shape)).astype(np.float32)
        yield xb, y[start : start + batch]


def data_batches(g, steps: int):
    """The first `steps` batches of the fixed digits training split, in order, cycling over epochs."""
    import itertools

    from poet.models.datasets import digits_split

    xtr, ytr, _, _ = digits_split()
    epoch = list(digits_batches(xtr, ytr, g.batch, tuple(g.input_shape)))
    return list(itertools.islice(itertools.cycle(epoch), steps))


def run_steps(dev, g, weights, schedule: bytes, data, lr: float, trace=None, say=None,
              expect_peak: int | None = None) -> list[float]:
    """Load model, weights and schedule (with the plan's peak, checked every step), one step per batch;
    returns the losses."""
    dev.load_model(g, weights)
    dev.load_schedule(schedule, planned_peak=expect_peak)
    losses = []
    for x, y in data:
        res = dev.step(x, y, lr)
        losses.append(res.loss)
        if trace is not None:
            trace.add_step(res, lr)
    return losses
