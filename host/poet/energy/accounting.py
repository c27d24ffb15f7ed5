"""Where every joule of a training step went: Smaragdine's breakdown (tensor, module tree, kind) of a poet trace.

Charging rules (docs/energy.md states them for users):

- Each trace record is charged once, to the tensor its node makes (the graph node's
  qualified name, e.g. `layer4/1/conv1/forward`), that node's module path and a kind:
  forward, backward, optimizer for the plan's computes; `recompute` is charged to the
  tensor that was recomputed, `page_in` / `page_out` to the tensor that was paged:
  what rematerialization and paging cost shows up on the tensor that caused it.
- The feature cache's records (`cache_write`, a kept tensor written to the board's storage in epoch 1;
  `cache_read`, a batch's features read back from it later) are kind `cache`, charged to the kept
  tensor and to the input, and priced with the storage model as paging is.
- A `free` record is runtime bookkeeping: kind `overhead`, charged to the freed tensor.
- What no record covers, `step_ticks` minus the sum of the step's record ticks
  (interpreter dispatch and timer reads between records), is kind `overhead`,
  charged to the pseudo-tensor `(runtime)`.

Modelled energy (the default source): ticks become board time through
`Board.compute_time_s` (emulated instructions at the board's clock, or the real
board's timer) times the CPU's active power (datasheet). A paging record costs the
board's storage model for the bytes it moved (`Board.page_cost`, datasheet), which
replaces the record's own ticks: emulated paging goes through semihosting and takes
no virtual time, and the planner costs paging with the same model.

A layer whose int8 weight streams from the SD card (poet.plan.transform.placement) reads it inside its own
record: each of its forward and recompute records is charged the storage model's cost of those
reads (the trace's node says their sizes), on top of its ticks when emulated (semihosting takes no
virtual time), and as the card's power alone on a board (its ticks include the reads).

The identity this keeps, tested against the step totals in tests/test_accounting.py:

    total_j = sum over steps of  P_cpu * t(step_ticks - ticks of the step's paging records)
              + sum over paging records of  page_cost_j(bytes)
              + sum over streamed-weight records of their reads' page_cost_j (emulated)

so every tick of every step is charged exactly once and the account's total is the
run's total, not the sum of whatever the records happened to cover.

Measured energy: `account(trace, board, energy_of)` takes the joules of each record
from a power meter instead (`energy_of(step, i)`, step = index into trace.steps,
i = index into that step's records; `energy_of(step, OVERHEAD_RECORD)` = the step's
joules outside every record). Times then come from the trace's ticks, except an emulated
trace's paging records, which keep the storage model's time (they took no virtual time).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from poet.boards import Board
from poet.energy.tracefile import Trace, same_graph
from poet.errors import PoetError

KINDS = ("forward", "backward", "recompute", "page_in", "page_out", "cache", "optimizer", "overhead")
PAGING = ("page_in", "page_out")
CACHE = ("cache_write", "cache_read")  # the feature cache's record kinds (device.protocol.CACHE_KINDS): kind "cache"
# the records the storage model prices, and which way each moves the bytes
STORAGE = {"page_in": "in", "page_out": "out", "cache_read": "in", "cache_write": "out"}
RUNTIME = "(runtime)"  # module and tensor of the time between records
OVERHEAD_RECORD = -1  # energy_of's record index for the part of a step no record covers

EnergyOf = Callable[[int, int], float]


def energy_from_lists(per_record: Sequence[Sequence[float]], overhead: Sequence[float]) -> EnergyOf:
    """An `energy_of` from per-step lists aligned with the records, plus each step's overhead joules."""
    def energy_of(step: int, record: int) -> float:
        return overhead[step] if record == OVERHEAD_RECORD else per_record[step][record]
    return energy_of


@dataclass(frozen=True)
class Charge:
    step: int  # index into trace.steps
    record: int  # index into the step's records; OVERHEAD_RECORD for the step's remainder
    tensor: str  # qualified tensor name, e.g. "conv1/forward"
    module: str  # the graph node's module path, e.g. "layer4/1/conv1"
    kind: str  # one of KINDS
    time_s: float  # board time
    energy_j: float
    bytes: int
    start_s: float  # board time from the start of the trace (records in order; the step's remainder last)


