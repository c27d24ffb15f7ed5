"""Acceptance: `poet report` on real emulated mlp-digits runs at a tight budget.

Two schedules of mlp-digits run on the emulated nRF52840 (the real firmware in QEMU):
A, POET's page-only plan (the MILP with paging alone) at an arena just below keep-all's,
pages a tensor out and back in and recomputes nothing; B, Chen's sqrt(n) checkpointing,
recomputes and pages nothing. (The input is the staged batch, read in place and never
paged, so the digits models' POET plans no longer page on this board: recomputing the
MLP's activations costs less, and cnn-digits has no plan below keep-all at all, its peak
being relu's backward, which needs all three 32 KiB tensors at once. POET restricted to
paging is the POET plan that pages.) Each run's trace and schedule are saved as
`poet train` saves them, and `poet report` is run on them in-process.

The plans are made from FLOP-estimated costs (one FLOP per cycle at the board's
clock, the storage model for paging), so the test needs no profile; the account
itself uses only the trace's ticks and the board file.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import data_batches, needs_qemu, run_steps
from poet.boards import Board, load_board
from poet.cli import main
from poet.device.connect import open_device
from poet.energy.accounting import OVERHEAD_RECORD, account
from poet.energy.tracefile import SCHEDULE_BESIDE, Trace
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import get_model
from poet.plan.cost.costs import work
from poet.plan.cost.memory import arena_bytes, budget_for
from poet.plan.pipeline import plan_step
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.types import CostedGraph, CostedNode

pytestmark = needs_qemu
STEPS = 3
MODULES = ("fc1", "relu1", "fc2", "relu2", "fc3", "relu3", "fc4", "loss", "optimizer", "input")
KIND_ROWS = ("forward", "backward", "recompute", "page_in", "page_out", "cache", "optimizer", "overhead")


def flop_costed(g: TrainingGraph, board: Board) -> CostedGraph:
    """Costs for planning only: one FLOP per cycle (an estimate), paging from the board's storage model."""
    nodes = []
    for n in g.nodes:
        t = 0.0 if n.kind == "input" else work(n) / board.clock_hz  # the staged batch: nothing runs
        nodes.append(CostedNode(n.id, n.name, n.kind, tuple(n.deps), arena_bytes(n), t, t * board.cpu_active_w,
                                *board.page_cost(n.bytes, "in"), *board.page_cost(n.bytes, "out"),
                                n.recomputable))
    return CostedGraph(tuple(nodes), name=g.model, param_bytes=g.param_bytes)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    board = load_board("nrf52840")
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 16)
    cg = flop_costed(g, board)
    deadline = 3 * cg.one_pass_s
    data = data_batches(g, STEPS)
    out: dict[str, Path] = {}
    with open_device(board, None, workdir=tmp_path_factory.mktemp("qemu"), quiet=True) as dev:
        fixed = budget_for(g, board.ram_bytes, dev.runtime_static).fixed
        full = keep_all(cg).peak_bytes
        plans = {"poet": plan_step(g, cg, board, fixed + full - 1, dev.runtime_static, deadline,
                                   progress=lambda _m: None, strategy="page-only"),
                 "sqrtn": plan_step(g, cg, board, fixed + full, dev.runtime_static, deadline,
                                    progress=lambda _m: None, strategy="sqrtn")}
        assert plans["poet"].plan.page_outs > 0 and plans["poet"].plan.recomputes == 0
        assert plans["sqrtn"].plan.recomputes > 0 and plans["sqrtn"].plan.page_outs == 0
        for name, p in plans.items():
            run_dir = tmp_path_factory.mktemp(name)
            sched = p.lowered.schedule.encode()
            (run_dir / SCHEDULE_BESIDE).write_bytes(sched)  # as a `poet train` run leaves it
            tr = Trace.for_graph(g, board.name, dev.provenance, dev.hello.tick_hz)
            run_steps(dev, g, weights_of(model), sched, data, 0.1, tr, lambda _m: None,
                      expect_peak=p.plan.peak_bytes)
            tr.save(run_dir / "trace.json")
            out[name] = run_dir / "trace.json"
    return out


