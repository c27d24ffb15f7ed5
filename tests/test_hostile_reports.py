"""Hostile input to `poet report` and the energy side, as a table (tests/test_hostile.py's rule): every case
ends in one line on stderr starting `poet: `, exit 2, no internal error, and nothing touched: every file in
the test's folder (the trace, the schedule beside it, the meter recording, a second trace) byte for byte
as it was, and no output written.

The classes (issue 45):
- an output of `report` (--csv, --chrome, --plot, a diff's CSV) that is one of its inputs (the trace, the
  schedule beside it, a meter recording, the --diff trace and its schedule), by name, through a link or a
  hard link, or two outputs of one file: refused before anything is read or written;
- a number of the trace that no board produces (the firmware's trace fields are u32 ticks and bytes, u16
  instr and node, u8 op, a u32 timer rate; a bool is no number; losses and host times finite), a field of
  the wrong type, a name that is not printable text, a board poet does not know;
- a file that is not a file (a link to /dev/zero, a FIFO) where a trace, a schedule or a recording is read;
- a meter recording whose header or samples are no meter's (a period of `abc` or a denormal, a counter
  range of `xyz`, 1e308 W, a counter of 10^30 uJ), from `report --meter` and from `train --meter file:`;
- numbers that reach the account from train's options (a grid intensity no grid has).

The traces are real ones made without a board: mlp-digits traced, a schedule solved for it (`poet solve`),
and one record per schedule instruction as the firmware's trace_kind makes it (tracefile._expected), with
plausible ticks and host times; a meter recording covers its steps. Each case changes one thing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _pytest.mark.structures import ParameterSet
from conftest import refused
from poet.cli import _graph, build_parser, main
from poet.energy.meters import base
from poet.energy.tracefile import SCHEDULE_BESIDE, Trace, _expected
from poet.errors import PoetError
from poet.paths import REPO_ROOT
from poet.plan.lowering.schedule import Schedule

SHIPPED_PROFILE = REPO_ROOT / "profiles" / "nrf52840.yaml"
TRAIN = ["train", "--model", "mlp-digits", "--ram", "200k", "--epochs", "1", "--data-limit", "64"]
STEPS = 2
T0 = 1.7e9  # host time.time() of the first step
SENTINEL = 987654321987  # a number no trace holds, replaced in the text by what JSON cannot say


def _no_error(msg: str) -> PoetError:
    raise AssertionError(msg)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as `poet train --meter` leaves it: trace.json, schedule.poet beside it, meter.csv."""
    root = tmp_path_factory.mktemp("template")
    ws = root / "ws"
    (ws / "profiles").mkdir(parents=True)
    (ws / "profiles" / "nrf52840.yaml").write_bytes(SHIPPED_PROFILE.read_bytes())
    run = root / "run"
    run.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POET_WORKSPACE", str(ws))
        mp.setenv("POET_NO_TIME_LIMITS", "1")
        assert main(["solve", "--model", "mlp-digits", "--ram", "200k", "-o", str(run / SCHEDULE_BESIDE)]) == 0
    g, _, _ = _graph(build_parser().parse_args(["solve", "--model", "mlp-digits", "--ram", "200k"]))
    sched = Schedule.decode((run / SCHEDULE_BESIDE).read_bytes())
    tr = Trace.for_graph(g, "nrf52840", "emulated", 25_000_000)
    kinds = _expected(sched, tr.nodes, _no_error)
    t = T0
    for k in range(STEPS):
        records = [[i, node, kind, sched.instrs[i].op, 200 + 37 * i, tr.nodes[node]["bytes"]]
                   for i, (node, kind) in enumerate(kinds)]
        step_ticks = sum(r[4] for r in records) + 900
        tr.steps.append({"step": k, "lr": 0.1, "loss": 2.3 - 0.1 * k, "peak_live_bytes": 1000,
                         "peak_extent_bytes": 1000, "step_ticks": step_ticks, "records": records,
                         "host_t0": t, "host_t1": t + 0.05})
        t += 0.1
    tr.save(run / "trace.json")
    times = np.arange(T0 - 0.01, t + 0.01, 1e-3)
    base.save(base.Recording.of_power("ppk2", 1e-3, times, np.full(times.size, 0.02)), run / "meter.csv")
    assert main(["report", str(run / "trace.json"), "--meter", str(run / "meter.csv")]) == 0  # a sound run
    return run


