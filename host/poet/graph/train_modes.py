"""What `--train` fine-tunes: which parameters of a model a training step updates.

One grammar, read by the CLI (syntax, before any work) and by the tracer (names and counts, against
the model). Modes joined by "+" train their union:

    all              every parameter that requires grad
    bias             every parameter named bias
    last:N           the last N layers with parameters, in the order the forward pass uses them
    bias:K           the biases of the last K such layers (tiny-training's n_bias_update)
    layers:A,B,...   every parameter of the named modules (tiny-training's manual_weight_idx), named as
                     PyTorch names them (blocks.7.conv) or as `poet graph` prints them (blocks/7/conv)

tiny-training's sparse update (Lin et al. 2022) is a union: the classifier in full, the biases of the
last layers, and the weights of a few chosen pointwise convs, e.g.
`last:1+bias:23+layers:blocks.7.pointwise1,blocks.8.pointwise1`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from poet.errors import UsageError

MODES = ("give all, bias, last:N, bias:K (the biases of the last K layers), or layers:NAME,NAME (those modules), "
         "or several joined by + (their union)")
MAX_COUNT = 100_000


def parse(text: str) -> list[tuple[str, int | tuple[str, ...]]]:
    """The modes of a --train value as (kind, argument) pairs; a malformed one is one line."""
    parts = text.split("+")
    if text == "all":
        return [("all", 0)]
    if len(set(parts)) != len(parts) or "all" in parts:
        raise UsageError(f"--train {text!r}: {MODES}")
    out: list[tuple[str, int | tuple[str, ...]]] = []
    for part in parts:
        kind, colon, arg = part.partition(":")
        if part == "bias":
            out.append(("bias", 0))
        elif kind in ("last", "bias") and colon and arg.isdigit() and 1 <= int(arg) <= MAX_COUNT:
            out.append((kind, int(arg)))
        elif kind == "layers" and colon and all(arg.split(",")):
            names = tuple(arg.split(","))
            if len(set(names)) != len(names):
                raise UsageError(f"--train {text!r}: a module is named twice in {part!r}")
            out.append(("layers", names))
        else:
            raise UsageError(f"--train {text!r}: {MODES}")
    return out


def select(text: str, names: Sequence[str], trainable: set[int], layers: Sequence[Sequence[int]],
           modules: Sequence[str]) -> set[int]:
    """Indices of the parameters `text` trains. `names`: the parameters' qualified names; `trainable`:
    those that require grad (no mode trains another); `layers`: the parameter indices of each layer
    with parameters, in forward order; `modules`: the model's module names."""
    chosen: set[int] = set()
    for kind, arg in parse(text):
        if kind == "all":
            chosen |= trainable
        elif kind == "bias" and arg == 0:
            chosen |= {i for i in trainable if names[i].rsplit(".", 1)[-1] == "bias"}
        elif kind in ("last", "bias"):
            n = int(arg)  # type: ignore[arg-type]
            if n > len(layers):
                raise UsageError(f"--train {text}: the model has only {len(layers)} layers with parameters")
            tail = {i for ps in layers[-n:] for i in ps} & trainable
            chosen |= tail if kind == "last" else {i for i in tail if names[i].rsplit(".", 1)[-1] == "bias"}
        else:
            for module in arg:  # type: ignore[union-attr]
                chosen |= _of_module(text, module, names, trainable, modules)
    return chosen


def _of_module(text: str, module: str, names: Sequence[str], trainable: set[int], modules: Sequence[str]) -> set[int]:
    module = module.replace("/", ".")  # as `poet graph` prints it, or as PyTorch names it
    if module not in modules or not module:
        near = difflib.get_close_matches(module, [m for m in modules if m], n=3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UsageError(f"--train {text}: the model has no module {module!r}{hint}; `poet graph` lists its layers")
    inside = {i for i, n in enumerate(names) if n.startswith(module + ".")}
    if not inside & trainable:
        raise UsageError(f"--train {text}: module {module!r} has no parameter to train")
    return inside & trainable
