"""The device API (firmware/core/poet.h): a bundle trained and predicted from with no host, held to the
host-driven runtime bit for bit (the same kernels, the same schedule), and to PyTorch in evaluation mode
for predict; a diverged step undone; a damaged bundle refused with a status, never a crash (the harness
runs under ASan + UBSan: firmware/tests/device_main.c)."""

from __future__ import annotations

import functools
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import needs_tools
from fwhelpers import native_link
from poet.device import firmware
from poet.device.protocol import BATCH, SCHEDULE
from poet.export.bundle import Bundle, make_bundle
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph, with_optimizer
from poet.models.zoo import get_model
from poet.plan.cost.costs import uncosted
from poet.plan.lowering.lower import forward_lowered, lower, model_blob
from poet.plan.lowering.modelblob import encode_batch
from poet.plan.lowering.schedule import COMPUTE, PAGE_OUT, Instr, Schedule
from poet.plan.strategies.checkpoint_all import keep_all
from poet.run.finish import to_model
from test_runtime_ops import _poet_plans

pytestmark = needs_tools("cc", "make")
LR = 0.05
PAGER, BUNDLE_E, DIVERGED = 38, 40, 41


class _BnDrop(torch.nn.Module):
    """A batch norm that trains and a dropout: what predict must run in evaluation mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.25)
        self.fc = torch.nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(torch.relu(self.bn(self.conv(x)))).flatten(1))


def _graph(name: str, optimizer: str, train: str, batch: int = 4) -> tuple[torch.nn.Module, TrainingGraph]:
    torch.manual_seed(0)
    if name == "bn-dropout":
        model: torch.nn.Module = _BnDrop()
        g = trace(model, name, (1, 8, 8), 10, batch, train=train)
    else:
        model, spec = get_model(name)
        g = trace(model, name, spec.input_shape, spec.classes, batch, train=train)
    return model, with_optimizer(g, optimizer)


def _batches(g: TrainingGraph, n: int, seed: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((g.batch, *g.input_shape)).astype(np.float32),
             rng.integers(0, g.classes, size=g.batch).astype(np.int32)) for _ in range(n)]


@functools.cache
def _harness() -> str:
    """The device harness, built once a session (make's own check costs more than a run of it)."""
    return str(firmware.build("device-run"))


class Session:
    """Commands for the device harness (firmware/tests/device_main.c), run in one process by `run`."""

    def __init__(self) -> None:
        self.req, self.want = bytearray(), ["init"]

    def step(self, x: np.ndarray, y: np.ndarray) -> Session:
        self.req += b"S" + np.ascontiguousarray(x, "<f4").tobytes() + np.ascontiguousarray(y, "<i4").tobytes()
        self.want.append("step")
        return self

    def predict(self, x: np.ndarray) -> Session:
        self.req += b"P" + struct.pack("<I", len(x)) + np.ascontiguousarray(x, "<f4").tobytes()
        self.want.append(f"predict {len(x)}")
        return self

    def order(self, n: int, seed: int, epoch: int) -> Session:
        self.req += b"Q" + struct.pack("<III", n, seed, epoch)
        self.want.append(f"Q {n}")
        return self

    def add(self, x: np.ndarray, label: int) -> Session:
        self.req += b"A" + np.ascontiguousarray(x, "<f4").tobytes() + struct.pack("<i", label)
        self.want.append("A")
        return self

    def epoch(self, seed: int, epoch: int) -> Session:
        self.req += b"E" + struct.pack("<II", seed, epoch)
        self.want.append("E")
        return self

    def simple(self, cmd: bytes, arg: int | None = None) -> Session:
        self.req += cmd + (b"" if arg is None else struct.pack("<I", arg))
        if cmd not in (b"K", b"X"):
            self.want.append(cmd.decode())
        return self

    def run(self, tmp_path: Path, bundle: bytes, store: Path | None = None) -> tuple[int, list[Any]]:
        """The exit status and each command's answer: a status, or (status, loss), (status, outputs),
        the weights as bytes. A cut power (exit 77) answers the commands before it only."""
        path = tmp_path / "bundle.bin"
        path.write_bytes(bundle)
        store = store or tmp_path / "store.bin"
        proc = subprocess.run([_harness(), str(path), str(store)], input=bytes(self.req),
                              capture_output=True, timeout=300)
        assert b"Sanitizer" not in proc.stderr and proc.returncode < 128, proc.stderr.decode()[-2000:]
        out, at, answers = proc.stdout, 0, []
        for w in self.want:
            if at + 4 > len(out):
                break
            (status,) = struct.unpack_from("<i", out, at)
            at += 4
            if w == "step":
                answers.append((status, struct.unpack_from("<f", out, at)[0]))
                at += 4
            elif w.startswith("predict"):
                (floats,) = struct.unpack_from("<I", out, at)
                answers.append((status, np.frombuffer(out, "<f4", floats, at + 4)))
                at += 4 + 4 * floats
            elif w.startswith("Q"):
                n = int(w.split()[1])
                answers.append(np.frombuffer(out, "<u4", n, at))
                at += 4 * n
            elif w in ("O", "E"):
                size = 4 if w == "O" else 12
                answers.append((status, out[at:at + size]))
                at += size
            elif w == "W":
                (nw,) = struct.unpack_from("<I", out, at)
                answers.append(out[at + 4:at + 4 + 4 * nw])
                at += 4 + 4 * nw
            else:
                answers.append(status)
        return proc.returncode, answers


def _device(tmp_path: Path, bundle: bytes, batches: list[tuple[np.ndarray, np.ndarray]],
            predict: np.ndarray | None = None) -> tuple[list[tuple[int, float]], np.ndarray, np.ndarray]:
    """(status, loss) per step, the trained weights and predict's outputs, from the device API."""
    s = Session()
    for x, y in batches:
        s.step(x, y)
    s.simple(b"W")
    if predict is not None:
        s.predict(predict)
    code, answers = s.run(tmp_path, bundle)
    assert code == 0 and answers[0] == 0, (code, answers[:1])
    steps = answers[1:1 + len(batches)]
    w = np.frombuffer(answers[1 + len(batches)], "<f4")
    out = answers[-1][1] if predict is not None else np.zeros(0, np.float32)
    if predict is not None:
        assert answers[-1][0] == 0
    return steps, w, out


def _host_driven(tmp_path: Path, g: TrainingGraph, w0: list[np.ndarray], sched: bytes,
                 batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[float], bytes]:
    """The same steps driven over the protocol: losses and the trained weights blob read back."""
    blob = model_blob(g)
    with native_link(tmp_path) as link:
        link.load_model(blob, w0)
        link.upload(SCHEDULE, sched)
        losses = []
        for x, y in batches:
            link.upload(BATCH, encode_batch(x, y))
            losses.append(link.step(LR).loss)
        weights, _, _ = blob.split_weights(link.read_params(blob))
    return losses, weights


def _bundle(g: TrainingGraph, w0: list[np.ndarray], sched: bytes, lr: float = LR, snapshot: bool = True) -> bytes:
    blob = model_blob(g)
    return make_bundle(blob, w0, Schedule.decode(sched), forward_lowered(blob).schedule, lr, snapshot).encode()


CASES = [("mlp-digits", "sgd", "all"), ("cnn-digits", "adam", "bias+last:1"), ("bn-dropout", "momentum", "all")]


@pytest.mark.parametrize("name,optimizer,train", CASES, ids=[c[0] for c in CASES])
def test_training_equals_host_driven_bit_for_bit(tmp_path: Path, name: str, optimizer: str, train: str) -> None:
    model, g = _graph(name, optimizer, train)
    w0 = weights_of(model)
    plans = _poet_plans(g) or [keep_all(uncosted(g))]
    sched = lower(plans[0], g).schedule.encode()  # a POET plan where one fits: recomputes the device must match
    batches = _batches(g, 6)
    losses, want = _host_driven(tmp_path, g, w0, sched, batches)
    steps, got, _ = _device(tmp_path, _bundle(g, w0, sched), batches)
    assert [s for s, _ in steps] == [0] * len(batches)
    assert [struct.pack("<f", v) for _, v in steps] == [struct.pack("<f", v) for v in losses]
    assert got.tobytes() == want
    assert want != model_blob(g).split_weights(w0)[0]  # training moved them


def _eval_logits(model: torch.nn.Module, g: TrainingGraph, trained: np.ndarray, x: np.ndarray) -> np.ndarray:
    """PyTorch's evaluation-mode output with the device's weights, in float64."""
    blob = model_blob(g)
    flat = [np.asarray(w, np.float32).ravel() for w in weights_of(model)]
    at = 0
    for i, w in enumerate(flat):
        if not blob.frozen(i):
            flat[i] = trained[at:at + w.size].copy()
            at += w.size
    to_model(model, g, flat)
    m64 = model.double().eval()
    with torch.no_grad():
        return m64(torch.from_numpy(x).double()).numpy()


@pytest.mark.parametrize("name,optimizer,train", CASES, ids=[c[0] for c in CASES])
def test_predict_is_the_eval_forward(tmp_path: Path, name: str, optimizer: str, train: str) -> None:
    model, g = _graph(name, optimizer, train)
    w0 = weights_of(model)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    x = np.random.default_rng(9).standard_normal((g.batch * 2 + 1, *g.input_shape)).astype(np.float32)
    steps, w, out = _device(tmp_path, _bundle(g, w0, sched), _batches(g, 3), x)
    want = _eval_logits(model, g, w, x)
    out = out.reshape(want.shape)
    # fp32 against float64: a few ulps of each output's scale, nowhere near a change of class
    scale = 1.0 + np.abs(want).max()
    assert np.abs(out - want).max() <= 1e-4 * scale
    margin = np.sort(want, axis=1)
    clear = margin[:, -1] - margin[:, -2] > 1e-3 * scale
    assert (out.argmax(1) == want.argmax(1))[clear].all()
    if name == "bn-dropout":  # evaluation mode is not training mode: the batch's statistics would differ
        model.train()
        with torch.no_grad():
            torch.manual_seed(0)
            train_mode = model(torch.from_numpy(x[:g.batch]).double()).numpy()
        assert np.abs(train_mode - want[:g.batch]).max() > 1e-2 * scale


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "no-snapshot"])
def test_a_non_finite_loss_changes_nothing(tmp_path: Path, snapshot: bool) -> None:
    """The loss is checked at the loss node: a step whose loss overflows stops before any update, with
    or without a snapshot, and the next step runs as if it had never been tried."""
    model, g = _graph("mlp-digits", "adam", "all")
    w0 = weights_of(model)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    good = _batches(g, 2)
    huge = (np.full_like(good[0][0], 3e38), good[0][1])
    steps, w_after, _ = _device(tmp_path, _bundle(g, w0, sched, snapshot=snapshot), [*good, huge, good[0]])
    _, w_two, _ = _device(tmp_path, _bundle(g, w0, sched, snapshot=snapshot), [*good, good[0]])
    assert [s for s, _ in steps] == [0, 0, DIVERGED, 0]
    assert not np.isfinite(steps[2][1])
    assert w_after.tobytes() == w_two.tobytes()


