"""Op costs: the cost model the planner reads, from a profile (profiles/<board>.yaml).

A profile (written by `poet profile`, poet.profile) maps each distinct (op, shape) to
its time and energy on the board and where each number comes from. An op the profile
lacks can be estimated from the nearest measured shape of the same op. Paging costs
come from the profile's `paging` section: the measured fit on a real board, the board
file's storage model on an emulated one (semihosting I/O takes no virtual time in QEMU,
so an emulated page-out says nothing about an SD card).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from poet.boards import Board
from poet.errors import PoetError, UsageError
from poet.files import read_bytes
from poet.graph.training_graph import GraphNode, TrainingGraph
from poet.paths import profile_to_read, shown
from poet.plan.cost.memory import arena_bytes, in_place
from poet.plan.types import COST_MAX, COST_MIN, CostedGraph, CostedNode
from poet.progress import Say

# The parameters a backward call makes gradients of, and the flag its key carries for each when it does not:
# the kernels skip a frozen parameter's gradient (op_util.h grad() hands them NULL), so a frozen conv's backward
# makes dX alone, a sparse update's (bias+last:N) dX and db: less work than the same shape training both.
SKIPPED_GRADS = (("w", "dw"), ("b", "db"))


def trained_params(g: TrainingGraph) -> frozenset[int]:
    """The indices of g's parameters that train (get gradients): all but the frozen ones."""
    frozen = set(g.frozen)
    return frozenset(i for i, (name, _) in enumerate(g.params) if name not in frozen)


def op_key(n: GraphNode, g: TrainingGraph | None = None) -> str:
    """The identity of a kernel invocation for costing: op and shapes, not which parameter it uses (an
    optional one only as whether it is there: a bias, running statistics, an int8 output's scale), and for a
    backward call the gradients it skips: `dw=0` / `db=0` when its weight / bias is frozen in g (a key
    without them makes every gradient its parameters have, as every profile before these flags measured).

    g is the graph n belongs to, which says what trains; a backward node with parameters needs it (ValueError
    without: its cost depends on it)."""
    # `inplace` stays: a depthwise conv marked so runs a channel at a time through a buffer, in place or not
    attrs = {k: v for k, v in n.attrs.items() if k not in ("w", "scale", "rm", "rv", "b", "out_scale")}
    if "b" in n.attrs:
        attrs["bias"] = int(n.attrs["b"] >= 0)
    if "rm" in n.attrs:
        attrs["stats"] = int(n.attrs["rm"] >= 0)
    if "out_scale" in n.attrs:
        attrs["int8_out"] = int(n.attrs["out_scale"] >= 0)
    params = [(p, flag) for k, flag in SKIPPED_GRADS if n.kind == "backward" and (p := n.attrs.get(k, -1)) >= 0]
    if params:
        if g is None:
            raise ValueError(f"op_key({n.name}): a backward call's cost depends on which of its parameters train: "
                             f"pass its graph")
        trained = trained_params(g)
        attrs.update({flag: 0 for p, flag in params if p not in trained})
    return f"{n.op}(" + ",".join(f"{k}={v}" for k, v in sorted(attrs.items())) + ")"


def load_profile(board: str, path: Path | None = None, note: Say | None = None) -> dict[str, Any]:
    """The profile the planner costs with: `path`, else the board's (paths.profile_to_read), checked.

    A file that is not a profile the planner can trust is refused in one line (UsageError, see
    read_profile). One measured on another firmware than this poet builds is used, and note() is
    told so: the shipped profiles/ lag firmware changes (a new op bumps the version without
    touching the old kernels), so refusing them would stop every command on those boards.
    """
    given = path is not None
    path = path or profile_to_read(board)
    if not path.exists():
        if given:  # the user named it: a mistake on the command line, not a missing measurement
            raise UsageError(f"profile {shown(path)} does not exist: pass an existing --profile, or run "
                             f"`poet profile --board {board} -o {shown(path)}` to measure one there")
        raise PoetError(f"no profile for board {board!r} at {path}: run `poet profile --board {board}` first")
    prof = read_profile(path, f"run `poet profile --board {board}` to measure it again, or pass another --profile")
    if "board" in prof and str(prof["board"]) != board:  # another core's cycles, another clock: every cost wrong
        raise UsageError(f"profile {shown(path)} was measured on the {prof['board']}, not the {board}: pass the "
                         f"{board}'s profile, or run `poet profile --board {board}`")
    if note is not None:
        older = firmware_note(prof, path)
        if older:
            note(older)
    return prof


