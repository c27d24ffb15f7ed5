"""Carbon intensity lookup, run prediction, the battery rule, emissions.csv; and the issue's acceptance:
after one epoch of a 5-epoch emulated run, the predicted total energy is within 5% of the actual."""

import csv
import datetime
import math
import os

import numpy as np
import pytest
from conftest import needs_qemu
from poet.energy.battery import USABLE_FRACTION, battery_energy_j, check_battery, refusal
from poet.energy.carbon import COUNTRY_FLAG, OVERRIDE_FLAG, countries, grams_co2, intensity, lookup
from poet.energy.emissions import COLUMNS, RunRecord, append, has_row
from poet.energy.predict import Epoch, RunPredictor, compare, per_epoch_extrapolation, plan_prediction
from poet.errors import UsageError

# codecarbon 3.3.2's EmissionsData fields, in order, as read from the wheel's
# codecarbon/output_methods/emissions_data.py: the header its FileOutput writes.
CODECARBON_3_3_2_COLUMNS = [
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions", "emissions_rate",
    "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy", "ram_energy", "energy_consumed",
    "water_consumed", "country_name", "country_iso_code", "region", "cloud_provider", "cloud_region", "os",
    "python_version", "codecarbon_version", "cpu_count", "cpu_model", "gpu_count", "gpu_model", "longitude",
    "latitude", "ram_total_size", "tracking_mode", "cpu_utilization_percent", "gpu_utilization_percent",
    "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
]


# --- carbon intensity ---------------------------------------------------------------------------

def test_override_wins_over_the_country():
    got = intensity("FRA", override_g_per_kwh=123.0)
    assert got.g_per_kwh == 123.0
    assert OVERRIDE_FLAG in got.source and got.country is None


def test_country_by_alpha3_and_alpha2_any_case():
    fra = intensity("FRA")
    # France's 2023 figure in codecarbon 3.3.2's global_energy_mix.json (Our World in Data)
    assert fra.g_per_kwh == 56.039
    assert intensity("fr") == fra and intensity(" Fr ") == fra
    assert "France (FRA) 2023" in fra.source and "codecarbon 3.3.2" in fra.source
    assert fra.country is not None and fra.country.alpha2 == "FR"


def test_every_country_has_both_codes_and_a_plausible_intensity():
    cs = countries()
    assert len(cs) == 213  # the countries of codecarbon 3.3.2's table
    for c in cs:
        assert len(c.alpha3) == 3 and len(c.alpha2) == 2
        assert lookup(c.alpha2) == c == lookup(c.alpha3)
        # the lowest and highest grids on Earth lie within these (Our World in Data: ~10 to ~1300 g/kWh)
        assert 0 <= c.g_per_kwh < 1500 and 2000 <= c.year <= 2030


def test_no_country_is_the_world_average_and_says_so():
    w = intensity()
    assert w.g_per_kwh == 475  # codecarbon's world_average (IEA, 2018)
    assert w.source.startswith(f"world average (no {COUNTRY_FLAG})")
    assert "world average" in w.line()


def test_unknown_country_is_one_line_naming_the_override():
    with pytest.raises(UsageError) as exc:
        intensity("XYZ")
    msg = str(exc.value)
    assert "\n" not in msg and "XYZ" in msg and OVERRIDE_FLAG in msg
    assert exc.value.status == 2
    with pytest.raises(UsageError, match="WORLD"):
        intensity("WORLD")  # the average row is not a country


@pytest.mark.parametrize("g", [-1, float("nan"), float("inf"), 1e308, 2001, True])
def test_override_no_grid_has_is_refused(g):
    with pytest.raises(UsageError, match=OVERRIDE_FLAG):
        intensity(override_g_per_kwh=g)


def test_grams_co2_units():
    # 1 kWh = 3.6e6 J at 100 g/kWh is 100 g; a PUE of 1.5 makes it 150 g
    assert grams_co2(3.6e6, 100) == pytest.approx(100)
    assert grams_co2(3.6e6, 100, pue=1.5) == pytest.approx(150)


# --- prediction ---------------------------------------------------------------------------------

def test_plan_prediction_is_per_step_times_steps():
    p = plan_prediction(2e-3, 0.1, 400, epochs=5, grid=intensity(override_g_per_kwh=360))
    assert p.energy_j == pytest.approx(0.8) and p.time_s == pytest.approx(40)
    assert p.co2_g == pytest.approx(0.8 / 3.6e6 * 360)
    assert p.basis == "plan" and "400 step(s)" in p.line()