def test_weights_that_overflow_are_undone_from_the_snapshot(tmp_path: Path) -> None:
    """A finite loss whose update overflows the weights (a learning rate of 1e38): undone from the
    snapshot, weights, Adam's state and step count as before."""
    model, g = _graph("mlp-digits", "sgd", "all")
    w0 = weights_of(model)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    b = [(x * 1e4, y) for x, y in _batches(g, 1)]  # gradients of 1e4 or so, a finite loss
    code, a = Session().simple(b"W").step(*b[0]).simple(b"W").run(tmp_path, _bundle(g, w0, sched, lr=1e38))
    assert code == 0 and a[2][0] == DIVERGED and np.isfinite(a[2][1])
    assert a[3] == a[1]


def test_without_a_snapshot_overflowed_weights_stop_the_device_until_restored(tmp_path: Path) -> None:
    model, g = _graph("mlp-digits", "sgd", "all")
    w0 = weights_of(model)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    b = [(x * 1e4, y) for x, y in _batches(g, 1)]
    x = np.zeros((1, *g.input_shape), np.float32)
    s = Session().simple(b"V").simple(b"W").step(*b[0]).step(*b[0]).predict(x).simple(b"V").simple(b"R")
    code, a = s.simple(b"W").step(*b[0]).run(tmp_path, _bundle(g, w0, sched, lr=1e38, snapshot=False))
    assert code == 0 and a[1] == 0
    assert a[3][0] == DIVERGED and a[4][0] == DIVERGED and a[5][0] == DIVERGED  # the step, then refused
    assert a[6] == DIVERGED  # never a save of non-finite weights
    assert a[7] == 0 and a[8] == a[2]  # restored the save taken before
    assert a[9][0] == DIVERGED  # the same step overflows again: the device is honest about it


