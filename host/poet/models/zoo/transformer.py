"""One transformer encoder block on token ids, written op by op so the tracer sees every kernel.

Attention is explicit Linear projections, matmuls and a softmax rather than nn.MultiheadAttention,
whose fused kernel would hide the ops (and the tensors kept for backward) that poet must plan.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention without masking (every token is real)."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by {heads} heads")
        self.heads = heads
        self.d_head = d_model // heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        # [B, S, D] -> [B, heads, S, d_head]
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.d_head).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_head)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        return self.out(ctx)


class PreLNBlock(nn.Module):
    """Pre-LN encoder block (Xiong et al. 2020): x + attn(LN(x)), then x + FFN(LN(x)).

    Pre-LN rather than the original post-LN because it trains stably without learning-rate
    warm-up, which matters for short on-device runs.
    """

    def __init__(self, d_model: int, heads: int, d_ff: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TransformerClassifier(nn.Module):
    """Token + learned positional embeddings, one pre-LN block, final LN, mean pool, classifier."""

    def __init__(self, vocab: int = 1000, seq_len: int = 32, d_model: int = 128, heads: int = 4,
                 d_ff: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.block = PreLNBlock(d_model, heads, d_ff)
        self.ln = nn.LayerNorm(d_model)  # pre-LN leaves the residual stream unnormalised: close it here
        self.classifier = nn.Linear(d_model, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # The token lookup is the only op reading `ids` (positions come from the fixed seq_len, not
        # ids.shape), so a tracer meets the model as a chain starting at the embedding.
        x = self.tokens(ids)
        x = x + self.positions(torch.arange(self.seq_len, device=x.device))
        x = self.ln(self.block(x))
        return self.classifier(x.mean(dim=1))


def transformer_block(classes: int = 10) -> nn.Module:
    return TransformerClassifier(vocab=1000, seq_len=32, d_model=128, heads=4, d_ff=512, classes=classes)