def test_prediction_after_k_epochs_counts_steps_and_overhead_apart():
    # 3 epochs of 10, 10 and 4 steps (a short last epoch), 1 mJ and 1 ms a step, 5 mJ / 2 ms of evaluation an epoch
    def epoch(steps):
        return Epoch(steps, steps * 1e-3, steps * 1e-3, overhead_j=5e-3, overhead_s=2e-3)

    run = RunPredictor(epochs=3, total_steps=24, grid=intensity(override_g_per_kwh=100))
    first = run.add(epoch(10))
    assert first is not None and run.prediction is first
    assert run.add(epoch(10)) is None and run.add(epoch(4)) is None
    actual = run.actual()
    assert actual.energy_j == pytest.approx(24e-3 + 15e-3)
    assert first.energy_j == pytest.approx(actual.energy_j)  # exact: steps and overhead scaled apart
    assert first.time_s == pytest.approx(actual.time_s)
    c = compare(first, actual)
    assert abs(c.energy_error) < 1e-12 and "prediction error" in c.lines()[1]
    # carbontracker's mean-epoch extrapolation overshoots the short last epoch: 3 x 15 mJ vs 39 mJ
    e_ct, _ = per_epoch_extrapolation(run.seen[:1], 3)
    assert e_ct == pytest.approx(45e-3)


def test_predictor_refuses_nonsense():
    with pytest.raises(ValueError):
        RunPredictor(epochs=0, total_steps=4)
    with pytest.raises(ValueError):
        RunPredictor(epochs=2, total_steps=4).predict()
    with pytest.raises(ValueError, match="more than"):
        RunPredictor(epochs=2, total_steps=4).add(Epoch(5, 1.0, 1.0))
    run = RunPredictor(epochs=1, total_steps=4)
    run.add(Epoch(4, 1.0, 1.0))
    with pytest.raises(ValueError):
        run.add(Epoch(4, 1.0, 1.0))


def test_pue_scales_energy_like_codecarbon():
    p = plan_prediction(1.0, 1.0, 10, grid=intensity(override_g_per_kwh=100), pue=1.2)
    assert p.energy_j == pytest.approx(12.0) and p.co2_g == pytest.approx(12.0 / 3.6e6 * 100)


# --- battery ------------------------------------------------------------------------------------

def test_battery_arithmetic():
    # 1000 mAh x 3.6 C/mAh x 3.7 V = 13320 J; 80% usable = 10656 J
    assert battery_energy_j(1000, 3.7, 1.0) == pytest.approx(13320)
    assert battery_energy_j(1000, 3.7) == pytest.approx(13320 * USABLE_FRACTION)
    ok = check_battery(5000, 1000, 3.7)
    assert ok.fits and ok.margin_j == pytest.approx(5656) and refusal(ok) is None
    assert ok.runs == pytest.approx(10656 / 5000) and "fits" in ok.line()
    short = check_battery(12000, 1000, 3.7)
    assert not short.fits and short.margin_j == pytest.approx(-1344)
    msg = refusal(short)
    assert msg is not None and "\n" not in msg and "--force" in msg and "12 kJ" in msg
    assert "does not fit" in short.line()
    # a CR2032 coin cell (225 mAh at 3.0 V nominal, Energizer CR2032 datasheet) at 90% usable
    assert check_battery(0.0, 225, 3.0, 0.9).available_j == pytest.approx(225 * 3.6 * 3.0 * 0.9)


@pytest.mark.parametrize("args", [(0, 3.7, 0.8), (1000, -1, 0.8), (1000, 3.7, 0), (1000, 3.7, 1.5),
                                  (5e-324, 3.7, 0.8), (1000, 5e-324, 0.8), (1000, 3.7, 5e-324), (1e308, 3.7, 0.8),
                                  (float("nan"), 3.7, 0.8), (1000, float("inf"), 0.8), (True, 3.7, 0.8)])
def test_battery_refuses_bad_numbers(args):
    """A denormal capacity's joules round to 0 (and the margin divided by them); none is a battery."""
    with pytest.raises(UsageError) as exc:
        battery_energy_j(*args)
    assert "\n" not in str(exc.value)


def test_predictions_refuse_numbers_that_are_not_finite():
    with pytest.raises(ValueError):
        plan_prediction(float("nan"), 1.0, 10)
    with pytest.raises(ValueError):
        Epoch(10, float("inf"), 1.0)


