"""Op-level instrumentation of a real PyTorch training step (the Amanda idea, for PyTorch).

Tools attach routines that run before and after every ATen op of a training step,
forward and backward alike. Module hooks miss functional calls (`F.relu`,
`x + y`, `torch.flatten`), the loss and autograd's own work; a dispatch mode sees
all of them, because every op reaches the dispatcher. Each op gets:

- a stable id (its position in the step),
- its phase (`forward` while the model and loss run, `backward` inside autograd),
- the qualified path of the innermost module running it (`layer2/0/conv1`),
- its tensor inputs and outputs,
- for a backward op, the id of the forward op whose autograd node produced it.

Above the ATen ops, the layer also records every call into the torch API that the
model's code makes (`F.linear`, `torch.matmul`, `x + y`, `x.view(...)`): a
`CallEvent` with the same module path, its arguments and results. Each ATen op
names the API call it ran inside (`call_id`), so a tool can work at the level the
user wrote (the graph tracer does) and still account for every op PyTorch ran.

Use:

    with Instrumented(model) as ins:
        ins.on_after(lambda ev: print(ev.id, ev.phase, ev.module, ev.op))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    ins.events  # every OpEvent of the step
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from poet.graph import composite


@dataclass
class OpEvent:
    id: int
    op: str  # ATen overload name, e.g. "aten.convolution.default"
    phase: str  # forward | backward
    module: str  # innermost module path, "" at the top level
    inputs: list[torch.Tensor] = field(repr=False)
    outputs: list[torch.Tensor] = field(default_factory=list, repr=False)
    forward_id: int | None = None  # for backward ops: the forward op they differentiate
    autograd_node: str = ""  # for backward ops: the autograd node running them (e.g. AccumulateGrad)
    call_id: int | None = None  # forward ops: the torch API call (CallEvent) they ran inside
    # backward ops autograd's engine runs after a node, to sum two gradients of one tensor
    accumulate: bool = False

    @property
    def output_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.outputs)


@dataclass
class CallEvent:
    """One call into the torch API from the model's (or the loss's) code."""

    id: int
    name: str  # the function or method name: "linear", "matmul", "__add__", "view", ...
    module: str  # innermost module path at the call
    args: tuple[Any, ...] = field(repr=False)
    kwargs: dict[str, Any] = field(repr=False)
    result: Any = field(default=None, repr=False)

    @property
    def inputs(self) -> list[torch.Tensor]:
        return _tensors((self.args, self.kwargs))

    @property
    def outputs(self) -> list[torch.Tensor]:
        return _tensors(self.result)


Hook = Callable[[OpEvent], None]


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _Mode(TorchDispatchMode):
    def __init__(self, owner: Instrumented) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.owner._dispatch(func, args, kwargs or {})


class _CallMode(TorchFunctionMode):
    def __init__(self, owner: Instrumented) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        # While a mode handles a call it is off the stack, so calls made inside `func`
        # (F.cross_entropy calling log_softmax) are not seen: one event per call the user wrote.
        # Attention is the exception: the calls it is made of are seen instead (graph/composite.py).
        if torch._C._current_autograd_node() is None:
            done, out = composite.run(self, func, args, kwargs or {})
            if done:
                return out
        return self.owner._record_call(func, args, kwargs or {})


class Instrumented:
    """A context in which every op of `model`'s training step is observed."""

    def __init__(self, model: nn.Module, aten: bool = True, saved: bool = False) -> None:
        self.model = model
        self.aten = aten  # False: record API calls only (fast; enough for tracing a graph)
        # (call id, tensor) for every tensor autograd saves for backward, when `saved` is set
        self.saved: list[tuple[int | None, torch.Tensor]] | None = [] if saved else None
        self.events: list[OpEvent] = []
        self.calls: list[CallEvent] = []
        self._current_call: int | None = None
        self._finished: set[int] = set()  # id(autograd node) whose own work is done this backward
        self._before: list[Hook] = []
        self._after: list[Hook] = []
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self._grad_fn_owner: dict[int, int] = {}  # id(autograd node) -> forward op id
        self._pending = 0  # events whose outputs' autograd nodes are not yet mapped
        self._mode = _Mode(self)
        self._call_mode = _CallMode(self)

    def on_before(self, hook: Hook) -> None:
        self._before.append(hook)

    def on_after(self, hook: Hook) -> None:
        self._after.append(hook)

    def __enter__(self) -> Instrumented:
        names = {m: n.replace(".", "/") for n, m in self.model.named_modules()}
        for mod, name in names.items():
            self._handles.append(mod.register_forward_pre_hook(lambda _m, _i, n=name: self._push(n)))
            self._handles.append(mod.register_forward_hook(lambda _m, _i, _o: self._pop()))
        if self.saved is not None:
            self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
            self._saved_hooks.__enter__()
        self._call_mode.__enter__()
        if self.aten:
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.aten:
            self._mode.__exit__(*exc)
        self._call_mode.__exit__(*exc)
        if self.saved is not None:
            self._saved_hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _push(self, name: str) -> None:
        self._stack.append(name)

    def _pop(self) -> None:  # returns None: a forward hook's return value would replace the output
        self._stack.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        assert self.saved is not None
        self.saved.append((self._current_call, t))
        return t

    def _record_call(self, func, args, kwargs):  # type: ignore[no-untyped-def]
        if torch._C._current_autograd_node() is not None:  # a backward hook's own torch calls
            return func(*args, **kwargs)
        ev = CallEvent(len(self.calls), getattr(func, "__name__", str(func)),
                       self._stack[-1] if self._stack else "", args, kwargs)
        outer, self._current_call = self._current_call, ev.id
        try:
            ev.result = func(*args, **kwargs)
        finally:
            self._current_call = outer
        self.calls.append(ev)
        return ev.result

    def _dispatch(self, func, args, kwargs):  # type: ignore[no-untyped-def]
        self._resolve_grad_fns()
        node = torch._C._current_autograd_node()
        phase = "backward" if node is not None else "forward"
        ev = OpEvent(len(self.events), str(func), phase, self._stack[-1] if self._stack else "",
                     _tensors((args, kwargs)), call_id=self._current_call if node is None else None)
        if node is not None:
            ev.autograd_node = node.name()
            ev.forward_id = self._grad_fn_owner.get(id(node))
            ev.accumulate = id(node) in self._finished
            if ev.forward_id is not None:
                ev.module = self.events[ev.forward_id].module
        for hook in self._before:
            hook(ev)
        out = func(*args, **kwargs)
        ev.outputs = _tensors(out)
        self.events.append(ev)
        for hook in self._after:
            hook(ev)
        return out

    def _watch(self, fn: Any) -> None:
        """After a node's own work the engine may still run ops under it: the sums of gradients
        from two consumers of one tensor. A post-hook marks when the node's own work ends."""
        key = id(fn)
        fn.register_prehook(lambda _g: self._finished.discard(key))
        fn.register_hook(lambda _gi, _go: self._finished.add(key))

    def _resolve_grad_fns(self) -> None:
        """Map autograd nodes to the forward ops that made them.

        The mode runs below autograd, so an op's outputs get their grad_fn only after
        the mode returns; by the next dispatched op they have it.
        """
        while self._pending < len(self.events):
            ev = self.events[self._pending]
            self._pending += 1
            if ev.phase != "forward":
                continue
            for t in ev.outputs:
                # an op writing a view in place gives the view's base a CopySlices node, which runs the op's
                # backward (a dropout in place on a flatten's output): it is the op's too
                base = t._base.grad_fn if t._base is not None else None
                for fn in (t.grad_fn, base):
                    if fn is not None and id(fn) not in self._grad_fn_owner:
                        self._grad_fn_owner[id(fn)] = ev.id
                        self._watch(fn)


# ---------------------------------------------------------------- tools built on the hooks

class OpTimer:
    """Host-side wall time of every op (for Linux boards that run PyTorch themselves)."""

    def __init__(self, ins: Instrumented) -> None:
        self.ns: dict[int, int] = {}
        self._t0 = 0
        ins.on_before(self._start)
        ins.on_after(self._stop)

    def _start(self, _ev: OpEvent) -> None:
        self._t0 = time.perf_counter_ns()

    def _stop(self, ev: OpEvent) -> None:
        self.ns[ev.id] = time.perf_counter_ns() - self._t0


def saved_activation_bytes(model: nn.Module, step: Callable[[], torch.Tensor]) -> int:
    """Bytes of the distinct floating-point tensors autograd saves for backward, parameters excluded.

    This is what PyTorch really keeps between forward and backward; the training
    graph's keep-everything plan should hold the same activations.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if t.is_floating_point() and st.data_ptr() not in params:
            storages[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step()
    loss.backward()
    return sum(storages.values())
