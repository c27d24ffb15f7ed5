"""`poet report TRACE --meter RECORDING`: measured energy from a meter's recording, synced by host step times.

One short emulated mlp-digits run (`poet train`, 4 steps, at 55k with `--strategy page-only`: the plan pages a
hidden layer's activation out and back in, recomputing nothing; POET's own plans of the digits models no longer
page on the nRF52840, as the input is read in place) with `--meter file:...`
replaying a constant-power recording (item: `poet train --meter`). Recordings of that run are then
synthesised on the host clock from the trace itself: each record's modelled power over the span
the report places it at inside its step's host window, idle power between steps, Gaussian noise,
an integrating meter slower than the shortest ops. The measured account must then agree with the
modelled one: the total within 2%, every op spanning >= 10 samples within 2%, the shorter ones
flagged. Then the refusals: a gap, a recording that stops early, a trace without host times; and a
RAPL-style counter that wraps.

`--markers`: a PPK2-like recording on its own clock made from the same trace, the op marker on a logic
input high exactly over each record and a known power per kind: aligned by the pulses, every kind
comes out within 0.1% of the truth; a recording without a logic column, and pulses that are not one
per record (too few, too many, none, on another input), are refused in one line with status 2.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, needs_tools
from poet.boards import load_board
from poet.cli import main
from poet.energy.accounting import OVERHEAD_RECORD, account
from poet.energy.meters import align as al
from poet.energy.meters import base, synthetic
from poet.energy.meters.measure import _placement, measure
from poet.energy.tracefile import Trace
from poet.errors import PoetError

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")

# The synthetic meter's period, as a share of the shortest step's host window: an emulated step's records fill
# its window in proportion to their modelled board time, so which records span 10 periods (resolvable) is the
# same on a fast machine and a busy one (a fixed 100 us period made it the machine's speed: 9 or 11 of them)
PERIODS_PER_STEP = 400
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
        assert main(["train", "--model", "mlp-digits", "--ram", "55k", "--strategy", "page-only", "--epochs", "1",
                     "--data-limit", "64", "--run-dir", str(run_dir), "--meter", f"file:{flat}"]) == 0
    return run_dir


def report(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    rc = main(["report", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def period_of(tr: Trace) -> float:
    times = tr.host_times()
    assert times is not None
    return min(t1 - t0 for t0, t1 in times) / PERIODS_PER_STEP


def synthesise(tr: Trace, *, period_s: float | None = None, seed: int = 0) -> base.Recording:
    """What an integrating meter on the host clock would record if the board drew the modelled power."""
    period_s = period_of(tr) if period_s is None else period_s
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
    assert "energy of 4 training step(s) of mlp-digits on nrf52840 (measured)" in out
    assert re.search(rf"source: measured by synthetic at [\d.]+ [mun]?s \({re.escape(str(recording))}", out), out
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


def without_host_times(run: Path, where: Path) -> Path:
    """The run's trace as an older poet wrote it (no host_t0/host_t1), beside its schedule, in `where`."""
    data = json.loads((run / "trace.json").read_text())
    for st in data["steps"]:
        del st["host_t0"], st["host_t1"]
    old = where / "trace.json"
    old.write_text(json.dumps(data))
    (where / "schedule.poet").write_bytes((run / "schedule.poet").read_bytes())
    return old


