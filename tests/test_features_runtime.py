"""Features once, the board's half (issue 48; docs/spec.md section 6, FEATURES): a step armed with KEEP writes a
frozen prefix's tensor to the aux storage right after computing it, and a step armed with STAGE reads its batch's
features from there into the staging region and trains the suffix (plan/transform/feature_cache.py) on them, bit
for bit as the whole model would have."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_qemu, needs_tools
from fwhelpers import native_link
from poet.device.framing import encode_frame
from poet.device.link import Link
from poet.device.protocol import BATCH, FEATURES, KEEP, PROTO, SCHEDULE, STAGE, DeviceError
from poet.graph.reference import weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph
from poet.models.zoo import ModelChoice
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import COMPUTE, PAGE_OUT, Instr, Schedule
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.transform.feature_cache import Cut, cuts, suffix_of

pytestmark = needs_tools("cc", "make")
LR = 0.05
BATCH_SIZE = 4


def _whole() -> tuple[list[np.ndarray], TrainingGraph]:
    import torch
    torch.manual_seed(0)
    model, g = traced(ModelChoice("mlp-digits", batch=BATCH_SIZE, train="last:1"))
    return weights_of(model), g


def _schedule(g: TrainingGraph, page_out: int | None = None) -> bytes:
    """The keep-everything schedule, with a page-out of `page_out` right after its compute (the board's
    own copy of the tensor, at its swap slot, to hold the cache against)."""
    s = lower(keep_all(uncosted(g)), g).schedule
    if page_out is not None:
        at = next(i for i, ins in enumerate(s.instrs) if ins.op == COMPUTE and ins.node == page_out)
        s = Schedule(s.n_nodes, s.model_hash, s.arena_bytes, [*s.instrs[:at + 1], Instr(PAGE_OUT, page_out),
                                                               *s.instrs[at + 1:]])
    return s.encode()


def _load(link: Link, g: TrainingGraph, w: list[np.ndarray], schedule: bytes | None = None) -> None:
    link.load_model(model_blob(g), w)
    link.upload(SCHEDULE, schedule if schedule is not None else _schedule(g))


def _data(g: TrainingGraph, steps: int, seed: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((g.batch, *g.input_shape)).astype(np.float32),
             rng.integers(0, g.classes, size=g.batch).astype(np.int32)) for _ in range(steps)]


def _params(link: Link, g: TrainingGraph) -> dict[str, np.ndarray]:
    flat = link.read_params(model_blob(g))
    return {name: w.reshape(shape) for w, (name, shape) in zip(flat, g.params, strict=True)}


def _cache_at(*graphs: TrainingGraph) -> int:
    """The first cache offset: past every model's swap area and aux weights, on a sector."""
    end = max(model_blob(g).aux_at + model_blob(g).aux_bytes for g in graphs)
    return -(-end // 512) * 512


def test_a_kept_tensor_is_the_step_own_output_byte_for_byte(tmp_path: Path) -> None:
    """KEEP at a cut writes the batch's tensor, as the step computed it (the board's own page-out of it
    holds the same bytes), and the trace says so in a record of its own right after the compute."""
    w0, g = _whole()
    c = cuts(g)[-1]
    at = _cache_at(g, c.suffix)
    x, y = _data(g, 1)[0]
    with native_link(tmp_path) as link:
        assert link.hello().proto == PROTO == 4
        _load(link, g, w0, _schedule(g, page_out=c.node))
        link.upload(BATCH, encode_batch(x, y))
        link.keep_features(c.node, at)
        kept = link.step(LR)
        again = link.step(LR)  # armed for one step only
    swap = (tmp_path / "poet-swap.bin").read_bytes()
    slot = sum(n.bytes for n in g.nodes[:c.node])
    assert len(swap) >= at + c.batch_bytes
    assert swap[at:at + c.batch_bytes] == swap[slot:slot + c.batch_bytes]
    assert any(swap[at:at + c.batch_bytes])
    kinds = [r.kind for r in kept.records]
    assert kinds.count("cache_write") == 1 and "cache_write" not in [r.kind for r in again.records]
    i = kinds.index("cache_write")
    assert (kept.records[i - 1].kind, kept.records[i - 1].node) == ("forward", c.node)
    assert (kept.records[i].node, kept.records[i].bytes) == (c.node, c.batch_bytes)
    assert [r.instr for r in kept.records] == list(range(len(kept.records)))
    assert len(kept.records) == len(again.records) + 1


def _int8_net() -> tuple[list[np.ndarray], TrainingGraph, list[tuple[np.ndarray, np.ndarray]]]:
    """A frozen conv prefix in static int8 (test_static_int8's net, rewritten and calibrated), staged int8."""
    from poet.graph.tracer import trace
    from poet.plan.transform.static_int8 import rewrite
    from test_static_int8 import _model_weights, _net

    m = _net()
    g = trace(m, "net", (1, 8, 8), 5, 2, train="last:1")
    prefix = rewrite(g)
    assert prefix is not None
    rng = np.random.default_rng(4)
    data = [(rng.standard_normal((2, 64)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int32))
            for _ in range(3)]
    return prefix.weights(_model_weights(m), data[0][0]), prefix.graph, data


def _case(name: str) -> tuple[list[np.ndarray], TrainingGraph, list[tuple[np.ndarray, np.ndarray]], int]:
    """Weights, graph, three batches and the cut kept: mlp-digits' last fp32 cut, or the int8 net's last int8
    one (its suffix stages int8 at the cut's scale)."""
    if name == "fp32":
        w0, g = _whole()
        return w0, g, _data(g, 3), cuts(g)[-1].node
    w0, g, data = _int8_net()
    c = [c for c in cuts(g) if c.suffix.nodes[0].attrs.get("i8")][-1]
    return w0, g, data, c.node


def _batch(blob_of: TrainingGraph, w: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> bytes:
    return encode_batch(x, y, model_blob(blob_of).x_scale(w))


def _cached_against_whole(link: Link, name: str) -> None:
    """Epoch 1 keeps each batch's features; then the suffix model, holding the whole's weights, trains a step
    on a batch staged from the cache (its samples in another order) to exactly the weights and loss the whole
    model's step on that batch gives."""
    w0, g, data, node = _case(name)
    c = next(c for c in cuts(g) if c.node == node)
    s = suffix_of(g, c.node)
    assert bool(s.nodes[0].attrs.get("i8")) == (name == "int8")
    at = _cache_at(g, s)
    order = np.arange(g.batch)[::-1].copy()
    x, y = data[0]
    # the reference: the whole model's steps, then the first batch again, reordered
    _load(link, g, w0)
    for xb, yb in [*data, (x[order], y[order])]:
        link.upload(BATCH, _batch(g, w0, xb, yb))
        ref_loss = link.step(LR).loss
    ref = _params(link, g)
    # epoch 1 with the cache: every step keeps its batch's features
    _load(link, g, w0)
    for k, (xb, yb) in enumerate(data):
        link.upload(BATCH, _batch(g, w0, xb, yb))
        link.keep_features(c.node, at + k * c.batch_bytes)
        link.step(LR)
    now = _params(link, g)
    # epoch 2: the suffix, its weights the whole's now, its batch from the cache
    _load(link, s, [now[p] for p, _ in s.params])
    link.stage_features([at + int(r) * c.sample_bytes for r in order], [int(v) for v in y[order]])
    got = link.step(LR)
    after = _params(link, s)
    assert got.records[0].kind == "cache_read" and got.records[0].node == 0
    assert got.records[0].bytes == c.batch_bytes
    assert [r.kind for r in got.records].count("cache_read") == 1
    assert struct.pack("<f", got.loss) == struct.pack("<f", ref_loss)
    trained = [p for p, _ in s.params if p not in set(s.frozen)]
    assert trained
    for p in trained:
        assert np.array_equal(after[p], ref[p]), p


@pytest.mark.parametrize("name", ["fp32", "int8"])
def test_staged_features_train_the_suffix_bit_for_bit_as_the_whole(tmp_path: Path, name: str) -> None:
    """_cached_against_whole on the native runtime: fp32 features, and int8 ones staged at the kept layer's
    scale."""
    with native_link(tmp_path) as link:
        _cached_against_whole(link, name)


@needs_qemu
def test_the_emulated_nrf52840_keeps_and_stages_features(tmp_path: Path) -> None:
    """The same on the emulated nRF52840 (QEMU, its card a file reached by semihosting)."""
    from poet.boards import load_board
    from poet.device.connect import open_device

    with open_device(load_board("nrf52840"), None, workdir=tmp_path, quiet=True) as dev:
        _cached_against_whole(dev.link, "fp32")


def _keep_then_load_suffix(link: Link, g: TrainingGraph, w0: list[np.ndarray], c: Cut, s: TrainingGraph, at: int,
                           x: np.ndarray, y: np.ndarray) -> None:
    """One whole step on (x, y) keeping c's features at `at`, then the suffix s loaded with w0's weights of its
    parameters."""
    _load(link, g, w0)
    link.upload(BATCH, encode_batch(x, y))
    link.keep_features(c.node, at)
    link.step(LR)
    _load(link, s, [w for w, (name, _) in zip(w0, g.params, strict=True) if name in dict(s.params)])


def test_a_staged_batch_stays_the_batch_and_a_batch_upload_replaces_it(tmp_path: Path) -> None:
    """After its step the staged features are the batch (a STEP without a new one reruns them, with no read);
    a batch uploaded after a STAGE is what the next step trains on."""
    w0, g = _whole()
    c = cuts(g)[-1]
    s = suffix_of(g, c.node)
    at = _cache_at(g, s)
    x, y = _data(g, 1)[0]
    with native_link(tmp_path) as link:
        _keep_then_load_suffix(link, g, w0, c, s, at, x, y)
        with pytest.raises(DeviceError) as e:
            link.step(LR)  # the suffix has no batch yet
        assert e.value.name == "ORDER"
        link.part = 32  # three samples a request (a lossy line's frames): the batch in two
        link.stage_features([at + r * c.sample_bytes for r in range(g.batch)], [int(v) for v in y])
        link.part = 1000
        first = link.step(LR)
        second = link.step(LR)
        assert "cache_read" not in [r.kind for r in second.records]
        assert len(second.records) == len(first.records) - 1
        # a STAGE, then a batch upload: the upload is the batch, nothing is read
        link.stage_features([at + r * c.sample_bytes for r in range(g.batch)], [int(v) for v in y])
        feats = np.frombuffer((tmp_path / "poet-swap.bin").read_bytes()[at:at + c.batch_bytes], "<f4")
        link.upload(BATCH, encode_batch(feats.reshape(g.batch, -1), y))
        third = link.step(LR)
        assert "cache_read" not in [r.kind for r in third.records]


def _refused(link: Link, payload: bytes) -> DeviceError:
    with pytest.raises(DeviceError) as e:
        link._ack(FEATURES, payload, "FEATURES")
    return e.value


def test_refusals_leave_everything_uploaded(tmp_path: Path) -> None:
    """A bad node, a cache on the swap area or past the storage, a label out of range, a count other than the
    batch: each refused with its status, nothing armed, nothing that was uploaded lost."""
    w0, g = _whole()
    c = cuts(g)[-1]
    at = _cache_at(g, c.suffix)
    blob = model_blob(g)
    x, y = _data(g, 1)[0]
    labels = [int(v) for v in y]
    ok = [at + r * c.sample_bytes for r in range(g.batch)]
    with native_link(tmp_path) as link:
        assert _refused(link, struct.pack("<BHI", KEEP, c.node, at)).name == "ORDER"  # no model
        assert _refused(link, struct.pack("<BHH", STAGE, g.batch, 0)).name == "ORDER"
        _load(link, g, w0)
        link.upload(BATCH, encode_batch(x, y))
        loaded = link.hello().loaded
        backward = next(n.id for n in g.nodes if n.kind == "backward")
        for node in (0, len(g.nodes) - 1, backward, 8, len(g.nodes), 0xFFFF):  # input, optimizer, backward, loss
            e = _refused(link, struct.pack("<BHI", KEEP, node, at))
            assert (e.name, e.detail) == ("RANGE", node), node
        e = _refused(link, struct.pack("<BHI", KEEP, c.node, 0))  # on the swap area
        assert (e.name, e.detail) == ("RANGE", blob.aux_at + blob.aux_bytes)
        e = _refused(link, struct.pack("<BHI", KEEP, c.node, blob.aux_at - 4))
        assert e.name == "RANGE"
        e = _refused(link, struct.pack("<BHI", KEEP, c.node, 0xFFFFFFFF - c.batch_bytes + 1))  # past the storage
        assert (e.name, e.detail) == ("RANGE", 0xFFFFFFFF)
        assert _refused(link, struct.pack("<BH", KEEP, c.node)).name == "FRAME"
        assert _refused(link, bytes([9])).name == "UNKNOWN_MSG"
        with pytest.raises(DeviceError) as err:
            link.stage_features(ok[:-1], labels[:-1])  # not the batch
        assert err.value.name == "RANGE"
        for bad, where in ((10, 1), (-1, 3)):
            with pytest.raises(DeviceError) as err:
                link.stage_features(ok, [bad if r == where else v for r, v in enumerate(labels)])
            assert (err.value.name, err.value.detail) == ("RANGE", where)
        with pytest.raises(DeviceError) as err:
            link.stage_features([0 if r == 2 else o for r, o in enumerate(ok)], labels)  # a sample on the swap area
        assert (err.value.name, err.value.detail) == ("RANGE", 2)
        assert _refused(link, struct.pack("<BHH", STAGE, g.batch, 1) + struct.pack("<Ii", at, 0)).name == "ORDER"
        assert link.hello().loaded == loaded
        step = link.step(LR)  # the uploaded batch, nothing armed
        assert not {"cache_write", "cache_read"} & {r.kind for r in step.records}
    with native_link(tmp_path) as fresh:  # the same step on a runtime that refused nothing
        _load(fresh, g, w0)
        fresh.upload(BATCH, encode_batch(x, y))
        assert struct.pack("<f", fresh.step(LR).loss) == struct.pack("<f", step.loss)


def test_a_repeated_features_request_is_answered_again_not_run_twice(tmp_path: Path) -> None:
    """A STAGE whose ACK was lost comes again with the same seq: the board answers it as before and the
    batch is staged once (the step reads it once)."""
    w0, g = _whole()
    c = cuts(g)[-1]
    at = _cache_at(g, c.suffix)
    x, y = _data(g, 1)[0]
    with native_link(tmp_path) as link:
        _keep_then_load_suffix(link, g, w0, c, c.suffix, at, x, y)
        payload = struct.pack("<BHH", STAGE, g.batch, 0) + b"".join(
            struct.pack("<Ii", at + r * c.sample_bytes, int(y[r])) for r in range(g.batch))
        link._seq = link._seq % 255 + 1
        frame = encode_frame(FEATURES, link._seq, payload)
        replies = []
        for _ in range(2):
            link._write(frame)
            replies.append(link._next_frame(time.monotonic() + 5, "the ACK"))
        assert replies[0] == replies[1] and replies[0] is not None
        assert struct.unpack("<HI", replies[0][2]) == (0, 0)
        step = link.step(LR)
    assert [r.kind for r in step.records].count("cache_read") == 1


def test_the_cache_is_its_own_kind_priced_by_the_storage_model(tmp_path: Path) -> None:
    """The traces of a KEEP step and of a STAGE step load against their schedules (the cache's records set
    aside), and the energy account charges each cache record the board's storage model for its bytes, as
    paging is charged, under its own kind."""
    from poet.boards import load_board
    from poet.energy.accounting import account
    from poet.energy.tracefile import Trace

    w0, g = _whole()
    c = cuts(g)[-1]
    s = c.suffix
    at = _cache_at(g, s)
    x, y = _data(g, 1)[0]
    board = load_board("rpi4")
    with native_link(tmp_path) as link:
        hz = link.hello().tick_hz
        _load(link, g, w0)
        link.upload(BATCH, encode_batch(x, y))
        link.keep_features(c.node, at)
        kept = link.step(LR)
        _load(link, s, [w for w, (name, _) in zip(w0, g.params, strict=True) if name in dict(s.params)])
        link.stage_features([at + r * c.sample_bytes for r in range(g.batch)], [int(v) for v in y])
        staged = link.step(LR)
    for graph, res, way in ((g, kept, "out"), (s, staged, "in")):
        tr = Trace.for_graph(graph, board.name, "measured", hz)
        tr.add_step(res, LR)
        tr.add_step(res, LR)
        tr.check(Schedule.decode(_schedule(graph)))
        acct = account(tr, board)
        t, e = board.page_cost(c.batch_bytes, way)
        assert acct.by_kind["cache"][0] == pytest.approx(2 * e, rel=1e-12)
        assert acct.by_kind["cache"][1] == pytest.approx(2 * t, rel=1e-12)
        assert acct.by_kind["page_in"][0] == acct.by_kind["page_out"][0] == 0
        assert acct.total_j == pytest.approx(sum(v[0] for v in acct.by_kind.values()), rel=1e-12)