@dataclass
class Entry:
    """Energy and time of one row of a breakdown (a kind, a module, a tensor), with its kinds."""

    energy_j: float = 0.0
    time_s: float = 0.0
    kinds: dict[str, float] = field(default_factory=dict)  # kind -> joules

    def add(self, energy_j: float, time_s: float, kinds: dict[str, float]) -> None:
        self.energy_j += energy_j
        self.time_s += time_s
        for k, e in kinds.items():
            self.kinds[k] = self.kinds.get(k, 0.0) + e

    @property
    def power_w(self) -> float:
        """Mean power over the entry's own time (energy / time)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


def _measured(energy_of: EnergyOf, step: int, record: int, what: str) -> float:
    e = float(energy_of(step, record))
    if not math.isfinite(e) or e < 0:
        raise PoetError(f"the measured energy of step {step} {what} is {e!r} J: impossible (a meter's samples "
                        f"misaligned with the trace?); nothing is clamped")
    return e


def sd_read_cost(board: Board, reads: Sequence[int]) -> tuple[float, float]:
    """(seconds, joules) of one record's SD reads by the card's storage model."""
    cost = [board.page_cost(b, "in") for b in reads]
    return sum(c[0] for c in cost), sum(c[1] for c in cost)


def _with_sd_reads(board: Board, read: tuple[float, float], t: float, e: float,
                   emulated: bool) -> tuple[float, float]:
    """A record of a layer that streams its weight from the SD card: its reads (`read`, sd_read_cost)
    charged to it. Emulated, they took no virtual time (semihosting): the storage model's time and energy
    are added. On a board the record's ticks include them (the CPU waits on the bus): only the card's own
    power is added."""
    read_s, read_j = read
    if emulated:
        return t + read_s, e + read_j
    return t, e + read_j - board.compute_energy_j(read_s)


def charges(trace: Trace, board: Board, energy_of: EnergyOf | None = None) -> list[Charge]:
    """Every record of every step and each step's remainder, charged (see the module docstring)."""
    out: list[Charge] = []
    clock = 0.0
    # once per streaming layer, not per record: a trace may list many reads and many steps
    sd = {j: sd_read_cost(board, n["sd_reads"]) for j, n in enumerate(trace.nodes) if n.get("sd_reads")}
    for k, st in enumerate(trace.steps):
        covered = 0
        for i, (_instr, node, kind, _op, ticks, nbytes) in enumerate(st["records"]):
            covered += ticks
            n = trace.nodes[node]
            if kind in STORAGE and (energy_of is None or trace.provenance == "emulated"):
                # emulated paging takes no virtual time (semihosting): its time is the storage model's,
                # measured or not (meters.measure places an emulated trace's records the same way); the
                # feature cache's reads and writes are the same storage's
                t, e = board.page_cost(nbytes, STORAGE[kind])
            else:
                t = board.compute_time_s(ticks, trace.tick_hz)
                e = board.compute_energy_j(t)
                if node in sd and kind in ("forward", "recompute"):
                    t, e = _with_sd_reads(board, sd[node], t, e, trace.provenance == "emulated")
            if energy_of is not None:
                e = _measured(energy_of, k, i, f"record {i} ({kind} {n['name']})")
            charged = "overhead" if kind == "free" else "cache" if kind in CACHE else kind
            out.append(Charge(k, i, n["name"], n["module"], charged, t, e, nbytes, clock))
            clock += t
        rest = st["step_ticks"] - covered
        if rest < 0:  # Trace.check refuses this; an account is never built on it
            raise PoetError(f"step {k}: records take {covered} ticks, more than the step's {st['step_ticks']}")
        t = board.compute_time_s(rest, trace.tick_hz)
        e = (_measured(energy_of, k, OVERHEAD_RECORD, "outside its records") if energy_of is not None
             else board.compute_energy_j(t))
        out.append(Charge(k, OVERHEAD_RECORD, RUNTIME, RUNTIME, "overhead", t, e, 0, clock))
        clock += t
    bad = next((c for c in out if not (c.energy_j >= 0 and c.time_s >= 0)), None)
    if bad is not None:  # only a board file with negative power or rates gets here
        raise PoetError(f"step {bad.step} record {bad.record} ({bad.kind} {bad.tensor}) comes out at "
                        f"{bad.energy_j} J in {bad.time_s} s: check boards/{trace.board}.yaml's power and storage")
    return out


