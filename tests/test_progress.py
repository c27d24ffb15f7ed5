"""Progress bars (poet.progress): drawn on a terminal, closed and cleared after; never a character of one in
a log or a captured stream, where `poet train` keeps its lines (one summary per epoch). A terminal here is
a stream whose isatty() says so: tqdm writes to the file object it is given (or to sys.stderr as it is
when the bar is made)."""

from __future__ import annotations

import io
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import REPO, needs_tools
from poet import progress
from poet.boards import load_board
from poet.cli import main
from poet.device.profile import measured_nodes, profile_graphs
from poet.device.protocol import StepResult, TraceRecord
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model

BAR_MARKS = ("\r", "%|", "█", "step/s")  # what any tqdm bar writes; none of it belongs in a log


class Terminal(io.StringIO):
    """A stream that says it is a terminal, keeping all that was written to it."""

    def isatty(self) -> bool:
        return True


def _cleared(text: str) -> bool:
    """The last thing written is a bar wiped out: '\\r', blanks, '\\r' (tqdm's close with leave=False)."""
    return re.search(r"\r *\r$", text) is not None


def _tickers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "poet-ticker"]


def _until(cond: Any) -> None:
    """Wait for something a thread does (not a timing assert: the bound only keeps a bug from hanging)."""
    for _ in range(2000):
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError("the condition never came")


# ---------------------------------------------------------------- the helper


def test_no_bar_when_the_stream_is_no_terminal() -> None:
    log = io.StringIO()
    with progress.bar(3, "epoch 1/1", shown=True, file=log) as b:
        assert b.disable
        for _ in range(3):
            b.update()
        b.set_postfix_str("loss 1.0")
    assert log.getvalue() == ""


def test_no_bar_on_the_stderr_pytest_captured() -> None:
    # the stream itself decides: captured (the default run) it is none; under `pytest -s` on a terminal, one
    with progress.bar(3, "x", shown=True) as b:
        assert bool(b.disable) == (not sys.stderr.isatty())


def test_no_bar_unless_asked_even_on_a_terminal() -> None:
    tty = Terminal()
    with progress.bar(3, "x", shown=False, file=tty) as b:
        b.update(3)
    assert tty.getvalue() == ""


def test_a_bar_on_a_terminal_is_drawn_and_cleared_when_closed() -> None:
    tty = Terminal()
    with progress.bar(3, "epoch 1/2", shown=True, file=tty, unit="step", mininterval=0) as b:
        assert not b.disable
        for _ in range(3):
            b.update()
        drawn = tty.getvalue()
    assert "epoch 1/2" in drawn and "3/3" in drawn
    assert _cleared(tty.getvalue()) and len(tty.getvalue()) > len(drawn)


def test_a_line_said_under_a_bar_lands_between_a_clear_and_a_redraw() -> None:
    tty = Terminal()
    with progress.bar(3, "solving", shown=True, file=tty) as b:
        b.update()
        say = progress.above(b, lambda m: tty.write(m + "\n"))
        say("  highs: optimal")
        after = tty.getvalue()
    line = after.index("  highs: optimal\n")
    assert re.search(r"\r *\r$", after[:line]), "the bar was not cleared before the line"
    assert "solving" in after[line:], "the bar was not drawn again after the line"


def test_sent_bytes_counts_each_blob_once() -> None:
    with progress.bar(300, "upload", shown=True, file=Terminal()) as b:
        for size in (100, 200):
            sent = progress.sent_bytes(b)
            for done in range(50, size + 1, 50):  # Link.upload's progress(done, total) after each chunk
                sent(done, size)
        assert b.n == 300


def test_ticker_off_the_terminal_starts_no_thread() -> None:
    log = io.StringIO()
    with progress.ticker("solving (poet)", 60.0, shown=True, file=log, delay_s=0):
        assert _tickers() == []
    assert log.getvalue() == ""


def test_ticker_ticks_then_stops_and_clears() -> None:
    tty = Terminal()
    with progress.ticker("solving (poet)", 3600.0, shown=True, file=tty, every_s=0.005, delay_s=0):
        assert len(_tickers()) == 1
        _until(lambda: "of the 1:00:00 time limit" in tty.getvalue())
    assert _tickers() == []
    assert _cleared(tty.getvalue())


def test_ticker_past_its_limit_says_elapsed_time() -> None:
    tty = Terminal()
    with progress.ticker("solving (poet)", 1e-6, shown=True, file=tty, every_s=0.005, delay_s=0):
        _until(lambda: "for the search alone" in tty.getvalue())


def test_ticker_thread_is_stopped_when_the_solve_fails() -> None:
    tty = Terminal()
    with pytest.raises(KeyboardInterrupt):
        with progress.ticker("solving (poet)", 60.0, shown=True, file=tty, every_s=0.005, delay_s=0):
            raise KeyboardInterrupt
    assert _tickers() == []
    assert _cleared(tty.getvalue())