class Run:
    """A copy of the template run in the test's folder, and ways to spoil one of its files."""

    def __init__(self, template: Path, tmp: Path) -> None:
        self.dir = tmp / "run"
        shutil.copytree(template, self.dir)
        self.tmp = tmp

    @property
    def trace(self) -> str:
        return str(self.dir / "trace.json")

    @property
    def meter(self) -> str:
        return str(self.dir / "meter.csv")

    @property
    def schedule(self) -> str:
        return str(self.dir / SCHEDULE_BESIDE)

    def edit(self, change: Callable[[dict[str, Any]], Any], name: str = "trace.json") -> str:
        """The trace with `change` made to its JSON (written as is: no NaN or 10^400 is lost)."""
        p = self.dir / name
        data = json.loads((self.dir / "trace.json").read_text())
        change(data)
        p.write_text(json.dumps(data))
        return str(p)

    def text(self, text: str, name: str = "trace.json") -> str:
        (self.dir / name).write_text(text)
        return str(self.dir / name)

    def raw(self, change: Callable[[dict[str, Any], int], Any], text: str) -> str:
        """The trace with `change(data, SENTINEL)` made, then the sentinel's digits replaced by `text` (what
        json.dumps cannot write: NaN, 1e999, a number of 5,000 digits)."""
        p = Path(self.edit(lambda d: change(d, SENTINEL)))
        old = p.read_text()
        assert old.count(str(SENTINEL)) == 1
        p.write_text(old.replace(str(SENTINEL), text))
        return str(p)

    def bytes(self, data: bytes) -> str:
        (self.dir / "trace.json").write_bytes(data)
        return self.trace

    def second(self, change: Callable[[dict[str, Any]], Any] | None = None) -> str:
        """A second run of the same graph beside the first (for --diff), changed by `change`."""
        other = self.tmp / "run2"
        shutil.copytree(self.dir, other)
        data = json.loads((other / "trace.json").read_text())
        if change is not None:
            change(data)
        (other / "trace.json").write_text(json.dumps(data))
        return str(other / "trace.json")

    def recording(self, head: str | None = None, rows: list[str] | None = None, cols: str = "t_s,power_w",
                  name: str = "meter.csv") -> str:
        """A meter recording over the run's steps: its header line and rows replaced where given."""
        lines = (self.dir / "meter.csv").read_text().splitlines()
        body = rows if rows is not None else lines[2:]
        (self.dir / name).write_text("\n".join([head or lines[0], cols, *body]) + "\n")
        return str(self.dir / name)

    def link(self, name: str, to: str) -> str:
        p = self.dir / name
        if p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to(to)
        return str(p)


def _rec(r: list[Any], i: int, v: Any) -> None:
    r[i] = v


def _first(d: dict[str, Any]) -> list[Any]:
    return d["steps"][0]["records"][0]


def _node(d: dict[str, Any], **kv: Any) -> None:
    d["nodes"][1].update(kv)


def _counter_rows(values: list[int]) -> list[str]:
    return [f"{T0 - 0.01 + 1e-2 * i!r},{v}" for i, v in enumerate(values)]


