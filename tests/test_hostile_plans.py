"""Hostile input to the planner (issue 45), as a table in test_hostile.py's style: every file the planner
reads (a profile, a board file, precision rules, a graph file) and every number that reaches its solver.
Each case ends in one line on stderr, `poet: ...`, exit 2, with no internal error, before anything runs,
and leaves every file it was given as it was.

The classes, each with several members: YAML aliases that expand without bound (the billion laughs) in
any YAML poet reads; numbers no board can have (a time of 1e308 s, a bandwidth of 1e-300 B/s, a power of
1e308 W) and products of numbers that pass but make a cost the solver cannot weigh; graph files that
parse but are no training step (every tensor 0 bytes, a shape that does not match its bytes, a negative
attribute, an index past the parameters, no loss, duplicate or unprintable names); deadlines and limits
no step can have (400 digits); and paths that are no file (a FIFO where a file is read twice, a device,
a link to one, a dangling link).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import refused
from poet.boards import load_board
from poet.cli import build_parser, main
from poet.paths import REPO_ROOT
from poet.plan.cost.costs import MAX_EXPANDED
from test_hostile import SHIPPED_PROFILE, TRAIN, _file

C3_PROFILE = REPO_ROOT / "profiles" / "esp32c3.yaml"
SOLVE = ["solve", "--ram", "200k"]
DIGITS_400 = "9" * 400


# ---------------------------------------------------------------- what the cases are made of

def _shipped() -> dict[str, Any]:
    return yaml.safe_load(SHIPPED_PROFILE.read_text())


def _profile(t: Path, edit: Callable[[dict[str, Any]], None], name: str = "p.yaml") -> str:
    """The shipped nRF52840 profile with `edit` made, as a file in t."""
    p = _shipped()
    edit(p)
    return _file(t, name, yaml.safe_dump(p, sort_keys=False))


def _every_op(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(p: dict[str, Any]) -> None:
        for op in p["ops"].values():
            op[field] = value
    return edit


def _measured_paging(**changes: float) -> Callable[[dict[str, Any]], None]:
    def edit(p: dict[str, Any]) -> None:
        p["paging"] = {"used": "measured", "read_bytes_per_s": 8e5, "write_bytes_per_s": 5e5,
                       "read_latency_s": 1e-3, "write_latency_s": 1e-3, "read_w": 0.1, "write_w": 0.15, **changes}
    return edit


LEVELS, WIDTH = 9, 10  # the bomb's nesting and fan-out: WIDTH ** LEVELS strings once expanded


def _bomb(field: str) -> str:
    """The billion laughs: under 1 KB of YAML whose field `field` is WIDTH ** LEVELS strings once its
    aliases are expanded."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * WIDTH)}]"]
    for k in range(1, LEVELS):
        lines.append(f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * WIDTH)}]")
    lines.append(f"{field}: *l{LEVELS - 1}")
    return "\n".join(lines) + "\n"


def test_the_bomb_would_take_all_the_memory_there_is() -> None:
    """By construction, not by a clock: expanded, the bomb is 10^9 strings (8 GB of references alone),
    from under a kilobyte, and far past what a profile's reader takes."""
    assert WIDTH ** LEVELS >= 10**9 >= 1000 * MAX_EXPANDED
    assert len(_bomb("board")) < 1024


def _bombed_profile(t: Path, field: str) -> str:
    """The shipped profile with `field` replaced by the bomb's last alias."""
    text = SHIPPED_PROFILE.read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(f"{field}:")]
    return _file(t, "bomb.yaml", _bomb(field) + "\n".join(lines) + "\n")


@functools.cache
def _mlp_graph_text() -> str:
    """`poet graph -o` of mlp-digits: 0 input, 1-7 forward, 8 loss, 9-16 backward, 17 optimizer."""
    from poet.cli import _graph

    g, _, _ = _graph(build_parser().parse_args(["graph", "--model", "mlp-digits"]))
    return g.to_json_text()