def firmware_note(prof: dict[str, Any], path: Path) -> str | None:
    """One line when the profile was measured on another firmware version than this poet builds."""
    from poet.device.firmware import source_version

    if "firmware" not in prof:
        return None  # made by hand or by a poet that did not record it: nothing to compare
    try:
        builds = source_version()
    except (OSError, KeyError):  # an installed poet without firmware/ sources builds nothing
        return None
    if str(prof["firmware"]) == builds:
        return None
    board = prof.get("board", "<board>")
    return (f"the costs in {shown(path)} were measured on firmware {prof['firmware']} and are used as they are, but "
            f"this poet builds firmware {builds}: run `poet profile --board {board}` to measure {builds}'s")


# Bounds on a profile's numbers: what a board can be, far beyond any that exists, so that no number that
# passes can make a cost the planner's solver cannot weigh (HiGHS is handed every op's time and energy; a
# coefficient of 1e308 or 1e-300 beside 1e-3 is an overflow or noise). Each sum over a graph stays finite:
# at most MAX_NODES (10^4) ops of an hour or a kJ each.
OP_TIME_MAX = 3600.0    # s: one op of one training step, an hour
OP_ENERGY_MAX = 1e3     # J: a kJ (a kW for a second)
POWER_MAX = 1e3         # W: a kW; boards draw mW to tens of W
LATENCY_MAX = 60.0      # s: one transfer to aux storage
BANDWIDTH = (1.0, 1e12)  # B/s: a byte a second to a TB/s
CLOCK_HZ = (1e3, 1e11)  # a kHz to 100 GHz
TINY = 1e-12            # a nonzero time (s) or energy (J) below a picosecond or picojoule is noise
WORK_MAX = 2.0**63      # FLOPs of one op (graph.file.FLOPS_BELOW)
STATIC_BYTES_MAX = 2**48  # units.MAX_SIZE
CYCLES_MAX = 1e12       # a cast fit's cycles per element, or its fixed cycles
# What a profile's YAML may expand to through its aliases (a profile poet wrote before 45 shares one list
# of sizes, 9 values): a profile has a few thousand values, and a kilobyte of nested aliases expands to
# billions (the billion laughs), which str() or a check would then walk for minutes in all the memory there is
MAX_EXPANDED = 1_000_000


class _AliasBomb(ValueError):
    pass


class _ProfileLoader(yaml.SafeLoader):
    """Plain YAML whose aliases expand to at most MAX_EXPANDED values, counted on the composed nodes
    (an alias is the same node object again, so counting with a memo takes one pass over the distinct
    nodes) before anything is constructed. Profiles poet wrote share a list through an alias, so aliases
    are not refused outright (poet.files.load_yaml does that for the files that never had them)."""

    def compose_document(self) -> Any:  # type: ignore[override]
        node = super().compose_document()
        _expanded(node, {})
        return node


