"""The energy account of a trace: every record charged once, to the right kind, module and tensor.

Pure Python on hand-made traces; tests/test_accounting.py does the same on real emulated runs.
"""

import json

import pytest
from poet.boards import load_board
from poet.energy.accounting import OVERHEAD_RECORD, RUNTIME, Box, account, diff, edd, energy_from_lists, fold, walk
from poet.energy.report import chrome_trace
from poet.energy.report import render as render_account
from poet.energy.tracefile import Trace
from poet.errors import PoetError


def render(tr, board):
    return render_account(account(tr, board), tr, board, top=5)

NODES = [
    {"name": "input", "module": "input", "kind": "input", "op": "input", "bytes": 4096},
    {"name": "fc1/forward", "module": "fc1", "kind": "forward", "op": "linear", "bytes": 2048},
    {"name": "loss/forward", "module": "loss", "kind": "loss", "op": "cross_entropy", "bytes": 4},
    {"name": "fc1/backward", "module": "fc1", "kind": "backward", "op": "linear_bwd", "bytes": 0},
    {"name": "optimizer/sgd", "module": "optimizer", "kind": "optimizer", "op": "sgd", "bytes": 0},
]


def _trace() -> Trace:
    tr = Trace("nrf52840", "toy", "emulated", 25e6, NODES)
    records = [
        [0, 0, "forward", 0, 100, 4096],
        [1, 0, "page_out", 0, 3, 4096],
        [2, 0, "free", 0, 0, 4096],
        [3, 1, "forward", 1, 1000, 2048],
        [4, 2, "forward", 6, 50, 4],
        [5, 0, "page_in", 0, 3, 4096],
        [6, 1, "recompute", 1, 1000, 2048],
        [7, 3, "backward", 16, 2000, 0],
        [8, 4, "optimizer", 32, 400, 0],
    ]
    tr.steps = [{"step": 0, "lr": 0.1, "loss": 2.3, "peak_live_bytes": 1, "peak_extent_bytes": 1,
                 "step_ticks": 4600, "records": records}]
    return tr


def test_every_joule_has_a_kind_and_a_tensor():
    board = load_board("nrf52840")
    a = account(_trace(), board)
    per_tick = board.compute_energy_j(board.compute_time_s(1, 25e6))
    assert a.by_kind["forward"][0] == pytest.approx(1150 * per_tick)
    assert a.by_kind["recompute"][0] == pytest.approx(1000 * per_tick)
    assert a.by_kind["backward"][0] == pytest.approx(2000 * per_tick)
    assert a.by_kind["optimizer"][0] == pytest.approx(400 * per_tick)
    # paging costs the storage model for the bytes moved, not the (emulated, near-zero) ticks
    assert a.by_kind["page_out"][0] == pytest.approx(board.page_cost(4096, "out")[1])
    assert a.by_kind["page_in"][0] == pytest.approx(board.page_cost(4096, "in")[1])
    # the step's 44 ticks outside its records and the free's 0 ticks are runtime overhead
    assert a.by_kind["overhead"][0] == pytest.approx(44 * per_tick)
    assert a.by_tensor[RUNTIME]["overhead"] == pytest.approx(44 * per_tick)
    assert a.total_j == pytest.approx(sum(e for e, _ in a.by_kind.values()))
    assert a.total_j == pytest.approx(sum(e for e, _ in a.by_module.values()))
    # the identity: the step's ticks (less the paging records' own, replaced by the storage model) + paging
    paging = board.page_cost(4096, "out")[1] + board.page_cost(4096, "in")[1]
    assert a.total_j == pytest.approx((4600 - 6) * per_tick + paging, rel=1e-12)
    # recompute is charged to the tensor it remade, paging to the tensor it moved
    assert a.by_tensor["fc1/forward"]["recompute"] == pytest.approx(1000 * per_tick)
    assert set(a.by_tensor["input"]) == {"forward", "page_in", "page_out", "overhead"}


