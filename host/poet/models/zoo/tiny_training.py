"""MIT tiny-training's three networks (Lin et al., "On-Device Training Under 256KB Memory", NeurIPS 2022;
github.com/mit-han-lab/tiny-training): mbv2-w0.35, proxyless-w0.3 and mcunet-5fps, at 128x128, in the
float form their training graph computes.

They publish each network as an int8 graph (algorithm/assets/mcu_models/<name>.pkl), which
build_quantized_network_from_cfg turns into first_conv, blocks, feature_mix (None in all three), a
global average pool, and a classifier that create_scaled_head replaces with a float Linear for the
task's classes. Written here in plain torch.nn from that graph:

- No BatchNorm: it is folded into the convs, so every conv has a bias.
- ReLU6 after first_conv, every pointwise1 and every depthwise: their int8 outputs clamp at
  y_zero = -128 (zero) with y_scale * 255 <= 6 (post-training quantization calibrated some clamps below
  6, where the activations never reached it). pointwise2 (y_zero free) and the residual add are linear.
- The residual is the identity (no block has a residual conv), added to pointwise2's output.
- No squeeze-and-excitation (their builder raises on one; no block has one), no feature_mix conv.

The order of nn.Conv2d in model.modules() is tiny-training's conv index (get_all_conv_ops: every Conv2d
in module order, the Linear classifier excluded), which their sparse-update configs name convs by.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# A block: (expand, kernel, stride, out, residual). expand is pointwise1's output channels, 0 where the
# block has no pointwise1 (the first block: depthwise straight on first_conv's output); kernel and stride
# are the depthwise conv's; out is pointwise2's output channels.
Block = tuple[int, int, int, int, bool]

# network -> (first_conv's output channels, blocks). first_conv is 3x3 stride 2 from 3 channels in all
# three; the classifier reads the last block's channels. Extracted once from
# algorithm/assets/mcu_models/<name>.pkl of mit-han-lab/tiny-training at commit 7bf8e05 (in_channel,
# out_channel, kernel_size, stride of each conv; residual not None), not read at run time.
ARCHS: dict[str, tuple[int, list[Block]]] = {
    "mbv2-w0.35": (16, [
        (0, 3, 1, 8, False),
        (48, 3, 2, 8, False),
        (48, 3, 1, 8, True),
        (48, 3, 2, 16, False),
        (96, 3, 1, 16, True),
        (96, 3, 1, 16, True),
        (96, 3, 2, 24, False),
        (144, 3, 1, 24, True),
        (144, 3, 1, 24, True),
        (144, 3, 1, 24, True),
        (144, 3, 1, 32, False),
        (192, 3, 1, 32, True),
        (192, 3, 1, 32, True),
        (192, 3, 2, 56, False),
        (336, 3, 1, 56, True),
        (336, 3, 1, 56, True),
        (336, 3, 1, 112, False),
    ]),
    "proxyless-w0.3": (16, [
        (0, 3, 1, 8, False),
        (24, 5, 2, 16, False),
        (48, 3, 1, 16, True),
        (48, 7, 2, 16, False),
        (48, 3, 1, 16, True),
        (48, 5, 1, 16, True),
        (48, 5, 1, 16, True),
        (96, 7, 2, 24, False),
        (72, 5, 1, 24, True),
        (72, 5, 1, 24, True),
        (72, 5, 1, 24, True),
        (144, 5, 1, 32, False),
        (96, 5, 1, 32, True),
        (96, 5, 1, 32, True),
        (96, 5, 1, 32, True),
        (192, 7, 2, 64, False),
        (384, 7, 1, 64, True),
        (192, 7, 1, 64, True),
        (192, 7, 1, 64, True),
        (384, 7, 1, 96, False),
    ]),
    "mcunet-5fps": (16, [
        (0, 3, 1, 8, False),
        (32, 3, 2, 16, False),
        (48, 3, 1, 16, True),
        (48, 7, 2, 24, False),
        (120, 3, 1, 24, True),
        (120, 3, 2, 40, False),
        (160, 7, 1, 40, True),
        (160, 5, 1, 48, False),
        (144, 3, 1, 48, True),
        (192, 3, 1, 48, True),
        (240, 7, 2, 96, False),
        (384, 5, 1, 96, True),
        (384, 5, 1, 96, True),
        (576, 3, 1, 160, False),
    ]),
}


class MbBlock(nn.Module):
    """[pointwise1 1x1 - ReLU6] - depthwise kxk - ReLU6 - pointwise2 1x1 (linear), plus the input if residual."""

    def __init__(self, c_in: int, expand: int, kernel: int, stride: int, c_out: int, residual: bool) -> None:
        super().__init__()
        if residual and (stride != 1 or c_in != c_out):
            raise ValueError(f"an identity residual needs stride 1 and {c_in} == {c_out} channels")
        mid = expand or c_in
        self.pointwise1: nn.Conv2d | None = nn.Conv2d(c_in, mid, 1) if expand else None
        self.pointwise1_act: nn.ReLU6 | None = nn.ReLU6() if expand else None
        self.depthwise = nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid)
        self.depthwise_act = nn.ReLU6()
        self.pointwise2 = nn.Conv2d(mid, c_out, 1)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        if self.pointwise1 is not None and self.pointwise1_act is not None:
            y = self.pointwise1_act(self.pointwise1(y))
        y = self.pointwise2(self.depthwise_act(self.depthwise(y)))
        return x + y if self.residual else y


class TinyTrainingNet(nn.Module):
    """first_conv 3x3/2 - ReLU6 - blocks - global average pool - classifier (Linear), from ARCHS[name]."""

    def __init__(self, name: str, classes: int = 10) -> None:
        super().__init__()
        stem, blocks = ARCHS[name]
        self.first_conv = nn.Conv2d(3, stem, 3, 2, 1)
        self.first_act = nn.ReLU6()
        layers: list[nn.Module] = []
        c_in = stem
        for expand, kernel, stride, c_out, residual in blocks:
            layers.append(MbBlock(c_in, expand, kernel, stride, c_out, residual))
            c_in = c_out
        self.blocks = nn.Sequential(*layers)
        self.classifier = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.first_act(self.first_conv(x)))
        return self.classifier(x.mean([2, 3]))


def conv_names(model: nn.Module) -> list[str]:
    """Module name of each tiny-training conv index (their get_all_conv_ops order)."""
    return [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]


def _conv_paths(name: str) -> list[str]:
    """conv_names of ARCHS[name]'s network, without building it."""
    out = ["first_conv"]
    for i, (expand, *_rest) in enumerate(ARCHS[name][1]):
        out += [f"blocks.{i}.{c}" for c in (("pointwise1",) if expand else ()) + ("depthwise", "pointwise2")]
    return out


