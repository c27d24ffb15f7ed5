"""A BERT encoder classifier (Devlin et al. 2019) in plain torch.nn, with the layout of the original.

Post-LN layers (LN(x + sublayer(x))) as BERT has them, erf GELU, LayerNorm eps 1e-12, a pooler
(dense + tanh on the first token) and a linear classifier. No dropout: it is a no-op at the
parameter level and would add RNG ops that the device runtime does not have. No attention mask:
inputs are fixed-length sequences with every token real, and all token type ids are 0.
"""

from __future__ import annotations

import torch
from torch import nn

from poet.models.zoo.transformer import SelfAttention

MAX_POSITIONS = 512  # BERT's position table is always 512 long, whatever sequence length is used
TOKEN_TYPES = 2


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, seq_len: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(MAX_POSITIONS, hidden)
        self.token_type = nn.Embedding(TOKEN_TYPES, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # The word lookup is the only op reading `ids`: positions and segments come from the fixed
        # seq_len, so a tracer meets the model as a chain starting at the embedding.
        x = self.word(ids)
        pos = torch.arange(self.seq_len, device=x.device)
        types = torch.zeros(self.seq_len, dtype=torch.long, device=x.device)  # one segment: all type 0
        return self.ln(x + self.position(pos) + self.token_type(types))


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(intermediate, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, seq_len: int, vocab: int, classes: int) -> None:
        super().__init__()
        if seq_len > MAX_POSITIONS:
            raise ValueError(f"sequence length {seq_len} exceeds BERT's {MAX_POSITIONS} positions")
        self.embeddings = BertEmbeddings(vocab, hidden, seq_len)
        self.layers = nn.Sequential(*(BertLayer(hidden, heads, 4 * hidden) for _ in range(layers)))
        self.pooler = nn.Linear(hidden, hidden)
        self.pooler_act = nn.Tanh()
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.embeddings(ids))
        pooled = self.pooler_act(self.pooler(x[:, 0]))  # BERT pools the [CLS] (first) token
        return self.classifier(pooled)


def bert(layers: int, hidden: int, heads: int, seq_len: int, vocab: int, classes: int = 10) -> nn.Module:
    """BERT with L layers, hidden H, A heads, intermediate 4H, for sequences of seq_len tokens from vocab.

    Parameters, for H hidden, V vocab, L layers, C classes:
      embeddings  (V + 512 + 2) * H + 2H                       (word, position, token type, LayerNorm)
      per layer   4 * (H*H + H) + 2H + (4H*H + 4H) + (4H*H + H) + 2H = 12H^2 + 13H
      pooler      H*H + H;  classifier  H*C + C
    """
    return Bert(layers, hidden, heads, seq_len, vocab, classes)
