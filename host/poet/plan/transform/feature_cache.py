"""Features once: a frozen prefix's output kept per sample after the first epoch, instead of computed again.

poet applies no augmentation, and a frozen prefix that treats each sample alone (no batch-norm statistics
of the batch, no dropout) gives a sample the same output in every epoch. Fine-tuning ResNet-18 `last:1`
on the nRF52840 spends 77% of a step's time on that prefix and 23% reading its weights from the SD card,
2.4 ms of 67 s on what trains. Kept on the board's storage after epoch 1, epoch 2 onwards reads each
sample's features and runs only the rest: the suffix, an ordinary training graph whose input is the kept
tensor (staged in place, as any input is).

Which tensor to keep is a cost decision (issue 48): MobileNetV2-0.35's narrowest exact tensor is its
last block's int8 output (1,792 B a sample), not the 80 KiB fp32 map after it. A cut is a tensor c of
the frozen prefix through which alone everything after it reads what came before; choose() prices each
cut over the run (epoch 1: the whole step and the write of c; later epochs: the read of c and the
suffix's plan) against never keeping one, and keeps the cheapest in energy. Costs come from the board's
profile and storage model, the suffix planned by the same planner at the same --ram.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from poet.graph.file import INT8_OUT
from poet.graph.training_graph import PARAM_ATTRS, GraphNode, TrainingGraph, numel
from poet.plan.types import CostedGraph

# ops whose output for a sample depends on the other samples of its batch or on the step: a prefix holding
# one is not the same in every epoch (a batch norm in training mode also moves its running statistics)
NOT_PER_SAMPLE = frozenset({"batchnorm", "bn_relu_mean", "dropout"})


@dataclass(frozen=True)
class Cut:
    """A tensor of the frozen prefix to keep per sample, and the graph that trains from it."""

    node: int  # its id in the whole graph
    name: str
    batch_bytes: int  # what one step writes (epoch 1) and reads (epoch 2 on)
    suffix: TrainingGraph  # the rest of the step, its input the kept tensor

    @property
    def sample_bytes(self) -> int:
        return self.batch_bytes // self.suffix.batch


def cuts(g: TrainingGraph) -> list[Cut]:
    """Every tensor of g's frozen, per-sample prefix through which alone the rest of the step reads the
    prefix, in graph order; none where the first layer trains or the prefix is not per sample."""
    frozen = set(g.frozen)
    trained = {i for i, (name, _) in enumerate(g.params) if name not in frozen}
    # c is a cut when no read jumps over it: no node after c reads a node before it
    over = [0] * (len(g.nodes) + 1)
    for n in g.nodes:
        for d in set(n.deps):
            if n.id > d + 1:
                over[d + 1] += 1
                over[n.id] -= 1
    out: list[Cut] = []
    jumped = 0
    for c in g.nodes:
        jumped += over[c.id]
        if c.id == 0:
            continue
        if not _per_sample(c, trained):
            break  # every later node's prefix holds this one
        if not jumped:
            out.append(Cut(c.id, c.name, c.bytes, suffix_of(g, c.id)))
    return out


def _per_sample(n: GraphNode, trained: set[int]) -> bool:
    """A forward node that trains nothing and treats each sample alone."""
    params = {n.attrs[k] for k in PARAM_ATTRS if isinstance(n.attrs.get(k), int) and n.attrs[k] >= 0}
    return n.kind == "forward" and n.op not in NOT_PER_SAMPLE and not params & trained


def suffix_of(g: TrainingGraph, c: int) -> TrainingGraph:
    """g from tensor c on: a new input node of c's shape and element type (int8 with c's output scale,
    staged so, or fp32), every node after c renumbered, the parameters only the suffix reads."""
    src = g.nodes[c]
    elems = numel(src.shape)
    attrs: dict[str, int] = {"n": elems}
    if src.op in INT8_OUT and src.bytes == elems:  # an int8 tensor: staged int8, at its own scale
        attrs |= {"i8": 1, "scale": src.attrs["scale" if src.op in ("quantize", "maxpool2d_q") else "out_scale"]}
    nodes = [GraphNode(0, "input", "input", "input", "input", [], src.bytes, list(src.shape), attrs)]
    renum = {c: 0}
    for n in g.nodes[c + 1:]:
        renum[n.id] = len(nodes)
        nodes.append(replace(n, id=len(nodes), deps=[renum[d] for d in n.deps],
                             saved=[renum[d] for d in n.saved]))
    used = sorted({n.attrs[k] for n in nodes for k in PARAM_ATTRS
                   if isinstance(n.attrs.get(k), int) and n.attrs[k] >= 0})
    params = {old: new for new, old in enumerate(used)}
    nodes = [replace(n, attrs={k: (params[v] if k in PARAM_ATTRS and isinstance(v, int) and v >= 0 else v)
                               for k, v in n.attrs.items()}) for n in nodes]
    kept = [g.params[i] for i in used]
    names = {name for name, _ in kept}
    return replace(g, nodes=nodes, params=kept, frozen=[f for f in g.frozen if f in names],
                   input_shape=list(src.shape[1:]))


@dataclass(frozen=True)
class Step:
    """A training step's modelled energy and time."""

    energy_j: float
    time_s: float


@dataclass(frozen=True)
class Choice:
    """What a run keeps, and what its steps cost: `first` in epoch 1, `later` from epoch 2."""

    cut: Cut | None  # None: nothing kept, every epoch runs the whole step
    first: Step
    later: Step

    def run(self, epochs: int, steps: int) -> Step:
        """The modelled energy and time of `epochs` epochs of `steps` steps."""
        later = max(0, epochs - 1) * steps
        return Step(steps * self.first.energy_j + later * self.later.energy_j,
                    steps * self.first.time_s + later * self.later.time_s)


def choose(whole: CostedGraph, whole_step: Step, candidates: list[Cut], epochs: int,
           suffix_step: Callable[[Cut], Step | None]) -> tuple[Choice, list[Choice]]:
    """The cheapest way in energy to run `epochs` epochs: no cache, or keeping one of `candidates` (the
    whole graph's costs price its write and read, in `whole`: page-out and page-in of the tensor on the
    board's storage); suffix_step(cut) plans the suffix (None: no plan fits). Returns the choice and every
    choice priced, in the order tried. A cut whose read and the suffix's plainest pass alone cost more
    than the best found is not planned."""
    none = Choice(None, whole_step, whole_step)
    priced = [none]
    best = none
    if epochs < 2:
        return best, priced

    def floor(c: Cut) -> float:
        n = whole.nodes[c.node]
        return n.page_in_j + sum(x.compute_j for x in whole.nodes[c.node + 1:])

    for c in sorted(candidates, key=floor):
        n = whole.nodes[c.node]
        first = Step(whole_step.energy_j + n.page_out_j, whole_step.time_s + n.page_out_s)
        if (epochs - 1) * floor(c) + first.energy_j >= best.run(epochs, 1).energy_j:
            break  # sorted by floor: no later cut can win either
        rest = suffix_step(c)
        if rest is None:
            continue
        choice = Choice(c, first, Step(n.page_in_j + rest.energy_j, n.page_in_s + rest.time_s))
        priced.append(choice)
        if choice.run(epochs, 1).energy_j < best.run(epochs, 1).energy_j:
            best = choice
    return best, priced