@dataclass(frozen=True)
class SparseUpdate:
    """One of tiny-training's sparse-update schemes: the classifier is always trained in full; the biases of
    the last n_bias_update convs; the weights of the convs manual_weight_idx names, each on the fraction
    weight_update_ratio of its input channels (those of largest weight norm, their 'magnitude+'; a ratio
    of 0 trains that conv's bias only)."""

    n_bias_update: int
    manual_weight_idx: tuple[int, ...]
    weight_update_ratio: tuple[float, ...]


# The sparse_update_config dicts of compilation/mcu_ir_gen.py (mit-han-lab/tiny-training, commit 7bf8e05),
# per network and memory budget; all with weight_select_criteria 'magnitude+' and pw1_weight_only 0.
SPARSE_UPDATES: dict[str, dict[str, SparseUpdate]] = {
    "mbv2-w0.35": {
        "49kb": SparseUpdate(16, (36, 39, 40, 41, 42, 45, 48, 49), (1, 1, 0, 0.25, 0.125, 0.125, 0.125, 0.125)),
        "73kb": SparseUpdate(20, (32, 33, 36, 39, 41, 42, 45, 48), (0.125, 0.5, 0.5, 1, 0.25, 0.125, 0.125, 1)),
        "99kb": SparseUpdate(25, (27, 30, 33, 36, 39, 42, 45, 48), (1, 1, 1, 1, 1, 0.125, 0.5, 1)),
        "123kb": SparseUpdate(31, (27, 30, 33, 36, 39, 42, 45, 48), (1, 1, 1, 1, 1, 0.5, 1, 1)),
        "138kb": SparseUpdate(34, (27, 30, 33, 36, 39, 42, 45, 48), (1, 1, 1, 1, 1, 1, 1, 1)),
    },
    "proxyless-w0.3": {
        "49kb": SparseUpdate(21, (39, 42, 44, 45, 50, 51, 54, 57), (0.25, 1, 0, 1, 0, 0.125, 0.25, 0.25)),
        "74kb": SparseUpdate(28, (33, 36, 39, 42, 45, 51, 54, 57), (0.5, 0.25, 1, 1, 1, 0.5, 0.25, 0.5)),
        "98kb": SparseUpdate(25, (36, 39, 42, 45, 48, 51, 54, 57), (1, 0.5, 1, 1, 0.25, 0.5, 1, 1)),
        "120kb": SparseUpdate(32, (36, 39, 42, 45, 48, 51, 54, 57), (1, 1, 1, 1, 0.5, 1, 1, 1)),
        "148kb": SparseUpdate(45, (36, 39, 42, 45, 48, 51, 54, 57), (1, 1, 1, 1, 1, 1, 1, 1)),
    },
    "mcunet-5fps": {
        "49kb": SparseUpdate(20, (23, 24, 27, 30, 33, 39), (0, 0.25, 0.5, 0.5, 0, 0)),
        "74kb": SparseUpdate(21, (21, 23, 24, 26, 27, 30), (1, 0, 1, 0, 0.5, 1)),
        "99kb": SparseUpdate(22, (21, 24, 27, 30, 36, 39), (1, 1, 1, 1, 0.125, 0.25)),
        "124kb": SparseUpdate(24, (21, 24, 27, 30, 33, 39), (0.25, 1, 1, 1, 0.5, 0.5)),
        "148kb": SparseUpdate(23, (21, 24, 27, 30, 36, 39), (1, 1, 1, 1, 1, 0.5)),
    },
}

# The ~100 KB scheme of each network: mcunet-5fps "99kb" is the one algorithm/scripts/sparse_update.sh
# trains (the paper's "sparse update (100KB scheme)"); for the other two, the budget of mcu_ir_gen.py
# nearest 100 KB, by the same measure.
HEADLINE: dict[str, str] = {"mbv2-w0.35": "99kb", "proxyless-w0.3": "98kb", "mcunet-5fps": "99kb"}


def train_mode(net: str, budget: str) -> str:
    """The `--train` value of SPARSE_UPDATES[net][budget]: the classifier (last:1); the biases of the
    last n_bias_update convs and the classifier, which is a layer with parameters too (bias:K with
    K = n_bias_update + 1); the weights of the chosen convs, `@R` where only a fraction R of their
    input channels trains."""
    cfg = SPARSE_UPDATES[net][budget]
    names = _conv_paths(net)
    layers = [names[i] + (f"@{r:g}" if r < 1 else "")
              for i, r in zip(cfg.manual_weight_idx, cfg.weight_update_ratio, strict=True) if r > 0]
    mode = f"last:1+bias:{cfg.n_bias_update + 1}"
    return mode + (f"+layers:{','.join(layers)}" if layers else "")