# --- emissions.csv ------------------------------------------------------------------------------

def _record(**kw):
    base = dict(energy_j=36.0, duration_s=10.0, co2_g=grams_co2(36.0, 56.039), grid=intensity("FRA"),
                board="nrf52840", provenance="emulated", ram_bytes=256 * 1024, experiment="cnn-digits",
                timestamp=datetime.datetime(2025, 1, 2, 3, 4, 5))
    base.update(kw)
    return RunRecord(**base)


def test_emissions_columns_are_codecarbons():
    assert list(COLUMNS) == CODECARBON_3_3_2_COLUMNS


def test_emissions_csv_rows_parse_in_codecarbon_units(tmp_path):
    out = tmp_path / "emissions.csv"
    assert append(out, _record()) is None
    assert append(out, _record(run_id="r2")) is None
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    with out.open(newline="") as f:
        assert next(csv.reader(f)) == CODECARBON_3_3_2_COLUMNS
    assert len(rows) == 2 and rows[1]["run_id"] == "r2"
    r = rows[0]
    assert float(r["energy_consumed"]) == pytest.approx(1e-5)  # 36 J = 1e-5 kWh
    assert float(r["cpu_energy"]) == float(r["energy_consumed"])
    assert float(r["emissions"]) == pytest.approx(1e-5 * 56.039 / 1e3)  # kg
    assert float(r["emissions_rate"]) == pytest.approx(float(r["emissions"]) / 10)  # kg/s
    assert float(r["cpu_power"]) == pytest.approx(3.6)  # W
    assert float(r["ram_total_size"]) == pytest.approx(256 / 1024**2)  # GiB
    assert r["country_iso_code"] == "FRA" and r["country_name"] == "France"
    assert r["cpu_model"] == "nrf52840 (emulated)" and r["tracking_mode"] == "machine"
    assert r["timestamp"] == "2025-01-02T03:04:05" and float(r["pue"]) == 1.0
    assert "codecarbon 3.3.2 columns" in r["codecarbon_version"]
    assert rows[0]["experiment_id"] == rows[1]["experiment_id"] and rows[0]["run_id"] != rows[1]["run_id"]


def test_emissions_csv_with_other_columns_is_backed_up(tmp_path):
    out = tmp_path / "emissions.csv"
    out.write_text("a,b\n1,2\n")
    bak = append(out, _record())
    assert bak is not None and bak.name == "emissions.csv.bak" and bak.read_text() == "a,b\n1,2\n"
    with out.open(newline="") as f:
        assert len(list(csv.DictReader(f))) == 1


@pytest.mark.parametrize("planted", ["dev-zero", "fifo", "not-text", "link-to-a-file"])
def test_emissions_csv_that_is_no_file_is_set_aside_never_read_or_followed(tmp_path, planted):
    """A link to /dev/zero or a FIFO would be read forever, a link to a file written through: each is
    renamed aside (the link itself), and a new emissions.csv is started."""
    out = tmp_path / "emissions.csv"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if planted == "dev-zero":
        out.symlink_to("/dev/zero")
    elif planted == "fifo":
        os.mkfifo(out)
    elif planted == "not-text":
        out.write_bytes(b"\xff\xfe\x00")
    else:
        out.symlink_to(victim)
    assert not has_row(out, "x")
    bak = append(out, _record(run_id="r1"))
    assert bak is not None and bak.name == "emissions.csv.bak"
    assert out.is_file() and not out.is_symlink() and has_row(out, "r1")
    assert victim.read_text() == "keep me"
    append(out, _record(run_id="r2"))
    assert has_row(out, "r1") and has_row(out, "r2")


def test_world_average_run_leaves_country_empty(tmp_path):
    out = tmp_path / "e.csv"
    append(out, _record(grid=intensity()))
    with out.open(newline="") as f:
        r = next(csv.DictReader(f))
    assert r["country_iso_code"] == "" and r["country_name"] == ""


# --- acceptance: 5 emulated epochs of cnn-digits on the nRF52840 ---------------------------------

EPOCHS = 5
SAMPLES = 64  # of scikit-learn's digits (the fixed training split), batch 16: 4 steps an epoch
BATCH = 16
LR = 0.1


