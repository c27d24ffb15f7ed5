"""Where each frozen weight lives: the board's flash, read in place, or its aux storage (the SD card),
streamed; and which frozen fp32 weights flash keeps int8.

Flash holds the model blob and the frozen weights while they fit (poet.plan.cost.memory). When they
do not, even stored int8, the largest int8 convolution weights (static int8, or an fp32 graph's frozen
convs run in int8 on weights stored int8) move to the aux storage,
past the swap area, one at a time until flash holds the rest: the fewest layers pay the SD
reads. Such a conv reads its weight a few output channels at a time into the pool's stream
buffer (one output channel's weights of the widest streamed conv) and computes those channels
before the next read (firmware/core/ops/quant.c), so the RAM cost is that buffer and the time
cost the reads, which the planner charges to the node (poet.plan.cost.costs) and the report to its
layer (poet.energy.accounting).

A model whose frozen fp32 weights still overflow flash (an autoencoder's dense layers; the convs a
backward pass reads behind the first layer that trains, as tiny-training's sparse updates leave them)
keeps its largest frozen fp32 weights int8 instead (weight-only int8, `w8`): the layer still computes
in fp32, on w = q * scale, forward and for the input gradient (a dense layer makes each element as it
reads it, firmware/core/kernels/lowp.c poet_linear_w8_*; a conv a block of output channels at a time
in the stream buffer, firmware/core/ops/conv.c w8_blocks), so it is the fp32 layer of a slightly
different frozen weight, bit for bit, the one the PyTorch reference is given (graph/reference.as_graph).
When even those overflow flash, the largest that only a forward linear reads stream from the card as the
convs do, a few output features a read (firmware/core/ops/linear.c).

The placement is a function of the graph and the board alone, recorded in the graph (a
conv2d_q node's `stream` attribute, a linear's `w8`), so `poet solve` and `poet train` make the
same model blob.
"""

from __future__ import annotations

from dataclasses import replace

from poet.boards import Board
from poet.errors import UsageError
from poet.graph.quantise import i8_bytes
from poet.graph.training_graph import STREAMING, W8_READERS, GraphNode, TrainingGraph, numel
from poet.plan.cost.memory import aux_area_bytes, pool_for
from poet.units import format_size


def _stored_conv(n: GraphNode) -> bool:
    """A conv whose weight is stored int8 in nv storage: static int8, or an int8 layer of the fp32 graph
    reading its frozen weight stored (two deps: poet.plan.transform.precision)."""
    return n.op == "conv2d_q" or (n.op == "conv2d_i8" and len(n.deps) == 2)


def streamed(g: TrainingGraph, params: set[str]) -> TrainingGraph:
    """g with the convs and linears whose weights, stored int8, are `params` streaming them from aux storage."""
    if not params:
        return g
    # a depthwise conv2d_q marked in place stays so: its reads go after the channel it makes (memory.in_place_plane)
    return replace(g, nodes=[replace(n, attrs={**n.attrs, "stream": 1})
                             if n.op in STREAMING and g.params[n.attrs["w"]][0] in params
                             and (n.op != "conv2d_i8" or _stored_conv(n)) else n for n in g.nodes])


def dense_streamable(g: TrainingGraph) -> list[str]:
    """Frozen dense weights stored int8 (w8) that could stream from aux storage, largest first: read by
    forward linear nodes only (the board streams a forward's output rows; a backward's input gradient sums
    over them all), not streamed already."""
    readers = _weight_readers(g)
    w8 = {n.attrs["w"] for n in g.nodes if n.op == "linear" and n.attrs.get("w8")}
    return _largest_first(g, [i for i in w8 if readers[i] == {"linear"} and g.params[i][0] not in g.streamed_params])


def _weight_readers(g: TrainingGraph) -> dict[int, set[str]]:
    """Each weight (parameter index) a node reads as its `w`: the ops of the nodes that read it."""
    readers: dict[int, set[str]] = {}
    for n in g.nodes:
        if n.attrs.get("w", -1) >= 0 and n.kind != "optimizer":
            readers.setdefault(n.attrs["w"], set()).add(n.op)
    return readers


def _largest_first(g: TrainingGraph, params: list[int]) -> list[str]:
    """The names of `params`, the largest first (ties by index): the fewest layers moved make the room."""
    return [g.params[i][0] for i in sorted(params, key=lambda i: (-numel(g.params[i][1]), i))]


def weight_only_int8(g: TrainingGraph, params: set[str]) -> TrainingGraph:
    """g with the frozen fp32 weights `params` stored int8 (the linear, conv2d and backward nodes that read
    them marked `w8`)."""
    if not params:
        return g
    return replace(g, nodes=[replace(n, attrs={**n.attrs, "w8": 1})
                             if n.op in W8_READERS and g.params[n.attrs["w"]][0] in params else n
                             for n in g.nodes])


