"""Read a graph file a user hands to `poet solve --graph` or `poet sweep --graph`: either a
training graph (`poet graph -o`) or a costed graph (the POET reference's schema), with one
clear line for every way the file can be wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from poet.errors import PoetError
from poet.graph import TrainingGraph
from poet.plan import CostedGraph


def _bad(path: str | Path, why: str) -> PoetError:
    return PoetError(f"graph file {path}: {why}", status=2)


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
    for k, n in enumerate(nodes):
        if not isinstance(n, dict) or "id" not in n or "bytes" not in n:
            raise _bad(path, f"node #{k} lacks \"id\" or \"bytes\"")
        if n["id"] != k:
            raise _bad(path, f"node #{k} has id {n['id']}; ids must be 0, 1, 2, ... in file order")
        deps = n.get("deps", [])
        if not isinstance(deps, list) or any(not isinstance(d, int) or not 0 <= d < len(nodes) for d in deps):
            raise _bad(path, f"node {k} has deps {deps!r}: each must be a node id 0..{len(nodes) - 1}")
    cycle = find_cycle([list(n.get("deps", [])) for n in nodes])
    if cycle:
        names = [str(nodes[i].get("name", i)) for i in cycle]
        raise _bad(path, f"the graph has a cycle: {' -> '.join(names)} (each node must only read earlier ones)")
    for n in nodes:
        late = [d for d in n.get("deps", []) if d >= n["id"]]
        if late:
            raise _bad(path, f"node {n['id']} reads node {late[0]}, which comes later; nodes must be in "
                             f"topological order")
    return nodes


def read_graph(path: str | Path, reference: bool = False) -> TrainingGraph | CostedGraph:
    """A TrainingGraph, or a CostedGraph if the nodes carry costs (compute_s)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise _bad(path, f"cannot read it ({exc.strerror or exc})") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    nodes = _check_structure(path, raw)
    try:
        if "compute_s" in nodes[0]:
            return CostedGraph.from_json(path, reference=reference)
        return TrainingGraph.from_json(path)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"does not fit the schema (docs/graph.md): {type(exc).__name__}: {exc}") from exc
