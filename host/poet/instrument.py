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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


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

    @property
    def output_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.outputs)


Hook = Callable[[OpEvent], None]


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _Mode(TorchDispatchMode):
    def __init__(self, owner: Instrumented) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.owner._dispatch(func, args, kwargs or {})


class Instrumented:
    """A context in which every op of `model`'s training step is observed."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.events: list[OpEvent] = []
        self._before: list[Hook] = []
        self._after: list[Hook] = []
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self._grad_fn_owner: dict[int, int] = {}  # id(autograd node) -> forward op id
        self._pending = 0  # events whose outputs' autograd nodes are not yet mapped
        self._mode = _Mode(self)

    def on_before(self, hook: Hook) -> None:
        self._before.append(hook)

    def on_after(self, hook: Hook) -> None:
        self._after.append(hook)

    def __enter__(self) -> Instrumented:
        names = {m: n.replace(".", "/") for n, m in self.model.named_modules()}
        for mod, name in names.items():
            self._handles.append(mod.register_forward_pre_hook(lambda _m, _i, n=name: self._push(n)))
            self._handles.append(mod.register_forward_hook(lambda _m, _i, _o: self._pop()))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _push(self, name: str) -> None:
        self._stack.append(name)

    def _pop(self) -> None:  # returns None: a forward hook's return value would replace the output
        self._stack.pop()

    def _dispatch(self, func, args, kwargs):  # type: ignore[no-untyped-def]
        self._resolve_grad_fns()
        node = torch._C._current_autograd_node()
        phase = "backward" if node is not None else "forward"
        ev = OpEvent(len(self.events), str(func), phase, self._stack[-1] if self._stack else "",
                     _tensors((args, kwargs)))
        if node is not None:
            ev.autograd_node = node.name()
            ev.forward_id = self._grad_fn_owner.get(id(node))
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
                fn = t.grad_fn
                if fn is not None:
                    self._grad_fn_owner.setdefault(id(fn), ev.id)


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