def test_report_round_trip(tmp_path):
    board = load_board("nrf52840")
    tr = _trace()
    tr.save(tmp_path / "t.json")
    again = Trace.load(tmp_path / "t.json")
    assert render(again, board) == render(tr, board)
    text = render(tr, board)
    for word in ("recompute", "page_in", "page_out", "optimizer", "fc1/forward"):
        assert word in text


def test_not_a_trace(tmp_path):
    (tmp_path / "x.json").write_text("{]")
    with pytest.raises(PoetError, match="not a poet trace"):
        Trace.load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text('{"a": 1}')
    with pytest.raises(PoetError, match="not a poet trace"):
        Trace.load(tmp_path / "y.json")


def test_measured_energy_replaces_the_model(tmp_path):
    board = load_board("nrf52840")
    tr = _trace()
    n = len(tr.steps[0]["records"])
    per_record = [[0.001 * (i + 1) for i in range(n)]]
    a = account(tr, board, energy_from_lists(per_record, [0.5]))
    assert a.source == "measured"
    assert a.total_j == pytest.approx(sum(per_record[0]) + 0.5)
    assert a.by_kind["recompute"][0] == pytest.approx(0.007)  # record 6
    assert a.by_tensor[RUNTIME]["overhead"] == pytest.approx(0.5)
    asked = []
    account(tr, board, lambda s, i: asked.append((s, i)) or 0.0)
    assert asked == [(0, i) for i in range(n)] + [(0, OVERHEAD_RECORD)]
    with pytest.raises(PoetError, match="step 0 record 3 .* impossible"):
        account(tr, board, lambda s, i: -1.0 if i == 3 else 0.0)


def _box(tree: dict, name: str = "m") -> Box:
    b = Box(name=name)
    for k, v in tree.items():
        c = _box(v, k) if isinstance(v, dict) else Box(energy_j=v, time_s=v, kinds={"forward": v}, name=k)
        b.children[k] = c
        b.add(c.energy_j, c.time_s, c.kinds)
    return b


def test_fold_numbered_siblings_of_the_same_shape():
    block = {"conv1": {"forward": 1.0}, "conv2": {"forward": 1.0}}
    down = {**block, "shortcut": {"0": {"forward": 1.0}}}
    root = _box({"layer1": {"0": block, "1": block}, "layer2": {"0": down, "1": block},
                 "layer3": {"0": down, "1": block}, "fc": {"forward": 1.0}})
    folded = fold(root)
    names = {b.path: b.count for _, b in walk(folded)}
    # layer1's first block has no shortcut: layer2 and layer3 fold, layer1 stays
    assert "layer{2,3}" in names and names["layer{2,3}"] == 2 and "layer1" in names
    assert names["layer1/*"] == 2  # its two blocks are alike
    assert names["layer1/*/conv*"] == 4 and names["layer1/*/conv*/forward"] == 4
    assert folded.energy_j == root.energy_j == pytest.approx(sum(b.energy_j for _, b in walk(folded) if not b.children))
    assert walk(root)[1][1].path == "" and len(walk(root, 1)) == 5  # the original tree is untouched


def test_edd_mirrors_module_paths():
    board = load_board("nrf52840")
    a = account(_trace(), board)
    root = edd(a)
    assert set(root.children) == {"input", "fc1", "loss", "optimizer", RUNTIME}
    assert set(root.children["fc1"].children) == {"forward", "backward"}
    assert root.children["input"].children == {}  # a tensor named like its module is the module's box
    assert root.energy_j == pytest.approx(a.total_j)


