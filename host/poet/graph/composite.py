"""PyTorch functions poet runs as the torch calls they are made of: attention.

`F.multi_head_attention_forward` (what `nn.MultiheadAttention` and `nn.TransformerEncoderLayer` call) and
`F.scaled_dot_product_attention` are one call each to a function mode, so a tracer that records calls sees
one opaque op. Here each is written out in the calls the runtime has (linear, view, transpose, a scale,
matmul, softmax, dropout, mean), and poet's call-level modes (graph/instrument.py's recording,
graph/reference.py's board dropout and fed values) run that instead of the fused function: the tracer then
sees every op and every tensor kept for backward, and the PyTorch reference drops what the board drops.
`tests/test_attention.py` checks each against PyTorch's own in float64.

A form the runtime cannot take (a mask, bias_k, add_zero_attn, static keys, cross-attention through one
packed projection) is not written out: the call stays whole and its handler (graph/handlers.py) refuses
it, naming the form.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_MHA = inspect.signature(F.multi_head_attention_forward)


def _bound(sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return dict(b.arguments)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, scale: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale) v over the last two dims, and the probabilities it used: dropout drops some
    whenever dropout_p > 0 (the callers pass 0 outside training, as PyTorch's do)."""
    scores = torch.matmul(q * scale, k.transpose(-2, -1))
    probs = F.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, v), probs


def _sdpa_why_not(a: dict[str, Any]) -> str | None:
    if a.get("attn_mask") is not None or a.get("is_causal"):
        return "a mask (attn_mask, is_causal): the runtime's attention is unmasked"
    if a.get("enable_gqa"):
        return "grouped-query attention (enable_gqa)"
    q, k = a["query"], a["key"]
    if q.shape[:-2] != k.shape[:-2]:
        return f"query {list(q.shape)} and key {list(k.shape)} differ in their batch dims"
    return None


def _sdpa(a: dict[str, Any]) -> torch.Tensor:
    q = a["query"]
    scale = a.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    return attention(q, a["key"], a["value"], float(a.get("dropout_p") or 0.0), scale)[0]


def _sdpa_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    # a builtin: no signature to bind, so its documented order
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    return dict(zip(names, args)) | kwargs


def _mha_why_not(a: dict[str, Any]) -> str | None:
    if a["attn_mask"] is not None or a["key_padding_mask"] is not None or a["is_causal"]:
        return "a mask (attn_mask, key_padding_mask, is_causal): the runtime's attention is unmasked"
    if a["bias_k"] is not None or a["bias_v"] is not None or a["add_zero_attn"]:
        return "bias_k, bias_v or add_zero_attn"
    if a["static_k"] is not None or a["static_v"] is not None:
        return "static keys or values"
    q, k, v = a["query"], a["key"], a["value"]
    if not a["use_separate_proj_weight"] and not (q is k and k is v):
        return ("query, key and value that differ through one packed projection (cross-attention): the runtime's "
                "linear reads a whole parameter; give the layer kdim/vdim, which makes three")
    if a["use_separate_proj_weight"] and a["in_proj_bias"] is not None:
        return ("separate projections (kdim, vdim) with biases: their biases are pieces of one parameter, which the "
                "runtime's linear cannot read; give the layer bias=False")
    if q.dim() not in (2, 3):
        return f"a {q.dim()}-d query"
    return None


def _mha(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """F.multi_head_attention_forward without masks, as its need_weights=True path computes it."""
    query, key, value = a["query"], a["key"], a["value"]
    batched = query.dim() == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    tgt, bsz, embed = query.shape
    heads = a["num_heads"]
    head_dim = embed // heads
    w, b = a["in_proj_weight"], a["in_proj_bias"]
    if not a["use_separate_proj_weight"]:  # self-attention: one linear, its output cut in three
        q, k, v = F.linear(query, w, b).chunk(3, dim=-1)
    else:
        q = F.linear(query, a["q_proj_weight"])  # (without a bias: _mha_why_not)
        k = F.linear(key, a["k_proj_weight"])
        v = F.linear(value, a["v_proj_weight"])
    q, k, v = (t.reshape(t.shape[0], bsz * heads, head_dim).transpose(0, 1) for t in (q, k, v))
    p = float(a["dropout_p"]) if a["training"] else 0.0
    out, probs = attention(q, k, v, p, 1.0 / math.sqrt(head_dim))  # [bsz * heads, tgt, head_dim]
    out = out.transpose(0, 1).reshape(tgt * bsz, embed)
    out = F.linear(out, a["out_proj_weight"], a["out_proj_bias"]).view(tgt, bsz, -1)
    weights = None
    if a["need_weights"]:  # (the tracer keeps no node of them unless the loss reads them)
        weights = probs.view(bsz, heads, tgt, probs.shape[-1])
        if a["average_attn_weights"]:
            weights = weights.mean(dim=1)
        if not batched:
            weights = weights.squeeze(0)
    if not batched:
        out = out.squeeze(1)
    return out, weights


# name -> (its arguments by name, why the runtime cannot take this call (None: it can), the written-out call)
_COMPOSITES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[[dict[str, Any]], str | None],
                             Callable[[dict[str, Any]], Any]]] = {
    "multi_head_attention_forward": (lambda args, kwargs: _bound(_MHA, args, kwargs), _mha_why_not, _mha),
    "scaled_dot_product_attention": (_sdpa_args, _sdpa_why_not, _sdpa),
}

NAMES = tuple(_COMPOSITES)


def why_not(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why a composite call cannot be written out in the runtime's ops ("" for a name that is no composite)."""
    if name not in _COMPOSITES:
        return ""
    bind, why, _ = _COMPOSITES[name]
    return why(bind(args, kwargs))


def run(mode: TorchFunctionMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    """Inside `mode`'s __torch_function__: (True, the call's result) computed by its written-out calls with
    `mode` seeing each, when `func` is a composite the runtime can take; else (False, None)."""
    name = getattr(func, "__name__", "")
    if name not in _COMPOSITES:
        return False, None
    bind, why, written = _COMPOSITES[name]
    a = bind(args, kwargs)
    if why(a) is not None:
        return False, None
    with mode:  # a mode is off its stack while it handles a call: back on, it sees the parts
        return True, written(a)