# (id, argv maker given a Run, words the one line must hold)
CASES: list[tuple[str, Callable[[Run], list[str]], tuple[str, ...]] | ParameterSet] = [
    # ---- an output that is an input: the file report reads is never the file it writes
    ("csv-is-the-trace", lambda r: ["report", r.trace, "--csv", r.trace], ("--csv", "the trace")),
    ("chrome-is-the-trace", lambda r: ["report", r.trace, "--chrome", r.trace], ("--chrome", "the trace")),
    ("csv-is-the-schedule", lambda r: ["report", r.trace, "--csv", r.schedule],
     ("--csv", "the schedule beside the trace")),
    ("chrome-is-the-meter", lambda r: ["report", r.trace, "--meter", r.meter, "--chrome", r.meter],
     ("--chrome", "the meter recording")),
    ("default-csv-is-the-meter", lambda r: ["report", r.trace, "--meter", r.recording(name="trace.energy.csv"),
                                            "--csv"], ("--csv", "the meter recording")),
    ("default-chrome-in-out-is-the-meter",
     lambda r: ["report", r.trace, "--out", str(r.tmp), "--chrome",
                "--meter", r.recording(name="../trace.chrome.json")], ("--chrome", "the meter recording")),
    ("plot-is-the-meter", lambda r: ["report", r.trace, "--plot", "--meter", r.recording(name="trace.edd.png")],
     ("--plot", "the meter recording")),
    ("diff-csv-is-the-second-trace", lambda r: ["report", r.trace, "--diff", (b := r.second()), "--csv", b],
     ("--csv", "the trace --diff compares")),
    ("diff-csv-is-its-schedule", lambda r: ["report", r.trace, "--diff", (b := r.second()), "--csv",
                                            str(Path(b).with_name(SCHEDULE_BESIDE))],
     ("--csv", "the schedule beside the --diff trace")),
    ("diff-default-csv-is-the-second-trace",
     lambda r: ["report", r.trace, "--diff", r.edit(lambda d: None, "trace.diff.csv"), "--csv"],
     ("--csv", "the trace --diff compares")),
    ("csv-through-a-link", lambda r: ["report", r.trace, "--csv", r.link("out.csv", r.trace)],
     ("--csv", "the trace")),
    ("csv-a-hard-link", lambda r: (os.link(r.trace, r.dir / "hard.csv"),
                                   ["report", r.trace, "--csv", str(r.dir / "hard.csv")])[1],
     ("--csv", "the trace")),
    ("csv-spelled-otherwise", lambda r: ["report", r.trace, "--csv", str(r.dir / ".." / "run" / "trace.json")],
     ("--csv", "the trace")),
    ("trace-through-a-link-csv-its-target", lambda r: ["report", r.link("t.json", r.trace), "--csv", r.trace],
     ("--csv", "the trace")),
    ("diff-with-chrome", lambda r: ["report", r.trace, "--diff", r.second(), "--chrome"], ("--diff", "--chrome")),
    ("diff-with-plot", lambda r: ["report", r.trace, "--diff", r.second(), "--plot"], ("--diff", "--plot")),
    ("csv-and-chrome-one-file", lambda r: ["report", r.trace, "--csv", str(r.dir / "x"), "--chrome",
                                           str(r.dir / "x")], ("--csv and --chrome both write",)),
    ("csv-a-folder", lambda r: ["report", r.trace, "--csv", str(r.tmp)], ("--csv", "is a folder")),
    ("csv-a-device", lambda r: ["report", r.trace, "--csv", "/dev/null"], ("--csv", "a character device")),
    ("csv-missing-folder", lambda r: ["report", r.trace, "--csv", str(r.tmp / "no" / "x.csv")],
     ("--csv", "does not exist")),
    # ---- numbers no board produces (firmware/core/interp.h: u32 ticks and bytes, u16 instr/node, u8 op)
    ("ticks-1e30", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 4, 1e30))], ("record 0", "ticks", "1e+30")),
    ("ticks-10^30", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 4, 10**30))], ("record 0", "ticks")),
    ("ticks-10^400", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 4, 10**400))],
     ("record 0", "ticks", "401 digits")),
    ("ticks-2^32", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 4, 2**32))], ("ticks", "4294967295")),
    ("ticks-true", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 4, True))], ("ticks", "True")),
    ("ticks-5000-digits", lambda r: ["report", r.raw(lambda d, x: _rec(_first(d), 4, x), "9" * 5000)],
     ("damaged poet trace",)),
    ("ticks-1e999", lambda r: ["report", r.raw(lambda d, x: _rec(_first(d), 4, x), "1e999")], ("too large",)),
    ("step-ticks-1e30", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(step_ticks=1e30))],
     ("step 0", "step_ticks")),
    ("step-ticks-false", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(step_ticks=False))],
     ("step_ticks",)),
    ("tick-hz-true", lambda r: ["report", r.edit(lambda d: d.update(tick_hz=True))], ("tick_hz", "True")),
    ("tick-hz-denormal", lambda r: ["report", r.edit(lambda d: d.update(tick_hz=5e-324))], ("tick_hz", "5e-324")),
    ("tick-hz-1e30", lambda r: ["report", r.edit(lambda d: d.update(tick_hz=1e30))], ("tick_hz",)),
    ("tick-hz-fraction", lambda r: ["report", r.edit(lambda d: d.update(tick_hz=25e6 + 0.5))], ("tick_hz",)),
    ("tick-hz-text", lambda r: ["report", r.edit(lambda d: d.update(tick_hz="25e6"))], ("tick_hz",)),
    ("tick-hz-nan", lambda r: ["report", r.raw(lambda d, x: d.update(tick_hz=x), "NaN")], ("NaN",)),
    ("bytes-10^30", lambda r: ["report", r.edit(lambda d: (_node(d, bytes=10**30),
                                                           [_rec(rec, 5, 10**30) for st in d["steps"]
                                                            for rec in st["records"] if rec[1] == 1]))],
     ("node 1", "bytes")),
    ("op-300", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 3, 300))], ("record 0", "op 300")),
    ("node-index-huge", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 1, 10**30))], ("names node",)),
    ("instr-float", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 0, 0.5))], ("record 0", "is not")),
    ("sd-reads-10^30", lambda r: ["report", r.edit(lambda d: _node(d, sd_reads=[4, 10**30]))], ("SD read",)),
    ("sd-reads-bool", lambda r: ["report", r.edit(lambda d: _node(d, sd_reads=[True]))], ("SD read",)),
    ("sd-reads-too-many-bytes", lambda r: ["report", r.edit(lambda d: _node(d, sd_reads=[2**31] * 4))],
     ("SD reads",)),
    ("sd-reads-not-a-list", lambda r: ["report", r.edit(lambda d: _node(d, sd_reads="many"))], ("sd_reads",)),
    ("peak-negative", lambda r: ["report", r.edit(lambda d: d["steps"][1].update(peak_live_bytes=-1))],
     ("step 1", "peak_live_bytes")),
    ("loss-text", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(loss="low"))], ("step 0", "loss")),
    ("loss-1e999", lambda r: ["report", r.raw(lambda d, x: d["steps"][0].update(loss=x), "1e999")],
     ("too large",)),
    ("lr-true", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(lr=True))], ("step 0", "lr")),
    ("host-time-1e300", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(host_t1=1e300))],
     ("step 0", "host times")),
    ("host-time-bool", lambda r: ["report", r.edit(lambda d: d["steps"][0].update(host_t0=True))],
     ("step 0", "host times")),
    # ---- fields of the wrong type or text that is no name
    ("model-a-list", lambda r: ["report", r.edit(lambda d: d.update(model=["mlp", "digits"]))], ("model",)),
    ("model-a-number", lambda r: ["report", r.edit(lambda d: d.update(model=7))], ("model",)),
    ("model-two-lines", lambda r: ["report", r.edit(lambda d: d.update(model="mlp\nboom"))], ("model",)),
    ("board-a-path", lambda r: ["report", r.edit(lambda d: d.update(board="../../etc/passwd"))],
     ("board", "not a board poet knows")),
    ("board-a-dict", lambda r: ["report", r.edit(lambda d: d.update(board={"name": "x"}))], ("board",)),
    ("provenance-a-number", lambda r: ["report", r.edit(lambda d: d.update(provenance=1))], ("provenance",)),
    ("node-name-two-lines", lambda r: ["report", r.edit(lambda d: _node(d, name="fc\nx"))], ("node 1", "name")),
    ("node-name-empty", lambda r: ["report", r.edit(lambda d: _node(d, name=""))], ("node 1", "name")),
    ("node-kind-unknown", lambda r: ["report", r.edit(lambda d: _node(d, kind="teleport"))], ("node 1", "kind")),
    ("node-a-list", lambda r: ["report", r.edit(lambda d: d["nodes"].__setitem__(1, [1, 2]))], ("node 1",)),
    ("nodes-a-dict", lambda r: ["report", r.edit(lambda d: d.update(nodes={"a": 1}))], ("nodes",)),
    ("record-kind-two-lines", lambda r: ["report", r.edit(lambda d: _rec(_first(d), 2, "a\nb"))], ("record 0",)),
    ("plan-a-list", lambda r: ["report", r.edit(lambda d: d.update(plan=[1]))], ("plan",)),
    ("steps-a-number", lambda r: ["report", r.edit(lambda d: d.update(steps=3))], ("no steps",)),
    ("a-step-a-list", lambda r: ["report", r.edit(lambda d: d["steps"].__setitem__(1, [1]))], ("step 1",)),
    ("second-trace-ticks-1e30", lambda r: ["report", r.trace, "--diff",
                                           r.second(lambda d: _rec(_first(d), 4, 1e30))], ("run2", "ticks")),
    ("second-trace-model-a-list", lambda r: ["report", r.trace, "--diff", r.second(lambda d: d.update(model=[1]))],
     ("run2", "model")),
    # ---- files that are not files
    ("trace-links-to-dev-zero", lambda r: ["report", r.link("trace.json", "/dev/zero")],
     ("trace file", "character device")),
    ("trace-a-fifo", lambda r: (os.unlink(r.trace), os.mkfifo(r.trace), ["report", r.trace])[2],
     ("trace file", "pipe")),
    ("schedule-links-to-dev-zero", lambda r: ["report", (r.link(SCHEDULE_BESIDE, "/dev/zero"), r.trace)[1]],
     ("schedule beside the trace", "character device")),
    ("trace-deep", lambda r: ["report", r.text('{"format": "poet-trace/1", "x": ' + "[" * 100_000)],
     ("nested too deep",)),
    ("trace-binary", lambda r: ["report", r.bytes(b'{"format":"poet-trace/1"\xff\xfe}')], ("not UTF-8",)),
    ("meter-links-to-dev-zero", lambda r: ["report", r.trace, "--meter", r.link("zero.csv", "/dev/zero")],
     ("meter recording", "character device")),
    # ---- meter recordings that are no meter's
    ("meter-period-abc", lambda r: ["report", r.trace, "--meter",
                                    r.recording("# poet-meter/1 meter=ppk2 period_s=abc")], ("period_s", "abc")),
    ("meter-period-denormal", lambda r: ["report", r.trace, "--meter",
                                         r.recording("# poet-meter/1 meter=ppk2 period_s=5e-324")], ("period_s",)),
    ("meter-period-nan", lambda r: ["report", r.trace, "--meter",
                                    r.recording("# poet-meter/1 meter=ppk2 period_s=nan")], ("period_s",)),
    ("meter-range-xyz", lambda r: ["report", r.trace, "--meter", r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01 max_energy_range_uj=xyz", _counter_rows([1, 2, 3]),
        "t_s,energy_uj")], ("max_energy_range_uj", "xyz")),
    ("meter-range-zero", lambda r: ["report", r.trace, "--meter", r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01 max_energy_range_uj=0", _counter_rows([0, 0, 0]),
        "t_s,energy_uj")], ("max_energy_range_uj",)),
    ("meter-power-1e308", lambda r: ["report", r.trace, "--meter", r.recording(
        rows=[f"{T0 - 0.01 + 1e-3 * i!r},{1e308 if i == 50 else 0.02!r}" for i in range(300)])],
     ("power 1e+308 W", "sample 50")),
    ("meter-power-inf", lambda r: ["report", r.trace, "--meter", r.recording(
        rows=[f"{T0 - 0.01 + 1e-3 * i!r},{'inf' if i == 5 else '0.02'}" for i in range(300)])],
     ("sample 5", "not a number")),
    ("meter-counter-10^30", lambda r: ["report", r.trace, "--meter", r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01", _counter_rows([0, 10**30, 10**30 + 5]), "t_s,energy_uj")],
     ("energy counter",)),
    ("meter-counter-jump", lambda r: ["report", r.trace, "--meter", r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01", _counter_rows([0, 10**18, 10**18 + 5]), "t_s,energy_uj")],
     ("energy counter jumps by 1e+12 J",)),
    ("meter-counter-over-its-range", lambda r: ["report", r.trace, "--meter", r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01 max_energy_range_uj=1000", _counter_rows([10, 20, 5000]),
        "t_s,energy_uj")], ("energy counter 5000",)),
    ("meter-time-1e300", lambda r: ["report", r.trace, "--meter", r.recording(rows=["0.0,0.02", "1e300,0.02"])],
     ("sample 1", "t=1e+300")),
    ("meter-offset-1e300", lambda r: ["report", r.trace, "--meter", r.meter, "--meter-offset", "1e300"],
     ("--meter-offset", "no offset between two clocks")),
    # ---- the same recordings where `train --meter file:` reads them: refused before a board is opened
    ("train-meter-period-abc", lambda r: [*TRAIN, "--meter", "file:" + r.recording(
        "# poet-meter/1 meter=ppk2 period_s=abc")], ("period_s", "abc")),
    ("train-meter-range-xyz", lambda r: [*TRAIN, "--meter", "file:" + r.recording(
        "# poet-meter/1 meter=rapl period_s=0.01 max_energy_range_uj=xyz", _counter_rows([1, 2, 3]),
        "t_s,energy_uj")], ("max_energy_range_uj",)),
    ("train-meter-power-1e308", lambda r: [*TRAIN, "--meter", "file:" + r.recording(
        rows=["0.0,0.02", "0.001,1e308", "0.002,0.02"])], ("1e+308 W",)),
    ("train-meter-dev-zero", lambda r: [*TRAIN, "--meter", "file:" + r.link("z.csv", "/dev/zero")],
     ("character device",)),
    # ---- numbers from train's options that reach the account
    ("train-carbon-1e308", lambda r: [*TRAIN, "--carbon-intensity", "1e308"], ("--carbon-intensity",)),
    ("train-battery-denormal", lambda r: [*TRAIN, "--battery-mah", "5e-324", "--volts", "3.7"], ("--battery-mah",)),
]


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: a regular file's bytes, a link's target, a FIFO or folder by kind."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link to " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "folder"
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


