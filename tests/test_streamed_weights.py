"""Frozen int8 weights streamed from the aux storage (the SD card) when flash cannot hold them
(poet.plan.transform.placement, firmware/core/ops/quant.c): the same bits as read in place from flash, on the
native runtime; where the planner puts them; what it charges for them; and the one line a model that
fits neither flash nor the card gets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import needs_tools
from poet.boards import load_board
from poet.errors import UsageError
from poet.graph.training_graph import TrainingGraph
from poet.plan.cost.memory import aux_area_bytes, pool_for, stream_reads, stream_row, swap_bytes
from poet.plan.lowering.lower import model_blob
from poet.plan.transform.placement import (
    dense_streamable,
    place,
    stream_lines,
    streamed,
    w8_candidates,
    weight_only_int8,
)
from poet.plan.transform.static_int8 import Int8Prefix, rewrite
from poet.units import format_size
from test_kernels_lp import _train


class _Net(torch.nn.Module):
    """conv 3x3 (row 9 B), conv 3x3 8->8 (row 72 B: the stream buffer), depthwise 3x3 (row 9 B: eight
    channels a read), 1x1 8->4 (row 8 B), then the linear that trains (`--train last:1`)."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.conv4 = nn.Conv2d(8, 4, 1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = torch.relu(self.conv3(h))
        return self.fc(torch.flatten(self.conv4(h), 1))


def _prefix() -> tuple[torch.nn.Module, TrainingGraph, Int8Prefix]:
    from poet.graph.tracer import trace

    torch.manual_seed(5)
    m = _Net()
    g = trace(m, "net", (1, 8, 8), 5, 2, train="last:1")
    prefix = rewrite(g)
    assert prefix is not None
    return m, g, prefix


def _convs(g: TrainingGraph) -> list[str]:
    return [g.params[n.attrs["w"]][0] for n in g.nodes if n.op == "conv2d_q"]


