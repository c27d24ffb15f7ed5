"""Hand-built training graphs and schedules for firmware tests.

The real graph tracer and planner live in the host package; these tests need
graphs that do not depend on them, so a failure points at the firmware or the
formats, not at the tracer.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "host"))

from poet.device import firmware  # noqa: E402
from poet.device.link import Link, ProcessPort  # noqa: E402
from poet.ops import CODE  # noqa: E402
from poet.plan.lowering.modelblob import (  # noqa: E402
    KIND_BACKWARD,
    KIND_FORWARD,
    KIND_INPUT,
    KIND_LOSS,
    KIND_OPTIMIZER,
    BlobNode,
    ModelBlob,
    conv_kernel,
)
from poet.plan.lowering.schedule import COMPUTE, FREE, PAGE_IN, PAGE_OUT, RECOMPUTE, Instr, Schedule  # noqa: E402


@dataclass
class Net:
    blob: ModelBlob
    layers: list[tuple]          # the layer specs, for building the PyTorch twin
    in_shape: tuple[int, ...]    # one sample's input shape
    classes: int
    param_shapes: list[tuple[int, ...]]


def build_net(batch: int, in_shape: tuple[int, ...], layers: list[tuple], classes: int) -> Net:
    """layers: ("linear", out) | ("conv2d", O, k, pad) | ("relu",) | ("maxpool2d",) | ("flatten",).
    Backward nodes are made in reverse, each reading the gradient of the layer after it."""
    B = batch
    nodes: list[BlobNode] = []
    params: list[tuple[int, ...]] = []
    shape = tuple(in_shape)
    x_elems = B * int(np.prod(shape))
    nodes.append(BlobNode(CODE["input"], KIND_INPUT, (), 4 * x_elems, (x_elems,)))
    fwd: list[tuple[int, tuple, tuple, tuple, tuple]] = []  # (node, spec, in shape, attrs, out shape)
    cur = 0
    for spec in layers:
        kind = spec[0]
        if kind == "linear":
            (fin,) = shape
            out = spec[1]
            w, b = len(params), len(params) + 1
            params += [(out, fin), (out,)]
            attrs = (B, fin, out, w, b)
            oshape: tuple[int, ...] = (out,)
            op = CODE["linear"]
        elif kind == "conv2d":
            C, H, W = shape
            filters, k, pad = spec[1], spec[2], spec[3]
            w, b = len(params), len(params) + 1
            params += [(filters, C, k, k), (filters,)]
            attrs = (B, C, H, W, filters, conv_kernel(k, k, pad), pad, w, b)
            oshape = (filters, H + 2 * pad - k + 1, W + 2 * pad - k + 1)
            op = CODE["conv2d"]
        elif kind == "relu":
            attrs, oshape, op = (B * int(np.prod(shape)),), shape, CODE["relu"]
        elif kind == "maxpool2d":
            C, H, W = shape
            attrs, oshape, op = (B, C, H, W), (C, H // 2, W // 2), CODE["maxpool2d"]
        elif kind == "flatten":
            attrs, oshape, op = (B * int(np.prod(shape)),), (int(np.prod(shape)),), CODE["flatten"]
        else:
            raise ValueError(spec)
        nodes.append(BlobNode(op, KIND_FORWARD, (cur,), 4 * B * int(np.prod(oshape)), attrs))
        fwd.append((len(nodes) - 1, spec, shape, attrs, oshape))
        cur = len(nodes) - 1
        shape = oshape
    logits = cur
    nodes.append(BlobNode(CODE["cross_entropy"], KIND_LOSS, (logits,), 4, (B, classes)))
    nodes.append(BlobNode(CODE["cross_entropy_bwd"], KIND_BACKWARD, (logits,), 4 * B * classes, (B, classes)))
    g = len(nodes) - 1
    for idx in range(len(fwd) - 1, -1, -1):
        node, spec, ishape, attrs, _ = fwd[idx]
        x = nodes[node].deps[0]
        need = 1 if idx > 0 else 0
        gx_bytes = 4 * B * int(np.prod(ishape))
        if spec[0] == "linear":
            nodes.append(BlobNode(CODE["linear_bwd"], KIND_BACKWARD, (g, x), gx_bytes if need else 0, attrs + (need,)))
        elif spec[0] == "conv2d":
            nodes.append(BlobNode(CODE["conv2d_bwd"], KIND_BACKWARD, (g, x), gx_bytes if need else 0, attrs + (need,)))
        elif spec[0] == "relu":
            nodes.append(BlobNode(CODE["relu_bwd"], KIND_BACKWARD, (g, node), gx_bytes, attrs))
        elif spec[0] == "maxpool2d":
            nodes.append(BlobNode(CODE["maxpool2d_bwd"], KIND_BACKWARD, (g, x), gx_bytes, attrs))
        elif spec[0] == "flatten":
            nodes.append(BlobNode(CODE["flatten_bwd"], KIND_BACKWARD, (g,), gx_bytes, attrs))
        g = len(nodes) - 1
    nodes.append(BlobNode(CODE["sgd"], KIND_OPTIMIZER, (), 0, ()))
    blob = ModelBlob(batch=B, x_elems=x_elems, param_elems=[int(np.prod(p)) for p in params], nodes=nodes)
    return Net(blob, layers, tuple(in_shape), classes, params)


def mlp(batch: int = 4, features: int = 8, hidden: int = 16, classes: int = 5) -> Net:
    return build_net(batch, (features,), [("linear", hidden), ("relu",), ("linear", classes)], classes)


def cnn(batch: int = 2, channels: int = 2, hw: int = 6, filters: int = 3, classes: int = 4) -> Net:
    return build_net(batch, (channels, hw, hw),
                     [("conv2d", filters, 3, 1), ("relu",), ("maxpool2d",), ("flatten",), ("linear", classes)],
                     classes)


class _Arena:
    """First-fit placement over the live tensors, 4-byte aligned."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, int]] = {}
        self.extent = 0

    def alloc(self, node: int, size: int) -> int:
        off = 0
        for lo, hi in sorted(self.live.values()):
            if off + size <= lo:
                break
            off = max(off, (hi + 3) // 4 * 4)
        self.live[node] = (off, off + size)
        self.extent = max(self.extent, off + size)
        return off

    def free(self, node: int) -> None:
        del self.live[node]


def _finish(blob: ModelBlob, ops: list[tuple[int, int]]) -> Schedule:
    arena = _Arena()
    instrs = []
    for op, node in ops:
        size = blob.nodes[node].arena_bytes
        off = 0
        if op in (COMPUTE, RECOMPUTE, PAGE_IN) and size:
            off = arena.alloc(node, size)
        elif op == FREE:
            arena.free(node)
        instrs.append(Instr(op, node, off))
    return Schedule(len(blob.nodes), blob.hash(), arena.extent, instrs)


def keep_all(blob: ModelBlob) -> Schedule:
    """Every tensor computed once and kept to the end: the reference schedule."""
    ops = [(COMPUTE, i) for i in range(len(blob.nodes))]
    ops += [(FREE, i) for i, n in enumerate(blob.nodes) if n.arena_bytes]
    return _finish(blob, ops)


def frugal(blob: ModelBlob) -> Schedule:
    """Frees forward tensors as soon as the forward pass is done with them, then brings them back
    for the backward pass: even-numbered ones by paging, odd ones by recomputation (the input is the
    staged batch, read in place: never in the arena). Stage order as docs/spec.md section 1: page_in,
    computes ascending, page_out, free."""
    nodes = blob.nodes
    n = len(nodes)
    consumers: list[list[int]] = [[] for _ in range(n)]
    for i, nd in enumerate(nodes):
        for d in nd.deps:
            consumers[d].append(i)
    first_bwd = next(i for i, nd in enumerate(nodes) if nd.kind == KIND_BACKWARD)
    pageable = {i for i, nd in enumerate(nodes)
                if nd.arena_bytes and nd.kind == KIND_FORWARD and i % 2 == 0}
    resident: set[int] = set()
    ops: list[tuple[int, int]] = []

    def ensure(d: int, page_in: list[int], recompute: set[int]) -> None:
        """Bring dep d back for the current stage: page it in, or recompute it (and its deps)."""
        if nodes[d].arena_bytes == 0 or d in resident or d in page_in or d in recompute:
            return
        if d in pageable:
            page_in.append(d)
        else:
            assert nodes[d].kind in (KIND_FORWARD, KIND_LOSS), f"node {d} must stay resident"
            for dd in nodes[d].deps:
                ensure(dd, page_in, recompute)
            recompute.add(d)

    for t in range(n):
        page_in: list[int] = []
        recompute: set[int] = set()
        for d in nodes[t].deps:
            ensure(d, page_in, recompute)
        ops += [(PAGE_IN, d) for d in sorted(page_in)]
        ops += [(RECOMPUTE, d) for d in sorted(recompute)]
        ops.append((COMPUTE, t))
        resident |= set(page_in) | recompute | ({t} if nodes[t].arena_bytes else set())
        if t in pageable:
            ops.append((PAGE_OUT, t))
        frees = []
        for r in sorted(resident):
            later = [c for c in consumers[r] if c > t]
            early_ok = nodes[r].kind in (KIND_INPUT, KIND_FORWARD, KIND_LOSS)
            if t < first_bwd:
                keep = any(c < first_bwd for c in later) or (not early_ok and bool(later))
            else:
                keep = (t + 1 in later) or (not early_ok and bool(later))
            if not keep:
                frees.append(r)
        ops += [(FREE, r) for r in frees]
        resident -= set(frees)
    return _finish(blob, ops)


def predicted_peaks(blob: ModelBlob, sched: Schedule) -> tuple[int, int]:
    """Peak of resident bytes and peak extent, counted as docs/spec.md section 1 says."""
    live = peak = extent = 0
    for ins in sched.instrs:
        size = blob.nodes[ins.node].arena_bytes
        if ins.op in (COMPUTE, RECOMPUTE, PAGE_IN) and size:
            live += size
            peak = max(peak, live)
            extent = max(extent, ins.offset + size)
        elif ins.op == FREE:
            live -= size
    return peak, extent


def init_params(net: Net, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape in net.param_shapes:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        out.append((rng.uniform(-1, 1, size=shape) / np.sqrt(fan_in)).astype(np.float32))
    return out


def make_batches(net: Net, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    B = net.blob.batch
    return [(rng.standard_normal((B, *net.in_shape)).astype(np.float32),
             rng.integers(0, net.classes, size=B).astype(np.int32)) for _ in range(n)]


@contextlib.contextmanager
def native_link(workdir: Path, target: str = "linux", timeout_s: float = 10.0,
                env: dict[str, str] | None = None, args: Sequence[str] = ()) -> Iterator[Link]:
    """The native runtime as a child process speaking the protocol on stdin/stdout; `env` adds to
    the inherited environment (e.g. POET_MARK_LOG); `args` to its command line (--pool, --nv)."""
    cmd = [*firmware.command(target), *args]
    proc = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=None if env is None else {**os.environ, **env})
    link = Link(ProcessPort(proc), timeout_s=timeout_s)
    try:
        yield link
    finally:
        link.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.returncode == 0, f"{cmd} exited with status {proc.returncode}"


def assert_models_refused(workdir: Path, good: Sequence[ModelBlob], bad: Sequence[tuple[ModelBlob, int]]) -> None:
    """The native runtime takes every blob in `good` and refuses each blob in `bad` with MODEL, its detail the
    index of the node named beside it (the first node its checks refuse)."""
    import pytest
    from poet.device.protocol import MODEL, DeviceError

    with native_link(workdir) as link:
        for blob in good:
            link.upload(MODEL, blob.encode())
        for blob, node in bad:
            with pytest.raises(DeviceError) as e:
                link.upload(MODEL, blob.encode())
            assert e.value.name == "MODEL" and e.value.detail == node, (e.value, node)
