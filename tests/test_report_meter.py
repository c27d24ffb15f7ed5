"""`poet report TRACE --meter RECORDING`: measured energy from a meter's recording, synced by host step times.

One short emulated cnn-digits run (`poet train`, 4 steps, at 164k: the plan pages the input) with `--meter file:...`
replaying a constant-power recording (item: `poet train --meter`). Recordings of that run are then
synthesised on the host clock from the trace itself: each record's modelled power over the span
the report places it at inside its step's host window, idle power between steps, Gaussian noise,
an integrating meter slower than the shortest ops. The measured account must then agree with the
modelled one: the total within 2%, every op spanning >= 10 samples within 2%, the shorter ones
flagged. Then the refusals: a gap, a recording that stops early, a trace without host times; and a
RAPL-style counter that wraps.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, needs_tools
from poet.accounting import OVERHEAD_RECORD, account
from poet.boards import load_board
from poet.cli import main
from poet.errors import PoetError
from poet.meters import align as al
from poet.meters import base, synthetic
from poet.report import _placement, measure
from poet.tracefile import Trace

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")

PERIOD_S = 1e-4  # 100 us: longer than the shortest ops (tens of us of stretched board time), shorter than most
IDLE_W = 1e-3  # the board between steps (link transfers, batch uploads): outside the account
REPLAY_W = 0.02


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "profiles").mkdir()
    (ws / "profiles" / "nrf52840.yaml").write_bytes((REPO / "profiles" / "nrf52840.yaml").read_bytes())
    # a flat 20 mW for 10 minutes at 10 ms: replayed by `poet train --meter file:` from the run's start
    flat = ws / "flat.csv"
    t = np.arange(0.0, 600.0, 0.01)
    base.save(base.Recording.of_power("bench-supply", 0.01, t, np.full(t.size, REPLAY_W)), flat)
    run_dir = ws / "runs" / "m"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POET_WORKSPACE", str(ws))
        assert main(["train", "--model", "cnn-digits", "--ram", "164k", "--epochs", "1", "--data-limit", "64",
                     "--run-dir", str(run_dir), "--meter", f"file:{flat}"]) == 0
    return run_dir


def report(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    rc = main(["report", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def synthesise(tr: Trace, *, period_s: float = PERIOD_S, seed: int = 0) -> base.Recording:
    """What an integrating meter on the host clock would record if the board drew the modelled power."""
    board = load_board(tr.board)
    acct = account(tr, board)
    durs, rest, stretch = _placement(tr, board, acct)
    placed = al.events_from_host_windows(tr, durs, rest, stretch=stretch)
    at = {e.key: e for e in placed.events}
    events, power = [], []
    for c in acct.charges:
        if c.record == OVERHEAD_RECORD:  # the step's remainder: after its records, to the step's end
            s0, s1 = at[(c.step, len(tr.steps[c.step]["records"]) - 1)].end_s, placed.steps[c.step][1]
        else:
            s0, s1 = at[(c.step, c.record)].start_s, at[(c.step, c.record)].end_s
        if s1 > s0:
            events.append(al.Event(s0, s1, (c.step, c.record)))
            power.append(c.energy_j / (s1 - s0))
    tl = synthetic.Timeline(events, np.array(power), IDLE_W)
    return synthetic.render(tl, period_s, noise=0.02, seed=seed, start_s=placed.windows[0][0] - 0.01,
                            margin_s=0.01)


@pytest.fixture(scope="module")
def trace(run: Path) -> Trace:
    return Trace.load(run / "trace.json")


@pytest.fixture(scope="module")
def recording(run: Path, trace: Trace) -> Path:
    p = run / "synthetic.csv"
    base.save(synthesise(trace), p)
    return p


def test_steps_carry_host_times(trace: Trace) -> None:
    times = trace.host_times()
    assert times is not None and len(times) == 4
    assert all(t0 < t1 for t0, t1 in times) and all(a[1] <= b[0] for a, b in zip(times, times[1:]))


def test_measured_matches_modelled(trace: Trace, recording: Path, run: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    board = load_board(trace.board)
    m = measure(trace, board, recording)
    measured, modelled = account(trace, board, m.energy_of), account(trace, board)
    assert measured.total_j == pytest.approx(modelled.total_j, rel=0.02)
    resolvable = 0
    for c in modelled.charges:
        if c.record == OVERHEAD_RECORD:
            continue
        ev = m.energy_of.by_record[(c.step, c.record)]
        if ev.resolvable:  # spans >= 10 meter periods
            resolvable += 1
            assert ev.energy_j == pytest.approx(c.energy_j, rel=0.02), (c.step, c.record, c.tensor, c.kind)
    assert resolvable >= 10 and m.unresolvable  # both kinds present: short ops are flagged
    paging = [k for k in m.energy_of.by_record if trace.steps[k[0]]["records"][k[1]][2].startswith("page")]
    assert any(m.energy_of.by_record[k].resolvable for k in paging)

    rc, out, err = report(capsys, run / "trace.json", "--meter", recording)
    assert rc == 0, err
    assert "energy of 4 training step(s) of cnn-digits on nrf52840 (measured)" in out
    assert f"source: measured by synthetic at 100 us ({recording}" in out
    n = re.search(r"resolution: (\d+) of (\d+) ops", out)
    assert n and int(n.group(1)) == len(m.unresolvable) > 0
    total = re.search(r"^  total +([\d.]+ \w+) +([\d.]+ \w+) +([+-][\d.]+)%$", out, re.M)
    assert total and abs(float(total.group(3))) <= 2.0, out
    for k in ("forward", "backward", "page_in", "page_out", "optimizer"):
        assert re.search(rf"^  {k} .*%$", out, re.M), k  # measured beside modelled, kind by kind
    # the CSV says where its joules came from
    rc, out, err = report(capsys, run / "trace.json", "--meter", recording, "--csv", run / "m.csv")
    assert rc == 0, err
    rows = (run / "m.csv").read_text().splitlines()
    assert rows[1].endswith(",measured")


def test_gap_refused_in_one_line_unless_allowed(trace: Trace, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = synthesise(trace, seed=1)
    w0, w1 = trace.host_times()[1]  # type: ignore[index]
    hole = (rec.t_s > w0 + 0.3 * (w1 - w0)) & (rec.t_s < w0 + 0.5 * (w1 - w0))
    assert hole.sum() > 5
    keep = ~hole
    gappy = base.Recording.of_power("synthetic", rec.period_s, rec.t_s[keep], rec.power_w[keep])  # type: ignore[index]
    p = run / "gappy.csv"
    base.save(gappy, p)
    rc, out, err = report(capsys, run / "trace.json", "--meter", p)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "gap of" in err and "--allow-gaps" in err, err
    rc, out, err = report(capsys, run / "trace.json", "--meter", p, "--allow-gaps")
    assert rc == 0, err
    assert re.search(r"gaps: \d+ records lie over a gap", out) and "interpolated" in out


def test_counter_wrap_gives_positive_energy(trace: Trace, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A RAPL-style counter read every millisecond whose range is smaller than the run's energy."""
    rec = synthesise(trace, period_s=1e-3, seed=2)
    rng = 5000  # uJ: the run's ~12 mJ wraps it twice
    counter = (np.floor(rec.energy_j() * 1e6).astype(np.int64) + 3000) % (rng + 1)
    assert np.any(np.diff(counter) < 0)
    p = run / "rapl.csv"
    base.save(base.Recording.of_counter("rapl:package-0", 1e-3, rec.t_s, counter, rng), p)
    board = load_board(trace.board)
    m = measure(trace, board, p)
    acct = account(trace, board, m.energy_of)
    assert acct.total_j > 0 and all(c.energy_j >= 0 for c in acct.charges)
    assert acct.total_j == pytest.approx(account(trace, board).total_j, rel=0.02)
    rc, out, err = report(capsys, run / "trace.json", "--meter", p)
    assert rc == 0, err
    assert "note: energy counter wrapped" in out