def report(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(["report", *map(str, argv)])
    except SystemExit as exc:  # refused while parsing (a missing file)
        rc = int(exc.code or 0)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_report_shows_module_tree_kinds_and_shares(runs, capsys):
    rc, out, err = report(capsys, runs["poet"])
    assert rc == 0, err
    assert "energy of 3 training step(s) of mlp-digits on nrf52840 (modelled)" in out
    for m in MODULES:  # the module tree, tensors below their module
        assert re.search(rf"^    {re.escape(m)} ", out, re.M), m
    assert re.search(r"^      forward ", out, re.M) and re.search(r"^      backward ", out, re.M)
    for k in KIND_ROWS:
        assert re.search(rf"^  {k} ", out, re.M), k
    paging = float(re.search(r"paging ([\d.]+)%", out).group(1))
    assert paging > 0
    rc, out, _ = report(capsys, runs["sqrtn"])
    assert float(re.search(r"recompute ([\d.]+)%", out).group(1)) > 0
    # the other views answer too
    for by in ("module", "layer", "tensor", "kind"):
        rc, out, err = report(capsys, runs["sqrtn"], "--by", by, "--depth", "1", "--top", "3")
        assert rc == 0, err
        assert f"by {by}" in out


def _independent_total(tr: Trace, board: Board) -> float:
    """The run's energy from the step totals, not from the charges: every step's ticks at CPU power, with
    the paging records' ticks replaced by the storage model (boards/nrf52840.yaml's numbers, inline)."""
    ns_per_instr = float(board.emulator.get("virtual_ns_per_instruction", 1))
    st = board.storage
    total = 0.0
    for step in tr.steps:
        ticks = step["step_ticks"]
        for _i, _n, kind, _op, t, nbytes in step["records"]:
            if kind in ("page_in", "page_out"):
                ticks -= t
                rate, w = ((st["read_bytes_per_s"], st["read_w"]) if kind == "page_in"
                           else (st["write_bytes_per_s"], st["write_w"]))
                total += (st["latency_s"] + nbytes / rate) * (w + board.cpu_active_w)
        seconds = ticks / tr.tick_hz * 1e9 / ns_per_instr * board.cpi / board.clock_hz
        total += seconds * board.cpu_active_w
    return total


def test_every_joule_adds_up_to_the_step_totals(runs):
    board = load_board("nrf52840")
    for path in runs.values():
        tr = Trace.load(path)
        acct = account(tr, board)
        per_record = sum(c.energy_j for c in acct.charges if c.record != OVERHEAD_RECORD)
        overhead = sum(c.energy_j for c in acct.charges if c.record == OVERHEAD_RECORD)
        assert overhead > 0 and all(c.energy_j >= 0 for c in acct.charges)
        assert per_record + overhead == pytest.approx(_independent_total(tr, board), rel=1e-3)
        assert acct.total_j == pytest.approx(sum(e for e, _ in acct.by_kind.values()), rel=1e-12)
        n_records = sum(len(s["records"]) for s in tr.steps)
        assert len(acct.charges) == n_records + len(tr.steps)


def test_csv_chrome_and_plots(runs, capsys, tmp_path):
    rc, out, err = report(capsys, runs["poet"], "--csv", "--chrome", "--plot", "--out", tmp_path)
    assert rc == 0, err
    stem = "trace"
    acct = account(Trace.load(runs["poet"]), load_board("nrf52840"))

    with (tmp_path / f"{stem}.energy.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"step", "module", "tensor", "kind", "energy_j", "time_s", "source"}
    assert len({(r["step"], r["tensor"], r["kind"]) for r in rows}) == len(rows)
    assert {r["kind"] for r in rows} == {"forward", "backward", "page_in", "page_out", "optimizer", "overhead"}
    assert sum(float(r["energy_j"]) for r in rows) == pytest.approx(acct.total_j, rel=1e-9)

    doc = json.loads((tmp_path / f"{stem}.chrome.json").read_text())
    ev = doc["traceEvents"]
    ops = [e for e in ev if e["ph"] == "X" and e["tid"] == 1]
    assert len(ops) == len(acct.charges)
    for e in ops:  # what Perfetto's JSON importer needs of a complete event
        assert isinstance(e["name"], str) and e["cat"] in KIND_ROWS
        assert e["ts"] >= 0 and e["dur"] >= 0 and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert "bytes" in e["args"]
    assert all(b["ts"] >= a["ts"] for a, b in zip(ops, ops[1:], strict=False))
    power = [e for e in ev if e["ph"] == "C"]
    assert power and all(e["name"] == "power" and isinstance(e["args"]["W"], float) for e in power)
    names = [e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
    assert names and "nrf52840" in names[0]
    assert doc["otherData"]["board"] == "nrf52840"

    for kind in ("edd", "tensors", "power"):
        png = tmp_path / f"{stem}.{kind}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"wrote {png}" in out


def test_diff_of_two_schedules(runs, capsys):
    rc, out, err = report(capsys, runs["poet"], "--diff", runs["sqrtn"])
    assert rc == 0, err
    deltas = {m.group(1): m.group(2) for m in re.finditer(r"^  (\w+) +.* (-?[\d.]+ [mu]?J|0) *$", out, re.M)}
    assert deltas["recompute"].strip() != "0" and not deltas["recompute"].startswith("-")
    assert deltas["page_out"].startswith("-")  # B does not page: its page-out energy is all gone


def _one_line(rc: int, err: str, *words: str, status: int = 2) -> None:
    assert rc == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("poet: "), err
    for w in words:
        assert w in lines[0], err


def test_truncated_and_foreign_traces_are_refused(runs, capsys, tmp_path):
    src = json.loads(runs["poet"].read_text())
    sched = runs["poet"].with_name(SCHEDULE_BESIDE).read_bytes()

    def saved(name: str, data: dict | str, with_schedule: bool = True) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "trace.json").write_text(data if isinstance(data, str) else json.dumps(data))
        if with_schedule:
            (d / SCHEDULE_BESIDE).write_bytes(sched)
        return d / "trace.json"

    cut = json.loads(json.dumps(src))
    cut["steps"][-1]["records"] = cut["steps"][-1]["records"][:-4]
    _one_line(*report(capsys, saved("short", cut))[::2], "step 2", "truncated")
    _one_line(*report(capsys, saved("short-alone", cut, with_schedule=False))[::2], "step 2", "truncated")
    text = json.dumps(src)
    _one_line(*report(capsys, saved("cut", text[: len(text) * 2 // 3]))[::2], "cut off", "truncated")

    negative = json.loads(json.dumps(src))
    negative["steps"][1]["records"][3][4] = -5
    _one_line(*report(capsys, saved("negative", negative))[::2], "step 1 record 3", "impossible")

    # the nodes of another graph (cnn-digits) under mlp-digits' records
    model, spec = get_model("cnn-digits")
    cnn = trace(model, "cnn-digits", spec.input_shape, spec.classes, 16)
    foreign = json.loads(json.dumps(src))
    foreign["nodes"] = Trace.for_graph(cnn, "nrf52840", "emulated", 25e6).nodes
    _one_line(*report(capsys, saved("foreign", foreign, with_schedule=False))[::2], "another graph")
    _one_line(*report(capsys, saved("foreign-sched", foreign))[::2], "another graph")

    # a whole, valid cnn-digits trace cannot be diffed against an mlp-digits one
    cnn_tr = Trace.for_graph(cnn, "nrf52840", "emulated", 25e6)
    records = [[i, n.id, {"input": "forward", "loss": "forward"}.get(n.kind, n.kind), 0, 10, n.bytes]
               for i, n in enumerate(cnn.nodes)]
    cnn_tr.steps = [{"step": 0, "lr": 0.1, "loss": 2.3, "peak_live_bytes": 0, "peak_extent_bytes": 0,
                     "step_ticks": 10 * len(records) + 7, "records": records}]
    (tmp_path / "cnn").mkdir()
    cnn_tr.save(tmp_path / "cnn" / "trace.json")
    _one_line(*report(capsys, runs["poet"], "--diff", tmp_path / "cnn" / "trace.json")[::2],
              "cannot diff", "different models")

    _one_line(*report(capsys, tmp_path / "nope.json")[::2], "does not exist", status=2)
    _one_line(*report(capsys, saved("text", "hello"))[::2], "not a poet trace")
    _one_line(*report(capsys, saved("other", {"format": "chrome"}))[::2], "not a poet trace")
