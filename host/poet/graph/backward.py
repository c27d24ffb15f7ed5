"""The backward pass of a traced training step, built from its forward nodes rather than traced.

One backward node per forward node that a trainable parameter needs a gradient through (docs/graph.md,
"Backward"): what each reads comes from the op's record (poet.ops `saves`, `backward`), or, for ops
with parameters, two inputs or a loss, from a rule here. Where a tensor feeds two ops (ResNet
shortcuts, attention's q/k/v) its gradient's parts are summed.
"""

from __future__ import annotations

from typing import Any

from poet.errors import PoetError
from poet.graph.dtypes import F32
from poet.graph.training_graph import GraphNode, numel
from poet.ops import OPS


class Backward:
    def __init__(self, nodes: list[GraphNode], rg: list[bool], trainable: set[int],
                 ck: dict[int, int] | None = None) -> None:
        self.nodes = nodes
        self.rg = rg
        self.trainable = trainable
        self.ck = ck or {}  # a conv weight trained for its first ck input channels (train_modes NAME@R)
        self.grads: dict[int, list[int]] = {}  # node -> backward nodes holding parts of its gradient

    def add(self, name: str, module: str, op: str, grad: list[int], saved: list[int], shape: list[int],
            attrs: dict[str, Any], flops: int, nbytes: int | None = None) -> int:
        nid = len(self.nodes)
        self.nodes.append(GraphNode(nid, name, module, "backward", op, grad + saved,
                                    F32 * numel(shape) if nbytes is None else nbytes, shape, attrs, flops,
                                    saved=saved))
        return nid

    def _grad_of(self, nid: int) -> int | None:
        """The one node holding the whole gradient of `nid`'s output, summing parts if needed."""
        parts = self.grads.get(nid)
        if not parts:
            return None
        node = self.nodes[nid]
        g = parts[0]
        for k, p in enumerate(parts[1:]):
            suffix = "" if k == 0 else f"_{k}"
            g = self.add(f"{node.module}/grad_sum{suffix}", node.module, "add", [g, p], [], node.shape,
                         {"n": numel(node.shape), "m": numel(node.shape)}, numel(node.shape))
        return g

    def _give(self, target: int, g: int) -> None:
        if self.rg[target]:
            self.grads.setdefault(target, []).append(g)

    def differentiate(self, nid: int) -> None:
        node = self.nodes[nid]
        g = self._grad_of(nid)
        if g is None:
            return
        op, x = node.op, node.deps
        trains = {r for r in ("w", "b") if node.attrs.get(r, -1) in self.trainable and r in node.attrs}
        need = [self.rg[d] for d in x]
        if not any(need) and not trains:
            return
        name, mod, attrs = f"{node.module}/backward", node.module, dict(node.attrs)
        if op in ("add", "sub"):
            self._give(x[0], g)
            if need[1] and attrs["m"] == attrs["n"] and op == "add":
                self._give(x[1], g)
            elif need[1]:  # negate and/or sum the gradient over the broadcast dimensions
                s = self.add(name, mod, OPS[op].backward[0], [g], [], self.nodes[x[1]].shape, attrs, attrs["n"])
                self._give(x[1], s)
            return
        if op == "cat":  # each input's gradient is its columns of g's rows
            total, offset = sum(attrs[f"l{i}"] for i in range(4)), 0
            for i, d in enumerate(x):
                length = attrs[f"l{i}"]
                if need[i]:
                    cut = {"outer": attrs["outer"], "total": total, "offset": offset, "len": length}
                    part = self.add(f"{name}_{i}", mod, OPS[op].backward[0], [g], [], self.nodes[d].shape, cut, 0)
                    self._give(d, part)
                offset += length
            return
        if op in ("mul", "matmul"):
            for i in (0, 1):
                if need[i]:
                    other = x[1 - i]
                    # b's gradient from a broadcast mul also sums g * a over the repeats: a multiply-add
                    sums = op == "mul" and i == 1 and attrs["m"] < attrs["n"]
                    s = self.add(f"{name}_{'ab'[i]}", mod, OPS[op].backward[i], [g], [other],
                                 self.nodes[x[i]].shape, attrs, node.flops * (2 if sums else 1))
                    self._give(x[i], s)
            return
        if op in ("linear", "conv2d", "embedding", "batchnorm", "batchnorm_eval", "layernorm"):
            gx = bool(need and need[0]) and op != "embedding"
            if op in ("linear", "conv2d", "batchnorm_eval"):  # x only for the weight gradient
                saved = [x[0]] if "w" in trains else []
            elif op == "embedding":
                saved = list(x)  # the token ids, when they come from the input
            else:  # normalisation: the input gives back the statistics and x-hat
                saved = [x[0]] if gx or "w" in trains else []
            attrs["need_grad_input"] = int(gx)
            share = 1.0
            if op == "conv2d" and "w" in trains and attrs["w"] in self.ck:
                attrs["ck"] = self.ck[attrs["w"]]
                share = attrs["ck"] / attrs["C"]
            work = node.flops
            if op in ("linear", "conv2d"):
                work = round((int(gx) + share * int("w" in trains)) * node.flops)
            shape = self.nodes[x[0]].shape if x else [0]
            s = self.add(name, mod, OPS[op].backward[0], [g], saved, shape, attrs, work, nbytes=None if gx else 0)
            if gx:
                self._give(x[0], s)
            return
        saves = OPS[op].saves  # a one-input op: its backward reads its input, its output or neither
        if saves in ("x", "y", ""):
            saved = {"x": [x[0]], "y": [nid], "": []}[saves]
            flops = 0 if op in ("flatten", "reshape", "permute", "select") else node.flops
            s = self.add(name, mod, OPS[op].backward[0], [g], saved, self.nodes[x[0]].shape, attrs, flops)
            self._give(x[0], s)
            return
        raise PoetError(f"{node.module}: no backward for runtime op {op}")  # poet.ops names a rule no one wrote
