"""What `--train` fine-tunes: which parameters of a model a training step updates.

One grammar, read by the CLI (syntax, before any work) and by the tracer (names and counts, against
the model). Modes joined by "+" train their union:

    all              every parameter that requires grad
    bias             every parameter named bias
    last:N           the last N layers with parameters, in the order the forward pass uses them
    bias:K           the biases of the last K such layers (tiny-training's n_bias_update)
    layers:A,B,...   every parameter of the named modules (tiny-training's manual_weight_idx), named as
                     PyTorch names them (blocks.7.conv) or as `poet graph` prints them (blocks/7/conv);
                     A@R updates a conv's weight for its first int(R x in_channels) input channels only
                     (tiny-training's weight_update_ratio), its bias in full

tiny-training's sparse update (Lin et al. 2022) is a union: the classifier in full, the biases of the
last layers, and the weights (or a share of them) of a few chosen pointwise convs, e.g.
`last:1+bias:23+layers:blocks.7.pointwise1,blocks.8.pointwise1@0.125`. Its training code picks the
share's channels by weight magnitude, its compiled engine (the one measured on the MCU) takes the
first ones, as poet does.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from poet.errors import UsageError

MODES = ("give all, bias, last:N, bias:K (the biases of the last K layers), or layers:NAME,NAME (those modules; "
         "NAME@R: a conv's first R of input channels), or several joined by + (their union)")
Layers = tuple[tuple[str, float], ...]  # (module, share of its conv weight's input channels)
MAX_COUNT = 100_000


def parse(text: str) -> list[tuple[str, int | Layers]]:
    """The modes of a --train value as (kind, argument) pairs; a malformed one is one line."""
    parts = text.split("+")
    if text == "all":
        return [("all", 0)]
    if len(set(parts)) != len(parts) or "all" in parts:
        raise UsageError(f"--train {text!r}: {MODES}")
    out: list[tuple[str, int | Layers]] = []
    for part in parts:
        kind, colon, arg = part.partition(":")
        if part == "bias":
            out.append(("bias", 0))
        elif kind in ("last", "bias") and colon and arg.isdigit() and 1 <= int(arg) <= MAX_COUNT:
            out.append((kind, int(arg)))
        elif kind == "layers" and colon and all(arg.split(",")):
            layers = tuple(_layer(text, item) for item in arg.split(","))
            if len({name for name, _ in layers}) != len(layers):
                raise UsageError(f"--train {text!r}: a module is named twice in {part!r}")
            out.append(("layers", layers))
        else:
            raise UsageError(f"--train {text!r}: {MODES}")
    return out


def _layer(text: str, item: str) -> tuple[str, float]:
    name, at, share = item.partition("@")
    if not at:
        return name, 1.0
    try:
        r = float(share)
    except ValueError:
        r = -1.0
    if not name or not 0 < r <= 1:
        raise UsageError(f"--train {text!r}: {item!r}: NAME@R takes a share 0 < R <= 1 of the conv's input channels")
    return name, r


def select(text: str, names: Sequence[str], trainable: set[int], layers: Sequence[Sequence[int]],
           modules: Sequence[str]) -> tuple[set[int], dict[int, float]]:
    """The indices of the parameters `text` trains, and the share of input channels of those a NAME@R
    updates in part (weight index -> R). `names`: the parameters' qualified names; `trainable`: those
    that require grad (no mode trains another); `layers`: the parameter indices of each layer with
    parameters, in forward order; `modules`: the model's module names."""
    whole: set[int] = set()  # trained in full by some mode: that wins over a share another gives
    shares: dict[int, float] = {}
    for kind, arg in parse(text):
        if kind == "all":
            whole |= trainable
        elif kind == "bias" and arg == 0:
            whole |= {i for i in trainable if names[i].rsplit(".", 1)[-1] == "bias"}
        elif kind in ("last", "bias"):
            n = int(arg)  # type: ignore[arg-type]
            if n > len(layers):
                raise UsageError(f"--train {text}: the model has only {len(layers)} layers with parameters")
            tail = {i for ps in layers[-n:] for i in ps} & trainable
            whole |= tail if kind == "last" else {i for i in tail if names[i].rsplit(".", 1)[-1] == "bias"}
        else:
            for module, r in arg:  # type: ignore[union-attr]
                got = _of_module(text, module, names, trainable, modules)
                weight = {i for i in got if names[i] == module.replace("/", ".") + ".weight"} if r < 1 else set()
                if r < 1 and not weight:
                    raise UsageError(f"--train {text}: {module}@{r:g}: the module has no weight of its own to update "
                                     f"a share of")
                shares.update(dict.fromkeys(weight, r))
                whole |= got - weight
    return whole | set(shares), {i: r for i, r in shares.items() if i not in whole}


def _of_module(text: str, module: str, names: Sequence[str], trainable: set[int], modules: Sequence[str]) -> set[int]:
    module = module.replace("/", ".")  # as `poet graph` prints it, or as PyTorch names it
    if module not in modules or not module:
        near = difflib.get_close_matches(module, [m for m in modules if m], n=3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UsageError(f"--train {text}: the model has no module {module!r}{hint}; "
                         f"`poet graph --list-layers` lists its layers")
    inside = {i for i, n in enumerate(names) if n.startswith(module + ".")}
    if not inside & trainable:
        raise UsageError(f"--train {text}: module {module!r} has no parameter to train")
    return inside & trainable
