"""The op table (poet.ops) against the firmware's (firmware/core/ops/optable.h), and everything the
host makes from it: the tracer's calls and backward ops, the graph file's attribute checks.

An op added on one side only, a number changed on one side, a kind or a slot count that differ: the
first test names each. The second shows the comparison catches them, on a copy of the C table edited
the way a mistake would edit it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from poet.graph import composite, handlers
from poet.graph.file import read_graph
from poet.graph.tracer import trace
from poet.ops import KINDS, N_ATTRS, OPS, PACKED, PARAM_SLOTS, Op, attrs_needed
from poet.paths import REPO_ROOT
from poet.plan.lowering.lower import blob_attrs
from torch import nn

OPTABLE = REPO_ROOT / "firmware" / "core" / "ops" / "optable.h"
MODEL_H = REPO_ROOT / "firmware" / "core" / "model.h"
ROW = re.compile(r"^\s*X\((\w+),\s*(\d+),\s*(\w+),\s*(\w+),\s*(\d+),\s*(\w+),\s*(\w+)\)")


def c_rows(text: str) -> dict[str, tuple[int, str, int, str]]:
    """NAME -> (number, kind, slot count, flag) of each row of optable.h's POET_OP_TABLE."""
    rows: dict[str, tuple[int, str, int, str]] = {}
    for line in text.splitlines():
        if "X(" not in line.split("/*")[0]:
            continue
        m = ROW.match(line)
        assert m, f"optable.h: a row not of the form X(NAME, NUMBER, KIND, FLAG, NATTRS, check, run): {line.strip()}"
        assert m[1] not in rows, f"optable.h: {m[1]} has two rows"
        rows[m[1]] = (int(m[2]), m[3], int(m[5]), m[4])
    return rows


def disagreements(ops: dict[str, Op], rows: dict[str, tuple[int, str, int, str]]) -> list[str]:
    out = []
    for name, op in ops.items():
        row = rows.get(name.upper())
        if row is None:
            out.append(f"{name}: in poet.ops, no row in optable.h")
            continue
        number, kind, nattrs, flag = row
        if number != op.code:
            out.append(f"{name}: opcode {op.code} on the host, {number} in the firmware")
        if kind != op.kind.upper():
            out.append(f"{name}: kind {op.kind} on the host, {kind} in the firmware")
        if nattrs != len(op.slots):
            out.append(f"{name}: {len(op.slots)} slots on the host ({', '.join(op.slots)}), {nattrs} in the firmware")
        if op.inplace != flag.endswith("INPLACE"):
            said = "in place" if op.inplace else "not in place"
            out.append(f"{name}: {said} on the host, flag {flag} in the firmware")
    out += [f"{name.lower()}: a row in optable.h, not in poet.ops" for name in rows if name.lower() not in ops]
    return out


def test_the_host_and_firmware_op_tables_agree() -> None:
    assert disagreements(OPS, c_rows(OPTABLE.read_text())) == []


def test_model_h_writes_no_opcode_of_its_own() -> None:
    """The C enum is made from optable.h: a number typed into model.h would be a second copy."""
    assert not re.findall(r"POET_OP_\w+\s*=\s*\d", MODEL_H.read_text())


@pytest.mark.parametrize("mistake", ["renumbered", "dropped", "slot", "kind", "in-place", "host-only"])
def test_the_comparison_catches_each_kind_of_mistake(mistake: str) -> None:
    text, ops = OPTABLE.read_text(), dict(OPS)
    if mistake == "renumbered":
        text = re.sub(r"X\(RELU, 3,", "X(RELU, 99,", text)
        want = "relu: opcode 3 on the host, 99 in the firmware"
    elif mistake == "dropped":
        text = "\n".join(line for line in text.splitlines() if "X(GELU_BWD," not in line)
        want = "gelu_bwd: in poet.ops, no row in optable.h"
    elif mistake == "slot":
        text = re.sub(r"(X\(LINEAR, 1, FORWARD, NONE, )5", r"\g<1>6", text)
        want = "linear: 5 slots on the host (B, in, out, w, b), 6 in the firmware"
    elif mistake == "kind":
        ops["mse"] = replace(OPS["mse"], kind="forward")
        want = "mse: kind forward on the host, LOSS in the firmware"
    elif mistake == "in-place":
        text = re.sub(r"X\(RELU_BWD, 18, BACKWARD, INPLACE,", "X(RELU_BWD, 18, BACKWARD, NONE,", text)
        want = "relu_bwd: in place on the host, flag NONE in the firmware"
    else:
        ops["erf"] = Op("erf", 91, "forward", ("n",))
        want = "erf: in poet.ops, no row in optable.h"
    assert text != OPTABLE.read_text() or ops != OPS, "the mistake was not made: the table's text changed"
    assert want in disagreements(ops, c_rows(text))