def test_a_pager_that_will_not_open_changes_nothing(tmp_path: Path) -> None:
    """A plan that pages, the card pulled, no snapshot: the step and the prediction say PAGER and
    nothing ran, so the device is not stopped as a half-updated one would be; with the card back the
    same step trains as if the failed one had never been tried (found reading a fuzz-device report)."""
    model, g = _graph("mlp-digits", "sgd", "all")
    w0 = weights_of(model)
    s = lower(keep_all(uncosted(g)), g).schedule
    node = next(ins.node for ins in s.instrs if ins.op == COMPUTE and g.nodes[ins.node].kind == "forward")
    at = next(i for i, ins in enumerate(s.instrs) if ins.op == COMPUTE and ins.node == node)
    paged = Schedule(s.n_nodes, s.model_hash, s.arena_bytes, [*s.instrs[:at + 1], Instr(PAGE_OUT, node),
                                                               *s.instrs[at + 1:]]).encode()
    bundle = _bundle(g, w0, paged, snapshot=False)
    b = _batches(g, 1)
    x = np.zeros((1, *g.input_shape), np.float32)
    session = Session().simple(b"X", 1).step(*b[0]).predict(x).simple(b"W").simple(b"X", 0).step(*b[0])
    code, a = session.simple(b"W").run(tmp_path, bundle)
    _, want = _host_driven(tmp_path, g, w0, paged, b)
    assert code == 0 and a[0] == 0
    assert a[1][0] == PAGER and a[2][0] == PAGER
    assert a[3] == model_blob(g).split_weights(w0)[0]
    assert a[4][0] == 0 and a[5] == want


