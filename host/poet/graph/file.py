"""Read a graph file a user hands to `poet solve --graph` or `poet sweep --graph`: either a
training graph (`poet graph -o`) or a costed graph (the POET reference's schema), with one
clear line for every way the file can be wrong.

Every number is checked here, before the planner sees it: a NaN, a negative size or a string
where a count belongs would otherwise surface deep in the MILP or the blob encoder as a bug.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from poet.errors import PoetError
from poet.files import kind as file_kind
from poet.graph.dtypes import ELEMENT_TYPES, F32
from poet.graph.training_graph import OPTIMIZER_DEFAULTS, PARAM_ATTRS, TrainingGraph, name_problem, numel
from poet.ops import MAX_DEPS, NO_DEP, OPS, STATIC_INT8_OPS, attrs_needed
from poet.plan.types import COST_MAX, COST_MIN, CostedGraph
from poet.units import format_size

KINDS = ("input", "forward", "loss", "backward", "optimizer")
# Limits, each far above any real model and low enough that the arithmetic downstream stays exact:
BYTES_BELOW = 2**48  # a tensor or parameter set of 256 TiB and more is a typo, not a model
FLOPS_BELOW = 2**63
I32 = 2**31  # shapes and attributes travel to the board as i32 (docs/spec.md section 2)
F32_MAX = 3.4028234663852886e38  # float attributes travel as binary32
COSTS = ("compute_s", "compute_j", "page_in_s", "page_in_j", "page_out_s", "page_out_j")
LOSSES = ("cross_entropy", "mse", "l1")
INPUT_DTYPES = ("float32", "int64")
# attributes that count something (a batch, channels, elements, a kernel's size): zero of them is no op
DIMENSIONS = frozenset({"B", "C", "D", "H", "W", "HW", "K", "M", "N", "O", "S", "V", "batch", "classes", "in", "out",
                        "n", "m", "rows", "outer", "r", "inner", "k", "kh", "kw", "sh", "sw", "stride", "groups",
                        "d0", "d1", "d2", "d3", "l0", "l1"})
# ops whose output may be int8, not fp32: static int8's ops but dequantize (whose output is the prefix's fp32 exit),
# and an input (staged int8)
INT8_OUT = frozenset(STATIC_INT8_OPS) - {"dequantize"} | {"input"}

# The most nodes poet plans, from a graph file or a traced model. Planning is not linear in the
# size: the heuristics the MILP starts from (and that stand in for it once it is too big to
# build, strategies.poet_milp.MAX_MILP_VARIABLES) replay every stage against every tensor alive in it,
# O(n x live), and there are six of them. benchmarks/graph_sizes.py, training-shaped graphs,
# budget half the keep-all peak: at 10^4 nodes `poet solve --graph` took 78 s on a chain
# (revolve 46 s, chen-greedy 14 s, dtr 9 s) and 25 s on a DAG, under 300 MB; at 10^5
# checkpoint-all alone took 44 s to give up a quarter of the way in and dtr over 5 minutes
# (about n^2: ten times the nodes, a hundred times the time). Every zoo model has under 700
# nodes (bert-base: 648); bert --layers 150 --hidden 64 has 7,824 and plans in 14 s.
MAX_NODES = 10_000
# A graph file is refused above this many bytes, before it is read: reading and checking one
# takes about ten times its size in memory (a 217 MB file of 10^6 nodes: 1.2 GB and 9 s in
# json.loads, 2.4 GB and 50 s to check and convert). `poet graph -o` writes about 450 B a node
# (bert-base: 385, mobilenetv2-cifar: 466), the POET reference's costed graphs about 210;
# about 2 KiB a node at MAX_NODES leaves room for long names and hand-written whitespace.
MAX_FILE_BYTES = 20 * 2**20


def too_many_nodes(what: str, n: int, hint: str) -> str:
    """The one line for a graph above MAX_NODES: `what` has n nodes, what poet plans, what to do."""
    return (f"{what} has {n:,} nodes; poet plans up to {MAX_NODES:,} (its heuristics take O(n x live tensors) "
            f"time, minutes at {MAX_NODES:,}): {hint}")


def _bad(path: str | Path, why: str) -> PoetError:
    return PoetError(f"graph file {path}: {why}", status=2)


def _show(v: Any) -> str:
    """A value as the file spells it (NaN, "12", true), cut short."""
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # JSON true is no count


def _is_number(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


def _range_text(lo: int, hi: int) -> str:
    """'from 1 to 65535', or '>= 0 and below 2**48' where hi + 1 is a large power of two."""
    if lo < 0 and (-lo) & (-lo - 1) == 0 and (hi + 1) & hi == 0:
        return f"from -2**{(-lo).bit_length() - 1} to 2**{hi.bit_length()} - 1"
    if hi + 1 >= 2**20 and (hi + 1) & hi == 0:
        return f">= {lo} and below 2**{hi.bit_length()}"
    return f"from {lo} to {hi}"


class _Place:
    """One place in the file (the top level or a node) that names itself in every complaint."""

    def __init__(self, path: str | Path, where: str, obj: dict[str, Any]) -> None:
        self.path, self.where, self.obj = path, where, obj

    def bad(self, why: str) -> PoetError:
        return _bad(self.path, f"{self.where}{why}")

    def has(self, key: str, required: bool) -> bool:
        if key in self.obj:
            return True
        if required:
            raise self.bad(f"no \"{key}\"; see docs/graph.md for the fields")
        return False

    def whole(self, key: str, lo: int, hi: int, required: bool = True, why: str = "") -> None:
        if self.has(key, required):
            self.whole_value(key, self.obj[key], lo, hi, why)

    def whole_value(self, key: str, v: Any, lo: int, hi: int, why: str = "") -> None:
        if not (_is_int(v) and lo <= v <= hi):
            raise self.bad(f"{key} is {_show(v)}; must be a whole number {_range_text(lo, hi)}{why}")

    def f32_value(self, key: str, v: Any) -> None:
        if not (_is_number(v) and abs(v) <= F32_MAX):
            raise self.bad(f"{key} is {_show(v)}; must be a finite number (the board takes binary32)")

    def real(self, key: str, hi: float, unit: str, required: bool = True) -> None:
        if not self.has(key, required):
            return
        v = self.obj[key]
        if not (_is_number(v) and 0 <= v <= hi):
            hi_text = f"{hi:.0e}".replace("e+0", "e")  # 1e9, as one would write it
            raise self.bad(f"{key} is {_show(v)}; must be a number from 0 to {hi_text} ({unit})")
        if 0 < v < COST_MIN:
            raise self.bad(f"{key} is {_show(v)}; a cost is 0 or at least {COST_MIN:g} ({unit}): less is no "
                           f"op's, and the planner's solver cannot weigh it")

    def name(self, key: str, required: bool = True) -> None:
        if self.has(key, required):
            why = name_problem(self.obj[key])
            if why:
                raise self.bad(f"{key} is {_show(self.obj[key])}; a name {why}")

    def wholes(self, key: str, lo: int, hi: int, required: bool = True) -> list[int]:
        """A list of whole numbers, e.g. a shape."""
        if not self.has(key, required):
            return []
        v = self.obj[key]
        if not isinstance(v, list) or not all(_is_int(d) and lo <= d <= hi for d in v):
            raise self.bad(f"{key} is {_show(v)}; must be a list of whole numbers {_range_text(lo, hi)}")
        return v


def _node_place(path: str | Path, k: int, n: Any) -> _Place:
    name = n.get("name") if isinstance(n, dict) else None
    text = name if isinstance(name, str) and name_problem(name) is None else json.dumps(name)[:40]
    label = f" ({text[:40]})" if name is not None else ""
    return _Place(path, f"node {k}{label}: ", n if isinstance(n, dict) else {})


def find_cycle(deps: list[list[int]]) -> list[int] | None:
    """A dependency cycle as a list of node ids (first == last), or None."""
    state = [0] * len(deps)  # 0 new, 1 on the stack, 2 done
    for root in range(len(deps)):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path = [root]
        state[root] = 1
        while stack:
            v, k = stack[-1]
            if k < len(deps[v]):
                stack[-1] = (v, k + 1)
                w = deps[v][k]
                if state[w] == 1:
                    return path[path.index(w):] + [w]
                if state[w] == 0:
                    state[w] = 1
                    stack.append((w, 0))
                    path.append(w)
            else:
                state[v] = 2
                stack.pop()
                path.pop()
    return None


def _check_structure(path: str | Path, raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, dict) or not isinstance(raw.get("nodes"), list) or not raw["nodes"]:
        raise _bad(path, "no \"nodes\" list; write one with `poet graph -o FILE`")
    nodes = raw["nodes"]
    if len(nodes) > MAX_NODES:  # before anything walks them
        raise PoetError(too_many_nodes(f"graph file {path}", len(nodes), "coarsen the graph (fuse ops into "
                                       "fewer, larger nodes) or plan it in parts"), status=2)
    for k, n in enumerate(nodes):
        at = _node_place(path, k, n)
        if not isinstance(n, dict):
            raise at.bad(f"is {_show(n)}, not an object with \"id\", \"bytes\", ...")
        at.has("id", True)
        at.has("bytes", True)
        if n["id"] != k or not _is_int(n["id"]):
            raise at.bad(f"id is {_show(n['id'])}; ids must be 0, 1, 2, ... in file order")
        deps = n.get("deps", [])
        if not isinstance(deps, list):
            raise at.bad(f"deps is {_show(deps)}; must be a list of node ids")
        for d in deps:
            if not (_is_int(d) and 0 <= d < len(nodes)):
                raise at.bad(f"deps has {_show(d)}; each must be a node id 0..{len(nodes) - 1}")
        at.name("name", required=False)
    top = _Place(path, "", raw)
    top.name("model", required=False)
    seen: dict[str, int] = {}
    for k, n in enumerate(nodes):  # plans, schedules and reports name tensors by these
        if "name" in n:
            if n["name"] in seen:
                raise _node_place(path, k, n).bad(f"its name is node {seen[n['name']]}'s too; each node's name "
                                                  f"must be its own")
            seen[n["name"]] = k
    cycle = find_cycle([list(n.get("deps", [])) for n in nodes])
    if cycle:
        names = [str(nodes[i].get("name", i)) for i in cycle]
        raise _bad(path, f"the graph has a cycle: {' -> '.join(names)} (each node must only read earlier ones)")
    for k, n in enumerate(nodes):
        late = [d for d in n.get("deps", []) if d >= k]
        if late:
            raise _node_place(path, k, n).bad(f"reads node {late[0]}, which comes later; nodes must be in "
                                              f"topological order")
    return nodes


def _check_costed(path: str | Path, raw: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """The numbers of a costed graph (the POET reference's schema)."""
    _Place(path, "", raw).whole("param_bytes", 0, BYTES_BELOW - 1, required=False)
    for k, n in enumerate(nodes):
        at = _node_place(path, k, n)
        at.whole("bytes", 0, BYTES_BELOW - 1)
        for key in COSTS:
            at.real(key, COST_MAX, "seconds" if key.endswith("_s") else "joules", required=key.startswith("compute"))
        if "kind" in n and n["kind"] not in KINDS:
            raise at.bad(f"kind is {_show(n['kind'])}; must be one of {', '.join(KINDS)}")
        if "recomputable" in n and not isinstance(n["recomputable"], bool):
            raise at.bad(f"recomputable is {_show(n['recomputable'])}; must be true or false")
    if all(n["bytes"] == 0 for n in nodes):
        raise _bad(path, "every node's bytes is 0: no tensor to keep, recompute or page, nothing to plan")
    # an input: so marked, or a forward node that reads nothing (from_dict; the reference's rules let
    # the planner recompute one, but from nothing)
    inputs = [n for n in nodes if n.get("kind", "forward") == "input"
              or (n.get("kind", "forward") == "forward" and not n.get("deps"))]
    if len(inputs) == len(nodes):
        raise _bad(path, "every node is a graph input: no op to compute, nothing to plan")
    if not any(n.get("kind") == "backward" for n in nodes):
        raise _bad(path, "has no backward node; a training step's graph holds a backward pass (\"kind\": "
                         "\"backward\")")


def _check_training(path: str | Path, raw: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """The numbers of a training graph (docs/graph.md): what the planner and the model blob read."""
    top = _Place(path, "", raw)
    # the model blob numbers nodes in u16 with 0xFFFF for "no dep"
    if len(nodes) >= NO_DEP:
        raise _bad(path, f"{len(nodes)} nodes; a training graph holds at most {NO_DEP - 1}")
    top.whole("batch", 1, 2**16 - 1, why=" (the model blob's batch field is u16)")
    top.wholes("input_shape", 1, I32 - 1)
    top.whole("classes", 1, I32 - 1)
    params = raw.get("params", [])
    if not isinstance(params, list):
        raise top.bad(f"params is {_show(params)}; must be a list of [name, shape]")
    for p in params:
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], list)
                and all(_is_int(d) and 0 <= d < I32 for d in p[1])):
            raise top.bad(f"params has {_show(p)}; each must be [name, shape] with whole dimensions "
                          f"{_range_text(0, I32 - 1)}")
    names: set[str] = set()
    for p in params:
        why = name_problem(p[0])
        if why:
            raise top.bad(f"params has the name {_show(p[0])}; a name {why}")
        if p[0] in names:
            raise top.bad(f"params has {_show(p[0])} twice; each parameter's name must be its own (weights are "
                          f"matched to parameters by name)")
        names.add(p[0])
    frozen = raw.get("frozen", [])
    if not isinstance(frozen, list) or not all(isinstance(f, str) for f in frozen):
        raise top.bad(f"frozen is {_show(frozen)}; must be a list of parameter names")
    unknown = [f for f in frozen if f not in names]
    if unknown:
        raise top.bad(f"frozen has {_show(unknown[0])}, which is no parameter's name in params")
    for key, allowed in (("loss", LOSSES), ("input_dtype", INPUT_DTYPES)):
        if key in raw and raw[key] not in allowed:
            raise top.bad(f"{key} is {_show(raw[key])}; must be one of {', '.join(allowed)}")
    if "train" in raw:
        top.name("train")
    opt = raw.get("optimizer", {"name": "sgd"})
    name = opt.get("name") if isinstance(opt, dict) else None
    if not (isinstance(name, str) and name in OPTIMIZER_DEFAULTS):
        raise top.bad(f"optimizer is {_show(opt)}; its name must be one of {', '.join(OPTIMIZER_DEFAULTS)}")
    settings = _Place(path, "optimizer: ", opt)
    for key in OPTIMIZER_DEFAULTS[name]:  # the ranges `--optimizer` allows (graph.parse_optimizer)
        settings.has(key, True)
        settings.f32_value(key, opt[key])
        if not (0 <= opt[key] < 1 if key != "eps" else opt[key] > 0):
            raise settings.bad(f"{key} is {_show(opt[key])}; must be " + ("> 0" if key == "eps" else "in [0, 1)"))
    for k, n in enumerate(nodes):
        at = _node_place(path, k, n)
        at.whole("bytes", 0, BYTES_BELOW - 1)
        at.whole("flops", 0, FLOPS_BELOW - 1, required=False)
        shape = at.wholes("shape", 0, I32 - 1)
        at.has("kind", True)
        if n["kind"] not in KINDS:
            raise at.bad(f"kind is {_show(n['kind'])}; must be one of {', '.join(KINDS)}")
        at.name("name")
        at.name("module", required=False)
        at.has("op", True)
        if not (isinstance(n["op"], str) and n["op"] in OPS):
            raise at.bad(f"op is {_show(n['op'])}; not an op of the runtime's op set (docs/graph.md)")
        _check_bytes(at, n, shape)
        deps = n.get("deps", [])
        if len(deps) > MAX_DEPS:
            raise at.bad(f"deps has {len(deps)} entries; a node of a training graph reads at most {MAX_DEPS} "
                         f"(docs/spec.md section 2)")
        saved = at.wholes("saved", 0, len(nodes) - 1, required=False)
        if any(d not in deps for d in saved):
            raise at.bad(f"saved is {_show(saved)}; must list only ids among its deps {_show(deps)}")
        _check_attrs(at, n, len(params))
    _check_step(path, nodes)


