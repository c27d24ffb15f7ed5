"""No import cycle among poet's modules, counting the imports inside functions too (a lazy import
hides a cycle from Python, not from a reader) and those under `if TYPE_CHECKING:` (a cycle Python
never runs is still two modules that each need the other to be read).

Run alone: `.venv/bin/python -m pytest tests/test_imports.py`; a failure lists each cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from poet.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "host" / "poet"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        name = ".".join(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _imports(tree: ast.AST, mods: dict[str, Path]) -> set[str]:
    """The poet modules a module imports, anywhere in it, TYPE_CHECKING blocks included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("poet"):
            for alias in node.names:  # `from poet import flash` imports the module poet.flash
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in mods else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("poet"))
    return found


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, f in mods.items():
        deps = _imports(ast.parse(f.read_text()), mods)
        # a package's own __init__ is imported with each submodule: not an edge of the flow
        graph[name] = {d for d in deps if d in mods and d != name and not name.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from poet.graph.training_graph import X\n"
                     "def f():\n    from poet.plan.cost.memory import y\n")
    assert _imports(tree, {"poet.graph.training_graph": PACKAGE, "poet.plan.cost.memory": PACKAGE}) == \
        {"poet.graph.training_graph", "poet.plan.cost.memory"}


def test_no_import_cycle_in_poet() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the package was found
    found = cycles(graph)
    assert not found, "import cycles (break each by moving what both need into a module of its own): " + \
        "; ".join(" <-> ".join(c) for c in found)


def _argparse_users(mods: dict[str, Path]) -> list[str]:
    """Modules that import argparse: the command line's parser belongs to the cli package alone."""
    out = []
    for name, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "argparse" or n.startswith("argparse.") for n in names):
                out.append(name)
                break
    return sorted(out)


def _namespace_takers(mods: dict[str, Path]) -> list[str]:
    """Library functions with a parameter annotated as a Namespace, or `args: Any` (how the library
    took the CLI's Namespace). PyTorch's own protocol hands untyped `args` tuples to instrument."""
    out = []
    for name, f in mods.items():
        if name == "poet.cli" or name.startswith("poet.cli."):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                note = ast.unparse(a.annotation) if a.annotation else ""
                if "Namespace" in note or (a.arg == "args" and note == "Any"):
                    out.append(f"{name}.{node.name}({a.arg}: {note})")
    return out


def test_only_the_cli_parses_the_command_line() -> None:
    mods = _modules()
    assert _argparse_users(mods) == ["poet.cli", "poet.cli.parser", "poet.cli.resume", "poet.cli.values"]
    assert not _namespace_takers(mods), "the library takes typed values: " + ", ".join(_namespace_takers(mods))


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    import argparse\n")
    b.write_text("from typing import Any\ndef run(args: Any, say): ...\ndef g(ns: 'argparse.Namespace'): ...\n")
    mods = {"a": a, "b": b}
    assert _argparse_users(mods) == ["a"]
    assert _namespace_takers(mods) == ["b.run(args: Any)", "b.g(ns: 'argparse.Namespace')"]
