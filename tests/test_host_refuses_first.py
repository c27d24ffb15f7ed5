"""Issue 49: the host refuses, before anything boots, every model the board would refuse. Bug 2 was a max pool on
an odd map that the tracer and planner passed and the board's check refused at upload (MODEL, detail 7).

A sweep of the call forms the layout and pooling ops take (windows, strides, padding, ceil_mode, odd and one-row
maps, 1-d and 2-d, splits), each traced as a user's model would be: either the host refuses it in one line
(a PoetError), or its lowered model blob, fp32 and with its frozen prefix in static int8, is one the board's own
parser and op checks (the native runtime, the same C as every port's) accept. Every traced op of test_op_table's
networks goes the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import needs_tools
from fwhelpers import native_link
from poet.device.protocol import MODEL
from poet.errors import PoetError
from poet.graph.tracer import trace
from poet.graph.training_graph import TrainingGraph
from poet.plan.lowering.lower import check_runtime, model_blob
from poet.plan.transform.static_int8 import rewrite
from test_op_table import _graphs
from torch import nn

pytestmark = needs_tools("cc", "make")


class _Net(nn.Module):
    """A 1x1 conv (4-d inputs), the call under test, then a linear head: the call reads an activation and
    its gradient flows."""

    def __init__(self, body: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]) -> None:
        super().__init__()
        self.conv, self.body = nn.Conv2d(shape[0], shape[0], 1), body
        self.fc = nn.Linear(torch.flatten(body(torch.zeros(1, *shape)), 1).shape[1], 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)) if x.dim() == 4 else x
        return self.fc(torch.flatten(self.body(h), 1))


def _models() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    F = nn.functional
    out: list[tuple[str, nn.Module, tuple[int, ...]]] = []

    def add(name: str, body: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]) -> None:
        try:
            out.append((name, _Net(body, shape), shape))
        except RuntimeError:  # a window larger than the padded map: PyTorch itself refuses the call
            pass

    for (k, s, p, ceil), size in itertools.product(
            [(2, 2, 0, False), (3, 2, 1, False), (3, 2, 0, True), (2, 1, 0, False), (3, 3, 1, True), (5, 2, 2, False),
             (3, 1, 1, False)], [(5, 5), (6, 7), (1, 9), (8, 8)]):
        kk, pp = ((1, k), (0, p)) if size[0] == 1 else (k, p)
        add(f"max k{k} s{s} p{p} ceil{int(ceil)} {size}",
            lambda h, kk=kk, s=s, pp=pp, ceil=ceil: F.max_pool2d(h, kk, s, pp, ceil_mode=ceil), (2, *size))
        if not ceil:
            add(f"avg k{k} s{s} p{p} {size}", lambda h, kk=kk, s=s, pp=pp: F.avg_pool2d(h, kk, s, pp), (2, *size))
    for n, splits in [(4, 2), (6, 3), (5, 2)]:
        add(f"chunk {n} into {splits}", lambda h, splits=splits: torch.cat(h.chunk(splits, 1)[::-1], 1), (n, 3, 3))
    add("split 1,3", lambda h: torch.split(h, [1, 3], 1)[1] * 2, (4, 3, 3))
    add("x[:, 1:3]", lambda h: h[:, 1:3], (4, 3, 3))
    add("unbind rows", lambda h: torch.unbind(h, 2)[1], (2, 3, 5))
    add("shuffle", lambda h: h.view(h.shape[0], 2, 2, 3, 3).transpose(1, 2).reshape(h.shape[0], 4, 3, 3), (4, 3, 3))
    for k, s, p in [(3, 1, 1), (5, 2, 0), (2, 2, 1)]:
        body = nn.Sequential(nn.Conv1d(3, 4, k, s, p), nn.ReLU(), nn.MaxPool1d(2, ceil_mode=True))
        add(f"conv1d k{k} s{s} p{p}", body, (3, 11))
    return out


def _blobs(g: TrainingGraph) -> list[tuple[str, bytes]]:
    """The fp32 graph's blob and, where the graph has a frozen prefix, its static int8 one."""
    check_runtime(g)
    out = [("fp32", model_blob(g).encode())]
    prefix = rewrite(g)
    if prefix is not None:
        check_runtime(prefix.graph)
        out.append(("int8 prefix", model_blob(prefix.graph).encode()))
    return out


def test_what_the_host_passes_the_board_takes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    graphs: list[tuple[str, TrainingGraph]] = [(g.model, g) for g in _graphs()]
    refused: list[str] = []
    for name, model, shape in _models():
        for train in ("all", "last:1"):
            try:
                graphs.append((f"{name} {train}", trace(model, "m", shape, 3, 2, train=train)))
            except PoetError as exc:  # refused on the host: one line, naming the call
                assert "\n" not in str(exc), exc
                refused.append(name)
    assert len(graphs) > 80 and len(refused) < len(graphs) // 4, refused
    with native_link(tmp_path, timeout_s=30.0) as link:
        for name, g in graphs:
            try:
                blobs = _blobs(g)
            except PoetError as exc:
                assert "\n" not in str(exc), exc
                continue
            for kind, blob in blobs:
                link.upload(MODEL, blob)  # raises DeviceError (MODEL, TOO_BIG...) if the board refuses it
                assert name and kind


def test_a_layer_outside_the_model_is_one_line() -> None:
    """Found by the sweep: a layer the forward calls but the model does not hold (kept in a closure or a plain
    list) ended the trace in an internal KeyError; now one line that says what to do."""
    conv = nn.Conv1d(3, 4, 3)
    with pytest.raises(PoetError, match="not one of the model's parameters.*register it"):
        trace(_Net(lambda h: conv(h), (3, 11)), "m", (3, 11), 3, 2)


@pytest.mark.parametrize("ceil", [False, True])
def test_an_odd_map_the_board_pools_is_traced(ceil: bool) -> None:
    """Bug 2's model: a 3x3/2 max pool on a 7x7 map traces (maxpool2d_general), ceil_mode or not."""
    net = _Net(lambda h: nn.functional.max_pool2d(h, 3, 2, 1, ceil_mode=ceil), (2, 7, 7))
    g = trace(net, "m", (2, 7, 7), 3, 2)
    assert any(n.op == "maxpool2d_general" for n in g.nodes)