def _refused(tmp_path: Path, bundle: bytes) -> int:
    code, answers = Session().run(tmp_path, bundle)
    assert answers == [code]
    return code


def _recrc(data: bytearray) -> bytes:
    return bytes(data[:-4]) + struct.pack("<I", zlib.crc32(bytes(data[:-4])))


def test_damaged_bundles_are_refused_with_a_status(tmp_path: Path) -> None:
    model, g = _graph("cnn-digits", "adam", "bias+last:1")
    good = _bundle(g, weights_of(model), lower(keep_all(uncosted(g)), g).schedule.encode())
    b = Bundle.decode(good)
    assert _refused(tmp_path, good) == 0
    assert _refused(tmp_path, good[:-1]) == BUNDLE_E
    flipped = bytearray(good)
    flipped[100] ^= 1
    assert _refused(tmp_path, bytes(flipped)) == 4  # CRC
    swapped = Bundle(b.model, b.frozen, b.weights, b.forward, b.train, b.lr, b.pool_bytes).encode()
    assert _refused(tmp_path, swapped) == BUNDLE_E  # the forward schedule where the training one goes
    short = Bundle(b.model, b.frozen, b.weights[:-4], b.train, b.forward, b.lr, b.pool_bytes).encode()
    assert _refused(tmp_path, short) == 39  # RANGE: weights of another size
    rng = np.random.default_rng(5)
    codes: set[int] = set()
    for _ in range(60):  # damage inside the sections, the CRC made to match: refused, never a crash
        d = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            d[int(rng.integers(0, len(d) - 4))] ^= 1 << int(rng.integers(0, 8))
        codes.add(_refused(tmp_path, _recrc(d)))
    assert len(codes - {0}) >= 2, codes  # the model refused, a schedule's own CRC; weights are any floats


def test_pool_bytes_is_what_init_needs(tmp_path: Path) -> None:
    model, g = _graph("cnn-digits", "adam", "bias+last:1")
    b = Bundle.decode(_bundle(g, weights_of(model), lower(keep_all(uncosted(g)), g).schedule.encode()))
    tight = Bundle(b.model, b.frozen, b.weights, b.train, b.forward, b.lr, b.pool_bytes - 8).encode()
    # the harness gives init exactly the header's pool: the bundle's own is enough (0), and two words
    # fewer leave the larger schedule's arena short (ARENA): pool_bytes is exact, as host and C compute it
    assert _refused(tmp_path, b.encode()) == 0
    assert _refused(tmp_path, tight) == 8