def _graph(t: Path, edit: Callable[[dict[str, Any]], Any]) -> str:
    g = json.loads(_mlp_graph_text())
    edit(g)
    return _file(t, "g.json", json.dumps(g))


def _node(k: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda g: g["nodes"][k].update(changes)


def _node_attrs(k: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda g: g["nodes"][k]["attrs"].update(changes)


def _all_zero_bytes(g: dict[str, Any]) -> None:
    for n in g["nodes"]:
        n["bytes"] = 0


def _only(keep: list[int]) -> Callable[[dict[str, Any]], None]:
    """The graph of the nodes `keep`, renumbered, each reading only kept nodes."""
    def edit(g: dict[str, Any]) -> None:
        new = {old: k for k, old in enumerate(keep)}
        nodes = []
        for old in keep:
            n = copy.deepcopy(g["nodes"][old])
            n["id"] = new[old]
            n["deps"] = [new[d] for d in n["deps"] if d in new]
            n["saved"] = [new[d] for d in n["saved"] if d in new]
            nodes.append(n)
        g["nodes"] = nodes
    return edit


def _costed(t: Path, edit: Callable[[dict[str, Any]], Any] = lambda g: None) -> str:
    """A small costed graph in the POET reference's schema, edited."""
    def node(i: int, name: str, kind: str, deps: list[int]) -> dict[str, Any]:
        return {"id": i, "name": name, "kind": kind, "deps": deps, "bytes": 256, "compute_s": 1e-3,
                "compute_j": 2e-3, "page_in_s": 1e-4, "page_in_j": 1e-4, "page_out_s": 1e-4, "page_out_j": 1e-4}
    g = {"model": "tiny", "param_bytes": 1024,
         "nodes": [node(0, "x", "forward", []), node(1, "fc1", "forward", [0]), node(2, "fc2", "forward", [1]),
                   node(3, "fc2_grad", "backward", [2, 1]), node(4, "fc1_grad", "backward", [3, 0])]}
    edit(g)
    return _file(t, "costed.json", json.dumps(g))


def _fifo(t: Path, name: str = "fifo") -> str:
    os.mkfifo(t / name)
    return str(t / name)


def _link(t: Path, name: str, target: str) -> str:
    (t / name).symlink_to(target)
    return str(t / name)


REF_SOLVE = ["solve", "--ram", "64k", "--semantics", "reference"]
NEWLINE_MODEL = """import torch.nn as nn
def f():
    m = nn.Sequential()
    m.add_module("fc\\nforged", nn.Linear(64, 10))
    m.input_shape = (64,)
    return m
"""

# (id, argv maker given tmp_path, words the one line must hold)
CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    # ---- YAML whose aliases expand without bound: refused as composed, before anything expands
    ("profile-bomb-in-board", lambda t: [*SOLVE, "--profile", _bombed_profile(t, "board")],
     ("bomb.yaml", "aliases", "YAML bomb")),
    ("profile-bomb-in-firmware", lambda t: [*SOLVE, "--profile", _bombed_profile(t, "firmware")],
     ("bomb.yaml", "aliases", "YAML bomb")),
    ("profile-bomb-in-an-op", lambda t: [*SOLVE, "--profile", _file(t, "bomb.yaml", _bomb("ops"))],
     ("aliases",)),
    ("profile-recursive-alias", lambda t: [*SOLVE, "--profile", _file(t, "rec.yaml", "board: &a [*a]\n")],
     ("recursive",)),
    ("sweep-profile-bomb", lambda t: ["sweep", "--ram", "200k", "--strategies", "checkpoint-all", "--profile",
                                      _bombed_profile(t, "board")], ("aliases",)),
    ("profile-o-bomb", lambda t: ["profile", "-o", _bombed_profile(t, "board")], ("aliases",)),
    ("precision-rules-bomb", lambda t: [*TRAIN, "--precision", "greedy", "--precision-rules",
                                        _file(t, "rules.yaml", _bomb("allow"))], ("--precision-rules", "anchor")),
    ("precision-rules-alias", lambda t: [*SOLVE, "--precision", "greedy", "--precision-rules",
                                         _file(t, "rules.yaml", "a: &x [fc1]\nallow: *x\n")], ("anchor",)),
    # ---- a profile's numbers outside what a board can be
    ("profile-energy-1e308", lambda t: [*SOLVE, "--profile", _profile(t, _every_op("energy_j", 1e308))],
     ("energy_j", "at most 1000")),
    ("profile-time-1e308", lambda t: [*SOLVE, "--profile", _profile(t, _every_op("time_s", 1e308))],
     ("time_s", "at most 3600")),
    ("profile-time-1e-300", lambda t: [*SOLVE, "--profile", _profile(t, _every_op("time_s", 1e-300))],
     ("time_s", "0 or at least")),
    ("profile-work-1e-300", lambda t: [*SOLVE, "--profile", _profile(t, _every_op("work", 1e-300))],
     ("work", "at least 1")),
    ("profile-paging-bandwidth-1e-300", lambda t: [*SOLVE, "--profile", _profile(
        t, _measured_paging(read_bytes_per_s=1e-300))], ("read_bytes_per_s", "at least 1")),
    ("profile-paging-bandwidth-1e308", lambda t: [*SOLVE, "--profile", _profile(
        t, _measured_paging(write_bytes_per_s=1e308))], ("write_bytes_per_s", "at most")),
    ("profile-paging-power-1e308", lambda t: [*SOLVE, "--profile", _profile(t, _measured_paging(read_w=1e308))],
     ("read_w", "at most 1000")),
    ("profile-paging-latency-1e308", lambda t: [*SOLVE, "--profile", _profile(
        t, _measured_paging(write_latency_s=1e308))], ("write_latency_s", "at most 60")),
    ("profile-static-bytes-huge", lambda t: [*SOLVE, "--profile", _profile(
        t, lambda p: p.update(runtime_static_bytes=10**30))], ("runtime_static_bytes",)),
    ("profile-cast-clock-1e-300", lambda t: [*SOLVE, "--profile", _profile(
        t, lambda p: p["casts"].update(clock_hz=1e-300))], ("clock_hz",)),
    ("profile-cast-fit-1e308", lambda t: [*SOLVE, "--profile", _profile(
        t, lambda p: p["casts"]["fp32->fp16"].update(cycles_per_elem=1e308))], ("cycles_per_elem",)),
    ("profile-board-a-list", lambda t: [*SOLVE, "--profile", _profile(t, lambda p: p.update(board=[1, 2]))],
     ("board", "a list")),
    ("profile-firmware-a-mapping", lambda t: [*SOLVE, "--profile", _profile(t, lambda p: p.update(firmware={}))],
     ("firmware", "a mapping")),
    ("profile-board-newline", lambda t: [*SOLVE, "--profile", _profile(t, lambda p: p.update(board="a\nb"))],
     ("board",)),
    ("sweep-profile-energy-1e308", lambda t: ["sweep", "--ram", "200k", "--strategies", "checkpoint-all",
                                              "--profile", _profile(t, _every_op("energy_j", 1e308))],
     ("energy_j",)),
    # numbers that pass, whose product over a big op is beyond what the solver takes: one op's cost
    # scaled by its work from a measured op of one FLOP
    ("profile-scaled-beyond", lambda t: [*SOLVE, "--batch", "256", "--profile", _profile(
        t, lambda p: p.update(ops={"linear(B=1,bias=1,in=1,out=1)": {"time_s": 3600.0, "energy_j": 1.0,
                                                                      "work": 1}}))],
     ("fc1/forward", "beyond the 1e+09 s")),
    # ---- `poet profile -o` over another board's measured profile
    ("profile-o-another-boards", lambda t: ["profile", "-o", _file(t, "c3.yaml", C3_PROFILE.read_text())],
     ("esp32c3", "profiling the nrf52840 would replace it", "-o another file")),
    # ---- graph files that parse but are no training step
    ("graph-all-zero-bytes", lambda t: [*SOLVE, "--graph", _graph(t, _all_zero_bytes)], ("bytes is 0",)),
    ("graph-forward-zero-bytes", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, bytes=0))],
     ("node 3 (fc2/forward)", "bytes is 0")),
    ("graph-shape-not-bytes", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, shape=[16, 64]))],
     ("node 3", "shape", "must agree")),
    ("graph-bytes-not-shape", lambda t: [*SOLVE, "--graph", _graph(t, _node(5, bytes=2047))],
     ("node 5", "bytes is 2047")),
    ("graph-attr-negative", lambda t: [*SOLVE, "--graph", _graph(t, _node_attrs(3, **{"in": -32}))],
     ("node 3", "attrs.in is -32")),
    ("graph-attr-zero", lambda t: [*SOLVE, "--graph", _graph(t, _node_attrs(2, n=0))], ("attrs.n is 0",)),
    ("graph-param-index-past-params", lambda t: [*SOLVE, "--graph", _graph(t, _node_attrs(3, w=99))],
     ("attrs.w is 99", "8 params")),
    ("graph-param-index-negative", lambda t: [*SOLVE, "--graph", _graph(t, _node_attrs(3, b=-5))],
     ("attrs.b is -5",)),
    ("graph-flag-negative", lambda t: [*SOLVE, "--graph", _graph(t, _node_attrs(10, need_grad_input=-1))],
     ("attrs.need_grad_input is -1",)),
    ("graph-only-an-input", lambda t: [*SOLVE, "--graph", _graph(t, _only([0]))], ("no forward node",)),
    ("graph-no-loss-no-backward", lambda t: [*SOLVE, "--graph", _graph(t, _only([0, 1, 2, 3, 17]))],
     ("no loss node",)),
    ("graph-no-backward", lambda t: [*SOLVE, "--graph", _graph(t, _only([0, 1, 2, 3, 4, 5, 6, 7, 8, 17]))],
     ("no backward node",)),
    ("graph-no-optimizer", lambda t: [*SOLVE, "--graph", _graph(t, _only(list(range(17))))],
     ("node 16", "not the optimizer")),
    ("graph-two-losses", lambda t: [*SOLVE, "--graph", _graph(t, _node(6, kind="loss"))],
     ("node 8", "second loss")),
    ("graph-input-not-first", lambda t: [*SOLVE, "--graph", _graph(t, _node(0, kind="forward"))],
     ("node 0", "not the input")),
    ("graph-duplicate-params", lambda t: [*SOLVE, "--graph", _graph(
        t, lambda g: g["params"].__setitem__(2, ["fc1.weight", [32, 32]]))], ("fc1.weight", "twice")),
    ("graph-frozen-unknown", lambda t: [*SOLVE, "--graph", _graph(t, lambda g: g.update(frozen=["nope"]))],
     ("frozen has \"nope\"",)),
    ("graph-name-a-list", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, name=["fc2"]))],
     ("node 3", "name is [\"fc2\"]", "must be text")),
    ("graph-name-newline", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, name="fc2\nforged line"))],
     ("node 3", "control character")),
    ("graph-name-escape", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, name="fc2\x1b[2J"))],
     ("control character",)),
    ("graph-names-twice", lambda t: [*SOLVE, "--graph", _graph(t, _node(3, name="fc1/forward"))],
     ("node 3", "node 1's too")),
    ("graph-param-name-newline", lambda t: [*SOLVE, "--graph", _graph(
        t, lambda g: g["params"][0].__setitem__(0, "fc1\nweight"))], ("params", "control character")),
    ("graph-model-name-newline", lambda t: [*SOLVE, "--graph", _graph(t, lambda g: g.update(model="a\nb"))],
     ("model is", "control character")),
    ("graph-op-unknown", lambda t: [*SOLVE, "--graph", _graph(t, _node(2, op="softplus"))],
     ("node 2", "op is \"softplus\"")),
    ("graph-loss-unknown", lambda t: [*SOLVE, "--graph", _graph(t, lambda g: g.update(loss="hinge"))],
     ("loss is \"hinge\"",)),
    ("sweep-graph-name-newline", lambda t: ["sweep", "--ram", "200k", "--strategies", "checkpoint-all", "--graph",
                                            _graph(t, _node(3, name="a\nb"))], ("control character",)),
    ("traced-module-name-newline", lambda t: (_file(t, "newlinemod.py", NEWLINE_MODEL), ["graph", "--model",
                                                                                      "newlinemod:f"])[1],
     ("module name 'fc\\nforged'", "control character")),
    ("costed-cost-1e-300", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g["nodes"][2].update(
        compute_s=1e-300))], ("node 2 (fc2)", "compute_s is 1e-300", "0 or at least 1e-12")),
    ("costed-page-cost-1e-300", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g["nodes"][1].update(
        page_in_j=1e-300))], ("page_in_j",)),
    ("costed-all-zero-bytes", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: [
        n.update(bytes=0) for n in g["nodes"]])], ("every node's bytes is 0",)),
    ("costed-only-inputs", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g.update(
        nodes=g["nodes"][:1]))], ("every node is a graph input",)),
    ("costed-no-backward", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g.update(
        nodes=g["nodes"][:3]))], ("no backward node",)),
    ("costed-name-newline", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g["nodes"][1].update(
        name="fc1\nforged"))], ("node 1", "control character")),
    ("costed-name-a-number", lambda t: [*REF_SOLVE, "--graph", _costed(t, lambda g: g["nodes"][1].update(
        name=5))], ("node 1", "must be text")),
    # ---- deadlines and limits no training step has
    ("deadline-400-digits-x", lambda t: [*SOLVE, "--deadline", DIGITS_400 + "x"],
     ("--deadline", "1e+06 times one plain pass")),
    ("deadline-400-digits-ms", lambda t: [*SOLVE, "--deadline", DIGITS_400 + "ms"], ("--deadline", "a year")),
    ("deadline-two-years", lambda t: [*SOLVE, "--deadline", "63072000s"], ("--deadline", "a year")),
    ("sweep-deadline-400-digits", lambda t: ["sweep", "--ram", "200k", "--deadline", f"1.5x,{DIGITS_400}us"],
     ("--deadline", "a year")),
    ("train-deadline-400-digits", lambda t: [*TRAIN, "--deadline", DIGITS_400 + "x"], ("--deadline",)),
    ("solve-time-limit-1e300", lambda t: [*SOLVE, "--time-limit", "1e300"], ("--time-limit", "more than a year")),
    ("sweep-time-limit-1e300", lambda t: ["sweep", "--ram", "200k", "--time-limit", "1e300"], ("--time-limit",)),
    # ---- paths that are no file the planner can read
    ("profile-a-fifo", lambda t: [*SOLVE, "--profile", _fifo(t)], ("--profile", "pipe (FIFO)", "more than once")),
    ("profile-dev-zero", lambda t: [*SOLVE, "--profile", "/dev/zero"], ("--profile", "character device")),
    ("profile-link-to-a-device", lambda t: [*SOLVE, "--profile", _link(t, "p.yaml", "/dev/zero")],
     ("--profile", "a link to /dev/zero", "character device")),
    ("profile-dangling-link", lambda t: [*SOLVE, "--profile", _link(t, "p.yaml", str(t / "gone.yaml"))],
     ("--profile", "a link to", "does not exist")),
    ("graph-dev-zero", lambda t: [*SOLVE, "--graph", "/dev/zero"], ("--graph", "character device")),
    ("graph-link-to-a-device", lambda t: [*SOLVE, "--graph", _link(t, "g.json", "/dev/urandom")],
     ("--graph", "a link to /dev/urandom", "character device")),
    ("precision-rules-fifo", lambda t: [*SOLVE, "--precision", "greedy", "--precision-rules", _fifo(t)],
     ("--precision-rules", "pipe")),
    ("precision-rules-dev-zero", lambda t: [*SOLVE, "--precision", "greedy", "--precision-rules", "/dev/zero"],
     ("--precision-rules", "character device")),
    ("sweep-profile-fifo", lambda t: ["sweep", "--ram", "200k", "--profile", _fifo(t)], ("--profile", "pipe")),
]