def _check_bytes(at: _Place, n: dict[str, Any], shape: list[int]) -> None:
    """A node's bytes are its output's: its shape's elements times their size (fp32 but for a cast's or an
    int8 layer's output), or 0 where a backward node writes no tensor (no input gradient) and for the
    optimizer. A forward tensor of 0 bytes would be planned as free to keep."""
    nbytes, elems = n["bytes"], numel(shape)
    if n["kind"] in ("input", "forward", "loss") and nbytes == 0:
        raise at.bad(f"bytes is 0; a {n['kind']} node's output is a tensor ({_show(shape)} elements of fp32: "
                     f"{F32 * elems} bytes)")
    if nbytes == 0:
        return
    attrs = n.get("attrs") if isinstance(n.get("attrs"), dict) else {}
    to = attrs.get("to")
    sizes = ({ELEMENT_TYPES[to].bytes} if n["op"] == "cast" and isinstance(to, str) and to in ELEMENT_TYPES
             else {1, F32} if n["op"] in INT8_OUT else {F32})
    if nbytes not in {s * elems for s in sizes}:
        per = " or ".join(str(s) for s in sorted(sizes))
        raise at.bad(f"bytes is {nbytes}, but its shape {_show(shape)} holds {elems} elements of {per} bytes "
                     f"({' or '.join(str(s * elems) for s in sorted(sizes))} bytes); the shape and the bytes must "
                     f"agree")