def test_trace_without_host_times(run: Path, recording: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    old = without_host_times(run, tmp_path)
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
    from poet.energy.meters.replay import ReplayMeter
    from poet.energy.meters.window import recorded

    flat = base.check(base.Recording.of_power("supply", 0.01, np.arange(0.0, 60.0, 0.01), np.full(6000, 0.02)))
    path, said = tmp_path / "meter.csv", []
    for _ in range(2):
        with recorded(ReplayMeter(flat), path, said.append):
            pass
    rec = base.load(path, allow_gaps=True)
    assert len(said) == 2 and "meter.csv" in said[-1] and rec.meter == "replay:supply"
    assert np.all(np.diff(rec.t_s) > 0)  # one forward-running clock across both sessions


# --- --markers: aligned by the op marker's pulses on a logic input (a PPK2's D0) ---------------------

MARK_PERIOD_S = 1e-5  # a PPK2: 100 kHz
MARK_IDLE_W = 2e-3  # the interpreter between records, and the board between steps
# a known power per record kind (a free too: its pulse is an op like any other to the meter)
LEVEL_W = {"forward": 10e-3, "backward": 20e-3, "recompute": 25e-3, "page_in": 30e-3, "page_out": 40e-3,
           "optimizer": 15e-3, "free": 5e-3}
MIN_SAMPLES, GAP_SAMPLES, STEP_GAP_SAMPLES = 3, 2, 50


def marked(tr: Trace, *, channel: int = 0, seed: int = 0) -> tuple[base.Recording, dict[str, float]]:
    """A PPK2-like recording on its own clock (from t=0) of the trace's records laid end to end (each its
    modelled board time, at least 3 samples, 2 samples of idle between records, 50 between steps), each
    drawing its kind's LEVEL_W, the marker on logic input `channel` high exactly over each record; and the
    true joules by accounting kind (a free's and the idle between a step's records are `overhead`)."""
    modelled = account(tr, load_board(tr.board))
    p = MARK_PERIOD_S
    t = 20.5 * p  # every edge half a sample off the grid: midway between the samples either side of it
    events, power = [], []
    truth = {k: 0.0 for k in LEVEL_W if k != "free"} | {"overhead": 0.0}
    for c in modelled.charges:
        if c.record == OVERHEAD_RECORD:
            n = len(tr.steps[c.step]["records"])
            truth["overhead"] += MARK_IDLE_W * (n - 1) * GAP_SAMPLES * p  # inside the step: its remainder
            t += (STEP_GAP_SAMPLES - GAP_SAMPLES) * p
            continue
        kind = tr.steps[c.step]["records"][c.record][2]
        d = max(round(c.time_s / p), MIN_SAMPLES) * p
        events.append(al.Event(t, t + d, (c.step, c.record)))
        power.append(LEVEL_W[kind])
        truth["overhead" if kind == "free" else kind] += LEVEL_W[kind] * d
        t += d + GAP_SAMPLES * p
    rec = synthetic.render(synthetic.Timeline(events, np.array(power), MARK_IDLE_W), p, noise=0.02, seed=seed,
                           margin_s=1e-3)
    starts, ends = np.array([e.start_s for e in events]), np.array([e.end_s for e in events])
    high = np.searchsorted(starts, rec.t_s, side="right") - np.searchsorted(ends, rec.t_s, side="right") > 0
    logic = high.astype(np.uint8) << channel
    return base.Recording.of_power("ppk2", p, rec.t_s, rec.power_w, logic), truth


@pytest.fixture(scope="module")
def marked_recording(run: Path, trace: Trace) -> tuple[Path, dict[str, float]]:
    rec, truth = marked(trace)
    p = run / "ppk2.csv"
    base.save(rec, p)
    return p, truth


def test_markers_recover_energy_per_kind(trace: Trace, run: Path, marked_recording: tuple[Path, dict[str, float]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    p, truth = marked_recording
    back = base.load(p)  # the logic column survives the file
    assert back.logic is not None and p.read_text().splitlines()[1] == "t_s,power_w,logic"
    assert np.array_equal(back.logic, marked(trace)[0].logic)
    records = len(al.record_keys(trace))
    assert len(al.marker_pulses(back, 0)) == records
    # the recording is on the meter's own clock (from 0): host windows cannot place it, markers can
    rc, out, err = report(capsys, run / "trace.json", "--meter", p)
    assert rc == 2 and "ends before the last step" in err and "--markers D0" in err, err
    csv_path = run / "marked.energy.csv"
    rc, out, err = report(capsys, run / "trace.json", "--meter", p, "--markers", "0", "--csv", csv_path)
    assert rc == 0, err
    assert f"aligned by {records} marker pulses on D0" in out and "host times" not in out, out
    assert "the meter saw" in out and "from the first pulse to the last" in out
    got = dict.fromkeys(truth, 0.0)
    for row in csv_path.read_text().splitlines()[1:]:
        _step, _module, _tensor, kind, energy_j, _time_s, source = row.split(",")
        assert source == "measured"
        got[kind] += float(energy_j)
    assert truth["page_in"] > 0 and truth["page_out"] > 0 and truth["overhead"] > 0
    # edges exact to the sample: every op kind within 0.1%, or within what the 2% sample noise leaves of a kind
    # of few samples (4 sigma: a 3-sample optimizer pass varies by 1.2%); a marker read one sample late is off
    # by a whole sample of each record (0.06-1.1% on the big kinds, a third of a 3-sample one, 55% on overhead);
    # the overhead (2-sample stretches) within 1%
    for kind, j in truth.items():
        samples = j / (MARK_IDLE_W if kind == "overhead" else LEVEL_W[kind]) / MARK_PERIOD_S
        rel = 0.01 if kind == "overhead" else max(1e-3, 4 * 0.02 / np.sqrt(max(samples, 1.0)))
        assert got[kind] == pytest.approx(j, rel=rel, abs=1e-12), (kind, got[kind], j, samples)
    assert sum(got.values()) == pytest.approx(sum(truth.values()), rel=1e-3)
    # D0 spelled as the PPK2 labels it; the same account
    rc, out2, err = report(capsys, run / "trace.json", "--meter", p, "--markers", "D0")
    assert rc == 0 and out2 == out.replace(f"wrote {csv_path}\n", ""), err


def test_merged_pulses_align_by_step_bursts(trace: Trace, run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real board's ops sit microseconds apart: at a PPK2's 10 us their pulses merge (and a free can fall
    between two samples). With one burst per step the report places each step by its burst and its records
    by their ticks inside it; a burst that cannot be told from the gaps inside a step is still refused."""
    rec, truth = marked(trace)
    assert rec.logic is not None
    pulses = al.marker_pulses(rec, 0)
    logic = np.zeros_like(rec.logic)
    at = 0
    for st in trace.steps:  # every step's pulses merged into one, rise to fall
        a, b = pulses[at][0], pulses[at + len(st["records"]) - 1][1]
        logic[(rec.t_s > a) & (rec.t_s < b)] = 1
        at += len(st["records"])
    p = run / "merged.csv"
    base.save(replace(rec, logic=logic), p)
    assert len(al.marker_pulses(base.load(p), 0)) == len(trace.steps)
    csv_path = run / "merged.energy.csv"
    rc, out, err = report(capsys, run / "trace.json", "--meter", p, "--markers", "0", "--csv", csv_path)
    assert rc == 0, err
    assert f"aligned by the marker's {len(trace.steps)} step bursts on D0" in out, out
    total = sum(float(row.split(",")[4]) for row in csv_path.read_text().splitlines()[1:])
    assert total == pytest.approx(sum(truth.values()), rel=0.01)  # every joule inside the steps, none outside
    got = dict.fromkeys(truth, 0.0)
    for row in csv_path.read_text().splitlines()[1:]:
        got[row.split(",")[3]] += float(row.split(",")[4])
    for kind in ("forward", "backward"):  # placed by ticks: the big kinds land where they ran
        assert got[kind] == pytest.approx(truth[kind], rel=0.05), (kind, got, truth)
    # one step's burst split in two by a gap as long as those between steps: not one burst per step
    mid = 0.5 * (pulses[0][0] + pulses[len(trace.steps[0]["records"]) - 1][1])  # the middle of the first step
    cut = logic.copy()
    cut[(rec.t_s > mid) & (rec.t_s < mid + 60 * rec.period_s)] = 0
    p2 = run / "merged-split.csv"
    base.save(replace(rec, logic=cut), p2)
    err = one_line_refusal(capsys, run / "trace.json", "--meter", p2, "--markers", "0")
    assert "pulses but the trace has" in err, err


def test_markers_need_no_host_times(run: Path, marked_recording: tuple[Path, dict[str, float]], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    old = without_host_times(run, tmp_path)
    rc, out, err = report(capsys, old, "--meter", marked_recording[0], "--markers", "0", "--by", "kind")
    assert rc == 0 and "marker pulses on D0" in out, err


def one_line_refusal(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> str:
    rc, out, err = report(capsys, *argv)
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("poet: "), err
    return err


def test_markers_refused_without_a_logic_column(trace: Trace, run: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    rec, _ = marked(trace)
    p = run / "no-logic.csv"
    base.save(base.Recording.of_power("ppk2", rec.period_s, rec.t_s, rec.power_w), p)  # type: ignore[arg-type]
    assert p.read_text().splitlines()[1] == "t_s,power_w"
    err = one_line_refusal(capsys, run / "trace.json", "--meter", p, "--markers", "0")
    assert "no logic column" in err and "D0" in err and str(p) in err, err


@pytest.mark.parametrize("case", ["last step missing", "another run", "not wired", "other input"])
def test_markers_refused_when_pulses_are_not_one_per_record(trace: Trace, run: Path, case: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    rec, _ = marked(trace, channel=3 if case == "other input" else 0)
    assert rec.logic is not None
    records = len(al.record_keys(trace))
    logic = rec.logic.copy()
    last = len(trace.steps[-1]["records"])
    want = {"last step missing": records - last, "another run": records + last, "not wired": 0,
            "other input": 0}[case]
    if case == "last step missing":  # the recording stopped before the last step
        first_of_last = al.marker_pulses(rec, 0)[records - last][0]
        logic[rec.t_s > first_of_last] = 0
    elif case == "another run":  # a longer run: extra pulses after this one's
        tail = rec.t_s[-1] + rec.period_s * (1 + np.arange(10 * last))
        rec = base.Recording.of_power("ppk2", rec.period_s, np.concatenate([rec.t_s, tail]),
                                      np.concatenate([rec.power_w, np.full(tail.size, MARK_IDLE_W)]),  # type: ignore[list-item]
                                      np.concatenate([logic, np.tile([0, 0, 1, 1, 1, 0, 0, 0, 0, 0], last)]))
        logic = rec.logic  # type: ignore[assignment]
    elif case == "not wired":
        logic[:] = 0
    p = run / f"pulses-{case.replace(' ', '-')}.csv"
    base.save(replace(rec, logic=logic), p)
    assert len(al.marker_pulses(base.load(p), 0)) == want
    err = one_line_refusal(capsys, run / "trace.json", "--meter", p, "--markers", "0")
    assert f"marker D0 shows {want} pulses but the trace has {records} records" in err, err
    cause = {"last step missing": "another run's recording", "another run": "another run's recording",
             "not wired": "not wired", "other input": "--markers 3"}[case]
    assert cause in err, err
    if case == "not wired":
        assert "notrace" in err


def test_markers_usage(run: Path, marked_recording: tuple[Path, dict[str, float]],
                       capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_refusal(capsys, run / "trace.json", "--markers", "0")
    assert "--meter" in err
    err = one_line_refusal(capsys, run / "trace.json", "--meter", marked_recording[0], "--markers", "0",
                           "--meter-offset", "1")
    assert "--meter-offset" in err
    with pytest.raises(SystemExit) as exc:
        main(["report", str(run / "trace.json"), "--meter", str(marked_recording[0]), "--markers", "D8"])
    assert exc.value.code == 2 and "0-7 or D0-D7" in capsys.readouterr().err