def _files(root: Path) -> dict[str, bytes | str]:
    """Every entry under root (links not followed): a regular file's bytes, else what it is."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts:  # a module:factory case's model, imported
            continue
        st = p.lstat()
        out[str(p.relative_to(root))] = p.read_bytes() if stat.S_ISREG(st.st_mode) else stat.filemode(st.st_mode)
    return out


@pytest.mark.parametrize("make,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_planner_input_is_refused_in_one_line(ws: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      make: Callable[[Path], list[str]],
                                                      words: tuple[str, ...]) -> None:
    import poet.device.connect

    def no_board(*a: Any, **k: Any) -> None:
        raise AssertionError("a board was opened: the refusal must come before")
    monkeypatch.setattr(poet.device.connect, "open_device", no_board)
    tmp = ws.parent
    argv = make(tmp)
    before = _files(tmp)
    refused(capsys, argv, 2, *words)
    assert _files(tmp) == before, "a refused command changed, made or removed a file"


# ---------------------------------------------------------------- board files

def _board_file(edit: Callable[[dict[str, Any]], Any]) -> str:
    raw = yaml.safe_load((REPO_ROOT / "boards" / "nrf52840.yaml").read_text())
    edit(raw)
    return yaml.safe_dump(raw, sort_keys=False)


def _without(*keys: str) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        section = raw
        for k in keys[:-1]:
            section = section[k]
        del section[keys[-1]]
    return edit


def _setting(value: Any, *keys: str) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        section = raw
        for k in keys[:-1]:
            section = section[k]
        section[keys[-1]] = value
    return edit


BOARD_CASES: list[tuple[str, str, tuple[str, ...]]] = [
    ("no-clock", _board_file(_without("clock_hz")), ("no clock_hz",)),
    ("clock-1e308", _board_file(_setting(1e308, "clock_hz")), ("clock_hz",)),
    ("clock-text", _board_file(_setting("fast", "clock_hz")), ("clock_hz", "'fast'")),
    ("ram-negative", _board_file(_setting(-1, "ram_bytes")), ("ram_bytes",)),
    ("ram-fraction", _board_file(_setting(1.5, "ram_bytes")), ("ram_bytes", "whole number")),
    ("no-power", _board_file(_without("power")), ("no power",)),
    ("power-a-list", _board_file(_setting([1], "power")), ("power is a list",)),
    ("cpu-power-1e308", _board_file(_setting(1e308, "power", "cpu_active_w")), ("power.cpu_active_w",)),
    ("bandwidth-1e-300", _board_file(_setting(1e-300, "aux_storage", "read_bytes_per_s")),
     ("aux_storage.read_bytes_per_s",)),
    ("latency-nan", _board_file(_setting(float("nan"), "aux_storage", "latency_s")), ("aux_storage.latency_s",)),
    ("no-storage-write-power", _board_file(_without("aux_storage", "write_w")), ("no aux_storage.write_w",)),
    ("name-a-list", _board_file(_setting(["nrf52840"], "name")), ("name",)),
    ("name-another-board", _board_file(_setting("mkr1000", "name")), ("name", "must agree")),
    ("usb-not-pairs", _board_file(_setting([[1, 2, 3]], "usb")), ("usb",)),
    ("emulator-args-not-a-list", _board_file(_setting("-bios none", "emulator", "extra_args")),
     ("emulator.extra_args",)),
    ("a-bomb", _bomb("description") + "\n".join(ln for ln in (REPO_ROOT / "boards" / "nrf52840.yaml").read_text()
                                                  .splitlines() if not ln.startswith("description:")),
     ("anchor",)),
    ("a-list", "- 1\n- 2\n", ("the file is a list",)),
    ("not-yaml", "name: [unclosed\n", ("not valid YAML",)),
]


@pytest.mark.parametrize("text,words", [c[1:] for c in BOARD_CASES], ids=[c[0] for c in BOARD_CASES])
def test_a_bad_board_file_is_refused_in_one_line(ws: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch, text: str,
                                                 words: tuple[str, ...]) -> None:
    """A board file poet ships, edited: every field poet reads is checked on load (a missing clock_hz was
    a KeyError, a bandwidth of 1e-300 an error inside the solver)."""
    import poet.boards

    boards = ws.parent / "boards"
    boards.mkdir()
    (boards / "nrf52840.yaml").write_text(text)
    monkeypatch.setattr(poet.boards, "BOARDS_DIR", boards)
    code = main(["solve", "--ram", "200k"])
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("poet: board file "), err
    for w in words:
        assert w in lines[0], lines[0]
    assert (boards / "nrf52840.yaml").read_text() == text


def test_every_shipped_board_file_loads() -> None:
    for path in sorted((REPO_ROOT / "boards").glob("*.yaml")):
        assert load_board(path.stem).name == path.stem


def test_a_board_name_is_one_of_the_board_files(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (ws.parent / "evil.yaml").write_text((REPO_ROOT / "boards" / "nrf52840.yaml").read_text())
    assert main(["solve", "--ram", "200k", "--board", "../../evil"]) == 2
    assert "unknown board" in capsys.readouterr().err


# ---------------------------------------------------------------- what must still work

def test_a_graph_from_a_fifo_is_read_once_and_planned(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--graph <(...)`: the file is read once (a second open would wait for a writer that is gone)."""
    fifo = Path(_fifo(ws.parent))
    text = _mlp_graph_text().encode()

    def writer() -> None:
        with open(fifo, "wb") as f:
            f.write(text)
        # a second open by poet would block for ever: give it an empty file to fail on instead
        done.wait(30)
        if not done.is_set():
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)

    done = threading.Event()
    feeder = threading.Thread(target=writer)
    feeder.start()
    try:
        code = main([*SOLVE, "--graph", str(fifo), "--profile", str(SHIPPED_PROFILE)])
    finally:
        done.set()
        feeder.join()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "status optimal" in out