def _check_step(path: str | Path, nodes: list[dict[str, Any]]) -> None:
    """The parts every training step has, in the order the runtime runs them: the input first (the staged
    batch), a forward pass, one loss, a backward pass, the optimizer last."""
    kinds = [n["kind"] for n in nodes]
    if kinds[0] != "input" or nodes[0]["op"] != "input":
        raise _node_place(path, 0, nodes[0]).bad("is not the input; a training graph starts with its input node")
    for kind, what in (("forward", "a forward pass"), ("loss", "a loss"), ("backward", "a backward pass")):
        if kind not in kinds:
            raise _bad(path, f"has no {kind} node; a training graph holds {what} (write one with `poet graph -o`)")
    for kind in ("input", "loss", "optimizer"):
        if kinds.count(kind) > 1:
            k = kinds.index(kind, kinds.index(kind) + 1)
            raise _node_place(path, k, nodes[k]).bad(f"is a second {kind} node; a training step has one")
    if kinds[-1] != "optimizer":
        raise _node_place(path, len(nodes) - 1, nodes[-1]).bad(
            "is the last node but not the optimizer; a training graph ends with its optimizer node")


def _check_attrs(at: _Place, n: dict[str, Any], n_params: int) -> None:
    """A node's attributes as lowering packs them into the blob's i32 slots (poet.ops)."""
    attrs = n.get("attrs", {})
    if not isinstance(attrs, dict):
        raise at.bad(f"attrs is {_show(attrs)}; must be an object of numbers")
    op = n.get("op")
    # the optimizer node's slots come from the graph's optimizer settings, not its attrs
    known = isinstance(op, str) and op in OPS and n.get("kind") != "optimizer"
    slots = OPS[op].slots if known else ()
    floats = [a[2:] for a in slots if a.startswith("f:")]
    needed = attrs_needed(OPS[op]) if known else []
    missing = [a for a in needed if a not in attrs]
    if missing:
        raise at.bad(f"attrs has no \"{missing[0]}\"; op {op} needs {', '.join(needed)} (docs/graph.md, the op set)")
    # packed into two i32 slots (modelblob.conv_kernel, conv_geometry), within the firmware's limits
    geom = {"k": (1, 64), "kw": (1, 64), "pad": (0, 64), "padw": (0, 64), "padb": (0, 64), "stride": (1, 64),
            "groups": (1, 2**15)} if "geom" in slots else {}
    for key, v in attrs.items():
        if not isinstance(key, str) or name_problem(key):
            raise at.bad(f"attrs has the key {_show(key)}; attribute names are plain text")
        if key in PARAM_ATTRS and _is_int(v):  # an index into params, or -1 for none
            at.whole_value(f"attrs.{key}", v, -1, n_params - 1, f" (a parameter's index, -1 for none; the graph "
                           f"has {n_params} params)")
        elif key in DIMENSIONS:
            at.whole_value(f"attrs.{key}", v, 1, I32 - 1, " (it counts elements, rows or a window)")
        elif _is_int(v) and key not in geom:
            at.whole_value(f"attrs.{key}", v, 0, I32 - 1, " (sizes, offsets and flags are not negative)")
        if key in geom:
            at.whole_value(f"attrs.{key}", v, *geom[key])
        elif key in ("from", "to") and key in slots:
            if not (isinstance(v, str) and v in ELEMENT_TYPES):
                raise at.bad(f"attrs.{key} is {_show(v)}; must be one of {', '.join(ELEMENT_TYPES)}")
        elif key in floats or (key not in slots and isinstance(v, float)):
            at.f32_value(f"attrs.{key}", v)
        elif key in slots or not isinstance(v, str):  # a name in an attribute lowering skips is harmless
            at.whole_value(f"attrs.{key}", v, -I32, I32 - 1, " (the board's attributes are i32)")
    if "padb" in attrs and "geom" in slots and op != "conv2d_q":
        raise at.bad("attrs has \"padb\"; only a conv2d_q (a row strip of a stage run patch by patch) pads below "
                     "otherwise than above")
    if attrs.get("need_grad_input", 0) not in (0, 1):
        raise at.bad(f"attrs.need_grad_input is {_show(attrs['need_grad_input'])}; a flag: 0 or 1")
    if "ck" in attrs and "need_ck" in slots and not attrs["ck"] <= attrs["C"] // attrs.get("groups", 1):
        raise at.bad(f"attrs.ck is {_show(attrs['ck'])}; the weight gradient's input channels: at most "
                     f"C / groups = {attrs['C'] // attrs.get('groups', 1)} (0 for all)")
    if "keep_from" in slots and not 0 <= attrs["p"] < 1:
        raise at.bad(f"attrs.p is {_show(attrs['p'])}; dropout drops a share p with 0 <= p < 1")