@needs_qemu
def test_prediction_after_one_epoch_within_5_percent(tmp_path):
    from conftest import digits_batches as batches
    from poet.boards import load_board
    from poet.device.connect import open_device
    from poet.energy.accounting import charges
    from poet.energy.tracefile import Trace
    from poet.graph.reference import weights_of
    from poet.graph.tracer import trace
    from poet.models.datasets import digits_split
    from poet.models.zoo import get_model
    from poet.plan.cost.costs import costed, load_profile
    from poet.plan.lowering.lower import lower
    from poet.plan.strategies.checkpoint_all import keep_all
    from test_runtime_ops import _frugal_plan

    board = load_board("nrf52840")
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, BATCH)
    xtr, ytr, _, _ = digits_split()
    x, y = xtr[:SAMPLES], ytr[:SAMPLES]
    steps_per_epoch = SAMPLES // BATCH
    grid = intensity("DEU")

    with open_device(board, None, workdir=tmp_path, quiet=True) as dev:
        # a plan that pages and recomputes, as test_board_emulated's for cnn-digits: no plan of it needs less
        # than keep-everything (its peak is one backward op's inputs and output; the input takes no arena
        # bytes), so a frugal one that pages and recomputes anyway, at no more than keep-everything's peak
        cg = costed(g, board, load_profile(board.name))
        plan = _frugal_plan(cg)
        assert plan.page_outs > 0 and plan.recomputes > 0 and plan.peak_bytes <= keep_all(cg).peak_bytes

        before = plan_prediction(plan.energy_j, plan.time_s, EPOCHS * steps_per_epoch, EPOCHS, grid)
        run = RunPredictor(EPOCHS, EPOCHS * steps_per_epoch, grid, after=1)
        dev.load_model(g, weights_of(model))
        dev.load_schedule(lower(plan, g).schedule.encode())
        rng = np.random.default_rng(0)
        tr = Trace.for_graph(g, board.name, dev.provenance, dev.hello.tick_hz)
        for _ in range(EPOCHS):
            first = len(tr.steps)
            order = rng.permutation(SAMPLES)  # a new order each epoch, as training does
            for xb, yb in batches(x[order], y[order], BATCH, tuple(g.input_shape)):
                tr.add_step(dev.step(xb, yb, LR), LR)
            mine = [c for c in charges(tr, board) if c.step >= first]
            # the runtime has no evaluation (inference-only) command, so an epoch's overhead is zero
            run.add(Epoch(len(tr.steps) - first, sum(c.energy_j for c in mine), sum(c.time_s for c in mine)))

    assert run.prediction is not None and run.prediction.basis == "1 of 5 epochs measured"
    actual = run.actual()
    result = compare(run.prediction, actual)
    print("\n" + "\n".join([before.line(), run.prediction.line(), *result.lines()]))
    assert abs(result.energy_error) < 0.05
    assert abs(result.time_error) < 0.05
    assert actual.steps == EPOCHS * steps_per_epoch
    assert math.isclose(actual.co2_g, grams_co2(actual.energy_j, grid.g_per_kwh))

    out = tmp_path / "emissions.csv"
    append(out, RunRecord(actual.energy_j, actual.time_s, actual.co2_g, grid, board.name, dev.provenance,
                          board.ram_bytes, experiment="cnn-digits on nrf52840"))
    with out.open(newline="") as f:
        row = next(csv.DictReader(f))
    assert float(row["energy_consumed"]) == pytest.approx(actual.energy_j / 3.6e6)
    assert row["country_iso_code"] == "DEU" and row["cpu_model"] == "nrf52840 (emulated)"


def test_a_run_keeping_features_is_predicted_from_its_second_epoch() -> None:
    """Epoch 1 of a run that keeps features (poet.run.features) writes them and costs more; the steps left
    are like epoch 2's: the prediction is made after it, from it alone, and is then exact for equal epochs."""
    p = RunPredictor(5, 50, after=2, like_rest=1)
    assert p.add(Epoch(10, 100.0, 10.0)) is None
    made = p.add(Epoch(10, 1.0, 0.5))
    assert made is not None
    assert made.energy_j == pytest.approx((100.0 + 4 * 1.0) * p.pue, rel=1e-12)
    assert made.time_s == pytest.approx(10.0 + 4 * 0.5, rel=1e-12)
    plain = RunPredictor(5, 50, after=2)  # both epochs alike: the mean of the two
    plain.add(Epoch(10, 100.0, 10.0))
    assert plain.add(Epoch(10, 1.0, 0.5)).energy_j == pytest.approx((101.0 + 3 * 50.5) * plain.pue, rel=1e-12)
    with pytest.raises(ValueError):
        RunPredictor(5, 50, after=1, like_rest=1)