PARAMS = [c if isinstance(c, ParameterSet) else pytest.param(*c[1:], id=c[0]) for c in CASES]


@pytest.mark.parametrize("make,words", PARAMS)
def test_hostile_report_input_is_refused_in_one_line_touching_nothing(
        template: Path, ws: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Run], list[str]],
        words: tuple[str, ...]) -> None:
    tmp = ws.parent
    argv = make(Run(template, tmp))
    capsys.readouterr()
    before = _snapshot(tmp)
    refused(capsys, argv, 2, *words)
    assert _snapshot(tmp) == before, "a refused command changed, made or removed a file"


def test_the_template_run_reports_and_writes_every_output(template: Path, ws: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The cases above are refusals of a run that reports: each changes one thing."""
    r = Run(template, ws.parent)
    assert main(["report", r.trace, "--meter", r.meter, "--csv", "--chrome", "--plot"]) == 0, capsys.readouterr().err
    for name in ("trace.energy.csv", "trace.chrome.json", "trace.edd.png", "trace.tensors.png", "trace.power.png"):
        assert (r.dir / name).stat().st_size > 0, name
    assert not [p for p in r.dir.iterdir() if p.name.endswith(".tmp")]
    assert main(["report", r.trace, "--diff", r.second(), "--csv"]) == 0
    assert (r.dir / "trace.diff.csv").exists()


def test_names_with_dollars_are_drawn_as_text(template: Path, ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A node or model named with `$...$` (mathtext to matplotlib, and `$\\frac{$` an error inside savefig)
    is plotted as the plain text it is."""
    r = Run(template, ws.parent)

    def dollars(d: dict[str, Any]) -> None:
        d["model"] = "$\\frac{$ model"
        for n in d["nodes"]:
            n["name"] = "$\\bad{" + n["name"] + "}$ $x^$"
            n["module"] = "$" + n["module"]
    trace = r.edit(dollars)
    code = main(["report", trace, "--plot", "--top", "3"])
    err = capsys.readouterr().err
    assert code == 0 and "internal error" not in err, err
    assert (r.dir / "trace.edd.png").stat().st_size > 0


def test_a_refused_output_leaves_an_existing_output_alone(template: Path, ws: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A report over an earlier report's files replaces them (atomically), and a link planted where an output
    goes is replaced, never followed."""
    r = Run(template, ws.parent)
    victim = ws.parent / "victim.txt"
    victim.write_text("keep me")
    r.link("trace.energy.csv", str(victim))
    assert main(["report", r.trace, "--csv"]) == 0
    assert victim.read_text() == "keep me"
    assert not (r.dir / "trace.energy.csv").is_symlink()
    assert (r.dir / "trace.energy.csv").read_text().startswith("step,module,tensor,kind")


def test_a_trace_saved_with_a_diverged_loss_loads(tmp_path: Path, template: Path) -> None:
    """A step whose loss is NaN (a diverged run) is saved as null: JSON has no NaN, and load refuses one."""
    tr = Trace.load(template / "trace.json", check=False)
    tr.steps[1]["loss"] = float("nan")
    (tmp_path / SCHEDULE_BESIDE).write_bytes((template / SCHEDULE_BESIDE).read_bytes())
    tr.save(tmp_path / "trace.json")
    assert Trace.load(tmp_path / "trace.json").steps[1]["loss"] is None


def test_plots_of_a_wide_deep_graph_stay_drawable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3,000 tensors and modules 30 levels deep, --top 100000 --depth 1000: the plots show the first 50
    tensors and 20 levels (3,000 bars drew a 600 MB canvas; 65,534 would need 13 GB)."""
    deep = "/".join(["m"] * 30)
    nodes = [{"name": f"{deep}/t{j}/forward", "module": f"{deep}/t{j}", "kind": "forward", "op": "linear",
              "bytes": 64} for j in range(3000)]
    tr = Trace("nrf52840", "wide", "emulated", 25_000_000, nodes)
    records = [[j, j, "forward", 0, 100 + j, 64] for j in range(3000)]
    tr.steps = [{"step": 0, "lr": 0.1, "loss": 1.0, "step_ticks": sum(r[4] for r in records) + 10,
                 "records": records}]
    tr.save(tmp_path / "trace.json")
    code = main(["report", str(tmp_path / "trace.json"), "--plot", "--top", "100000", "--depth", "1000"])
    err = capsys.readouterr().err
    assert code == 0 and "internal error" not in err, err
    assert all((tmp_path / f"trace.{n}.png").stat().st_size > 0 for n in ("edd", "tensors", "power"))
    from matplotlib.image import imread

    assert imread(tmp_path / "trace.tensors.png").shape[0] < 3000  # 50 bars, not 3,000 (115,000 pixels)