NO_STATE, CUT = 42, 77


def _adam_bundle() -> tuple[TrainingGraph, bytes, list[tuple[np.ndarray, np.ndarray]]]:
    model, g = _graph("cnn-digits", "adam", "bias+last:1")
    bundle = _bundle(g, weights_of(model), lower(keep_all(uncosted(g)), g).schedule.encode())
    return g, bundle, _batches(g, 6, seed=11)


def _steps(s: Session, batches: list[tuple[np.ndarray, np.ndarray]]) -> Session:
    for x, y in batches:
        s.step(x, y)
    return s


def test_restore_continues_exactly_where_the_save_was(tmp_path: Path) -> None:
    g, bundle, b = _adam_bundle()
    store = tmp_path / "flash.bin"
    code, a = _steps(_steps(Session().simple(b"R"), b[:3]).simple(b"V").simple(b"W"), b[3:]).simple(b"W").run(
        tmp_path, bundle, store)
    assert code == 0 and a[1] == NO_STATE and a[5] == 0  # a new board has nothing to restore
    saved, uninterrupted = a[6], a[-1]
    # a reset: the weights are the bundle's until restored; then Adam's state and step count are too
    code, a = _steps(Session().simple(b"W").simple(b"R").simple(b"W"), b[3:]).simple(b"W").run(tmp_path, bundle, store)
    assert code == 0 and a[2] == 0
    assert a[1] != saved and a[3] == saved
    assert a[-1] == uninterrupted
    # whatever the pool held before (a reset scrambles it: 'I')
    code, a = _steps(Session().simple(b"I").simple(b"R"), b[3:]).simple(b"W").run(tmp_path, bundle, store)
    assert a[-1] == uninterrupted


def test_restore_refuses_another_models_state(tmp_path: Path) -> None:
    g, bundle, b = _adam_bundle()
    store = tmp_path / "flash.bin"
    _steps(Session(), b[:1]).simple(b"V").run(tmp_path, bundle, store)
    model, g2 = _graph("mlp-digits", "adam", "all")
    other = _bundle(g2, weights_of(model), lower(keep_all(uncosted(g2)), g2).schedule.encode())
    code, a = Session().simple(b"W").simple(b"R").simple(b"W").run(tmp_path, other, store)
    assert code == 0 and a[2] == NO_STATE and a[1] == a[3]  # refused, and nothing changed