def test_recording_that_stops_early_is_refused(trace: Trace, recording: Path, run: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rec = base.load(recording)
    cut = rec.t_s < trace.host_times()[2][0]  # type: ignore[index]
    p = run / "short.csv"
    base.save(base.Recording.of_power("synthetic", rec.period_s, rec.t_s[cut], rec.power_w[cut]), p)  # type: ignore[index]
    rc, out, err = report(capsys, run / "trace.json", "--meter", p)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "ends before the last step" in err and "--meter-offset" in err, err
    # a meter on another clock, not told: nothing lines up
    rc, out, err = report(capsys, run / "trace.json", "--meter", recording, "--meter-offset", "-3600")
    assert rc == 2 and "does not cover" not in err and "starts after the first step" in err, err


def test_trace_without_host_times(run: Path, recording: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((run / "trace.json").read_text())
    for st in data["steps"]:
        del st["host_t0"], st["host_t1"]
    old = tmp_path / "trace.json"
    old.write_text(json.dumps(data))
    (tmp_path / "schedule.poet").write_bytes((run / "schedule.poet").read_bytes())
    rc, out, err = report(capsys, old)  # an older trace still loads and reports, modelled
    assert rc == 0 and "(modelled)" in out, err
    rc, out, err = report(capsys, old, "--meter", recording)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "predates host timestamps" in err and "rerun" in err, err
    rc, out, err = report(capsys, old, "--allow-gaps")
    assert rc == 2 and "--meter" in err


def test_train_meter_records_the_run(run: Path, trace: Trace, capsys: pytest.CaptureFixture[str]) -> None:
    """`poet train --meter file:...` saved meter.csv over the steps; the report reads it back."""
    rec = base.load(run / "meter.csv")
    assert rec.meter == "replay:bench-supply"
    times = trace.host_times()
    assert times is not None and rec.t_s[0] <= times[0][0] and rec.t_s[-1] >= times[-1][1]
    rc, out, err = report(capsys, run / "trace.json", "--meter", run / "meter.csv", "--by", "kind")
    assert rc == 0, err
    assert "measured by replay:bench-supply at 10 ms" in out
    # a flat 20 mW over every step's window (an emulated step fills its window)
    expect = REPLAY_W * sum(t1 - t0 for t0, t1 in times)
    # the unit follows the size (a fast machine's windows sum to under a millijoule)
    m = re.search(r"^  total +([\d.]+) (uJ|mJ|J)\b", out, re.M)
    assert m, out
    got = float(m.group(1)) * {"uJ": 1e-6, "mJ": 1e-3, "J": 1.0}[m.group(2)]
    assert got == pytest.approx(expect, rel=1e-3)


def test_a_real_board_step_starts_at_its_step_and_must_fit_its_window() -> None:
    """Records of a real board are anchored at STEP sent and take their ticks in real time."""
    tr = Trace("b", "m", "measured", 1e6, [{"name": "x", "module": "x", "kind": "forward", "op": 0, "bytes": 4}])
    tr.steps = [{"step_ticks": 3000, "records": [[0, 0, "forward", 0, 1000, 4], [1, 0, "forward", 0, 1500, 4]],
                 "host_t0": 100.0, "host_t1": 100.005}]
    placed = al.events_from_host_windows(tr, [[1e-3, 1.5e-3]], [0.5e-3])
    got = [t for e in placed.events for t in (e.start_s, e.end_s)]
    assert got == pytest.approx([100.0, 100.001, 100.001, 100.0025])
    assert list(placed.steps[0]) == pytest.approx([100.0, 100.003]) and placed.slack_s == pytest.approx([0.002])
    tr.steps[0]["host_t1"] = 100.002  # the host saw less time than the board's timer: wrong tick_hz
    with pytest.raises(PoetError, match="tick_hz is not the board timer's rate"):
        al.events_from_host_windows(tr, [[1e-3, 1.5e-3]], [0.5e-3])


def test_a_resumed_run_appends_to_its_recording(tmp_path: Path) -> None:
    """`recorded` keeps an earlier session's samples; the hole between sessions is outside every step."""
    from poet.meters.replay import ReplayMeter
    from poet.meters.window import recorded

    flat = base.check(base.Recording.of_power("supply", 0.01, np.arange(0.0, 60.0, 0.01), np.full(6000, 0.02)))
    path, said = tmp_path / "meter.csv", []
    for _ in range(2):
        with recorded(ReplayMeter(flat), path, said.append):
            pass
    rec = base.load(path, allow_gaps=True)
    assert len(said) == 2 and "meter.csv" in said[-1] and rec.meter == "replay:supply"
    assert np.all(np.diff(rec.t_s) > 0)  # one forward-running clock across both sessions