def read_graph(path: str | Path, reference: bool = False) -> TrainingGraph | CostedGraph:
    """A TrainingGraph, or a CostedGraph if the nodes carry costs (compute_s). The file is opened and
    read once: `--graph <(...)`, /dev/stdin or a FIFO gives its bytes once, and a second open would wait
    for a writer that is gone."""
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            regular = stat.S_ISREG(info.st_mode)
            if regular:  # by its size, before reading a byte of it
                size = info.st_size
                data = fh.read() if size <= MAX_FILE_BYTES else b""
            elif stat.S_ISFIFO(info.st_mode):  # a pipe: reading one byte past the limit says it is over
                data = fh.read(MAX_FILE_BYTES + 1)
                size = len(data)
            else:  # /dev/zero would read 20 MiB of zeros to say "not JSON"
                raise _bad(path, f"is {file_kind(info.st_mode)}, not a file: give a graph file (or a pipe)")
        if size > MAX_FILE_BYTES:
            raise _bad(path, f"{format_size(size) if regular else 'over ' + format_size(MAX_FILE_BYTES)}; poet "
                             f"reads graph files up to {format_size(MAX_FILE_BYTES)} ({MAX_NODES:,} nodes at about "
                             f"2 KiB each; `poet graph -o` writes about 450 B a node): coarsen the graph (fuse ops "
                             f"into fewer, larger nodes) or plan it in parts")
        text = data.decode()
    except OSError as exc:
        raise _bad(path, f"cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not JSON: byte {exc.start} is not UTF-8 text") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:  # Python reads no integer of over 4300 digits
        raise _bad(path, "a number in it has thousands of digits; no field takes one that large") from exc
    except RecursionError as exc:
        raise _bad(path, "nested too deeply to be a graph") from exc
    nodes = _check_structure(path, raw)
    costed = "compute_s" in nodes[0]
    if costed:
        _check_costed(path, raw, nodes)
    else:
        _check_training(path, raw, nodes)
    try:
        if costed:
            return CostedGraph.from_dict(raw, Path(path).stem, reference=reference)
        return TrainingGraph.from_dict(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"does not fit the schema (docs/graph.md): {type(exc).__name__}: {exc}") from exc