@dataclass
class Account:
    board: str
    model: str
    source: str  # modelled | measured
    provenance: str  # of the trace's ticks: emulated | measured
    steps: int
    charges: list[Charge]
    total_j: float
    total_s: float
    by_kind: dict[str, tuple[float, float]]  # kind -> (joules, seconds), every kind of KINDS
    by_module: dict[str, tuple[float, float]]  # graph node module (a layer) -> (joules, seconds)
    by_tensor: dict[str, dict[str, float]]  # tensor -> kind -> joules
    tensors: dict[str, Entry]  # the tensor energy footprint
    layers: dict[str, Entry]  # per graph node module
    module_of: dict[str, str]  # tensor -> module

    def share(self, *kinds: str) -> float:
        """Fraction of the total energy spent in these kinds."""
        return sum(self.by_kind[k][0] for k in kinds) / self.total_j if self.total_j > 0 else 0.0


def account(trace: Trace, board: Board, energy_of: EnergyOf | None = None) -> Account:
    cs = charges(trace, board, energy_of)
    kinds = {k: Entry() for k in KINDS}
    tensors: dict[str, Entry] = {}
    layers: dict[str, Entry] = {}
    module_of: dict[str, str] = {}
    for c in cs:
        one = {c.kind: c.energy_j}
        kinds[c.kind].add(c.energy_j, c.time_s, one)
        tensors.setdefault(c.tensor, Entry()).add(c.energy_j, c.time_s, one)
        layers.setdefault(c.module, Entry()).add(c.energy_j, c.time_s, one)
        module_of[c.tensor] = c.module
    return Account(
        board=board.name, model=trace.model, source="measured" if energy_of else "modelled",
        provenance=trace.provenance, steps=len(trace.steps), charges=cs,
        total_j=sum(c.energy_j for c in cs), total_s=sum(c.time_s for c in cs),
        by_kind={k: (v.energy_j, v.time_s) for k, v in kinds.items()},
        by_module={k: (v.energy_j, v.time_s) for k, v in layers.items()},
        by_tensor={k: dict(v.kinds) for k, v in tensors.items()},
        tensors=tensors, layers=layers, module_of=module_of)


# ---------------------------------------------------------------- the energy distribution diagram

@dataclass
class Box(Entry):
    """A node of the energy distribution diagram: the model, a module, or a tensor (a leaf)."""

    name: str = ""
    path: str = ""
    children: dict[str, Box] = field(default_factory=dict)
    count: int = 1  # how many self-similar siblings a folded box stands for


def tensor_leaf(tensor: str, module: str) -> str:
    """The tensor's name below its module: `conv1/forward` in module `conv1` -> `forward`."""
    return tensor[len(module) + 1:] if tensor.startswith(module + "/") else tensor


def edd(acct: Account) -> Box:
    """The EDD: the module tree of the graph (module paths split at '/'), tensors as leaves (a tensor named
    like its module, `input` or `(runtime)`, is the module's box itself)."""
    root = Box(name=acct.model, path="")
    own: list[tuple[Box, Entry]] = []  # the box each tensor ends at
    for tensor, ent in acct.tensors.items():
        module = acct.module_of[tensor]
        box = root
        for seg in module.split("/") + ([] if tensor == module else [tensor_leaf(tensor, module)]):
            child = box.children.get(seg)
            if child is None:
                child = box.children[seg] = Box(name=seg, path=f"{box.path}/{seg}" if box.path else seg)
            box = child
        own.append((box, ent))
    # summed bottom-up once, not added to every ancestor per tensor: a trace of many tensors under deep
    # module paths would take tensors x depth additions
    for box, ent in own:
        box.add(ent.energy_j, ent.time_s, ent.kinds)
    _sum_children(root)
    return root