def test_power_cuts_never_leave_a_mixture(tmp_path: Path) -> None:
    """The power goes at 24 seeded points of a save (erasing, writing the payload, writing the header):
    after the restart the restored state is one whole earlier save, the older one unless the cut came
    after the last byte, and training then continues to the uninterrupted run's weights."""
    g, bundle, b = _adam_bundle()
    code, a = _steps(_steps(_steps(Session(), b[:2]).simple(b"V").simple(b"W"), b[2:4]).simple(b"V").simple(b"W"),
                     b[4:]).simple(b"W").run(tmp_path, bundle, tmp_path / "ref.bin")
    first, second, uninterrupted = a[4], a[8], a[-1]
    base = tmp_path / "base.bin"
    _steps(Session(), b[:2]).simple(b"V").run(tmp_path, bundle, base)
    after_first = base.read_bytes()
    rng = np.random.default_rng(47)
    # the second save writes its slot: erase (a whole slot), payload, header; cut anywhere in it, or past it
    slot = (32 + 4 + 4 * (len(second) // 4) * 3 + 4 + 4095) // 4096 * 4096
    cuts = sorted({0, 1, 31, slot, slot + 3, *(int(c) for c in rng.integers(0, slot + 6000, 20))})
    seen = set()
    for cut in cuts:
        store = tmp_path / f"cut{cut}.bin"
        store.write_bytes(after_first)
        code, _ = _steps(Session().simple(b"R"), b[2:4]).simple(b"K", cut).simple(b"V").run(tmp_path, bundle, store)
        done = code == 0
        assert code in (0, CUT)
        code, a = Session().simple(b"R").simple(b"W").run(tmp_path, bundle, store)
        assert code == 0 and a[1] == 0
        assert a[2] in (first, second), f"cut after {cut} bytes: restored a mixture"
        assert (a[2] == second) == done, f"cut after {cut} bytes"
        seen.add(a[2] == second)
        # training continues from the restored save to the uninterrupted weights
        code, a = _steps(Session().simple(b"R"), b[2:] if a[2] == first else b[4:]).simple(b"W").run(
            tmp_path, bundle, store)
        assert a[-1] == uninterrupted
    assert seen == {False, True}  # cuts inside the save and after it


def test_epoch_order_is_the_hosts(tmp_path: Path) -> None:
    from poet.export.order import epoch_order
    g, bundle, _ = _adam_bundle()
    cases = [(n, seed, epoch) for n in (1, 2, 3, 10, 97, 256, 1000) for seed, epoch in ((0, 0), (7, 1), (2**31, 5))]
    s = Session()
    for n, seed, epoch in cases:
        s.order(n, seed, epoch)
    code, a = s.run(tmp_path, bundle)
    for (n, seed, epoch), got in zip(cases, a[1:], strict=True):
        want = epoch_order(n, seed, epoch)
        assert got.tolist() == want.tolist()
        assert sorted(want.tolist()) == list(range(n))  # a permutation
    assert epoch_order(1000, 7, 1).tolist() != epoch_order(1000, 7, 2).tolist()  # epochs differ
    assert epoch_order(1000, 7, 1).tolist() != list(range(1000))
    # poet train --order device: the run's epochs take their batches in the device's order
    from poet.models.datasets import load_dataset
    data = load_dataset("digits", limit=100)
    order = epoch_order(len(data.y_train), 4, 2)
    got = data.epoch_batches(16, 2, 4, "device")
    assert len(got) == len(data.y_train) // 16
    for k, (x, y) in enumerate(got):
        picked = order[16 * k:16 * (k + 1)]
        assert (x == data.x_train[picked]).all() and (y == data.y_train[picked]).all()


def test_an_epoch_over_stored_samples_is_the_host_driven_epoch(tmp_path: Path) -> None:
    """Samples collected into the store, then two epochs over them on the device, equal the same
    batches (poet.export.order) driven from the host over the protocol, bit for bit; a reset keeps the
    samples; a sample torn by a power cut is passed over."""
    from poet.export.order import epoch_order
    model, g = _graph("cnn-digits", "adam", "bias+last:1")
    w0 = weights_of(model)
    sched = lower(keep_all(uncosted(g)), g).schedule.encode()
    bundle = _bundle(g, w0, sched)
    rng = np.random.default_rng(21)
    n = 4 * g.batch + 3  # a partial last batch, left out as the host leaves it
    xs = rng.standard_normal((n, *g.input_shape)).astype(np.float32)
    ys = rng.integers(0, g.classes, n).astype(np.int32)
    store = tmp_path / "flash.bin"
    s = Session().simple(b"O")
    for x, y in zip(xs[:5], ys[:5], strict=True):
        s.add(x, int(y))
    code, a = s.run(tmp_path, bundle, store)
    assert code == 0 and a[1][0] == 0 and a[2:] == [0] * 5
    # a cut inside the sixth add: passed over by the next open; the rest after a "reset"
    code, _ = Session().simple(b"O").simple(b"K", 20).add(xs[5], int(ys[5])).run(tmp_path, bundle, store)
    assert code == CUT
    s = Session().simple(b"O")
    for x, y in zip(xs[5:], ys[5:], strict=True):
        s.add(x, int(y))
    s.simple(b"O").epoch(3, 0).epoch(3, 1).simple(b"W")
    code, a = s.run(tmp_path, bundle, store)
    assert code == 0
    assert struct.unpack("<I", a[1][1])[0] == 5 and struct.unpack("<I", a[-4][1])[0] == n
    steps = [struct.unpack("<IIf", a[k][1]) for k in (-3, -2)]
    assert [st[:2] for st in steps] == [(n // g.batch, 0)] * 2
    batches = []
    for epoch in range(2):
        order = epoch_order(n, 3, epoch)
        batches += [(xs[order[i:i + g.batch]], ys[order[i:i + g.batch]]) for i in range(0, n - g.batch + 1, g.batch)]
    losses, want = _host_driven(tmp_path, g, w0, sched, batches)
    assert a[-1] == want
    assert steps[0][2] == np.float32(np.mean(np.float64(losses[:n // g.batch])))