def test_profiles_poet_wrote_with_a_shared_list_still_load(tmp_path: Path) -> None:
    """Profiles written before issue 45 share the paging sizes through an alias (&id001): a bounded
    expansion, read as before. Each shipped profile is written here as poet wrote it then (one list
    object for both directions' sizes, which PyYAML's dumper anchors), whatever the shipped file's
    own formatting."""
    from poet.plan.cost.costs import read_profile

    for shipped in sorted((REPO_ROOT / "profiles").glob("*.yaml")):
        prof = yaml.safe_load(shipped.read_text())
        fit = prof["paging"]["fit"]
        sizes = list(fit["in"]["sizes"])
        fit["in"]["sizes"] = fit["out"]["sizes"] = sizes  # shared, as before issue 45
        path = tmp_path / shipped.name
        path.write_text(yaml.safe_dump(prof, sort_keys=False))
        text = path.read_text()
        assert "&id001" in text and "*id001" in text
        read = read_profile(path, "")
        assert read["board"] == shipped.stem
        assert read["paging"]["fit"]["out"]["sizes"] == read["paging"]["fit"]["in"]["sizes"] == sizes


def test_a_profile_poet_writes_has_no_aliases(tmp_path: Path) -> None:
    from poet.device.profile import write_profile

    prof = _shipped()
    path = tmp_path / "p.yaml"
    write_profile(prof, path)
    text = path.read_text()
    assert "&" not in text and "*id" not in text
    assert yaml.safe_load(text)["paging"]["fit"]["in"]["sizes"] == _shipped()["paging"]["fit"]["in"]["sizes"]
