"""Issue 49: nn.MultiheadAttention, nn.TransformerEncoderLayer and F.scaled_dot_product_attention as models
written with them trace, check against PyTorch, and train on the native runtime like PyTorch.

poet traces attention as the calls it is made of (graph/composite.py). These tests hold that written-out
attention to PyTorch's own functions in float64 (outputs and gradients), then run the traced steps.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from poet.errors import PoetError
from poet.graph import composite
from poet.graph.check import op_check, real_step, saved_check
from poet.graph.tracer import trace
from torch import nn
from torch.overrides import TorchFunctionMode


class _WrittenOut(TorchFunctionMode):
    """Runs attention as graph/composite.py writes it, as poet's modes do."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        done, out = composite.run(self, func, args, kwargs or {})
        return out if done else func(*args, **(kwargs or {}))


def _both(layer: nn.Module, *xs: torch.Tensor, **kw: object) -> None:
    """layer(*xs) and the gradients of its parameters and inputs, PyTorch's and written out, in float64."""
    layer = layer.double()
    results = []
    for written in (False, True):
        ins = [x.detach().double().requires_grad_() for x in xs]
        # self-attention: one tensor given as query, key and value (the packed projection's case)
        args = [ins[0]] * 3 if len(ins) == 1 and isinstance(layer, nn.MultiheadAttention) else ins
        layer.zero_grad()
        with _WrittenOut() if written else torch.enable_grad():
            out = layer(*args, **kw)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
        sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view(o.shape)).sum() for o in outs).backward()
        results.append([o.detach() for o in outs] + [x.grad for x in ins] + [p.grad for p in layer.parameters()])
    assert len(results[0]) == len(results[1])
    for a, b in zip(*results, strict=True):
        assert a.shape == b.shape
        # float64: the two orders of the same sums differ in the last bits only
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (a - b).abs().max()


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_written_out_multihead_attention_is_pytorchs(batch_first: bool, need_weights: bool, average: bool) -> None:
    torch.manual_seed(0)
    layer = nn.MultiheadAttention(12, 3, batch_first=batch_first)
    _both(layer, torch.randn(2, 5, 12), need_weights=need_weights, average_attn_weights=average)


def test_written_out_attention_of_other_forms_is_pytorchs() -> None:
    torch.manual_seed(1)
    _both(nn.MultiheadAttention(8, 2), torch.randn(5, 8))  # unbatched
    # separate projections (kdim, vdim), without the bias they would share
    cross = nn.MultiheadAttention(8, 2, kdim=6, vdim=4, bias=False, batch_first=True)
    _both(cross, torch.randn(2, 5, 8), torch.randn(2, 7, 6), torch.randn(2, 7, 4))
    for norm_first in (False, True):
        _both(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first),
              torch.randn(2, 5, 8))


@pytest.mark.parametrize("scale", [None, 0.3])
def test_written_out_scaled_dot_product_attention_is_pytorchs(scale: float | None) -> None:
    class Sdpa(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, scale=scale)

    torch.manual_seed(2)
    _both(Sdpa(), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 7))


class _Encoder(nn.Module):
    """A tutorial's sequence classifier: a projection, nn.TransformerEncoderLayer, mean over time, a head."""

    def __init__(self, norm_first: bool = False, activation: str = "relu") -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.encoder = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, activation=activation, batch_first=True,
                                                  norm_first=norm_first)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(1))


class _Attention(nn.Module):
    """nn.MultiheadAttention as written most often: self-attention, the weights it returns thrown away."""

    def __init__(self) -> None:
        super().__init__()
        self.attn, self.fc = nn.MultiheadAttention(8, 2, dropout=0.2, batch_first=True), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.attn(x, x, x)
        return self.fc(torch.relu(y + x).mean(1))


def _checked(model: nn.Module, shape: tuple[int, ...]) -> None:
    t = real_step(model, "m", shape, 3, 2)
    saved = saved_check(model, t)
    assert not saved.unexplained, saved.render()
    ops = op_check(t)
    assert not ops.unaccounted and not ops.backward_mismatch, (ops.unaccounted, ops.backward_mismatch)


def test_attention_traces_as_its_ops_and_keeps_what_pytorch_saves() -> None:
    for model, shape in ((_Encoder(), (5, 4)), (_Encoder(True, "gelu"), (5, 4)), (_Attention(), (5, 8))):
        _checked(model, shape)
    g = trace(_Attention(), "m", (5, 8), 3, 2)
    ops = [n.op for n in g.nodes if n.kind == "forward"]
    # one packed projection cut in three, two matmuls, a softmax, the dropout on the probabilities
    assert ops.count("linear") == 3 and ops.count("slice") == 3 and ops.count("matmul") == 2
    assert ops.count("softmax") == 1 and ops.count("dropout") == 1
    # the attention weights it returns by default, which the loss never reads, make no node
    assert [n.name for n in g.nodes if n.op == "mean"] == ["mean/forward"]