def test_diff_needs_the_same_graph():
    board = load_board("nrf52840")
    a, b = _trace(), _trace()
    b.steps[0]["records"][6][4] = 500  # a cheaper recompute
    rows = {(r.tensor, r.kind): r for r in diff(a, account(a, board), b, account(b, board))}
    per_tick = board.compute_energy_j(board.compute_time_s(1, 25e6))
    assert rows[("fc1/forward", "recompute")].delta_j == pytest.approx(-500 * per_tick)
    b.nodes = [dict(n) for n in b.nodes]
    b.nodes[1]["bytes"] = 1024
    with pytest.raises(PoetError, match="graphs differ at fc1/forward"):
        diff(a, account(a, board), b, account(b, board))


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["steps"][0]["records"].pop(), "instruction"),
    (lambda d: d["steps"][0].update(step_ticks=100), "more than the step"),
    (lambda d: d["steps"][0]["records"][3].__setitem__(5, 99), "another graph"),
    (lambda d: d["steps"][0]["records"][3].__setitem__(1, 40), "another graph"),
    (lambda d: d["steps"][0]["records"][7].__setitem__(2, "forward"), "another graph"),
    (lambda d: d["steps"][0]["records"][0].__setitem__(4, -1), "impossible"),
    (lambda d: d.update(tick_hz=0), "tick_hz"),
    (lambda d: d.update(steps=[]), "no steps"),
])
def test_damaged_traces_are_refused_in_one_line(tmp_path, edit, words):
    tr = _trace()
    tr.steps.append(json.loads(json.dumps(tr.steps[0])))
    tr.save(tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    edit(data)
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(PoetError, match=words) as exc:
        Trace.load(tmp_path / "t.json")
    assert "\n" not in str(exc.value)


def test_chrome_trace_events():
    board = load_board("nrf52840")
    tr = _trace()
    a = account(tr, board)
    doc = json.loads(json.dumps(chrome_trace(a, tr, board)))
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    assert [e["cat"] for e in xs][:3] == ["forward", "page_out", "overhead"]
    assert sum(e["dur"] for e in xs) == pytest.approx(a.total_s * 1e6)
    assert doc["otherData"]["board"] == "nrf52840"


def test_chrome_trace_times_count_every_tick_of_every_step():
    """Each record starts where the one before it ended, each step's runtime overhead (its ticks
    outside the records) comes at its end, and the next step starts after it: the event times are
    the board time of everything before them, which monotonic times alone do not show."""
    board = load_board("nrf52840")
    tr = _trace()
    second = json.loads(json.dumps(tr.steps[0]))
    second.update(step=1, step_ticks=4600 + 100)  # 144 ticks of overhead here, 44 in step 0
    tr.steps.append(second)
    tick_s = board.compute_time_s(1, tr.tick_hz)

    def record_s(kind: str, ticks: int, nbytes: int) -> float:
        if kind in ("page_in", "page_out"):  # emulated paging: the storage model's time
            return board.page_cost(nbytes, "in" if kind == "page_in" else "out")[0]
        return ticks * tick_s

    want: list[tuple[str, float, float]] = []  # (category, start µs, duration µs)
    clock = 0.0
    for st in tr.steps:
        for _i, _node, kind, _op, ticks, nbytes in st["records"]:
            dur = record_s(kind, ticks, nbytes)
            want.append(("overhead" if kind == "free" else kind, clock * 1e6, dur * 1e6))
            clock += dur
        rest = (st["step_ticks"] - sum(r[4] for r in st["records"])) * tick_s
        want.append(("overhead", clock * 1e6, rest * 1e6))
        clock += rest
    assert want[len(want) // 2 - 1][2] == pytest.approx(44 * tick_s * 1e6)
    assert want[-1][2] == pytest.approx(144 * tick_s * 1e6)

    doc = chrome_trace(account(tr, board), tr, board)
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    assert [e["cat"] for e in ops] == [c for c, _, _ in want]
    for e, (_, ts, dur) in zip(ops, want, strict=True):
        assert e["ts"] == pytest.approx(ts, rel=1e-12, abs=1e-9), e
        assert e["dur"] == pytest.approx(dur, rel=1e-12, abs=1e-9), e
    steps = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 2}
    half = len(want) // 2
    assert steps["step 0"]["ts"] == 0.0
    assert steps["step 0"]["dur"] == pytest.approx(want[half][1], rel=1e-12)
    assert steps["step 1"]["ts"] == pytest.approx(want[half][1], rel=1e-12)
    assert steps["step 1"]["ts"] + steps["step 1"]["dur"] == pytest.approx(clock * 1e6, rel=1e-12)
