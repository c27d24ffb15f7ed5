"""Power meters: recordings and their checks, alignment accuracy, every backend on data in its device's shape."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from poet.energy.meters import align as al
from poet.energy.meters import base, ina219, ina3221, joulescope, ppk2, rapl, synthetic
from poet.energy.meters.sampler import PollingMeter
from poet.energy.meters.window import Windows
from poet.energy.tracefile import Trace
from poet.errors import PoetError


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and isinstance(exc.value, PoetError)
    return msg


# --- alignment: the rule, then its accuracy -------------------------------------------------

def test_plain_rule_splits_by_overlap_time_and_equally_among_concurrent_events() -> None:
    # 1 W for [0, 1), 3 W for [1, 2), last sample holds one period: [2, 3) at 0 W.
    rec = base.check(base.Recording.of_power("m", 1.0, [0.0, 1.0, 2.0], [1.0, 3.0, 0.0]))
    ev = [al.Event(0.0, 0.5, "a"), al.Event(0.5, 1.5, "b"), al.Event(1.5, 2.0, "c")]
    out = {e.key: e.energy_j for e in al.align(rec, ev, refine=0, min_samples=1).events}
    assert out == pytest.approx({"a": 0.5, "b": 0.5 + 1.5, "c": 1.5})
    # Two events at once share the power equally while both run.
    ev = [al.Event(0.0, 2.0, "long"), al.Event(1.0, 2.0, "short")]
    out = {e.key: e.energy_j for e in al.align(rec, ev, refine=0, min_samples=1).events}
    assert out == pytest.approx({"long": 1.0 + 1.5, "short": 1.5})


def test_accuracy_within_2_percent_for_ops_of_10_samples_or_more() -> None:
    tl = synthetic.timeline(200, seed=0)            # 20 us .. 20 ms ops, 5-30 mW, idle between
    rec = base.check(synthetic.render(tl, 100e-6, noise=0.02, seed=0))
    res = al.align(rec, tl.events)
    got = np.array([e.energy_j for e in res.events])
    ok = np.array([e.resolvable for e in res.events])
    err = np.abs(got / tl.energy_j - 1)
    assert ok.sum() >= 60 and (~ok).sum() >= 60     # both kinds are well represented
    assert err[ok].max() < 0.02, f"worst resolvable op off by {err[ok].max():.2%}"
    dur = np.array([e.end_s - e.start_s for e in tl.events])
    assert np.array_equal(~ok, dur < 10 * 100e-6)   # exactly the ops shorter than 10 periods are flagged
    assert {e.key for e in res.unresolvable()} == {e.key for e, k in zip(tl.events, ok) if not k}
    # Every sample's energy ends up somewhere: ops + unattributed = what the meter saw over the span.
    seg = rec.segments()
    first = np.searchsorted(seg.start_s, tl.events[0].start_s, side="right") - 1
    last = np.searchsorted(seg.start_s, tl.events[-1].end_s, side="right") - 1
    seen = float(np.sum((seg.power_w * (seg.end_s - seg.start_s))[first:last + 1]))
    assert res.total_j == pytest.approx(seen, rel=1e-9)
    assert all(e.energy_j >= 0 for e in res.events) and res.unattributed_j >= 0


def test_plain_overlap_split_alone_is_not_accurate_enough() -> None:
    # Why align() refines by default: without it, the op boundaries inside samples cost several %.
    tl = synthetic.timeline(200, seed=0)
    rec = base.check(synthetic.render(tl, 100e-6, noise=0.0))
    res = al.align(rec, tl.events, refine=0)
    ok = np.array([e.resolvable for e in res.events])
    err = np.abs(np.array([e.energy_j for e in res.events]) / tl.energy_j - 1)
    assert err[ok].max() > 0.02


def footprint_corr(a: al.Alignment, b: al.Alignment) -> float:
    x = np.array([e.energy_j for e in a.events])
    y = np.array([e.energy_j for e in b.events])
    return float(np.corrcoef(x, y)[0, 1])


def test_smaragdine_precision_and_stability() -> None:
    """Pearson correlation of per-op footprints: sparsened recordings (precision), noise seeds (stability).

    Measured over 20 timelines (benchmarks/meter_accuracy.py, docs/benchmarks.md), minimum r:
    2x 0.99997, 4x 0.99975, 8x 0.99893, 5 noise seeds 0.99999. The floors below leave ~10x the
    measured shortfall from 1 as margin, so a seed change passes but a broken alignment (r of an
    op's energy against another's drops fast once shares land on the wrong ops) does not.
    """
    tl = synthetic.timeline(200, seed=3)
    full = base.check(synthetic.render(tl, 100e-6, seed=3))
    ref = al.align(full, tl.events)
    for every, floor in ((2, 0.999), (4, 0.995), (8, 0.98)):
        assert footprint_corr(ref, al.align(full.sparsened(every), tl.events)) > floor, every
    runs = [al.align(base.check(synthetic.render(tl, 100e-6, seed=s)), tl.events) for s in range(5)]
    assert min(footprint_corr(runs[0], r) for r in runs[1:]) > 0.999


# --- recordings: file format and refusals ---------------------------------------------------

def test_save_load_round_trip(tmp_path: Path) -> None:
    rec = base.check(base.Recording.of_power("ppk2", 1e-5, [0, 1e-5, 2e-5], [0.01, 0.02, 0.015], [0, 1, 0]))
    base.save(rec, tmp_path / "p.csv")
    back = base.load(tmp_path / "p.csv")
    assert back.meter == "ppk2" and back.period_s == 1e-5
    assert np.array_equal(back.power_w, rec.power_w) and np.array_equal(back.logic, rec.logic)
    assert (tmp_path / "p.csv").read_text().splitlines()[:2] == ["# poet-meter/1 meter=ppk2 period_s=1e-05",
                                                                  "t_s,power_w,logic"]
    cnt = base.Recording.of_counter("rapl:package-0", 0.01, [0, 0.01, 0.02], [10, 20, 5], 99)
    base.save(cnt, tmp_path / "c.csv")
    back = base.load(tmp_path / "c.csv")
    assert back.max_energy_range_uj == 99 and back.energy_j()[-1] == pytest.approx((10 + 85) * 1e-6)


def test_logic_column_is_optional_and_must_be_input_bits(tmp_path: Path) -> None:
    """A recording written before the logic column (t_s,power_w) still loads, with no logic; a logic
    value that is not the bits of D0-D7 is refused in one line naming the sample."""
    old = tmp_path / "old.csv"
    old.write_text("# poet-meter/1 meter=ina219 period_s=0.001\nt_s,power_w\n0.0,0.01\n0.001,0.02\n0.002,0.015\n")
    rec = base.load(old)
    assert rec.logic is None and rec.power_w is not None and rec.power_w.tolist() == [0.01, 0.02, 0.015]
    head = "# poet-meter/1 meter=ppk2 period_s=1e-05\nt_s,power_w,logic\n"
    ok = tmp_path / "ok.csv"
    ok.write_text(head + "0.0,0.01,0\n1e-05,0.02,255\n2e-05,0.015,129\n")
    assert base.load(ok).logic.tolist() == [0, 255, 129]  # type: ignore[union-attr]
    for i, bad in enumerate(["256", "1.5", "-1", "nan"]):
        f = tmp_path / f"bad{i}.csv"
        f.write_text(head + f"0.0,0.01,0\n1e-05,0.02,{bad}\n2e-05,0.015,1\n")
        with pytest.raises(base.RecordingError, match=r"sample 1: logic .* is not the bits of inputs D0-D7"):
            base.load(f)


def write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_gap_is_one_clear_error_unless_allowed(tmp_path: Path) -> None:
    rows = ["t_s,power_w"] + [f"{i * 1e-3},0.01" for i in range(5)] + ["0.05,0.03", "0.051,0.03"]
    f = write(tmp_path / "g.csv", "# poet-meter/1 meter=ina219 period_s=0.001", rows)
    with pytest.raises(base.RecordingError) as exc:
        base.load(f)
    msg = one_line(exc)
    assert "gap of 46.000 ms after sample 4" in msg and "--allow-gaps" in msg and exc.value.status == 2
    rec = base.load(f, allow_gaps=True)
    assert len(rec.gaps) == 1 and "gap" in rec.notes[0]
    res = al.align(rec, [al.Event(0.0, 0.004, "before"), al.Event(0.004, 0.05, "over")], min_samples=1)
    before, over = res.events
    assert not before.interpolated and over.interpolated
    # Over the gap: the trapezoid of its ends, (10 mW + 30 mW) / 2 for 46 ms.
    assert over.energy_j == pytest.approx(0.02 * 0.046, rel=1e-6)


def test_negative_unsorted_and_nan_samples_are_refused(tmp_path: Path) -> None:
    head = "# poet-meter/1 meter=x period_s=0.001"
    cases = {
        "negative power -0.002 W at sample 1": ["t_s,power_w", "0,0.01", "0.001,-0.002", "0.002,0.01"],
        "timestamps do not increase at sample 2": ["t_s,power_w", "0,0.01", "0.002,0.01", "0.001,0.01"],
        "sample 1 is not a number": ["t_s,power_w", "0,0.01", "0.001,nan", "0.002,0.01"],
        "line 4: cannot read": ["t_s,power_w", "0,0.01", "0.001;0.01"],
    }
    for n, (want, rows) in enumerate(cases.items()):
        with pytest.raises(base.RecordingError) as exc:
            base.load(write(tmp_path / f"{n}.csv", head, rows))
        assert want in one_line(exc)


def test_counter_going_down_without_range_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "c.csv", "# poet-meter/1 meter=rapl period_s=0.01",
              ["t_s,energy_uj", "0,100", "0.01,200", "0.02,50"])
    with pytest.raises(base.RecordingError) as exc:
        base.load(f)
    assert "goes down at sample 2" in one_line(exc) and "max_energy_range_uj" in str(exc.value)


# --- backends -------------------------------------------------------------------------------

def rapl_tree(root: Path, energy_uj: int, max_uj: int) -> Path:
    z = root / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (root / "intel-rapl:0:0").mkdir()
    (root / "intel-rapl:0:0" / "name").write_text("core\n")
    return z


def test_rapl_counter_wrap_gives_positive_energy(tmp_path: Path) -> None:
    max_uj = 262143328850                 # a real package zone's range
    z = rapl_tree(tmp_path, max_uj - 1_000_000, max_uj)
    clock = FakeClock()
    m = rapl.RaplMeter(root=tmp_path, period_s=0.01, clock=clock)
    m.start(thread=False)
    readings = [max_uj - 400_000, 100_000, 700_000]   # wraps between the 1st and 2nd
    for v in readings:
        clock.t += 0.01
        (z / "energy_uj").write_text(f"{v}\n")
        m.sample()
    clock.t += 0.01
    rec = m.stop()
    # 0.6 J before the wrap, then (max + 1 - (max - 400000)) + 100000 uJ = 0.500001 J, then 0.6 J.
    assert rec.energy_j()[-1] == pytest.approx(0.6 + 0.500001 + 0.6)
    assert np.all(rec.segments().power_w >= 0)
    assert any("wrapped 1 time" in n for n in rec.notes)


def test_rapl_missing_zone_is_a_clear_error(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 0, 100)
    with pytest.raises(base.MeterError) as exc:
        rapl.RaplMeter("dram", root=tmp_path)
    assert "no RAPL zone named 'dram'" in one_line(exc) and "intel-rapl:0=package-0" in str(exc.value)


def hwmon_tree(root: Path, name: str, files: dict[str, int]) -> Path:
    d = root / f"hwmon{len(list(root.glob('hwmon*')))}"
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    for k, v in files.items():
        (d / k).write_text(f"{v}\n")
    return d


def test_ina219_hwmon_power_and_fallback(tmp_path: Path) -> None:
    hwmon_tree(tmp_path, "cpu_thermal", {"temp1_input": 45000})
    d = hwmon_tree(tmp_path, "ina219", {"in1_input": 5000, "curr1_input": 400, "power1_input": 2_000_000})
    clock = FakeClock()
    m = ina219.Ina219Meter(root=tmp_path, period_s=0.001, clock=clock)
    m.start(thread=False)
    for _ in range(10):
        clock.t += 0.001
        m.sample()
    assert m.read_energy_j() == pytest.approx(2.0 * 0.010)     # 2 W (power1_input, uW) for 10 ms
    (d / "power1_input").unlink()
    assert ina219.power_reader(d)() == pytest.approx(5.0 * 0.4)  # 5000 mV x 400 mA


def jetson_iio(root: Path) -> None:
    # Jetson TX2, L4T 32.x: the module's input rail on 0-0041, sub-rails on 0-0040.
    for dev, rails in {"0-0040": ["VDD_SYS_GPU", "VDD_SYS_SOC", "VDD_SYS_WIFI"],
                       "0-0041": ["VDD_IN", "VDD_SYS_CPU", "VDD_SYS_DDR"]}.items():
        d = root / "ina3221x" / dev / "iio:device0"
        d.mkdir(parents=True)
        for k, name in enumerate(rails):
            (d / f"rail_name_{k}").write_text(name + "\n")
            (d / f"in_power{k}_input").write_text(f"{1000 * (k + 1) + (3000 if name == 'VDD_IN' else 0)}\n")
            (d / f"in_current{k}_input").write_text("100\n")
            (d / f"in_voltage{k}_input").write_text("19000\n")


def jetson_hwmon(root: Path) -> None:
    # Orin / mainline: hwmon under the upstream ina3221 driver, channels 1..3.
    d = root / "ina3221" / "1-0040" / "hwmon" / "hwmon3"
    d.mkdir(parents=True)
    (d / "name").write_text("ina3221\n")
    for k, (label, mv, ma) in enumerate([("VDD_IN", 5000, 1200), ("VDD_CPU_GPU_CV", 5000, 300),
                                         ("VDD_SOC", 5000, 250)], start=1):
        (d / f"in{k}_label").write_text(label + "\n")
        (d / f"in{k}_input").write_text(f"{mv}\n")
        (d / f"curr{k}_input").write_text(f"{ma}\n")


def test_ina3221_both_sysfs_layouts(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    jetson_iio(old)
    jetson_hwmon(new)
    names, read = ina3221.rail_reader(root=old)
    assert names == ["VDD_IN"] and read() == pytest.approx(4.0)           # 4000 mW
    names, read = ina3221.rail_reader(["VDD_SYS_GPU", "VDD_SYS_CPU"], root=old)
    assert read() == pytest.approx(1.0 + 2.0)
    names, read = ina3221.rail_reader(root=new)
    assert names == ["VDD_IN"] and read() == pytest.approx(5.0 * 1.2)     # 5000 mV x 1200 mA
    assert {r.layout for r in ina3221.find_rails(new)} == {"hwmon"}
    clock = FakeClock()
    m = ina3221.Ina3221Meter(["VDD_SOC"], root=new, period_s=0.01, clock=clock)
    m.start(thread=False)
    clock.t += 0.5
    assert m.stop().energy_j()[-1] == pytest.approx(5.0 * 0.25 * 0.5)
    with pytest.raises(base.MeterError) as exc:
        ina3221.rail_reader(["VDD_GPU"], root=old)
    assert "no INA3221 rail named VDD_GPU" in one_line(exc)


def ppk2_word(adc: int, rng: int, logic: int) -> int:
    return (logic << 24) | (rng << 14) | adc


def test_ppk2_decoder_on_synthetic_words() -> None:
    cal = ppk2.Calibration(GS=[0.0] * 5)            # linear in the code, to check by hand
    words = np.array([ppk2_word(1000, 2, 0b1), ppk2_word(1000, 4, 0b10), ppk2_word(16383, 0, 0)], dtype=np.uint32)
    current, logic = ppk2.decode_words(words, cal, vdd_v=3.0)
    assert current[0] == pytest.approx(4000 * 1.8 / 163840 / 10.15)      # range 2: 10.15 ohm
    assert current[1] == pytest.approx(4000 * 1.8 / 163840 / 0.043)      # range 4: 0.043 ohm
    assert current[2] == pytest.approx(65532 * 1.8 / 163840 / 1031.64)
    assert logic.tolist() == [1, 2, 0]
    # Range codes above 4 are clamped, as ppk2-api does.
    assert ppk2.decode_words(np.array([ppk2_word(1000, 7, 0)], dtype=np.uint32), cal, 3.0)[0][0] == \
        pytest.approx(current[1])
    # Any chunking of the byte stream decodes to the same samples.
    raw = np.array([ppk2_word(i % 16384, i % 5, i % 256) for i in range(999)], dtype="<u4").tobytes()
    whole = ppk2.StreamDecoder(cal, 3.0).feed(raw)
    dec = ppk2.StreamDecoder(cal, 3.0)
    parts = [dec.feed(raw[a:a + 7]) for a in range(0, len(raw), 7)]
    assert np.allclose(np.concatenate([p[0] for p in parts]), whole[0])
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])


@pytest.mark.skipif(importlib.util.find_spec("ppk2_api") is None, reason="ppk2-api not installed (optional)")
def test_ppk2_decoder_matches_ppk2_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from ppk2_api import ppk2_api

    monkeypatch.setattr(ppk2_api.serial, "Serial", lambda port: type("S", (), {"close": lambda s: None})())
    api = ppk2_api.PPK2_API("fake")
    api.current_vdd = 3000
    cal = ppk2.Calibration.from_modifiers(api.modifiers)
    for adc, rng, lg in [(1000, 2, 1), (5, 0, 0), (16383, 4, 0x7f)]:
        word = ppk2_word(adc, rng, lg)
        fresh = ppk2_api.PPK2_API("fake")      # no spike-filter history
        fresh.current_vdd = 3000
        got = fresh._handle_raw_data(word)     # 0.9.2 returns (uA, bits); older releases uA alone
        theirs_ua = float(got[0] if isinstance(got, tuple) else got)
        ours, logic = ppk2.decode_words(np.array([word], dtype=np.uint32), cal, 3.0)
        assert ours[0] * 1e6 == pytest.approx(theirs_ua)
        assert logic[0] == fresh._get_masked_value(word, fresh.MEAS_LOGIC)


def test_ppk2_marker_pulses_become_trace_events() -> None:
    # 3 ops marked on D3: high for samples 10-29, 40-44, 60-99 (10 us per sample).
    n = 120
    logic = np.zeros(n, dtype=np.uint8)
    for a, b in ((10, 30), (40, 45), (60, 100)):
        logic[a:b] = 1 << 3
    power_w = np.where(logic > 0, 0.03, 0.003)
    words = np.array([ppk2_word(0, 0, int(lg)) for lg in logic], dtype=np.uint32)
    rec = ppk2.recording_from_bytes(words.tobytes(), ppk2.Calibration(), 3.0)
    assert rec.period_s == 1e-5 and rec.logic is not None and len(rec.t_s) == n
    rec = base.Recording.of_power("ppk2", 1e-5, rec.t_s, power_w, rec.logic)
    trace = small_trace([[5, 1], [9]])
    events = al.events_from_markers(trace, rec, channel=3)
    assert [e.key for e in events] == [(0, 0), (0, 1), (1, 0)]
    assert events[0].start_s == pytest.approx(9.5e-5) and events[0].end_s == pytest.approx(29.5e-5)
    energy = al.measured_energy(trace, rec, events, min_samples=10)
    assert energy(0, 0) == pytest.approx(0.03 * 20e-5, rel=0.06)
    assert energy.resolvable(0, 0) and not energy.resolvable(0, 1)
    with pytest.raises(base.MeterError) as exc:
        al.events_from_markers(small_trace([[5]]), rec, channel=3)
    assert "shows 3 op pulses but the trace has 1 records" in one_line(exc)


def test_missing_optional_packages_say_how_to_install() -> None:
    if importlib.util.find_spec("ppk2_api") is None:
        with pytest.raises(base.MeterError, match=r"pip install ppk2-api"):
            ppk2.Ppk2Meter().start()
    if importlib.util.find_spec("joulescope") is None:
        with pytest.raises(base.MeterError, match=r"pip install joulescope"):
            joulescope.JoulescopeMeter().start()


def js_samples(power: np.ndarray, fs: float = 1000.0, t1: float = 5.0) -> dict:
    return {"time": {"range": {"value": [t1, t1 + power.size / fs], "units": "s"},
                     "sample_id_range": {"value": [0, power.size], "units": "samples"},
                     "sampling_frequency": {"value": fs, "units": "Hz"}},
            "signals": {"current": {"value": (power / 3.3).astype(np.float32), "units": "A"},
                        "voltage": {"value": np.full(power.size, 3.3, dtype=np.float32), "units": "V"}}}


def test_joulescope_sample_dict() -> None:
    p = np.full(100, 0.02)
    rec = joulescope.recording_from_samples(js_samples(p))
    assert rec.t_s[0] == 5.0 and rec.period_s == pytest.approx(1e-3)
    assert rec.energy_j()[-1] == pytest.approx(0.02 * 0.099, rel=1e-6)
    p[40:60] = np.nan                                   # samples the driver lost
    with pytest.raises(base.RecordingError) as exc:
        joulescope.recording_from_samples(js_samples(p))
    assert "gap of 21.000 ms after sample 39" in one_line(exc)
    assert len(joulescope.recording_from_samples(js_samples(p), allow_gaps=True).gaps) == 1


# --- windows, sync, accounting hook ---------------------------------------------------------

def test_windows_nest_overlap_and_refuse_a_missing_begin() -> None:
    clock = FakeClock()
    power = {"w": 2.0}
    m = PollingMeter("fake", 1.0, lambda: power["w"], clock=clock)
    m.start(thread=False)
    w = Windows(m)
    w.begin_window("outer")
    clock.t += 1.0
    w.begin_window("inner")
    clock.t += 1.0
    power["w"] = 4.0
    m.sample()
    clock.t += 1.0
    inner = w.end_window("inner")
    clock.t += 1.0
    outer = w.end_window("outer")
    assert inner.time_s == pytest.approx(2.0) and inner.energy_j == pytest.approx(2.0 + 4.0)
    assert outer.time_s == pytest.approx(4.0) and outer.energy_j == pytest.approx(2.0 + 2.0 + 4.0 + 4.0)
    assert outer.meter == "fake"
    with pytest.raises(PoetError) as exc:
        w.end_window("inner")
    assert "end_window('inner') without begin_window('inner')" in one_line(exc)


def test_sync_fit_recovers_offset_and_drift() -> None:
    board = np.linspace(0, 10, 50)
    meter = 3.25 + board * (1 + 40e-6)
    s = al.fit_sync(board, meter, period_s=1e-5)
    assert s.offset_s == pytest.approx(3.25) and s.scale == pytest.approx(1 + 40e-6)
    with pytest.raises(base.MeterError, match="do not line up"):
        al.fit_sync(board, meter + np.r_[np.zeros(49), 1e-3], period_s=1e-5)


def small_trace(steps: list[list[int]], tick_hz: float = 1e6) -> Trace:
    nodes = [{"name": "fc1/forward", "module": "fc1", "kind": "forward", "op": "linear", "bytes": 64}]
    tr = Trace("nrf52840", "mlp-digits", "measured", tick_hz, nodes)
    for n, ticks in enumerate(steps):
        tr.steps.append({"step": n, "step_ticks": sum(ticks) + 1000,   # + 1 ms of interpreter overhead
                         "records": [[i, 0, "forward", "linear", t, 0] for i, t in enumerate(ticks)]})
    return tr


def test_measured_energy_per_trace_record_from_step_times() -> None:
    # Host-side meter: 10 mW while ops run; steps start at host times 1.0 and 2.0.
    trace = small_trace([[2000, 3000], [5000]])         # ticks at 1 MHz: 2 ms, 3 ms; 5 ms
    t = np.arange(0.9, 2.1, 1e-4)
    rec = base.check(base.Recording.of_power("ina219", 1e-4, t, np.full(t.size, 0.01)))
    events = al.events_from_steps(trace, [1.0, 2.0])
    windows = al.step_windows(trace, [1.0, 2.0])
    energy_of = al.measured_energy(trace, rec, events, windows=windows)
    # accounting asks energy_of(step, -1) for the step's time outside its records: 1 ms each here.
    assert energy_of(0, al.OVERHEAD_RECORD) == pytest.approx(0.01 * 1e-3, rel=1e-6)
    assert energy_of(1, al.OVERHEAD_RECORD) == pytest.approx(0.01 * 1e-3, rel=1e-6)
    assert energy_of(0, 0) == pytest.approx(0.01 * 2e-3, rel=1e-6)
    assert energy_of(0, 1) == pytest.approx(0.01 * 3e-3, rel=1e-6)
    assert energy_of(1, 0) == pytest.approx(0.01 * 5e-3, rel=1e-6)
    with pytest.raises(base.MeterError, match="no measured energy for step 3"):
        energy_of(3, 0)
    with pytest.raises(base.MeterError) as exc:
        al.align(rec, al.events_from_steps(trace, [1.0, 5.0]))
    assert "covers only" in one_line(exc)
