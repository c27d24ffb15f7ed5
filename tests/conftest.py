import os
import shutil
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
# limit such a verdict would depend on how fast the machine is. So in tests every solve runs to
# its proof (the instances take well under a second to a few seconds), but in tests marked
# `time_limited`, which exercise the limit itself or need only some plan of a large model.
NO_LIMIT = 3600.0


@pytest.fixture(autouse=True)
def _solves_run_to_their_proof(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("time_limited"):
        return
    from poet.plan import milp

    real = milp.solve

    def unlimited(prob: object, solver: str, time_limit_s: float, *args: object, **kw: object) -> milp.Outcome:
        return real(prob, solver, NO_LIMIT, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(milp, "solve", unlimited)


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
    assert "internal error" not in err, err
    assert code == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poet: "), err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


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
