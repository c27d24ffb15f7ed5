"""Write the fuzzers' seed corpora and built-in models from real blobs made by the host package.

    .venv/bin/python firmware/fuzz/make_seeds.py

writes firmware/fuzz/corpus/{model,schedule,protocol}/ and firmware/fuzz/seed_models.h (the models
fuzz_schedule validates against). The seeds are what poet itself sends: model blobs traced and lowered
from zoo models and small hand-built nets, keep-all, recompute-and-page and POET schedules, and whole
upload-and-step protocol sessions. The corpus directories are rewritten, not added to; the POET plans come
from a time-limited MILP, so a rerun on a busier machine may change those seeds (and the sessions using them).
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import sys
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "host"))
sys.path.insert(0, str(REPO / "tests"))

import fwhelpers  # noqa: E402
from poet.boards import load_board  # noqa: E402
from poet.device.protocol import AUX, BATCH, FEATURES, FROZEN, KEEP, MODEL, SCHEDULE, STAGE, VERIFY, WEIGHTS  # noqa: E402
from poet.graph.tracer import trace  # noqa: E402
from poet.graph.training_graph import TrainingGraph, with_optimizer  # noqa: E402
from poet.models.zoo import get_model  # noqa: E402
from poet.models.zoo.transformer import TransformerClassifier  # noqa: E402
from poet.ops import CODE  # noqa: E402
from poet.plan.cost.costs import costed, load_profile, uncosted  # noqa: E402
from poet.plan.lowering.lower import lower, model_blob  # noqa: E402
from poet.plan.lowering.modelblob import ModelBlob, encode_batch, f32_bits  # noqa: E402
from poet.plan.lowering.schedule import Schedule  # noqa: E402
from poet.plan.strategies import plan_with  # noqa: E402
from poet.plan.strategies.checkpoint_all import keep_all  # noqa: E402
from poet.plan.transform.placement import streamed, w8_candidates, weight_only_int8  # noqa: E402
from poet.plan.transform.static_int8 import rewrite  # noqa: E402

HELLO, BEGIN, CHUNK, END, STEP, READ = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
CHUNK_BYTES = 1000
PROTOCOL_POOL = 64 * 1024  # POET_FUZZ_POOL in fuzz_port.h
PROTOCOL_NV = 16 * 1024  # POET_FUZZ_NV in fuzz_port.h
SESSION_MAX = 8 * 1024  # bigger sessions (mlp-digits' 18 KB of weights) only slow the fuzzer down


def conv_bn_net() -> nn.Module:
    """Strided, grouped conv, batch norm and the pointwise ops the zoo's CNNs do not reach."""
    return nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(4), nn.Hardtanh(),
                         nn.Conv2d(4, 4, 1), nn.Tanh(), nn.Flatten(), nn.Linear(64, 8), nn.Sigmoid(),
                         nn.Linear(8, 3))


def conv_bn_eval_net() -> nn.Module:
    """The same with the batch norm in eval mode: frozen statistics, an affine map (ops 48 and 66)."""
    net = conv_bn_net()
    net[1].eval()
    return net


class QHead(nn.Module):
    """A frozen conv -> BN -> ReLU prefix and a trained BN -> ReLU -> mean -> linear head: fine-tuned
    `last:2` it runs its prefix in static int8 (quantize, conv2d_q with the BN folded and the ReLU fused,
    int8 weights and scales in flash) and its head fused (bn_relu_mean), updating in backward."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                  nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x).mean((2, 3)))


def static_int8(g: TrainingGraph) -> TrainingGraph:
    prefix = rewrite(g)
    assert prefix is not None, f"{g.model}: no layer runs in static int8"
    return prefix.graph


class BroadcastNet(nn.Module):
    """Token, position and type embeddings (all three id sources) summed with broadcasting adds and
    subs, a select of the first token: the ops of BERT's embedding and pooler in a blob that fits 4 KiB."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(10, 8), nn.Embedding(4, 8), nn.Embedding(2, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids) + self.pos(torch.arange(4))
        h = h - self.typ(torch.zeros(4, dtype=torch.long))
        return self.head(torch.tanh(h[:, 0]))