def w8_candidates(g: TrainingGraph) -> list[str]:
    """Frozen fp32 weights that could be stored int8, largest first: read by fp32 linear or conv nodes
    and their backwards only (W8_READERS), never written (not trained, not moved), not int8 already."""
    fixed = set(g.frozen) - g.moved - g.int8_params
    return _largest_first(g, [i for i, ops in _weight_readers(g).items()
                              if ops <= set(W8_READERS) and g.params[i][0] in fixed])


def place(g: TrainingGraph, board: Board) -> TrainingGraph:
    """g with its frozen weights placed for `board`: unchanged when flash holds them, else with the
    largest int8-stored conv weights (static int8, or int8 layers of the fp32 graph) streamed from aux
    storage until it does, then the largest frozen
    fp32 weights stored int8 (weight-only). A model whose frozen weights fit neither is one clear line."""
    flash = board.model_flash_bytes
    if pool_for(g).flash.total <= flash:
        return g
    movable = sorted((n for n in g.nodes if _stored_conv(n) and not n.attrs.get("stream")),
                     key=lambda n: (-numel(g.params[n.attrs["w"]][1]), n.id))
    chosen = set(g.streamed_params)
    out = g
    for n in movable:
        chosen.add(g.params[n.attrs["w"]][0])
        out = streamed(g, chosen)
        if pool_for(out).flash.total <= flash:
            break
    dense: set[str] = set()
    for name in w8_candidates(out) if pool_for(out).flash.total > flash else []:
        dense.add(name)
        out2 = weight_only_int8(out, dense)
        if pool_for(out2).flash.total <= flash:
            out = out2
            break
    else:
        out = weight_only_int8(out, dense)
    for name in dense_streamable(out) if pool_for(out).flash.total > flash else []:
        chosen.add(name)  # then the largest of those to the card, as the convs
        out = streamed(out, chosen)
        if pool_for(out).flash.total <= flash:
            break
    f = pool_for(out).flash
    if f.total > flash:
        n = len(chosen)
        why = (f"even with the weights of {n} of its layers on the SD card" if chosen
               else "and only convolutions and dense layers whose frozen weights are stored int8 can stream "
                    "them from the SD card (this model has none: its frozen layers are read by a layer that "
                    "trains, or have no int8 form)")
        if dense:
            why += f", and {len(dense)} frozen fp32 weight{'s' if len(dense) != 1 else ''} stored int8"
        raise UsageError(f"the model's frozen weights fit neither {board.name}'s flash nor its SD card: flash would "
                         f"need {format_size(f.total)} of the {format_size(flash)} the firmware leaves, {why}; "
                         "choose a smaller model or train more of it")
    room = board.aux_bytes
    need = aux_area_bytes(out)
    if room is not None and need > room:
        raise UsageError(f"the model's frozen weights fit neither {board.name}'s flash nor its SD card: "
                         f"{format_size(f.aux)} of weights on the card after a {format_size(need - f.aux)} "
                         f"swap area is more than the firmware's {format_size(room)} of it (boards/{board.name}.yaml "
                         "aux_storage bytes); choose a smaller model")
    return out


def w8_params(g: TrainingGraph) -> set[str]:
    """The frozen fp32 weights g stores int8 (weight-only, `w8`)."""
    return {g.params[n.attrs["w"]][0] for n in g.nodes if n.op in W8_READERS and n.attrs.get("w8")}


def w8_lines(g: TrainingGraph) -> list[str]:
    """What `poet solve` says of the frozen fp32 weights flash keeps int8 (weight-only)."""
    names = sorted(w8_params(g))
    if not names:
        return []
    nbytes = sum(i8_bytes(numel(shape)) for name, shape in g.params if name in names)
    return [f"frozen weights stored int8 in flash (fp32 cannot fit it; computed in fp32 on q x scale, "
            f"forward and input gradient): {len(names)} layer(s), {format_size(nbytes)}: {', '.join(names)}"]


def stream_lines(g: TrainingGraph) -> list[str]:
    """What `poet solve` says of the weights on the SD card: which layers, how big, how they are read."""
    from poet.plan.cost.memory import node_rows, node_stream_row, stream_reads

    pool = pool_for(g)
    nodes = [n for n in g.nodes if n.op in STREAMING and n.attrs.get("stream")]
    if not nodes:
        return []
    kinds = (("conv2d_q", "static-int8 convolution"), ("conv2d_i8", "int8 convolution"),
             ("linear", "dense layer"))
    counts = [(sum(n.op == op for n in nodes), what) for op, what in kinds]
    what = ", ".join(f"{k} {w}{'s' if k != 1 else ''}" for k, w in counts if k)
    out = [f"frozen weights on the SD card (flash cannot hold them): {what}, "
           f"{format_size(pool.flash.aux)}, each read through a {format_size(pool.stream)} stream buffer in RAM:"]
    for n in nodes:
        a = n.attrs
        reads = stream_reads(node_rows(n.op, a), node_stream_row(n.op, a), pool.stream)
        out.append(f"  {n.name:<30} {format_size(i8_bytes(numel(g.params[a['w']][1]))):>10} in {len(reads)} reads")
    return out