def test_a_value_the_loss_does_not_read_makes_no_node() -> None:
    class Logged(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.seen: list[torch.Tensor] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.append(torch.softmax(x * 2, -1).mean(1))  # a statistic kept for logging
            return self.fc(x)

    g = trace(Logged(), "m", (4,), 3, 2)
    assert [n.op for n in g.nodes if n.kind == "forward"] == ["linear"]
    _checked(Logged(), (4,))


class _Masked(nn.Module):
    def __init__(self, **kw: object) -> None:
        super().__init__()
        self.kw = kw
        self.att, self.fc = nn.MultiheadAttention(8, 2, batch_first=True), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.att(x, x, x, **self.kw)
        return self.fc(y.mean(1))


class _Cross(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.att, self.fc = nn.MultiheadAttention(8, 2, batch_first=True), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.att(x, torch.relu(x), torch.relu(x))
        return self.fc(y.mean(1))


@pytest.mark.parametrize("model,why", [
    (lambda: _Masked(attn_mask=torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)), "a mask"),
    (lambda: _Masked(key_padding_mask=torch.zeros(2, 5, dtype=torch.bool)), "a mask"),
    (_Cross, "query, key and value that differ through one packed projection"),
])
def test_attention_the_runtime_cannot_run_is_refused_in_one_line(model, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PoetError, match=f"^att: multi_head_attention_forward: {why}") as e:
        trace(model(), "m", (5, 8), 3, 2)
    assert e.value.status == 2 and "\n" not in str(e.value)


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="cc / make missing")
@pytest.mark.time_limited
@pytest.mark.parametrize("kind", ["encoder", "attention"])
def test_attention_trains_like_pytorch_on_the_runtime(tmp_path: Path, kind: str) -> None:
    """Keep-all and POET's tighter plans (which recompute and page the attention's tensors) give the same
    weights bit for bit, as close to PyTorch's float64 steps as its float32 steps are; the board's attention
    dropout is the reference's."""
    from test_runtime_ops import STEPS, _check_model

    torch.manual_seed(0)
    encoder = kind == "encoder"
    model, shape = (_Encoder(norm_first=True, activation="gelu"), (5, 4)) if encoder else (_Attention(), (5, 8))
    g = trace(model, kind, shape, 3, 2)
    # the dropout on the attention probabilities: the reference must draw its mask as the board does
    assert any(n.op == "dropout" and n.name.endswith("attn/dropout/forward") for n in g.nodes)
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal((2, *shape)).astype(np.float32), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, kind, model, g, data)


class _Tutorial(nn.Module):
    """A tutorial's text classifier: token ids, nn.Embedding plus a learned positional nn.Parameter, a two-layer
    nn.TransformerEncoder, a learned gain (a parameter times an activation), mean over tokens, a head."""

    input_dtype = "int64"

    def __init__(self, vocab: int = 50, d: int = 16, seq: int = 6) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2, 32, dropout=0.1, batch_first=True), 2)
        self.gain = nn.Parameter(torch.ones(d))
        self.head = nn.Linear(d, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids) + self.pos
        return self.head((self.enc(h) * self.gain).mean(dim=1))


def test_a_parameter_read_as_an_activation_is_an_embedding_of_its_rows() -> None:
    """Issue 49: x + P (a learned positional embedding) and x * g (a learned gain), P and g parameters: each is
    first made an activation by an embedding node reading its rows in order, which trains it; the step keeps
    what PyTorch keeps and accounts for every op."""
    torch.manual_seed(0)
    model = _Tutorial()
    g = trace(model, "tutorial", (6,), 3, 2, input_dtype="int64")
    made = {g.params[n.attrs["w"]][0]: n for n in g.nodes if n.op == "embedding" and n.attrs["ids"] == 1}
    assert set(made) == {"pos", "gain"}
    assert (made["pos"].attrs["V"], made["pos"].attrs["D"]) == (6, 16) and made["gain"].attrs["V"] == 1
    assert {"pos", "gain"} <= {g.params[n.attrs["w"]][0] for n in g.nodes if n.op == "embedding_bwd"}
    t = real_step(model, "tutorial", (6,), 3, 2, "int64", "all")
    saved = saved_check(model, t)
    assert not saved.unexplained, saved.render()
    ops = op_check(t)
    assert not ops.unaccounted and not ops.backward_mismatch, (ops.unaccounted, ops.backward_mismatch)


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="cc / make missing")
@pytest.mark.time_limited
def test_a_tutorial_transformer_trains_like_pytorch_on_the_runtime(tmp_path: Path) -> None:
    from test_runtime_ops import STEPS, _check_model

    torch.manual_seed(0)
    model = _Tutorial()
    g = trace(model, "tutorial", (6,), 3, 2, input_dtype="int64")
    rng = np.random.default_rng(5)
    data = [(rng.integers(0, 50, (2, 6)).astype(np.int64), rng.integers(0, 3, 2).astype(np.int32))
            for _ in range(STEPS)]
    _check_model(tmp_path, "tutorial", model, g, data)