def traced(name: str, build: Callable[[], nn.Module], shape: tuple[int, ...], classes: int, batch: int,
           dtype: str = "float32", train: str = "all", optimizer: str = "sgd",
           loss: str = "cross_entropy") -> TrainingGraph:
    torch.manual_seed(0)
    return with_optimizer(trace(build(), name, shape, classes, batch, input_dtype=dtype, train=train, loss=loss),
                          optimizer)


class SmallOps(nn.Module):
    """The ops small models use besides convs and dense layers: average pooling with padding, nearest
    upsampling, a cat of two branches, SiLU, hardswish and hardsigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(1, 2, 3, padding=1), nn.Conv2d(1, 2, 1)
        self.pool, self.up = nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.Upsample(scale_factor=2)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.cat([nn.functional.silu(self.a(x)), nn.functional.hardswish(self.b(x))], dim=1)
        h = self.up(self.pool(h))
        return self.fc(nn.functional.hardsigmoid(torch.flatten(h, 1)))


class TinyKws(nn.Module):
    """DS-CNN's shape in miniature: a rectangular strided conv padded unevenly per axis, dropout in
    training mode (the mask made from the step), a depthwise-separable block, a rectangular pool."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.drop = nn.Conv2d(1, 3, (5, 2), 2, (2, 0)), nn.Dropout(0.25)
        self.dw, self.pw = nn.Conv2d(3, 3, 3, padding=1, groups=3), nn.Conv2d(3, 4, 1)
        self.pool, self.fc = nn.AvgPool2d((5, 2)), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.stem(x)))
        h = nn.functional.dropout(torch.relu(self.pw(torch.relu(self.dw(h)))), 0.5, self.training)
        return self.fc(torch.flatten(self.pool(h), 1))


class StemNet(nn.Module):
    """The ops torchvision's small networks brought (issue 49): ResNet's padded 3x3/2 max pool and
    SqueezeNet's ceil_mode one on odd maps, a squeeze-and-excitation scale broadcast over its map, and a
    residual branch dropped per sample (stochastic depth: a dropout drawn per row)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.se, self.fc = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 1), nn.Linear(4 * 2 * 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.max_pool2d(torch.relu(self.a(x)), 3, 2, 1)  # 8x8 -> 4x4
        h = nn.functional.hardsigmoid(self.se(nn.functional.adaptive_avg_pool2d(h, 1))) * h
        noise = torch.empty([h.shape[0], 1, 1, 1]).bernoulli_(0.75)
        noise.div_(0.75)
        h = nn.functional.max_pool2d(h + h * noise, 3, 2, ceil_mode=True)  # -> 2x2
        return self.fc(torch.flatten(h, 1))


class QStem(nn.Module):
    """StemNet's frozen body in static int8 (`last:1`): conv + BN + ReLU6, an int8 max pool at its input's
    scale, squeeze-and-excitation as mean_q, conv2d_q with hardsigmoid and mul_q, a conv with hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.se, self.b, self.fc = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 3, padding=1), nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.max_pool2d(nn.functional.relu6(self.bn(self.a(x))), 3, 2, 1)
        h = nn.functional.hardsigmoid(self.se(nn.functional.adaptive_avg_pool2d(h, 1))) * h
        return self.fc(torch.flatten(nn.functional.hardswish(self.b(h)), 1))