def _expanded(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values `node` holds once its aliases are expanded; _AliasBomb above MAX_EXPANDED."""
    key = id(node)
    if key in memo:
        if memo[key] < 0:
            raise _AliasBomb("an alias inside what it names (a recursive structure)")
        return memo[key]
    memo[key] = -1
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded(k, memo) + _expanded(v, memo) for k, v in node.value)
    if total > MAX_EXPANDED:
        raise _AliasBomb(f"aliases (*name) that expand to over {MAX_EXPANDED:,} values (a YAML bomb: a "
                         f"profile holds a few thousand)")
    memo[key] = total
    return total


def read_profile(path: Path, fix: str, need_ops: bool = True) -> dict[str, Any]:
    """The profile in `path`, or UsageError `profile <path> <what is wrong>: <fix>` in one line.

    Only plain YAML is read (a SafeLoader: a `!!python/...` tag is refused, never run; aliases only as
    far as MAX_EXPANDED values), and every number the planner or `poet profile` reads is checked here,
    within what a board can be (OP_TIME_MAX...), so a bad file is named where it is
    read instead of surfacing later as a negative deadline or an internal error. `need_ops`: a
    profile with no ops is refused (every op would be estimated from nothing); `poet profile`
    reads its own file with False, as an interrupted first graph may leave none.
    """
    data = read_bytes(path, f"profile {shown(path)}")  # a regular file only: it is read more than once
    try:
        raw = yaml.load(data.decode("utf-8"), Loader=_ProfileLoader)  # noqa: S506 - a SafeLoader
        why = profile_problem(raw, need_ops)
    except _AliasBomb as exc:
        why = f"uses {exc}"
    except UnicodeDecodeError:
        why = "is not a text file"
    except yaml.constructor.ConstructorError as exc:
        tag = re.search(r"tag '([^']*)'", exc.problem or "")
        why = (f"uses the YAML tag {tag[1].replace('tag:yaml.org,2002:', '!!')}, which poet does not load (a "
               f"profile is plain data)" if tag else f"is not YAML ({_one_line(exc)})")
    except (yaml.YAMLError, ValueError, ArithmeticError, RecursionError) as exc:
        # ValueError / ArithmeticError: a scalar with an explicit tag that does not parse (!!int abc)
        why = f"is not YAML ({_one_line(exc)})"
    if why:
        raise UsageError(f"profile {shown(path)} {why}: {fix}")
    return raw  # type: ignore[no-any-return]  # profile_problem checked it is a mapping


def _one_line(exc: BaseException) -> str:
    """A YAML error as one short line: its problem and where."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        return f"{exc.problem}" + (f" at line {mark.line + 1}" if mark is not None else "")
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def _kind(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "empty"}.get(
        type(v), f"the number {_short(v)}" if isinstance(v, int | float) else type(v).__name__)


def _short(v: Any) -> str:
    """A value as a message shows it: a 400-digit number must not make the line a screen long."""
    text = str(v)
    return text if len(text) <= 24 else text[:20] + "..."


def _number(v: Any, least: float, above: bool = False, most: float = math.inf, tiny: float = 0.0) -> str | None:
    """Why v is not a usable number (finite, >= least, or > least when `above`, <= most, and 0 or at least
    `tiny`); None when it is."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return f"is {_kind(v)}, not a number"
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float
        return f"is {_short(v)}, too large for a number"
    if not math.isfinite(f):
        return f"is {v}, not a finite number"
    if f < least or (above and f == least):
        return f"is {_short(v)}: it must be {'more than' if above else 'at least'} {least:g}"
    if f > most:
        return f"is {_short(v)}: it must be at most {most:g}, more than any board's"
    if 0 < abs(f) < tiny:
        return f"is {_short(v)}: it must be 0 or at least {tiny:g}, less than any board's"
    return None


def _fields(where: str, section: dict[str, Any], least: float, names: tuple[str, ...], above: bool = False,
            required: bool = True, most: float = math.inf, tiny: float = 0.0) -> str | None:
    """Why one of section's `names` is not a number >= least (> least when `above`) and <= most, 0 or at
    least `tiny`; `where` names the section in the message ("" for the top level)."""
    for name in names:
        if name not in section:
            if required:
                return f"has no {name}" + (f" in {where}" if where else "")
            continue
        bad = _number(section[name], least, above, most, tiny)
        if bad:
            return f"has {where + ' ' if where else ''}{name} that {bad}"
    return None


def profile_problem(raw: Any, need_ops: bool = True) -> str | None:
    """What makes `raw` (a parsed YAML document) unusable as a profile, as the rest of a sentence
    starting `profile <path>`; None when it is usable. Checks what a reader relies on: the types of
    the sections, every op's time_s / energy_j (finite, >= 0) and work (> 0: estimates divide by
    it), runtime_static_bytes, the measured paging fit the planner uses, the casts fits."""
    if raw is None:
        return "is empty"
    if not isinstance(raw, dict):
        return f"is {_kind(raw)}, not a profile (a mapping with board, ops, paging, ...)"
    for name in ("models", "paging", "casts", "compute", "settings"):
        if name in raw and not isinstance(raw[name], dict):
            return f"has a {name} section that is {_kind(raw[name])}, not a mapping"
    for name in ("board", "firmware", "source"):  # compared and printed: a name, not a structure
        if name in raw and (isinstance(raw[name], bool) or not isinstance(raw[name], str | int | float)):
            return f"has {name} that is {_kind(raw[name])}, not a name"
        if name in raw and (len(str(raw[name])) > 100 or not str(raw[name]).isprintable()):
            return f"has {name} {str(raw[name])[:40]!r}, not a name (printable, at most 100 characters)"
    bad = _fields("", raw, 1.0, ("tick_hz",), required=False, most=CLOCK_HZ[1])
    if bad:
        return bad
    ops = raw.get("ops")
    if ops is None and not need_ops:
        ops = {}
    if not isinstance(ops, dict):
        return "has no ops section" if ops is None else f"has ops that are {_kind(ops)}, not a mapping"
    if not ops and need_ops:
        return "has no ops (an empty or truncated profile: every op would be estimated from nothing)"
    for key, op in ops.items():
        if not isinstance(key, str):
            return f"has an op key {key!r} that is not text"
        if not isinstance(op, dict):
            return f"has op {key} that is {_kind(op)}, not a mapping"
        if len(key) > 1000 or not key.isprintable():
            return f"has an op key {key[:40]!r}..., not one poet writes (printable, at most 1000 characters)"
        bad = (_fields(f"op {key}", op, 0.0, ("time_s",), most=OP_TIME_MAX, tiny=TINY)
               or _fields(f"op {key}", op, 0.0, ("energy_j",), most=OP_ENERGY_MAX, tiny=TINY)
               or _fields(f"op {key}", op, 1.0, ("work",), required=False, most=WORK_MAX))
        if bad:
            return bad
    if "runtime_static_bytes" in raw or need_ops:
        bad = _fields("", raw, 0.0, ("runtime_static_bytes",), most=STATIC_BYTES_MAX)
        if bad:
            return bad
        if not isinstance(raw["runtime_static_bytes"], int):
            return f"has runtime_static_bytes {raw['runtime_static_bytes']}, not a whole number of bytes"
    for name, models in (raw.get("models") or {}).items():
        if not isinstance(models, dict):
            return f"has models entry {name!r} that is {_kind(models)}, not a mapping"
    paging = raw.get("paging") or {}
    if "fit" in paging and not isinstance(paging["fit"], dict):
        return f"has a paging fit that is {_kind(paging['fit'])}, not a mapping"
    if paging.get("used") == "measured":  # what page_cost reads
        bad = (_fields("paging", paging, BANDWIDTH[0], ("read_bytes_per_s", "write_bytes_per_s"), most=BANDWIDTH[1])
               or _fields("paging", paging, 0.0, ("read_latency_s", "write_latency_s"), most=LATENCY_MAX, tiny=TINY)
               or _fields("paging", paging, 0.0, ("read_w", "write_w"), most=POWER_MAX, tiny=TINY))
        if bad:
            return bad
    casts = raw.get("casts") or {}
    bad = _fields("casts", casts, CLOCK_HZ[0], ("clock_hz",), required=False, most=CLOCK_HZ[1])
    if bad:
        return bad
    for name, fit in casts.items():
        if isinstance(fit, dict) and ("cycles_per_elem" in fit or "cycles_fixed" in fit):
            # cycles_fixed is a fitted intercept: any finite value, though a slope below 0 is no cast;
            # precision.cast_cost reads both
            bad = (_fields(f"casts {name}", fit, 0.0, ("cycles_per_elem",), most=CYCLES_MAX)
                   or _fields(f"casts {name}", fit, -CYCLES_MAX, ("cycles_fixed",), most=CYCLES_MAX))
            if bad:
                return bad
    return None


def _coefficients(board: Board, n: CostedNode) -> CostedNode:
    """n, its costs checked as the planner's solver will weigh them: each finite and at most COST_MAX, and
    one below COST_MIN taken as 0 (an estimate scaled far down: less than any op costs). Every number of
    the profile and the board file is bounded where it is read, but their products over a tensor's bytes
    or an op's work are bounded here, once, for every cost a plan is made from."""
    costs = {}
    for field in ("compute_s", "compute_j", "page_in_s", "page_in_j", "page_out_s", "page_out_j"):
        v = getattr(n, field)
        if not (math.isfinite(v) and 0 <= v <= COST_MAX):
            what = ("computing it" if field.startswith("compute") else
                    f"paging its {n.bytes} bytes {'in' if 'in' in field else 'out'}")
            unit = "s" if field.endswith("_s") else "J"
            raise UsageError(f"{n.name}: {what} would cost {v:.3g} {unit} on the {board.name} by its profile and "
                             f"board file, beyond the {COST_MAX:g} {unit} the planner takes: check the profile's "
                             f"numbers (and the board's aux_storage) for this op")
        costs[field] = v if v >= COST_MIN else 0.0
    return replace(n, **costs)