@needs_tools("cc", "make")
def test_streamed_weights_give_the_bits_of_weights_in_flash(tmp_path: Path) -> None:
    from poet.graph.reference import state_tensors, weights_of

    m, _, prefix = _prefix()
    q = prefix.graph
    rng = np.random.default_rng(2)
    data = [(rng.standard_normal((2, 64)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    w = prefix.weights(dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True)), data[0][0])
    convs = _convs(q)
    runs = {}
    for which in ((), tuple(convs), (convs[1], convs[2]), (convs[2], convs[3])):
        g = streamed(q, set(which))
        blob = model_blob(g)
        assert [blob.aux(p) for p in range(len(g.params))] == [name in which for name, _ in g.params]
        assert blob.pool == pool_for(g)  # the board's layout is the planner's, stream buffer included
        d = tmp_path / str(len(runs))  # each run its own pager file
        d.mkdir()
        runs[which] = _train(d, blob, w, data)
    # every weight streamed: the buffer is the depthwise conv's, which runs in place: its 64 B output channel,
    # then its 9-byte rows, one a read (73 B; the 8->8 conv's channel is 72 B); without it, the 1x1's 8 B
    assert pool_for(streamed(q, set(convs))).stream == 73
    assert pool_for(streamed(q, {convs[3]})).stream == max(8, 64)
    assert [n.op for n in q.nodes if n.attrs.get("inplace")] == ["conv2d_q"]
    base_losses, base_w = runs[()]
    fc = [n for n, _ in q.params].index("fc.weight")
    assert not np.allclose(base_w[fc], w[fc].ravel())  # the linear trained
    for which, (losses, got) in runs.items():
        assert losses == base_losses, which
        for a, b in zip(got, base_w, strict=True):
            assert np.array_equal(a, b), which


class _Mlp(torch.nn.Module):
    """Two frozen dense layers (rows of 64 and 48 B stored int8), then the one that trains."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 40), nn.ReLU(), nn.Linear(40, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@needs_tools("cc", "make")
def test_frozen_dense_weights_stream_with_the_bits_of_weights_in_flash(tmp_path: Path) -> None:
    """Issue 49: a frozen linear whose weight is stored int8 reads it from the card a few output rows at a time
    when flash cannot hold it, and computes what it computes from flash, bit for bit."""
    from poet.graph.reference import weights_of
    from poet.graph.tracer import trace

    torch.manual_seed(6)
    m = _Mlp()
    g0 = trace(m, "mlp", (64,), 5, 2, train="last:1")
    w8 = weight_only_int8(g0, set(w8_candidates(g0)))
    assert dense_streamable(w8) == ["net.0.weight", "net.2.weight"]  # the largest first; never the trained one
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((2, 64)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    w = weights_of(m)
    runs = {}
    for which in ((), ("net.0.weight",), ("net.0.weight", "net.2.weight")):
        g = streamed(w8, set(which))
        assert g.streamed_params == set(which)
        blob = model_blob(g)
        assert [blob.aux(p) for p in range(len(g.params))] == [name in which for name, _ in g.params]
        assert blob.pool == pool_for(g)  # the board's layout is the planner's, stream buffer included
        d = tmp_path / str(len(runs))
        d.mkdir()
        runs[which] = _train(d, blob, w, data)
    assert pool_for(streamed(w8, {"net.0.weight", "net.2.weight"})).stream == 64  # one row of the widest
    assert pool_for(streamed(w8, {"net.2.weight"})).stream == 48
    base_losses, base_w = runs[()]
    fc = [n for n, _ in g0.params].index("net.4.weight")
    assert not np.allclose(base_w[fc], w[fc].ravel())  # the last layer trained
    for which, (losses, got) in runs.items():
        assert losses == base_losses, which
        for a, b in zip(got, base_w, strict=True):
            assert np.array_equal(a, b), which
    # a flash that holds the int8 weights but for 100 B: after storing both int8, the largest moves to the card
    small = replace(load_board("nrf52840"), model_flash_bytes=pool_for(w8).flash.total - 100)
    placed = place(g0, small)
    assert placed.streamed_params == {"net.0.weight"} and placed.int8_params == {"net.0.weight", "net.2.weight"}
    assert pool_for(placed).flash.total <= small.model_flash_bytes and pool_for(placed).flash.aux == 4 + 64 * 48
    lines = stream_lines(placed)
    assert "SD card (flash cannot hold them): 1 dense layer, 3.0 KiB" in lines[0] and "net/0" in lines[1]


@needs_tools("cc", "make")
def test_an_fp32_graphs_int8_convs_stream_with_the_bits_of_weights_in_flash(tmp_path: Path) -> None:
    """Issue 49: the frozen convs of an fp32 graph that run in int8 on weights stored int8 (conv2d_i8, two deps:
    precision.flash_fit) stream those weights from the card as static-int8 convs do, with the same bits; where
    flash is short, placement moves the largest."""
    from poet.graph.reference import weights_of
    from poet.graph.tracer import trace
    from poet.plan.transform.precision import apply_storage, flash_fit

    torch.manual_seed(5)
    m = _Net()
    g0 = trace(m, "net", (1, 8, 8), 5, 2, train="last:1")
    g = apply_storage(g0, {}, set(flash_fit(g0, 64)))  # every storable frozen weight int8
    convs = [g.params[n.attrs["w"]][0] for n in g.nodes if n.op == "conv2d_i8" and len(n.deps) == 2]
    assert len(convs) == 4
    rng = np.random.default_rng(4)
    data = [(rng.standard_normal((2, 64)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    w = weights_of(m)
    runs = {}
    for which in ((), tuple(convs), (convs[1],)):
        s = streamed(g, set(which))
        assert s.streamed_params == set(which)
        blob = model_blob(s)
        assert [blob.aux(p) for p in range(len(s.params))] == [name in which for name, _ in s.params]
        assert blob.pool == pool_for(s)
        d = tmp_path / str(len(runs))
        d.mkdir()
        runs[which] = _train(d, blob, w, data)
    assert pool_for(streamed(g, set(convs))).stream == 72  # the 8->8 3x3 conv's output channel
    base_losses, base_w = runs[()]
    for which, (losses, got) in runs.items():
        assert losses == base_losses, which
        for a, b in zip(got, base_w, strict=True):
            assert np.array_equal(a, b), which
    small = replace(load_board("nrf52840"), model_flash_bytes=pool_for(g).flash.total - 100)
    assert place(g, small).streamed_params == {convs[1]}  # the largest (576 B int8) moves, alone


def test_stream_reads_follow_the_buffer() -> None:
    assert stream_row(8, 8, 3, 3) == 9 and stream_row(512, 1, 3, 3) == 4608 and stream_row(1, 1, 10, 4) == 40
    assert stream_reads(8, 9, 72) == [4, 72]  # the scale, then eight channels in one read
    assert stream_reads(5, 8, 18) == [4, 16, 16, 8]
    assert stream_reads(512, 4608, 4608) == [4] + [4608] * 512


def test_the_largest_int8_weights_move_to_the_card_until_flash_holds_the_rest() -> None:
    _, _, prefix = _prefix()
    q = prefix.graph
    board = load_board("nrf52840")
    assert place(q, board) is q  # it fits: nothing streams
    f = pool_for(q).flash
    sizes = {n.attrs["w"]: n for n in q.nodes if n.op == "conv2d_q"}
    assert len(sizes) == 4
    # flash short of the largest weight's bytes (the 8->8 conv, 576 B int8): that one moves, alone
    small = replace(board, model_flash_bytes=f.total - 100)
    placed = place(q, small)
    assert placed.streamed_params == {_convs(q)[1]}
    assert pool_for(placed).flash.total <= small.model_flash_bytes
    assert pool_for(placed).flash.aux == 4 + 576 and pool_for(placed).stream == 72
    # the same placement on solve and train: a function of the graph and the board
    assert place(q, small).streamed_params == placed.streamed_params


def test_a_model_that_fits_neither_flash_nor_the_card_is_one_line() -> None:
    _, g, prefix = _prefix()
    board = load_board("nrf52840")
    with pytest.raises(UsageError, match=r"fit neither nrf52840's flash nor its SD card: .*even with the weights "
                                         r"of 4 of its layers on the SD card"):
        place(prefix.graph, replace(board, model_flash_bytes=64))
    with pytest.raises(UsageError, match=r"fit neither .* only convolutions and dense layers whose frozen weights "
                                         r"are stored int8 can stream"):
        place(g, replace(board, model_flash_bytes=64))  # fp32 weights (not stored int8): nothing can stream
    # flash holds all but one weight; the card holds the swap area, not that weight after it
    short = replace(board, model_flash_bytes=pool_for(prefix.graph).flash.total - 100)
    need = aux_area_bytes(place(prefix.graph, short))
    assert need == -(-swap_bytes(prefix.graph) // 512) * 512 + 580
    with pytest.raises(UsageError, match=rf"fit neither .* 580 B of weights on the card after a .* swap area is more "
                                         rf"than the firmware's {format_size(need - 1)} of it"):
        place(prefix.graph, replace(short, storage=dict(board.storage, bytes=need - 1)))


def test_the_planner_charges_each_streamed_read() -> None:
    from poet.plan.cost.costs import costed, load_profile, with_stream_costs

    _, _, prefix = _prefix()
    q = prefix.graph
    board = load_board("nrf52840")
    prof = load_profile(board.name)
    convs = _convs(q)
    s = streamed(q, {convs[1]})
    base, cs = costed(q, board, prof, estimate=True), costed(s, board, prof, estimate=True)
    node = next(n for n in s.nodes if n.op == "conv2d_q" and n.attrs.get("stream"))
    reads = [board.page_cost(b, "in") for b in stream_reads(8, 72, 72)]  # its scale, then 8 reads of a channel
    assert len(reads) == 9
    extra = cs.nodes[node.id].compute_s - base.nodes[node.id].compute_s
    assert extra == pytest.approx(sum(t for t, _ in reads))
    assert cs.nodes[node.id].compute_j - base.nodes[node.id].compute_j == pytest.approx(sum(j for _, j in reads))
    assert all(a == b for a, b in zip(base.nodes, cs.nodes, strict=True) if a.id != node.id)
    # placed after costing (poet solve): the same costs
    assert with_stream_costs(base, s, board, prof).nodes == cs.nodes


def test_a_streamed_conv_costs_its_streaming_compute_where_the_profile_measured_it() -> None:
    """A streamed conv runs one stream buffer of output channels per read, so its loops cannot block
    channels: its compute is the profile's stream=1 entry, not the same conv's unstreamed one (ResNet-18
    last:1 on the nRF52840: 6.2 s against 3.2 s per 3x3 512-channel conv, firmware 2.1)."""
    from poet.plan.cost.costs import costed, load_profile, op_key, with_stream_costs

    _, _, prefix = _prefix()
    q = prefix.graph
    board = load_board("nrf52840")
    prof = load_profile(board.name)
    s = streamed(q, {_convs(q)[1]})
    node = next(n for n in s.nodes if n.op == "conv2d_q" and n.attrs.get("stream"))
    base = costed(q, board, prof, estimate=True)
    measured = {"time_s": 2.5, "energy_j": 0.025}
    timed = {**prof, "ops": {**prof["ops"], op_key(node): measured}}
    reads_s = sum(board.page_cost(b, "in")[0] for b in stream_reads(8, 72, 72))
    got = with_stream_costs(base, s, board, timed).nodes[node.id]
    assert got.compute_s == pytest.approx(2.5 + reads_s)
    assert base.nodes[node.id].compute_s < 1.0  # the unstreamed conv's cost, which it no longer takes


@needs_tools("cc", "make")
def test_the_account_charges_the_reads_to_the_layer_that_made_them(tmp_path: Path) -> None:
    from fwhelpers import keep_all, native_link
    from poet.device.protocol import BATCH, SCHEDULE
    from poet.energy.accounting import account
    from poet.energy.report import sd_lines
    from poet.energy.tracefile import Trace
    from poet.graph.reference import state_tensors, weights_of
    from poet.plan.lowering.modelblob import encode_batch

    m, _, prefix = _prefix()
    s = streamed(prefix.graph, {_convs(prefix.graph)[1]})
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    w = prefix.weights(dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True)), x)
    blob = model_blob(s)
    with native_link(tmp_path) as link:
        link.load_model(blob, w)
        link.upload(SCHEDULE, keep_all(blob).encode())
        link.upload(BATCH, encode_batch(x, np.array([0, 1], np.int32), blob.x_scale(w)))
        result = link.step(0.05)
    board = load_board("nrf52840")
    for provenance in ("emulated", "measured"):
        tr = Trace.for_graph(s, board.name, provenance, 1e6)
        tr.add_step(result, 0.05)
        node = next(i for i, n in enumerate(tr.nodes) if n.get("sd_reads"))
        assert tr.nodes[node]["sd_reads"] == [4] + [72] * 8
        (c,) = [c for c in account(tr, board).charges if c.tensor == tr.nodes[node]["name"] and c.kind == "forward"]
        ticks = next(r[4] for r in tr.steps[0]["records"] if r[1] == node and r[2] == "forward")
        t = board.compute_time_s(ticks, 1e6)
        reads = [board.page_cost(b, "in") for b in tr.nodes[node]["sd_reads"]]
        read_s, read_j = sum(r[0] for r in reads), sum(r[1] for r in reads)
        if provenance == "emulated":  # semihosting took no virtual time: the storage model's, added
            assert c.time_s == pytest.approx(t + read_s) and c.energy_j == pytest.approx(board.compute_energy_j(t)
                                                                                         + read_j)
        else:  # the board's ticks hold the reads; the card's own power is added
            assert c.time_s == pytest.approx(t)
            assert c.energy_j == pytest.approx(board.compute_energy_j(t) + read_j - board.compute_energy_j(read_s))
        # the report says what the reads cost, at the storage model
        (line,) = sd_lines(account(tr, board), tr, board)
        assert "1 layer(s), 9 reads of 580 B a step" in line and f"{read_j * 1e3:.3f} mJ" in line, line
        # every other record as before: the one streamed layer pays
        plain = Trace.for_graph(prefix.graph, board.name, provenance, 1e6)
        plain.add_step(result, 0.05)
        others = [(a.tensor, a.kind, a.energy_j) for a in account(tr, board).charges if a.record != c.record]
        assert others == [(a.tensor, a.kind, a.energy_j) for a in account(plain, board).charges
                          if a.record != c.record]



@needs_tools("cc", "make")
def test_a_card_that_holds_the_weights_is_checked_not_written_again(tmp_path: Path) -> None:
    """The board CRC-32s the aux weights its card already holds (VERIFY): equal, they are not uploaded
    again; a card holding anything else gets them over the link; a card image written directly (as a
    card reader would, `Device.load_model` on an emulated board) counts the same."""
    from fwhelpers import native_link
    from poet.device.protocol import AUX
    from poet.graph.reference import state_tensors, weights_of

    m, _, prefix = _prefix()
    s = streamed(prefix.graph, set(_convs(prefix.graph)))
    x = np.zeros((2, 64), np.float32)
    w = prefix.weights(dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True)), x)
    blob = model_blob(s)
    aux = blob.split_weights(w)[2]
    card = tmp_path / "poet-swap.bin"
    with native_link(tmp_path) as link:
        sent: list[int] = []
        upload = link.upload
        link.upload = lambda blob_id, data, progress=None: (sent.append(blob_id), upload(blob_id, data, progress))
        link.load_model(blob, w)
        assert sent.count(AUX) == 1  # an empty card: over the link
        assert card.read_bytes()[blob.aux_at:] == aux
        link.load_model(blob, w)
        assert sent.count(AUX) == 1  # checked, not sent
        with open(card, "r+b") as f:  # one byte of the card changed
            f.seek(blob.aux_at + len(aux) // 2)
            f.write(bytes([aux[len(aux) // 2] ^ 1]))
        link.load_model(blob, w)
        assert sent.count(AUX) == 2 and card.read_bytes()[blob.aux_at:] == aux
        card.write_bytes(bytes(blob.aux_at + len(aux)))  # a card wiped, then written by a card reader
        link.load_model(blob, w, card)
        assert sent.count(AUX) == 2 and card.read_bytes()[blob.aux_at:] == aux


@needs_tools("cc", "make")
@pytest.mark.parametrize("stream", [False, True])
def test_the_planners_flash_is_the_size_the_board_checks(tmp_path: Path, stream: bool) -> None:
    """Issue 49, bug 3: `poet solve` said 761.3 of 768 KiB of flash for a SqueezeNet and the board then refused
    the upload TOO_BIG. The flash the planner counts (the model blob page-aligned, then the frozen weights,
    int8 ones with their scale word) is what the board checks: a board whose nv storage is exactly that takes
    the model, one a byte smaller refuses it, TOO_BIG, and the aux weights take no flash."""
    from fwhelpers import native_link
    from poet.device.protocol import DeviceError
    from poet.graph.reference import state_tensors, weights_of

    m, _, prefix = _prefix()
    g = streamed(prefix.graph, set(_convs(prefix.graph)[1:3]) if stream else set())
    x = np.zeros((2, 64), np.float32)
    w = prefix.weights(dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True)), x)
    blob = model_blob(g)
    flash = blob.pool.flash
    assert (flash.aux > 0) == stream and flash.total % 4096 != 0  # a total that is not a page count: no slack
    for nv, fits in ((flash.total, True), (flash.total - 1, False)):
        d = tmp_path / str(nv)
        d.mkdir()
        with native_link(d, args=["--nv", str(nv)]) as link:
            if fits:
                link.load_model(blob, w)
            else:
                with pytest.raises(DeviceError) as e:
                    link.load_model(blob, w)
                assert e.value.name == "TOO_BIG"


@needs_tools("cc", "make")
def test_a_card_that_fails_mid_step_fails_the_step_not_the_board(tmp_path: Path) -> None:
    """A streamed read that fails (the card's weights gone) ends the step with PAGER; the board keeps
    serving, and with the weights back the same step runs."""
    from fwhelpers import keep_all, native_link
    from poet.device.protocol import BATCH, SCHEDULE, DeviceError
    from poet.graph.reference import state_tensors, weights_of
    from poet.plan.lowering.modelblob import encode_batch

    m, _, prefix = _prefix()
    s = streamed(prefix.graph, {_convs(prefix.graph)[3]})
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    w = prefix.weights(dict(zip([n for n, _ in state_tensors(m)], weights_of(m), strict=True)), x)
    blob = model_blob(s)
    card = tmp_path / "poet-swap.bin"
    with native_link(tmp_path) as link:
        link.load_model(blob, w)
        link.upload(SCHEDULE, keep_all(blob).encode())
        link.upload(BATCH, encode_batch(x, np.array([0, 1], np.int32), blob.x_scale(w)))
        whole = card.read_bytes()
        card.write_bytes(whole[:blob.aux_at + 4])  # the scale is there, the channels are not
        with pytest.raises(DeviceError, match="PAGER"):
            link.step(0.0)
        card.write_bytes(whole)
        assert link.step(0.0).loss > 0