class SplitShuffle(nn.Module):
    """ShuffleNetV2's unit: chunk, a branch on one half, cat, the channel shuffle; unequal split pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.branch, self.fc = nn.Conv2d(2, 2, 1), nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=1)
        h = torch.cat((x1, torch.relu(self.branch(x2))), dim=1)
        h = torch.transpose(h.view(h.shape[0], 2, 2, 4, 4), 1, 2).contiguous().view(h.shape[0], 4, 4, 4)
        a, rest = torch.split(h, [1, 3], dim=1)
        return self.fc(torch.flatten(torch.cat((a, rest[:, :1] * 2), 1), 1))


def issue49_models() -> list[TrainingGraph]:
    """StemNet in fp32 and QStem's int8 prefix, also at 7x7: its staged int8 input is 98 B, and the swap slots
    after it must still start 4-aligned (fuzz_model's invariant; firmware/core/model.c swap_off); SplitShuffle's
    slice pieces."""
    return [traced("stem", StemNet, (1, 8, 8), 3, 2, optimizer="momentum"),
            static_int8(traced("q-stem", QStem, (1, 8, 8), 3, 2, train="last:1")),
            static_int8(traced("q-stem-7", QStem, (1, 7, 7), 3, 2, train="last:1")),
            traced("split-shuffle", SplitShuffle, (4, 4, 4), 3, 2, optimizer="momentum")]


def autoencoder() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 6))


def zoo(name: str, batch: int, train: str = "all", optimizer: str = "sgd") -> TrainingGraph:
    model, spec = get_model(name)
    return traced(name, lambda: model, spec.input_shape, spec.classes, batch, spec.input_dtype, train, optimizer)


def tiny_transformer() -> TrainingGraph:
    return traced("tiny-transformer",
                  lambda: TransformerClassifier(vocab=20, seq_len=8, d_model=16, heads=2, d_ff=32, classes=3),
                  (8,), 3, 1, "int64")


def with_adam(blob: ModelBlob) -> ModelBlob:
    """A hand-built net stepping with Adam: two state words per trained element in the pool."""
    adam = (2, f32_bits(0.9), f32_bits(0.999), f32_bits(1e-8))
    return replace(blob, nodes=[*blob.nodes[:-1], replace(blob.nodes[-1], attrs=adam)])


def graph_schedules(g: TrainingGraph) -> list[Schedule]:
    """Keep-all, and POET at half the keep-all peak where the MILP finds a plan (recompute, paging)."""
    plans = [keep_all(uncosted(g))]
    board = load_board("nrf52840")
    cg = costed(g, board, load_profile(board.name), estimate=True)
    poet = plan_with("poet", cg, plans[0].peak_bytes // 2, 50 * cg.one_pass_s, time_limit_s=5.0)
    if poet.status in ("optimal", "feasible"):
        plans.append(poet)
    return [lower(p, g).schedule for p in plans]


def frame_records(requests: list[tuple[int, bytes]]) -> bytes:
    """fuzz_protocol's record form [type][seq][u16 len][payload]: the harness adds COBS and CRC.
    Requests are numbered 1, 2, ... as a host numbers them (a repeat of a number is a retransmission)."""
    return b"".join(struct.pack("<BBH", t, 1 + i % 255, len(p)) + p for i, (t, p) in enumerate(requests))


def raw_frames(requests: list[tuple[int, bytes]]) -> bytes:
    from poet.device.framing import encode_frame

    return b"".join(encode_frame(t, 1 + i % 255, p) for i, (t, p) in enumerate(requests))


def upload(blob: int, data: bytes) -> list[tuple[int, bytes]]:
    reqs = [(BEGIN, struct.pack("<BI", blob, len(data)))]
    for off in range(0, len(data), CHUNK_BYTES):
        reqs.append((CHUNK, struct.pack("<BI", blob, off) + data[off:off + CHUNK_BYTES]))
    return reqs + [(END, bytes([blob]))]


def session(blob: ModelBlob, sched: Schedule, seed: int, token_vocab: int = 0) -> list[tuple[int, bytes]]:
    """HELLO, every blob uploaded, two steps, the weights read back: what `poet run` sends."""
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-0.3, 0.3, size=n).astype(np.float32) for n in blob.param_elems]
    if token_vocab:
        x = rng.integers(0, token_vocab, size=blob.x_elems).astype(np.float32)
    else:
        x = rng.standard_normal(blob.x_elems).astype(np.float32)
    classes = min((n.attrs[1] for n in blob.nodes if n.op == CODE["cross_entropy"]), default=1)
    labels = rng.integers(0, classes, size=blob.batch).astype(np.int32)
    reqs = [(HELLO, b"")]
    trained, frozen, aux = blob.split_weights(weights)
    # a model with frozen parameters puts them in nv storage (flash) after itself, and those it streams
    # on the aux storage after the swap area: checked first (VERIFY: not there yet), uploaded, checked again
    reqs += upload(MODEL, blob.encode()) + (upload(FROZEN, frozen) if frozen else [])
    if aux:
        check = (VERIFY, struct.pack("<BI", AUX, zlib.crc32(aux)))
        reqs += [check, *upload(AUX, aux), check]
    reqs += upload(WEIGHTS, trained)
    reqs += upload(SCHEDULE, sched.encode()) + upload(BATCH, encode_batch(x, labels, blob.x_scale(weights)))
    reqs += [(STEP, struct.pack("<fH", 0.05, 60)), (STEP, struct.pack("<fH", 0.05, 3))]
    reqs.append((READ, struct.pack("<BIH", WEIGHTS, 0, min(blob.param_bytes, 64))))
    if frozen:
        reqs.append((READ, struct.pack("<BIH", FROZEN, 0, min(blob.frozen_bytes, 64))))
    return reqs


def features_session(blob: ModelBlob, sched: Schedule, seed: int) -> list[tuple[int, bytes]]:
    """A session with the feature cache (FEATURES): a step keeping the first forward tensor past the swap
    area and aux weights, a batch staged from it in two requests (and one refused label), and its step."""
    reqs = session(blob, sched, seed)[:-1]  # the steps run; the READ after them dropped
    node = next(i for i, n in enumerate(blob.nodes) if n.kind == fwhelpers.KIND_FORWARD and n.arena_bytes)
    at = -(-(blob.aux_at + blob.aux_bytes) // 512) * 512
    row = blob.nodes[0].bytes // blob.batch
    reqs += [(FEATURES, struct.pack("<BHI", KEEP, node, at)), (STEP, struct.pack("<fH", 0.05, 60))]
    entries = [struct.pack("<Ii", at + r * row, 0) for r in range(blob.batch)]
    half = blob.batch // 2
    reqs += [(FEATURES, struct.pack("<BHH", STAGE, blob.batch, 0) + b"".join(entries[:half])),
             (FEATURES, struct.pack("<BHH", STAGE, blob.batch, half) + struct.pack("<Ii", at, 1 << 20)),
             (FEATURES, struct.pack("<BHH", STAGE, blob.batch, half) + b"".join(entries[half:])),
             (STEP, struct.pack("<fH", 0.05, 7))]
    return reqs


def write(dirname: str, data: bytes) -> None:
    d = HERE / "corpus" / dirname
    d.mkdir(parents=True, exist_ok=True)
    # content-addressed, like libFuzzer's own corpus files: rewriting a seed never duplicates it
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def c_array(name: str, data: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    return f"static const uint8_t {name}[{len(data)}] = {{\n    " + ",\n    ".join(rows) + "\n};\n"


def main() -> None:
    for d in ("model", "schedule", "protocol"):
        shutil.rmtree(HERE / "corpus" / d, ignore_errors=True)
    mlp, cnn = fwhelpers.mlp(), fwhelpers.cnn()
    digits, transformer = zoo("mlp-digits", 2), tiny_transformer()
    # fuzz_schedule's eight models (mode bits 0-2), each with the schedules poet would send for it:
    # between them every optimizer, frozen parameters, batch norm with running statistics, strided
    # and grouped convs, attention's ops
    mlp_adam = with_adam(mlp.blob)
    conv_bn = traced("conv-bn", conv_bn_net, (2, 8, 8), 3, 2, optimizer="adam")
    tuned = zoo("mlp-digits", 2, train="last:1", optimizer="momentum")
    bcast = traced("broadcast", BroadcastNet, (4,), 3, 2, "int64", optimizer="momentum")
    fixed: list[tuple[ModelBlob, list[Schedule]]] = [
        (mlp.blob, [fwhelpers.keep_all(mlp.blob), fwhelpers.frugal(mlp.blob)]),
        (cnn.blob, [fwhelpers.keep_all(cnn.blob), fwhelpers.frugal(cnn.blob)]),
        (model_blob(digits), graph_schedules(digits)),
        (model_blob(transformer), graph_schedules(transformer)),
        (mlp_adam, [fwhelpers.keep_all(mlp_adam), fwhelpers.frugal(mlp_adam)]),
        (model_blob(conv_bn), graph_schedules(conv_bn)),
        (model_blob(tuned), graph_schedules(tuned)),
        (model_blob(bcast), graph_schedules(bcast)),
    ]
    for index, (_, scheds) in enumerate(fixed):
        for s in scheds:
            for flags in (0x20, 0x38):  # pool of 1 MiB; also with CRC and hash fixed up
                write("schedule", bytes([index | flags]) + s.encode())
    header = ["/* Generated by make_seeds.py: the models fuzz_schedule validates schedules against. */",
              "#ifndef POET_FUZZ_SEED_MODELS_H", "#define POET_FUZZ_SEED_MODELS_H", "",
              "#include <stdint.h>", "", f"#define FUZZ_N_MODELS {len(fixed)}u", ""]
    for index, (blob, _) in enumerate(fixed):
        header.append(c_array(f"fuzz_model{index}", blob.encode()))
    names = ", ".join(f"fuzz_model{i}" for i in range(len(fixed)))
    lens = ", ".join(f"sizeof fuzz_model{i}" for i in range(len(fixed)))
    header += [f"static const uint8_t *const fuzz_models[FUZZ_N_MODELS] = {{{names}}};",
               f"static const uint32_t fuzz_model_lens[FUZZ_N_MODELS] = {{{lens}}};", "", "#endif", ""]
    (HERE / "seed_models.h").write_text("\n".join(header))

    qhead = static_int8(traced("q-head", QHead, (1, 6, 6), 3, 2, train="last:2", optimizer="adam"))
    # the same with its int8 conv weights on the aux storage, streamed through the stream buffer
    qhead_sd = streamed(qhead, {qhead.params[n.attrs["w"]][0] for n in qhead.nodes if n.op == "conv2d_q"})
    assert model_blob(qhead_sd).aux_bytes > 0
    kws = traced("tiny-kws", TinyKws, (1, 10, 5), 3, 2, optimizer="momentum")
    # an autoencoder fine-tuning its biases, its two dense weights stored int8 (weight-only, fp32 compute)
    ae_bias = traced("ae-bias", autoencoder, (6,), 6, 2, train="bias", loss="mse")
    ae_w8 = weight_only_int8(ae_bias, set(w8_candidates(ae_bias)))
    assert len(ae_w8.int8_params) == 2
    extra = [model_blob(g) for g in (zoo("lenet", 1, optimizer="adam"), zoo("cnn-digits", 1),
                                     zoo("cnn-digits", 1, train="bias+last:1"),
                                     traced("conv-bn-eval", conv_bn_eval_net, (2, 8, 8), 3, 1), qhead, qhead_sd,
                                     traced("small-ops", SmallOps, (1, 6, 6), 3, 2),
                                     traced("ae-mse", autoencoder, (6,), 6, 2, loss="mse"),
                                     traced("ae-l1", autoencoder, (6,), 6, 2, loss="l1"), kws, ae_w8,
                                     *issue49_models())]
    for blob in [b for b, _ in fixed] + extra:
        write("model", blob.encode())

    # protocol sessions on nets that fit fuzz_port's 64 KiB pool, in both input modes; the last is the
    # static-int8 ones, their frozen weights int8 in nv storage or on the aux storage
    sessions = [*fixed, (model_blob(qhead), graph_schedules(qhead)), (model_blob(qhead_sd), graph_schedules(qhead_sd)),
                (model_blob(kws), graph_schedules(kws)), (model_blob(ae_w8), graph_schedules(ae_w8))]
    for k, (blob, scheds) in enumerate(sessions):
        vocab = {3: 20, 7: 10}.get(k, 0)
        if (blob.pool.fixed + max(s.arena_bytes for s in scheds) > PROTOCOL_POOL
                or blob.pool.flash.total > PROTOCOL_NV):
            continue
        for s in scheds:
            reqs = session(blob, s, seed=k, token_vocab=vocab)
            if len(raw_frames(reqs)) > SESSION_MAX:
                continue
            write("protocol", b"\x00" + frame_records(reqs))
            write("protocol", b"\x01" + raw_frames(reqs))
    features = features_session(mlp.blob, fwhelpers.keep_all(mlp.blob), seed=1)
    write("protocol", b"\x00" + frame_records(features))
    write("protocol", b"\x01" + raw_frames(features))
    print(f"seeds in {HERE / 'corpus'}, models in {HERE / 'seed_models.h'}")


if __name__ == "__main__":
    main()