def uncosted(g: TrainingGraph) -> CostedGraph:
    """The graph with unit compute costs: enough for plans that do not optimise (keep-all, profiling)."""
    return CostedGraph(tuple(CostedNode(n.id, n.name, n.kind, tuple(n.deps), arena_bytes(n), 1.0, 1.0,
                                        recomputable=n.recomputable, inplace=in_place(g, n)) for n in g.nodes),
                       name=g.model, param_bytes=g.param_bytes)


@dataclass(frozen=True)
class Estimate:
    """How the cost of an op the profile lacks was made."""
    key: str
    source: str        # the measured op key it was scaled from, or "" for the profile's FLOP rate
    ratio: float       # this op's work / the source's
    time_s: float
    energy_j: float

    @property
    def provenance(self) -> str:
        if self.source:
            return f"estimated from {self.source} (x{self.ratio:.3g} FLOPs)"
        return "estimated from FLOPs at the profile's median rate (no shape of this op was measured)"


def work(n: GraphNode) -> int:
    """An op's work for scaling costs: its FLOPs, at least one per output element."""
    return max(n.flops, n.bytes // 4, 1)


def op_name(key: str) -> str:
    return key.split("(", 1)[0]


def _shape_key(key: str) -> str:
    """A key without the flags that say how its call runs rather than on what: the gradients it skips, whether
    its weight streams from the SD card (an unstreamed conv's cost is what a plan takes for a streamed one
    the profile lacks: with_stream_costs), whether a depthwise conv runs a channel at a time to run in place
    (the same kernel's work, and a copy of its output)."""
    op, _, rest = key.partition("(")
    kept = (a for a in rest.rstrip(")").split(",") if a.split("=")[0] not in ("dw", "db", "stream", "inplace"))
    return op + "(" + ",".join(kept) + ")"


def estimate_op(n: GraphNode, ops: dict[str, Any], g: TrainingGraph | None = None) -> Estimate | None:
    """The cost of an unprofiled op: the measured shape of the same op with the closest work, scaled by the
    work ratio, and the same shape run another way first when the profile has it (a frozen layer's backward
    from the trained one's, by their FLOPs: dX alone is half of dX and dW; a streamed conv from the same conv
    unstreamed); else the median seconds (and joules) per unit of work of every measured op. None when the
    profile has no op with its work recorded. g: n's graph (op_key)."""
    key, w = op_key(n, g), work(n)
    known = {k: v for k, v in ops.items() if v.get("work")}
    same = [k for k in known if op_name(k) == n.op]
    shape = _shape_key(key)
    same = [k for k in same if _shape_key(k) == shape] or same
    if same:
        src = min(same, key=lambda k: (abs(math.log(w / float(known[k]["work"]))), k))
        r = w / float(known[src]["work"])
        return Estimate(key, src, r, float(known[src]["time_s"]) * r, float(known[src]["energy_j"]) * r)
    if not known:
        return None
    rate_s = statistics.median(float(v["time_s"]) / float(v["work"]) for v in known.values())
    rate_j = statistics.median(float(v["energy_j"]) / float(v["work"]) for v in known.values())
    return Estimate(key, "", 1.0, w * rate_s, w * rate_j)


def page_cost(board: Board, profile: dict[str, Any], nbytes: int, direction: str) -> tuple[float, float]:
    """(seconds, joules) to page nbytes out or in: the profile's measured fit when it says the planner
    uses it (a real board), else the board file's storage model."""
    p = profile.get("paging") or {}
    if p.get("used") != "measured":
        return board.page_cost(nbytes, direction)
    rate, lat, power = ((p["write_bytes_per_s"], p["write_latency_s"], p["write_w"]) if direction == "out"
                        else (p["read_bytes_per_s"], p["read_latency_s"], p["read_w"]))
    t = float(lat) + nbytes / float(rate)
    return t, t * (float(power) + board.cpu_active_w)


def stream_cost(board: Board, profile: dict[str, Any], g: TrainingGraph) -> dict[int, tuple[float, float]]:
    """(seconds, joules) of the aux-storage reads of each node that streams its weight (poet.plan.transform.placement),
    by node id: the paging model's cost of each read, as the firmware makes them (memory.stream_reads)."""
    from poet.plan.cost.memory import streamed_reads

    out = {}
    for node, reads in streamed_reads(g).items():
        cost = [page_cost(board, profile, b, "in") for b in reads]
        out[node] = (sum(t for t, _ in cost), sum(j for _, j in cost))
    return out


def with_stream_costs(cg: CostedGraph, g: TrainingGraph, board: Board, profile: dict[str, Any]) -> CostedGraph:
    """cg with g's streamed weights costed as they run (cg's costs are of g before its frozen weights were
    placed): a streamed conv's compute as the profile measured it streaming, where it has that (its key
    says stream=1: it runs a few output channels per read, which its loops cannot block), plus its reads; in place
    as memory.in_place says of g (a depthwise one stays so: its rows are read after the channel it makes)."""
    cost = stream_cost(board, profile, g)
    ops = profile.get("ops", {})

    def placed(n: CostedNode) -> CostedNode:
        key = op_key(g.nodes[n.id], g)
        s, j = (float(ops[key]["time_s"]), float(ops[key]["energy_j"])) if key in ops else (n.compute_s, n.compute_j)
        return _coefficients(board, replace(n, compute_s=s + cost[n.id][0], compute_j=j + cost[n.id][1],
                                            inplace=in_place(g, g.nodes[n.id])))

    return replace(cg, nodes=tuple(placed(n) if n.id in cost else n for n in cg.nodes))


def with_in_place(cg: CostedGraph, g: TrainingGraph, board: Board, profile: dict[str, Any]) -> CostedGraph:
    """cg with the convs g marks to run in place (poet.plan.transform.in_place_convs) costed so: in place, and
    their compute as the profile measured them marked, else estimated from the same conv unmarked."""
    changed = {n.id for n in g.nodes if n.op in ("conv2d", "conv2d_bwd") and in_place(g, n) != cg.nodes[n.id].inplace}
    if not changed:
        return cg
    ops = profile.get("ops", {})

    def marked(n: CostedNode) -> CostedNode:
        node = g.nodes[n.id]
        key = op_key(node, g)
        if key in ops:
            s, j = float(ops[key]["time_s"]), float(ops[key]["energy_j"])
        else:
            est = estimate_op(node, ops, g)
            s, j = (est.time_s, est.energy_j) if est is not None else (n.compute_s, n.compute_j)
        return _coefficients(board, replace(n, compute_s=s, compute_j=j, inplace=in_place(g, node)))

    return replace(cg, nodes=tuple(marked(n) if n.id in changed else n for n in cg.nodes))


def costed(g: TrainingGraph, board: Board, profile: dict[str, Any], estimate: bool = False,
           note: Say | None = None) -> CostedGraph:
    """Attach the profile's compute costs and paging model to every node.

    An op the profile lacks is an error, unless `estimate`: then it is estimated (see
    `estimate_op`) and note() gets one line per estimated op shape, saying from what.
    """
    ops = profile.get("ops", {})
    nodes, guessed = [], {}
    in_backward = g.updates_in_backward
    streamed = stream_cost(board, profile, g)  # compute as profiled, plus the SD reads of a streamed weight
    for n in g.nodes:
        key = op_key(n, g)
        if n.kind == "input":
            time_s = energy_j = 0.0  # the staged batch, read in place: nothing runs (memory.arena_bytes)
        elif n.kind == "optimizer" and in_backward:
            time_s = energy_j = 0.0  # it only counts the step: the backward nodes' costs hold the update
        elif n.kind == "optimizer" and key in ops and ops[key].get("work"):
            # one key for every size (its node names no shape): per trained element, as measured
            r = work(n) / float(ops[key]["work"])
            time_s, energy_j = float(ops[key]["time_s"]) * r, float(ops[key]["energy_j"]) * r
        elif key in ops:
            time_s, energy_j = float(ops[key]["time_s"]), float(ops[key]["energy_j"])
        else:
            est = estimate_op(n, ops, g) if estimate else None
            if est is None:
                raise PoetError(f"profile for {board.name} has no cost for {key} ({n.name}): "
                                f"run `poet profile --board {board.name} --model {g.model}`")
            time_s, energy_j = est.time_s, est.energy_j
            guessed.setdefault(key, (est, n.name))
        if n.id in streamed:
            time_s, energy_j = time_s + streamed[n.id][0], energy_j + streamed[n.id][1]
        in_s, in_j = page_cost(board, profile, n.bytes, "in")
        out_s, out_j = page_cost(board, profile, n.bytes, "out")
        nodes.append(_coefficients(board, CostedNode(n.id, n.name, n.kind, tuple(n.deps), arena_bytes(n), time_s,
                                                     energy_j, in_s, in_j, out_s, out_j, n.recomputable,
                                                     in_place(g, n))))
    if guessed and note:
        note(f"{len(guessed)} op shapes of {g.model} are not in the {board.name} profile; their costs are estimated, "
             f"not measured:")
        for key, (est, name) in guessed.items():
            note(f"  {key} ({name}): {est.provenance}")
    return CostedGraph(tuple(nodes), name=g.model, param_bytes=g.param_bytes)
