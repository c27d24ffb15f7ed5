"""Trace a PyTorch model's training step into poet's TrainingGraph, through the instrumentation layer.

The model runs once on an example batch under `poet.graph.instrument.Instrumented`;
every call its code makes into the torch API (`F.linear`, `x + y`,
`torch.matmul`, `x.view(...)`) becomes at most one forward node, one kernel of
the runtime's op set (poet.ops, with graph/handlers.py; docs/graph.md lists it with what
each backward reads). Calls that only make constants (`torch.arange`) or read
metadata (`x.shape`) make no node; views that the runtime needs no kernel for
(`contiguous`, `dropout` with p=0 or in eval mode) alias their input; a `bernoulli_` mask divided by its
keep share and multiplied in (torchvision's stochastic_depth) is a dropout by rows. Any other call is an error
naming the call, its module path and the supported set: nothing is dropped.

The backward pass is then built from the forward nodes, not traced (graph/backward.py):
one backward node per forward node that a trainable parameter needs a gradient through
(docs/graph.md, "Backward"), gradient sums where a tensor feeds two ops, the loss
gradient, and SGD over the trainable parameters. graph/check.py proves it against what PyTorch
really does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from poet.errors import PoetError, UsageError
from poet.graph import dropout, train_modes
from poet.graph import file as graphfile
from poet.graph.backward import Backward
from poet.graph.dtypes import F32
from poet.graph.handlers import FORWARD, SUPPORTED, Ctx, Fwd, arg
from poet.graph.instrument import CallEvent, Instrumented
from poet.graph.reference import LOSSES, state_tensors
from poet.graph.training_graph import GraphNode, TrainingGraph, name_problem, numel
from poet.models.zoo import ModelChoice

IGNORED = {"dim", "size", "__get__", "numel", "backward", "__len__", "__format__", "__bool__", "item"}
ALIAS = {"contiguous", "clone", "detach"}  # runtime tensors are always contiguous, private copies


class _Tracer:
    def __init__(self, model: nn.Module, train: str, subst: dict[str, torch.Tensor] | None = None) -> None:
        self.model = model
        # parameters, then the running statistics the runtime keeps (frozen: moved by the forward only)
        self.params = state_tensors(model)
        # the tensors the forward pass will really see: the parameters, or their meta stand-ins
        seen = [subst[n] if subst else p for n, p in self.params]
        self.pindex = {id(p): i for i, p in enumerate(seen)}
        self.buffers = {id(subst[n] if subst else b) for n, b in model.named_buffers()}
        self.node_of: dict[int, int] = {}  # id(tensor) -> node id (tensors are kept alive by the calls)
        self.node_of_call: dict[int, int] = {}  # CallEvent id -> the node it made (or aliased)
        self.const_calls: set[int] = set()  # calls that make constants or only read metadata
        self.poison: dict[int, tuple[PoetError, ...]] = {}  # id(tensor) -> why no runtime op can make it
        # why each op the loss reads through cannot run, in the order met: all are reported at once
        self.blocking: list[PoetError] = []
        self.consts: dict[int, tuple[str, CallEvent]] = {}
        self.fwd: list[tuple[Fwd, CallEvent]] = []
        self.train = train
        self.dropout_calls: dict[int, int] = {}  # CallEvent id -> which dropout call of the forward (its salt)
        self.masks: dict[int, dropout.Mask] = {}  # id(tensor) -> the bernoulli_ mask it holds (stochastic depth)
        # a split's pieces, made nodes only when an op reads them (x1, x2 = x.chunk(2) with x1 unused is one)
        self.pending: dict[int, tuple[Fwd, CallEvent]] = {}  # id(piece) -> its node, not yet made
        self.pieces: dict[int, list[int]] = {}  # CallEvent id -> the nodes made of its pieces
        self.extra: dict[int, list[int]] = {}  # CallEvent id -> nodes made for it first (a parameter as an input)

    def const_index(self, t: torch.Tensor) -> int | None:
        """Index tensors the model makes itself: 1 = arange(n), 2 = zeros(n); None = anything else."""
        made = self.consts.get(id(t))
        if made is None:
            return None
        name, call = made
        if name == "arange" and len(call.args) == 1:
            return 1
        if name == "zeros":
            return 2
        return None

    def add_call(self, call: CallEvent) -> None:
        kept = dropout.drawn_share(call.name, call.args, call.kwargs)
        if call.name == "dropout" or kept is not None:  # numbered as reference.PoetDropout numbers them
            self.dropout_calls[call.id] = len(self.dropout_calls)
        if kept is not None:
            self.masks[id(call.args[0])] = dropout.Mask(self.dropout_calls[call.id], kept)
        else:
            self._follow_mask(call)
        outs = call.outputs
        if call.name in IGNORED or not outs:
            self.const_calls.add(call.id)
            return
        ins = call.inputs
        for t in ins:
            self.made(t)
        # An op outside the op set is an error only if the loss depends on it: its outputs carry the
        # error, and a supported op that reads one (or the logits) makes it count. So values read only
        # for control flow (`if x.sum() > 0`) or logging do not stop a trace.
        inherited = tuple(e for t in ins for e in self.poison.get(id(t), ()))
        live = [t for t in ins if id(t) in self.node_of]
        if not inherited and not live and not any(id(t) in self.pindex for t in ins):
            for t in outs:  # made from constants only: arange, zeros, running-statistics updates
                self.consts[id(t)] = (call.name, call)
            self.const_calls.add(call.id)
            return
        ctx = Ctx(self, call)
        alias = call.name in ALIAS or (call.name == "dropout" and (not arg(call, 2, "training", True)
                                                                  or arg(call, 1, "p", 0.5) == 0))
        handler = FORWARD.get(call.name)
        if alias and inherited:
            self._poison(outs, inherited)
            return
        if alias:
            self.node_of[id(call.result)] = self.node_of_call[call.id] = self.node_of[id(call.args[0])]
            return
        if handler is None:
            self._poison(outs, (*inherited, PoetError(f"{call.module or 'model'}: {call.name} is not in the "
                                                      f"runtime's op set; supported: {SUPPORTED}")))
            return
        # a supported op that reads what none can make: the unmade tensor stands in as the input node, so the
        # trace goes on and finds every op a model lacks in one pass
        for t in ins:
            if id(t) in self.poison:
                self.node_of.setdefault(id(t), 0)
        try:
            f = handler(ctx)
        except PoetError as exc:  # a supported op in a form the runtime lacks: same rule
            self._poison(outs, (*inherited, exc))
            return
        for e in inherited:
            self._block(e)
        fs = f if isinstance(f, list) else [f]
        for pre in [] if isinstance(f, list) else f.pre:
            pre.deps = [self.node_of[id(t)] for t in pre.inputs]
            self.extra.setdefault(call.id, []).append(self._add(pre, call, made_by_call=False))
        for t in fs[0].inputs:
            if id(t) not in self.node_of:
                raise ctx.fail("reads a tensor that is neither an activation nor a parameter "
                               "(register constant tensors as buffers, or compute them from the input)")
        if any(id(p) not in self.pindex for p in fs[0].params.values()):
            raise ctx.fail("its weight is not one of the model's parameters (a layer kept outside the model's "
                           "modules, in a list or a closure: register it, e.g. with nn.ModuleList)")
        for one in fs:
            one.deps = [self.node_of[id(t)] for t in one.inputs]
        if isinstance(f, list):
            for one in f:
                self.pending[id(one.out)] = (one, call)
            return
        self._add(f, call)

    def _add(self, f: Fwd, call: CallEvent, made_by_call: bool = True) -> int:
        """f as the next forward node, made by call (a split's first piece read names the call's node; a node the
        call needs made first, made_by_call False, does not)."""
        nid = len(self.fwd) + 1  # node 0 is the input
        self.node_of[id(f.out)] = nid
        if made_by_call:
            self.node_of_call.setdefault(call.id, nid)
        self.fwd.append((f, call))
        return nid

    def prune(self, out: int) -> None:
        """Drop the forward nodes the output does not depend on: values computed for logging, the attention
        weights nn.MultiheadAttention returns by default. Their calls count as making no node (graph/check.py)."""
        live = {out}
        for nid in range(out, 0, -1):
            if nid in live:
                live.update(self.fwd[nid - 1][0].deps)
        if len(live - {0}) == len(self.fwd):
            return
        new = {0: 0}
        kept: list[tuple[Fwd, CallEvent]] = []
        for nid, (f, call) in enumerate(self.fwd, 1):
            if nid in live:
                kept.append((f, call))
                new[nid] = len(kept)
        for f, _ in kept:
            f.deps = [new[d] for d in f.deps]
        self.fwd = kept
        for t, nid in list(self.node_of.items()):
            if nid in new:
                self.node_of[t] = new[nid]
            else:
                del self.node_of[t]
        for c, nid in list(self.node_of_call.items()):
            if nid in new:
                self.node_of_call[c] = new[nid]
            else:
                del self.node_of_call[c]
                self.const_calls.add(c)
        self.pieces = {c: [new[n] for n in ns if n in new] for c, ns in self.pieces.items()}
        self.extra = {c: [new[n] for n in ns if n in new] for c, ns in self.extra.items()}

    def made(self, t: Any) -> None:
        """A piece of a split becomes a node when first read (its deps fixed when the split was recorded)."""
        got = self.pending.pop(id(t), None) if isinstance(t, torch.Tensor) else None
        if got is not None:
            self.pieces.setdefault(got[1].id, []).append(self._add(*got))

    def _follow_mask(self, call: CallEvent) -> None:
        """A bernoulli_ mask divided by its keep share (in place or not) is one a dropout node makes: the
        multiply with x becomes the node (handlers._binary). Any other in-place change makes it a tensor
        the tracer knows nothing of."""
        t = call.args[0] if call.args else None
        mask = self.masks.get(id(t)) if isinstance(t, torch.Tensor) else None
        if mask is None:
            return
        by = call.args[1] if len(call.args) > 1 else None
        if (call.name in ("div_", "div", "__truediv__", "__itruediv__") and not mask.scaled and not call.kwargs
                and isinstance(by, int | float) and float(by) == mask.kept and isinstance(call.result, torch.Tensor)):
            self.masks[id(call.result)] = replace(mask, scaled=True)
        elif call.name.endswith("_") or call.name.startswith("__i"):
            del self.masks[id(t)]

    def _poison(self, outs: list[torch.Tensor], errs: tuple[PoetError, ...]) -> None:
        for t in outs:
            self.poison[id(t)] = errs

    def _block(self, err: PoetError) -> None:
        if all(str(e) != str(err) for e in self.blocking):
            self.blocking.append(err)

    def refusal(self, name: str) -> PoetError | None:
        """One line naming every op the loss reads through that the runtime cannot run (None: there is none).
        A model that uses ops poet lacks is an input poet cannot take: status 2."""
        if not self.blocking:
            return None
        why = [str(e).removesuffix(f"; supported: {SUPPORTED}") for e in self.blocking]
        lacks = any(str(e).endswith(f"; supported: {SUPPORTED}") for e in self.blocking)
        tail = f"; supported: {SUPPORTED}" if lacks else ""
        if len(why) == 1:
            return PoetError(why[0] + tail, status=2)
        return PoetError(f"model {name!r} uses {len(why)} ops the runtime cannot run: {' | '.join(why)}{tail}",
                         status=2)


# The most elements one tensor may have: the board counts them in i32 (docs/spec.md section 2,
# graphfile.I32), so a bigger one cannot be described to it, let alone trained there.
MAX_ELEMENTS = 2**31 - 1
# A model whose code needs values (it fails on meta tensors) is traced on a real batch, allocated
# here, every activation kept alive by the recorded calls: its batch may take at most this much.
REAL_BATCH_BYTES = 2**30


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def _example_batch(batch: int, input_shape: tuple[int, ...], input_dtype: str, device: str = "cpu") -> torch.Tensor:
    shape = (batch, *input_shape)
    if input_dtype == "int64":
        return torch.zeros(shape, dtype=torch.long, device=device)  # token 0 exists in every vocabulary
    if device == "meta":
        return torch.empty(shape, device="meta")
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g)


def _check_batch(name: str, shape: tuple[int, ...], input_dtype: str) -> None:
    """Refuse an example batch beyond MAX_ELEMENTS before anything is allocated for it."""
    n = numel(list(shape))
    if n > MAX_ELEMENTS:
        size = _gib(n * (8 if input_dtype == "int64" else 4))
        raise UsageError(f"model {name!r}: an input batch of shape {list(shape)} has {n:,} elements ({size} as "
                         f"{input_dtype}); poet's tensors hold at most 2**31 - 1 elements (the board counts them in "
                         f"i32): use a smaller --input-shape or --batch")


def traced(choice: ModelChoice) -> tuple[nn.Module, TrainingGraph]:
    """The chosen model, freshly initialised, and its traced training step."""
    if choice.batch < 1:
        raise UsageError(f"--batch {choice.batch}: must be at least 1")
    model, spec = choice.build()
    return model, trace(model, spec.name, spec.input_shape, spec.classes, choice.batch, spec.input_dtype,
                        choice.train, spec.loss)


def trace(model: nn.Module, name: str, input_shape: tuple[int, ...] | list[int], classes: int, batch: int,
          input_dtype: str = "float32", train: str = "all", loss: str = "cross_entropy") -> TrainingGraph:
    """The training step of `model` (the mean `loss`, SGD) as a TrainingGraph.

    `loss`: "cross_entropy" of logits [batch, classes] against the staged labels, or "mse" / "l1" of
    the output against the input (an autoencoder reconstructing it: the output has the input's shape).

    `train`: "all" (every parameter that requires grad), "last:N" (the last N layers with
    parameters, in the order the forward pass uses them), "bias" (only parameters named bias), or
    modes joined by "+" (their union: "bias+last:N", tiny-training's sparse update).
    The pass runs on meta tensors (shapes only, nothing allocated); a model whose code needs
    values gets a real batch of at most REAL_BATCH_BYTES.
    """
    if loss != "cross_entropy" and (loss not in LOSSES or input_dtype != "float32"):
        raise UsageError(f"loss {loss!r} for a {input_dtype} input: poet has cross_entropy, and "
                         f"{', '.join(LOSSES)} of a float32 output against the input")
    shape = (batch, *input_shape)
    _check_batch(name, shape, input_dtype)
    # module and parameter names become the graph's node and tensor names, printed one to a line
    for kind, names in (("module", (n for n, _ in model.named_modules())),
                        ("parameter", (n for n, _ in model.named_parameters()))):
        for n in names:
            why = name_problem(n) if n else None
            if why:
                raise UsageError(f"model {name!r}: the {kind} name {n[:60]!r} {why}; rename it")
    labels = torch.zeros(batch, dtype=torch.long)
    x = _example_batch(batch, tuple(input_shape), input_dtype, device="meta")
    try:
        return _trace_step(model, name, x, labels.to("meta"), classes, input_dtype, train, False, set(),
                           meta=True, loss=loss).graph
    except _NeedsValues as exc:
        need = numel(list(shape)) * x.element_size()
        if need > REAL_BATCH_BYTES:
            why = exc.__cause__
            msg = f" ({type(why).__name__}: {str(why).splitlines()[0][:80]})" if why and str(why) else ""
            raise UsageError(f"model {name!r} needs values to trace, not only shapes{msg}, and a real batch of "
                             f"shape {list(shape)} takes {_gib(need)}; poet traces on real batches up to "
                             f"{_gib(REAL_BATCH_BYTES)}: use a smaller --input-shape or --batch") from exc
    return _trace_step(model, name, _example_batch(batch, tuple(input_shape), input_dtype), labels, classes,
                       input_dtype, train, False, set(), meta=False, loss=loss).graph


@dataclass
class Traced:
    """A traced step and what it was traced from, for tools that compare the graph with PyTorch."""

    graph: TrainingGraph
    ins: Instrumented
    node_of_call: dict[int, int]  # CallEvent id -> graph node (the loss call -> the loss node)
    const_calls: set[int]  # CallEvent ids that made constants (arange, buffer updates) or read metadata
    x: torch.Tensor
    labels: torch.Tensor
    pieces: dict[int, list[int]] = field(default_factory=dict)  # CallEvent id -> a split's piece nodes
    extra: dict[int, list[int]] = field(default_factory=dict)  # CallEvent id -> nodes made for it first


def trace_step(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
               input_dtype: str = "float32", train: str = "all", real_step: bool = False,
               loss: str = "cross_entropy") -> Traced:
    """Trace one step on batch `x`. With `real_step`, run it as PyTorch trains it (autograd on, only
    the mode's parameters requiring grad, backward run) and record its ATen ops and saved tensors
    too. Either way the model's parameters, gradients, buffers and flags are left as they were."""
    frozen: set[str] = set()
    if real_step:  # the frozen set depends on the forward order, known from a first, plain trace
        frozen = set(trace_step(model, name, x, labels, classes, input_dtype, train, loss=loss).graph.frozen)
    else:
        # Shapes are all a graph needs: a pass on meta tensors costs no arithmetic (BERT-base in
        # well under a second). Models whose code needs values (data-dependent control flow) fall
        # back to a real pass.
        try:
            return _trace_step(model, name, x.to("meta"), labels.to("meta"), classes, input_dtype, train,
                               False, frozen, meta=True, loss=loss)
        except _NeedsValues:
            pass
    return _trace_step(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta=False, loss=loss)


class _NeedsValues(Exception):
    """The model failed on meta tensors: trace it on real ones."""


def _trace_step(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
                input_dtype: str, train: str, real_step: bool, frozen: set[str], meta: bool,
                loss: str = "cross_entropy") -> Traced:
    """One traced step; fine-tuning part of the model, its frozen batch norms use running statistics.

    A batch norm in training mode none of whose parameters trains (`--train last:N`, `bias` on a
    layer without a bias...) normalises with its running statistics instead of the batch's, as
    Keras runs frozen BatchNormalization layers and tiny-training folds frozen ones: a frozen layer
    then computes the same function every step, its statistics stay read-only in flash instead of
    taking RAM to be moved, and a batch of one is well defined. The PyTorch reference does the same
    (reference.as_graph)."""
    try:
        t = _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, frozenset(),
                        loss)
    except PoetError:
        if train == "all":
            raise
        # a batch norm that cannot run in training mode here (BatchNorm1d on a batch of one) may be one
        # the mode freezes: learn which parameters train with every batch norm on running statistics
        every = frozenset(p.replace(".", "/") for p, m in model.named_modules()
                          if isinstance(m, nn.modules.batchnorm._BatchNorm))
        t = _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, every, loss)
        fixed = set(t.graph.frozen)
        norms = frozenset(n.module for n in t.graph.nodes if n.op == "batchnorm_eval" and all(
            t.graph.params[n.attrs[k]][0] in fixed for k in ("w", "b") if n.attrs.get(k, -1) >= 0))
        return _trace_once(model, name, x, labels, classes, input_dtype, train, real_step, frozen, meta, norms,
                           loss)
    norms = _norms_to_freeze(t.graph) if train != "all" else frozenset()
    # only a batch norm module switches (a functional call inside a larger module keeps its mode)
    norms = frozenset(n for n in norms if isinstance(_module(model, n), nn.modules.batchnorm._BatchNorm))
    return t if not norms else _trace_once(model, name, x, labels, classes, input_dtype, train, real_step,
                                           frozen, meta, norms, loss)


def _norms_to_freeze(g: TrainingGraph) -> frozenset[str]:
    """Module paths of the batch norms in training mode that train no parameter."""
    fixed = set(g.frozen)
    return frozenset(n.module for n in g.nodes if n.op == "batchnorm" and all(
        g.params[n.attrs[k]][0] in fixed for k in ("w", "b") if n.attrs.get(k, -1) >= 0))


def _module(model: nn.Module, path: str) -> nn.Module:
    return model.get_submodule(path.replace("/", "."))


def _trace_once(model: nn.Module, name: str, x: torch.Tensor, labels: torch.Tensor, classes: int,
                input_dtype: str, train: str, real_step: bool, frozen: set[str], meta: bool,
                eval_norms: frozenset[str], loss: str = "cross_entropy") -> Traced:
    batch = x.shape[0]
    params = list(model.named_parameters())
    before = [(p.requires_grad, p.grad) for _, p in params]
    # BN running stats: the trace leaves no mark. A meta pass reads and moves only meta stand-ins
    # (subst below), so it needs no copy, which for a large model is as big as the model.
    state = {} if meta else {k: v.clone() for k, v in model.state_dict().items()}
    modes = {m: m.training for m in model.modules()}
    if not model.training:  # a model handed over in eval mode trains as a whole; one in train mode
        model.train()       # keeps the modes its user set (a batch norm in eval(): frozen statistics)
    for path in eval_norms:
        _module(model, path).training = False
    subst = None
    if meta:
        subst = {n: torch.empty_like(t, device="meta").requires_grad_(t.requires_grad)
                 for n, t in [*model.named_parameters(), *model.named_buffers()]}
    tr = _Tracer(model, train, subst)
    tr.node_of[id(x)] = 0
    try:
        if real_step:
            for n, p in params:
                p.requires_grad_(n not in frozen)
                p.grad = None
        with torch.set_grad_enabled(real_step), Instrumented(model, aten=real_step, saved=real_step) as ins:
            try:
                logits = model(x) if subst is None else torch.func.functional_call(model, subst, (x,))
            except PoetError:
                raise
            except Exception as exc:  # the user's code can raise anything; say where and why in one line
                if meta:
                    raise _NeedsValues() from exc
                msg = str(exc).splitlines()[0] if str(exc) else ""
                if batch == 1 and "more than 1 value per channel" in msg:  # torch's batch norm in training mode
                    raise PoetError(f"model {name!r} cannot train on a batch of 1: its batch norm needs more than "
                                    f"one value per channel; use --batch 2 or more, or a --train mode that freezes "
                                    f"its batch norms (last:N)") from exc
                hint = ("; a model that reads token ids: give it an attribute input_dtype = 'int64'"
                        if input_dtype == "float32" and "'indices'" in msg else "")
                raise PoetError(f"model {name!r} fails on a batch of shape {list(x.shape)} ({input_dtype}): "
                                f"{type(exc).__name__}: {msg}{hint}") from exc
            want = [batch, classes] if loss == "cross_entropy" else list(x.shape)
            if not isinstance(logits, torch.Tensor) or list(logits.shape) != want:
                got = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                raise PoetError(f"model {name!r} returns {got}, expected " + (
                    f"logits [{batch}, {classes}]" if loss == "cross_entropy" else
                    f"a reconstruction of its input {want} (--loss {loss} compares the output with the input)"))
            n_model_calls = len(ins.calls)
            step_loss = F.cross_entropy(logits, labels) if loss == "cross_entropy" else LOSSES[loss](logits, x)
            if real_step:
                step_loss.backward()
        for call in ins.calls[:n_model_calls]:
            tr.add_call(call)
    finally:
        if state:
            # in place, not load_state_dict: a dict copy lost its _metadata, and a module that reads its
            # version from it (torchvision's MNASNet) refuses to load without it
            with torch.no_grad():
                for k, v in model.state_dict(keep_vars=True).items():
                    v.copy_(state[k])
        for m, mode in modes.items():
            m.training = mode
        for (_, p), (req, grad) in zip(params, before):
            p.requires_grad_(req)
            p.grad = grad
    tr.made(logits)
    for e in tr.poison.get(id(logits), ()):
        tr._block(e)
    refused = tr.refusal(name)
    if refused is not None:
        raise refused
    if id(logits) not in tr.node_of:
        raise PoetError(f"model {name!r}: its output is not computed from its input by traced ops")
    tr.prune(tr.node_of[id(logits)])
    g = _build(tr, name, batch, tuple(x.shape[1:]), classes, input_dtype, tr.node_of[id(logits)], loss)
    loss_call = ins.calls[n_model_calls].id
    return Traced(g, ins, tr.node_of_call | {loss_call: len(tr.fwd) + 1}, tr.const_calls, x, labels, tr.pieces,
                  tr.extra)


def _trainable(tr: _Tracer, train: str) -> tuple[set[int], dict[int, float]]:
    """Indices of the parameters the --train mode trains, and the share of input channels of the weights
    it updates in part (poet.graph.train_modes)."""
    layers: list[list[int]] = []  # parameter sets of the layers, in forward order
    for f, _ in tr.fwd:
        ps = [tr.pindex[id(p)] for p in f.params.values()]
        if ps and (not layers or layers[-1] != ps):
            layers.append(ps)
    wanted = {i for i, (_, p) in enumerate(tr.params) if p.requires_grad}
    modules = [n for n, _ in tr.model.named_modules()]
    return train_modes.select(train, [n for n, _ in tr.params], wanted, layers, modules)


def _share(tr: _Tracer, path: str, attrs: dict[str, Any], r: float, readers: int, op: str) -> dict[int, int]:
    """A conv whose weight a NAME@R updates for its first int(R x C) input channels (a depthwise one: its
    channels): {weight: the channels its gradient covers} (tiny-training's int(in_channels * ratio)),
    nothing when that is all of them."""
    where = f"--train {tr.train}: {path}"
    groups = attrs.get("groups", 1)
    if op != "conv2d" or not (groups == 1 or groups == attrs["C"] == attrs["O"]) or readers != 1:
        what = ("a grouped conv" if op == "conv2d" and readers == 1 else
                "a weight read by more than one op" if op == "conv2d" else f"a {op}")
        raise UsageError(f"{where} is {what}: @R updates a share of the input channels of a conv2d with groups=1, "
                         f"or of the channels of a depthwise one (as tiny-training); train the whole layer instead")
    k = int(attrs["C"] * r)
    if k < 1:
        raise UsageError(f"{where}: @{r:g} of its {attrs['C']} input channels is none; give a larger share")
    return {attrs["w"]: k} if k < attrs["C"] else {}


def _names(tr: _Tracer) -> list[str]:
    """Qualified names: a leaf module's path for its one op, else module/op with _1, _2 for repeats."""
    leaves = {n.replace(".", "/") for n, m in tr.model.named_modules() if not any(m.children())}
    per_module: dict[str, int] = {}
    for _, call in tr.fwd:
        per_module[call.module] = per_module.get(call.module, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for f, call in tr.fwd:
        mod = call.module
        if mod and mod in leaves and per_module[mod] == 1:  # a bare layer as the model: "" is no name
            out.append(mod)
            continue
        base = f"{mod}/{f.op}" if mod else f.op
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(base if k == 0 else f"{base}_{k}")
    return out


def _build(tr: _Tracer, name: str, batch: int, input_shape: tuple[int, ...], classes: int, input_dtype: str,
           logits_id: int, loss: str = "cross_entropy") -> TrainingGraph:
    trainable, shares = _trainable(tr, tr.train)
    readers = {i: [f for f, _ in tr.fwd if i in (tr.pindex[id(p)] for p in f.params.values())] for i in shares}
    ck: dict[int, int] = {}  # weight -> the input channels its gradient covers, where a share of them
    nodes: list[GraphNode] = []
    shape0 = [batch, *input_shape]
    nodes.append(GraphNode(0, "input", "input", "input", "input", [], F32 * numel(shape0), shape0,
                           {"n": numel(shape0)}))
    rg = [False]  # does the node's output need a gradient?
    for (f, _call), path in zip(tr.fwd, _names(tr)):
        deps = list(f.deps)
        pidx = {role: tr.pindex[id(p)] for role, p in f.params.items()}
        attrs = dict(f.attrs) | pidx
        if pidx.get("w") in shares:
            ck.update(_share(tr, path, attrs, shares[pidx["w"]], len(readers[pidx["w"]]), f.op))
        shape = list(f.out.shape)
        if numel(shape) > MAX_ELEMENTS:  # in a meta pass, before any real tensor of that size exists
            raise UsageError(f"model {name!r}: {path} makes a tensor of shape {shape}, {numel(shape):,} elements "
                             f"({_gib(F32 * numel(shape))}); poet's tensors hold at most 2**31 - 1 elements (the "
                             f"board counts them in i32): use a smaller --input-shape or --batch")
        nid = len(nodes)
        nodes.append(GraphNode(nid, f"{path}/forward", path, "forward", f.op, deps, F32 * numel(shape), shape,
                               attrs, f.flops))
        rg.append(any(rg[d] for d in deps) or any(i in trainable for i in pidx.values()))
    if not any(rg):
        raise PoetError(f"--train {tr.train}: no parameter of model {name!r} would be trained")

    lshape = nodes[logits_id].shape
    if loss == "cross_entropy":
        ce = {"B": batch, "classes": classes}
        nodes.append(GraphNode(len(nodes), "loss/forward", "loss", "loss", "cross_entropy", [logits_id], 4, [1], ce,
                               5 * batch * classes))
        b = Backward(nodes, rg, trainable, ck)
        b.grads[logits_id] = [b.add("loss/backward", "loss", "cross_entropy_bwd", [], [logits_id], lshape, ce,
                                    4 * batch * classes)]
    else:  # the output against the input (node 0), which gets no gradient
        reg = {"n": numel(lshape)}
        nodes.append(GraphNode(len(nodes), "loss/forward", "loss", "loss", loss, [logits_id, 0], 4, [1], reg,
                               3 * numel(lshape)))
        b = Backward(nodes, rg, trainable, ck)
        b.grads[logits_id] = [b.add("loss/backward", "loss", f"{loss}_bwd", [], [logits_id, 0], lshape, reg,
                                    3 * numel(lshape))]
    for nid in range(len(nodes) - 2, 0, -1):
        b.differentiate(nid)
    n_train = sum(numel(list(tr.params[i][1].shape)) for i in trainable)
    nodes.append(GraphNode(len(nodes), "optimizer/sgd", "optimizer", "optimizer", "sgd", [], 0, [0], {},
                           2 * n_train))
    params = [(n, list(p.shape)) for n, p in tr.params]
    frozen = [n for i, (n, _) in enumerate(tr.params) if i not in trainable]
    if len(nodes) > graphfile.MAX_NODES:  # first known here: refused before any planner spends minutes on it
        raise UsageError(graphfile.too_many_nodes(f"model {name!r}", len(nodes),
                                                  "trace fewer layers (bert: --layers) or a smaller model"))
    return TrainingGraph(name, batch, list(input_shape), classes, params, nodes, frozen=frozen, train=tr.train,
                         input_dtype=input_dtype, loss=loss)