def _sum_children(box: Box) -> None:
    for c in box.children.values():
        _sum_children(c)
        box.add(c.energy_j, c.time_s, c.kinds)


def walk(box: Box, depth: int | None = None, level: int = 0) -> list[tuple[int, Box]]:
    """(level, box) in pre-order, largest energy first among siblings, down to `depth` (root = level 0)."""
    out = [(level, box)]
    if depth is None or level < depth:
        for c in sorted(box.children.values(), key=lambda b: (-b.energy_j, b.name)):
            out += walk(c, depth, level + 1)
    return out


_NUMBERED = re.compile(r"(.*?)(\d+)")


def _shape(box: Box) -> tuple:
    return tuple(sorted((c.name, _shape(c)) for c in box.children.values()))


def _merge(into: Box, other: Box) -> None:
    into.add(other.energy_j, other.time_s, other.kinds)
    into.count += other.count
    for name, c in other.children.items():
        if name in into.children:
            _merge(into.children[name], c)
        else:
            into.children[name] = _copy(c)


def _copy(box: Box) -> Box:
    out = Box(box.energy_j, box.time_s, dict(box.kinds), box.name, box.path, {}, box.count)
    out.children = {k: _copy(c) for k, c in box.children.items()}
    return out


def _set_paths(box: Box, path: str) -> Box:
    box.path = path
    for c in box.children.values():
        _set_paths(c, f"{path}/{c.name}" if path else c.name)
    return box


def fold(box: Box) -> Box:
    """The summarized footprint: numbered siblings (`layer_3`, `layer3`, `3`) whose subtrees have the
    same shape fold into one box (`layer_*`, or `layer{2,3}` when other `layer<n>` differ), summed;
    `count` says how many it stands for. A new tree; `box` is left as it was."""
    return _set_paths(_fold(box), box.path)


def _fold(box: Box) -> Box:
    kids = [_fold(c) for c in box.children.values()]
    groups: dict[tuple, list[Box]] = {}
    numbered: dict[str, int] = {}  # prefix -> how many numbered siblings share it
    for c in kids:
        m = _NUMBERED.fullmatch(c.name)
        key = (m.group(1), _shape(c)) if m else (c.name, None)
        groups.setdefault(key, []).append(c)
        if m:
            numbered[m.group(1)] = numbered.get(m.group(1), 0) + 1
    out = Box(box.energy_j, box.time_s, dict(box.kinds), box.name, box.path, {}, box.count)
    for (prefix, shape), members in groups.items():
        if shape is None or len(members) < 2:
            for c in members:
                out.children[c.name] = c
            continue
        nums = sorted(int(_NUMBERED.fullmatch(c.name).group(2)) for c in members)  # type: ignore[union-attr]
        name = f"{prefix}*" if len(members) == numbered[prefix] else prefix + "{" + ",".join(map(str, nums)) + "}"
        merged = _copy(members[0])
        for c in members[1:]:
            _merge(merged, c)
        merged.name = name
        out.children[name] = merged
    return out


# ---------------------------------------------------------------- two schedules of one model

@dataclass(frozen=True)
class DiffRow:
    tensor: str
    kind: str
    a_j: float  # joules per step in the first trace
    b_j: float  # joules per step in the second

    @property
    def delta_j(self) -> float:
        return self.b_j - self.a_j


def diff(a_trace: Trace, a: Account, b_trace: Trace, b: Account) -> list[DiffRow]:
    """Per tensor and kind, joules per step of b minus a (per step: the runs may differ in length)."""
    why = same_graph(a_trace, b_trace)
    if why is not None:
        raise PoetError(f"cannot diff these traces tensor by tensor: {why}", status=2)
    keys = sorted({(t, k) for acc in (a, b) for t, ks in acc.by_tensor.items() for k in ks})
    return [DiffRow(t, k, a.by_tensor.get(t, {}).get(k, 0.0) / a.steps, b.by_tensor.get(t, {}).get(k, 0.0) / b.steps)
            for t, k in keys]
