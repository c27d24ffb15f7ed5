"""The energy account of a trace: every record charged once, to the right kind, module and tensor."""

import pytest
from poet.boards import load_board
from poet.energy import account, render
from poet.errors import PoetError
from poet.tracefile import Trace

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
                 "step_ticks": 4553, "records": records}]
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
    assert a.total_j == pytest.approx(sum(e for e, _ in a.by_kind.values()))
    assert a.total_j == pytest.approx(sum(e for e, _ in a.by_module.values()))
    # recompute is charged to the tensor it remade, paging to the tensor it moved
    assert a.by_tensor["fc1/forward"]["recompute"] == pytest.approx(1000 * per_tick)
    assert set(a.by_tensor["input"]) == {"forward", "page_in", "page_out"}


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