def test_every_record_is_whole() -> None:
    """Each op's backward ops are ops of the backward kind, its slots fit a node record, a packed slot
    says what it is packed from, and a traced op has a handler (its own, or the pointwise one)."""
    for op in OPS.values():
        assert op.kind in KINDS, op
        assert len(op.slots) <= N_ATTRS, op
        assert all(OPS[b].kind == "backward" for b in op.backward), op
        assert op.saves in ("x", "y", "", "rule"), op
        if op.calls:
            assert op.name in handlers.HANDLERS or op.flops > 0, f"{op.name}: traced from {op.calls} by no handler"
        for slot in op.slots:
            assert slot in PARAM_SLOTS or slot in PACKED or slot.startswith("f:") or slot.isidentifier(), slot
    assert set(handlers.HANDLERS) <= set(OPS)
    # every call an op is traced from has a handler; the others are the composites written out in ops
    assert set(handlers.FORWARD) == {c for op in OPS.values() for c in op.calls} | set(composite.NAMES)


class _Convs(nn.Module):
    """Every traced op of convolutional networks, once."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn, self.b = nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.Conv2d(2, 2, 1)
        self.pool, self.up = nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.Upsample(scale_factor=2)
        self.drop, self.fc, self.fc2 = nn.Dropout(0.25), nn.Linear(4 * 4 * 4, 3), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.a(x)))  # 2 x 8 x 8
        g = self.b(h)
        h = torch.cat([nn.functional.silu(h), nn.functional.hardswish(g)], dim=1)  # 4 x 8 x 8
        h = nn.functional.max_pool2d(h, 2) + self.up(self.pool(self.pool(h))) * 0.5  # 4 x 4 x 4
        h = nn.functional.hardsigmoid(h) - torch.clamp(h, -1, 1) / 2 + nn.functional.relu6(h)
        h = h * torch.sigmoid(h) + torch.tanh(nn.functional.hardtanh(h)) + nn.functional.gelu(h)
        h = h + torch.clamp(h, min=0)
        h = h + nn.functional.max_pool2d(h, 3, 1, 1)  # any other window: maxpool2d_general
        h = nn.functional.adaptive_avg_pool2d(h, 1) * h  # squeeze-and-excitation's broadcast
        lo, hi = h.chunk(2, dim=1)  # a split's pieces
        h = torch.cat([hi, lo], dim=1)
        m = h.mean(dim=(2, 3)) * torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1)
        return self.fc(self.drop(torch.flatten(h, 1))) + self.fc2(m)


class _Tokens(nn.Module):
    """Every traced op of transformers, once."""

    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos, self.norm, self.q = nn.Embedding(5, 8), nn.Embedding(4, 8), nn.LayerNorm(8), nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.tok(ids) + self.pos(torch.arange(4)))  # B x 4 x 8, the positions broadcast
        att = torch.softmax(self.q(h) @ h.transpose(1, 2), dim=-1)  # B x 4 x 4
        h = torch.bmm(att, h).permute(0, 2, 1).reshape(-1, 8, 4).permute(0, 2, 1).contiguous()
        return torch.log_softmax(self.head(h[:, 0]), dim=-1)


def _graphs() -> list:
    torch.manual_seed(0)
    return [trace(_Convs(), "convs", (1, 8, 8), 3, 2), trace(_Tokens(), "tokens", (4,), 3, 2, input_dtype="int64"),
            trace(nn.Conv2d(1, 1, 3, padding=1), "mse", (1, 4, 4), 1, 2, loss="mse"),
            trace(nn.Conv2d(1, 1, 3, padding=1), "l1", (1, 4, 4), 1, 2, loss="l1")]


def test_every_traced_op_round_trips_through_a_graph_file(tmp_path: Path) -> None:
    """Each op the tracer makes, forward and backward, written by `poet graph -o` and read back by
    `--graph`: the file's check asks for the attributes the table's slots need (avgpool2d's packed
    padding and strides were refused as a missing "pgeom"), and lowering fills every slot from them."""
    seen: set[str] = set()
    for g in _graphs():
        path = tmp_path / f"{g.model}.json"
        g.to_json(path)
        back = read_graph(path)
        assert back.nodes == g.nodes
        for n in g.nodes:
            seen.add(n.op)
            if n.kind != "optimizer":
                assert len(blob_attrs(n.op, n.attrs)) == len(OPS[n.op].slots)
                assert all(a in n.attrs for a in attrs_needed(OPS[n.op])), n
    traced = {op.name for op in OPS.values() if op.calls or op.kind == "loss"}
    traced |= {b for o in traced for b in OPS[o].backward}
    assert traced - seen == set(), "ops the tracer makes that no model here traces: add them to _Convs or _Tokens"


class _Depth(nn.Module):
    """A residual branch dropped per sample, written as torchvision.ops.stochastic_depth writes it
    (torchvision is no dependency of poet's): a bernoulli_ mask of [N, 1, 1, 1], divided, multiplied in."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.fc = nn.Conv2d(1, 2, 3, padding=1), nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        noise = torch.empty([h.shape[0]] + [1] * (h.ndim - 1), dtype=h.dtype).bernoulli_(0.8)
        noise.div_(0.8)
        return self.fc(torch.flatten(h + h * noise, 1))


def test_stochastic_depth_round_trips_with_its_row(tmp_path: Path) -> None:
    """Stochastic depth is dropout with a draw per row: the graph file carries its row (a sample's 32
    elements) and lowering packs it into the record's last slot; a dropout written before rows existed
    (no "row") lowers to 0, a draw per element, the meaning its blobs always had."""
    torch.manual_seed(0)
    g = trace(_Depth(), "depth", (1, 4, 4), 3, 2)
    path = tmp_path / "depth.json"
    g.to_json(path)
    back = read_graph(path)
    assert back.nodes == g.nodes
    drops = [n for n in back.nodes if n.op in ("dropout", "dropout_bwd")]
    assert len(drops) == 2 and all(n.attrs["row"] == 32 and n.attrs["n"] == 64 for n in drops)
    fwd = drops[0]
    assert abs(fwd.attrs["p"] - 0.2) < 1e-12 and fwd.attrs["salt"] == 0
    assert blob_attrs("dropout", fwd.attrs)[OPS["dropout"].slots.index("drop_row")] == 32
    old = {k: v for k, v in fwd.attrs.items() if k != "row"}
    assert blob_attrs("dropout", old)[4] == 0 and "row" not in attrs_needed(OPS["dropout"])


def test_a_broadcast_operands_repeats_are_the_third_slot() -> None:
    """add/sub/mul's b as [outer, inner] over a's [outer, r, inner]: the slot holds inner, or 0 for b a's
    trailing shape (inner = m), which every blob written before the slot says."""
    convs, tokens = _graphs()[:2]
    se = [n for n in convs.nodes if n.op in ("mul", "mul_bwd_a", "mul_bwd_b") and "inner" in n.attrs]
    assert [blob_attrs(n.op, n.attrs) for n in se] == [(2 * 4 * 16, 2 * 4, 1)] * 3
    pos = [n for n in tokens.nodes if n.op in ("add", "add_bwd") and n.attrs["m"] < n.attrs["n"]]
    assert pos and all("inner" not in n.attrs and blob_attrs(n.op, n.attrs)[2] == 0 for n in pos)