# ---------------------------------------------------------------- profile: a bar per graph over its ops


class _Steady:
    """A board whose every op takes the same ticks each run: its ops settle after the least runs."""

    board = load_board("nrf52840")
    hello = SimpleNamespace(fw_version="2.0", tick_hz=25_000_000, pool_bytes=200_000)
    provenance, emulated, runtime_static = "emulated", True, 28672

    def __init__(self, g: Any) -> None:
        self.nodes = [n.id for n in measured_nodes(g) if n.kind != "input"]

    def load_model(self, *_: Any) -> None:
        pass

    def load_schedule(self, *_: Any, **__: Any) -> None:
        pass

    def step(self, x: np.ndarray, y: np.ndarray, lr: float) -> StepResult:
        records = [TraceRecord(i, node, "forward", 0, 1000 + node, 0) for i, node in enumerate(self.nodes)]
        return StepResult(0.0, 0, 0, sum(r.ticks for r in records), records)


def _profile(monkeypatch: pytest.MonkeyPatch, stderr: io.StringIO) -> tuple[list[str], int]:
    """What a profile of mlp-digits said, and how many ops it timed."""
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 16)
    board = _Steady(g)
    monkeypatch.setattr(sys, "stderr", stderr)  # where tqdm draws by default
    said: list[str] = []
    profile_graphs(board, [(g, weights_of(model))], repeats=3, progress=said.append, bars=True)
    return said, len(board.nodes)


def test_profile_on_a_terminal_draws_a_bar_over_the_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = Terminal()
    said, ops = _profile(monkeypatch, tty)
    assert f"{ops}/{ops} ops settled" in tty.getvalue() and "run 3/10" in tty.getvalue()
    assert _cleared(tty.getvalue())
    assert not any(m.startswith("  run ") for m in said), said  # the bar says it, not a line per run
    assert any("mlp-digits done" in m for m in said)


def test_profile_into_a_log_keeps_its_lines_and_no_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    said, _ = _profile(monkeypatch, log)
    assert log.getvalue() == ""
    assert [m.split(":")[0] for m in said if m.startswith("  run ")] == ["  run 1", "  run 2", "  run 3"]


# ---------------------------------------------------------------- the upload of a model over the link


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_model_upload_bar_counts_every_byte_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fwhelpers import init_params, mlp, native_link
    from poet.device import link as link_module
    from poet.plan.lowering.modelblob import encode_weights

    tty, made = Terminal(), []

    def drawn_at_once(*args: Any, **kw: Any) -> Any:
        kw["delay"] = 0  # a small model's upload is over before the usual second
        made.append(progress.bar(*args, file=tty, **kw))
        return made[-1]

    monkeypatch.setattr(link_module, "bar", drawn_at_once)
    net = mlp()
    params = init_params(net, 0)
    with native_link(tmp_path) as link:
        link.load_model(net.blob, params, bars=True)
    (b,) = made
    assert b.n == b.total == len(net.blob.encode()) + len(encode_weights(params))
    assert "upload" in tty.getvalue() and _cleared(tty.getvalue())


# ---------------------------------------------------------------- `poet train`: a bar per epoch, or lines

needs_qemu = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
TRAIN = ["train", "--ram", "200k", "--epochs", "2", "--data-limit", "32"]  # mlp-digits: 2 epochs of 2 steps


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "nrf52840.yaml").write_bytes((REPO / "profiles" / "nrf52840.yaml").read_bytes())
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    return tmp_path


def _epoch_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if re.match(r"epoch \d/2: mean loss", ln)]


@needs_qemu
def test_train_into_a_log_writes_lines_and_no_bar(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TRAIN, "--run-dir", str(workspace / "run")]) == 0
    out, err = capsys.readouterr()
    assert not any(mark in out + err for mark in BAR_MARKS), err
    assert len(_epoch_lines(out)) == 2  # one summary line per epoch
    steps = [ln for ln in out.splitlines() if re.match(r"  epoch \d/2 step +\d/2 ", ln)]
    assert len(steps) == 4  # and the step lines a log had before bars


@needs_qemu
def test_train_on_a_terminal_draws_a_bar_per_epoch(workspace: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import poet.run.loop

    def every_step_drawn(*args: Any, **kw: Any) -> Any:
        return progress.bar(*args, mininterval=0, **kw)  # tqdm skips frames within 0.1 s of the last one

    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(poet.run.loop, "bar", every_step_drawn)
    assert main([*TRAIN, "--run-dir", str(workspace / "run")]) == 0
    out = capsys.readouterr().out
    bars = tty.getvalue()
    for epoch in (1, 2):
        assert re.search(rf"epoch {epoch}/2: 100%\|.*\| 2/2 .*loss \d\.\d{{4}}", bars), bars
    assert _cleared(bars)
    assert len(_epoch_lines(out)) == 2
    assert not re.search(r"  epoch \d/2 step ", out)  # the bar took the step lines' place
    assert not any(mark in out for mark in BAR_MARKS)
