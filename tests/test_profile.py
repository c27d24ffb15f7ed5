"""`poet profile` on the emulated nRF52840: the planner's predicted op costs match what a run then
measures; an interrupted profile keeps its finished graphs and the same command resumes it; the
paging fit and the estimate of unprofiled ops."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import needs_tools
from poet import cli
from poet.boards import load_board
from poet.device import emulator
from poet.device.profile import fit_line, page_sizes, paging_model, paging_schedule
from poet.graph.tracer import trace
from poet.graph.training_graph import GraphNode
from poet.models.zoo import get_model
from poet.plan.cost.costs import costed, estimate_op, load_profile, op_key, page_cost, work
from poet.plan.cost.memory import budget_for
from poet.plan.lowering.schedule import NO_DETAIL, validate
from poet.plan.strategies.checkpoint_all import keep_all
from poet.plan.strategies.poet_milp import min_arena_budget

needs_m4 = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")
COMPUTE = ("forward", "backward", "recompute", "optimizer")


def _poet(*argv: str) -> int:
    return cli.main(list(argv))


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    return tmp_path


@needs_m4
def test_planner_predicts_what_the_run_measures(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof_path = workspace / "nrf52840.yaml"
    assert _poet("profile", "--board", "nrf52840", "--emulate", "--model", "mlp-digits", "-o", str(prof_path)) == 0
    prof = load_profile("nrf52840", prof_path)
    assert prof["source"] == "emulated" and prof["models"]["mlp-digits batch 16"]["done"]
    assert prof["paging"]["used"] == "datasheet" and prof["paging"]["fit"]["done"]  # semihosting: no SD timing
    assert all(op["repeats"] >= 3 and op["provenance"] == "emulated" for op in prof["ops"].values())

    # a budget below keep-all, so the plan must recompute or page (mlp-digits: cnn-digits at batch 16 keeps every
    # activation at its smallest arena, its peak one backward op's inputs and output)
    board = load_board("nrf52840")
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 16)
    cg = costed(g, board, prof)
    fixed = budget_for(g, board.ram_bytes, int(prof["runtime_static_bytes"])).fixed
    full = keep_all(cg).peak_bytes
    smallest = min_arena_budget(cg, 50 * cg.one_pass_s)
    assert smallest is not None and smallest < full
    ram = fixed + smallest + (full - smallest) // 4
    sched = workspace / "mlp.poet"
    common = ["--board", "nrf52840", "--model", "mlp-digits", "--ram", str(ram), "--deadline", "50x",
              "--profile", str(prof_path)]
    assert _poet("solve", *common, "-o", str(sched)) == 0
    run = workspace / "run"
    assert _poet("train", *common, "--epochs", "1", "--data-limit", "32", "--schedule", str(sched),
                 "--run-dir", str(run)) == 0
    capsys.readouterr()

    tr = json.loads((run / "trace.json").read_text())
    predicted, measured = [], []
    for st in tr["steps"]:
        for _instr, node, kind, _op, ticks, _bytes in st["records"]:
            if kind in COMPUTE:
                predicted.append(cg.nodes[node].compute_s)
                measured.append(board.compute_time_s(ticks, tr["tick_hz"]))  # the same conversion as the profile
    kinds = {r[2] for st in tr["steps"] for r in st["records"]}
    assert "recompute" in kinds or "page_out" in kinds
    per_op = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True) if m > 0]
    assert statistics.median(per_op) <= 0.05
    assert abs(sum(predicted) - sum(measured)) / sum(measured) <= 0.02


class _KillAfter:
    """A progress hook: after `line` is printed, stop the emulator (as a pulled cable would) or press Ctrl-C."""

    def __init__(self, line: str, monkeypatch: pytest.MonkeyPatch, ctrl_c: bool = False) -> None:
        self.line, self.ctrl_c, self.qemu = line, ctrl_c, None
        real_start, real_say = emulator.start_qemu, cli.say

        def start(*a, **kw):  # type: ignore[no-untyped-def]
            cm = real_start(*a, **kw)
            emu = cm.__enter__()
            self.qemu = emu.process

            class _Wrap:
                def __enter__(self_inner):  # type: ignore[no-untyped-def]
                    return emu

                def __exit__(self_inner, *exc):  # type: ignore[no-untyped-def]
                    return cm.__exit__(*exc)
            return _Wrap()

        def say(msg: str = "") -> None:
            real_say(msg)
            if self.line in msg:
                self.line = "\0never"  # once
                if self.ctrl_c:
                    raise KeyboardInterrupt
                assert self.qemu is not None
                self.qemu.kill()
                self.qemu.wait()

        monkeypatch.setattr(emulator, "start_qemu", start)
        monkeypatch.setattr(cli, "say", say)


@needs_m4
@pytest.mark.parametrize("ctrl_c", [False, True], ids=["emulator-stopped", "ctrl-c"])
def test_an_interrupted_profile_resumes(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], ctrl_c: bool) -> None:
    path = workspace / "p.yaml"
    args = ["profile", "--board", "nrf52840", "--models", "mlp-digits", "cnn-digits", "--no-paging", "-o", str(path)]
    with monkeypatch.context() as m:
        _KillAfter("profile cnn-digits", m, ctrl_c=ctrl_c)
        status = _poet(*args)
    out, err = capsys.readouterr()
    assert status == (130 if ctrl_c else 1)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    went = "stopped by Ctrl-C" if ctrl_c else "the board went away"
    assert lines[0].startswith(f"poet: {went} while profiling cnn-digits (")
    # the optimizer of these graphs (updated in backward) only counts the step: not measured
    assert "(11 of 21 ops done" in lines[0] and "run the same command again to resume" in lines[0]
    saved = yaml.safe_load(path.read_text())
    assert list(saved["models"]) == ["mlp-digits batch 16"]
    kept = dict(saved["ops"])

    assert _poet(*args) == 0
    out, err = capsys.readouterr()
    assert "profile mlp-digits: already in the profile" in out
    assert "cnn-digits done" in out and not err
    done = yaml.safe_load(path.read_text())
    assert set(done["models"]) == {"mlp-digits batch 16", "cnn-digits batch 16"}
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, 16)
    cnn = {op_key(n, g) for n in g.nodes}
    mlp_only = {k: v for k, v in kept.items() if k not in cnn}
    assert mlp_only and all(done["ops"][k] == v for k, v in mlp_only.items())  # mlp-digits was not run again


def test_emulate_and_port_together_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        _poet("profile", "--emulate", "--port", "/dev/ttyACM0")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not allowed with argument" in err[0]


# ---------------------------------------------------------------- pure parts

def test_fit_recovers_latency_and_throughput() -> None:
    sizes = [256 << k for k in range(9)]
    t = [0.001 + s / 500_000 for s in sizes]
    f = fit_line(sizes, t)
    assert f["latency_s"] == pytest.approx(0.001, rel=1e-6)
    assert f["bytes_per_s"] == pytest.approx(500_000, rel=1e-6)
    assert f["r2"] == pytest.approx(1.0)
    flat = fit_line(sizes, [1e-7] * len(sizes))
    assert flat["bytes_per_s"] is None and flat["r2"] is None


def test_paging_model_only_pages() -> None:
    blob = paging_model(4096)
    sched = paging_schedule(blob, rounds=3)
    assert [n.arena_bytes for n in blob.nodes] == [0, 4096, 0] and blob.param_elems == []
    ops = [i.op for i in sched.instrs]
    assert ops.count(3) == ops.count(4) == 3  # PAGE_OUT, PAGE_IN
    assert validate(sched.encode(), blob, 1 << 20) == (0, NO_DETAIL)  # the input itself is never paged
    assert page_sizes(233472)[-1] == 65536 and page_sizes(20000)[-1] == 8192


def _node(op: str, flops: int, n: int) -> GraphNode:
    return GraphNode(id=0, name=f"{op}{n}", module=op, kind="forward", op=op, deps=[], bytes=4 * n, shape=[n],
                     attrs={"n": n}, flops=flops)


def test_missing_op_is_estimated_from_the_nearest_measured_shape() -> None:
    small, big, other = _node("relu", 100, 100), _node("relu", 10_000, 10_000), _node("tanh", 400, 400)
    ops = {op_key(small): {"work": work(small), "time_s": 1e-3, "energy_j": 1e-5},
           op_key(big): {"work": work(big), "time_s": 5e-2, "energy_j": 5e-4},
           op_key(other): {"work": work(other), "time_s": 4e-3, "energy_j": 4e-5}}
    est = estimate_op(_node("relu", 200, 200), ops)
    assert est is not None and est.source == op_key(small) and est.time_s == pytest.approx(2e-3)
    assert est.provenance.startswith(f"estimated from {op_key(small)}")
    never = estimate_op(_node("gelu", 1000, 1000), ops)  # no gelu measured: the profile's median rate
    assert never is not None and never.source == "" and never.time_s == pytest.approx(1e-2)
    assert estimate_op(_node("gelu", 1, 1), {}) is None


def test_a_measured_paging_fit_is_what_the_planner_uses() -> None:
    board = load_board("nrf52840")
    measured = {"paging": {"used": "measured", "read_bytes_per_s": 1e6, "write_bytes_per_s": 5e5,
                           "read_latency_s": 1e-4, "write_latency_s": 2e-4, "read_w": 0.1, "write_w": 0.2}}
    t, e = page_cost(board, measured, 1000, "out")
    assert t == pytest.approx(2e-4 + 1000 / 5e5) and e == pytest.approx(t * (0.2 + board.cpu_active_w))
    assert page_cost(board, {"paging": {"used": "datasheet"}}, 1000, "in") == board.page_cost(1000, "in")


def test_shipped_profiles_say_what_the_planner_uses() -> None:
    root = Path(__file__).resolve().parents[1] / "profiles"
    for name in ("nrf52840", "mkr1000", "esp32c3", "rpi4", "jetson"):
        p = yaml.safe_load((root / f"{name}.yaml").read_text())
        assert p["compute"]["used"] and p["paging"]["used"] in ("datasheet", "measured"), name
        assert p["ops"] and all("provenance" in o and "time_provenance" in o for o in p["ops"].values()), name
        assert all(np.isfinite(o["time_s"]) and o["time_s"] > 0 for o in p["ops"].values()), name


def test_an_op_key_names_shapes_not_parameters() -> None:
    """Two layers of one shape share a measured cost whichever parameters they read; an optional
    parameter counts only as there or not (a bias, running statistics, an int8 output's scale)."""
    from poet.graph.training_graph import GraphNode

    def node(op: str, **attrs: int) -> GraphNode:
        return GraphNode(0, "x", "x", "forward", op, [], 4, [1], dict(attrs))

    assert op_key(node("add_q", n=64, out_scale=7, relu=0)) == op_key(node("add_q", n=64, out_scale=91, relu=0))
    assert op_key(node("add_q", n=64, out_scale=7, relu=0)) != op_key(node("add_q", n=64, out_scale=-1, relu=0))
    assert op_key(node("quantize", n=64, scale=3)) == op_key(node("quantize", n=64, scale=12))
    bn = {"B": 1, "C": 8, "HW": 16}
    tracked = op_key(node("batchnorm", **bn, w=1, b=2, rm=3, rv=4))
    assert tracked == op_key(node("batchnorm", **bn, w=5, b=6, rm=7, rv=8))
    assert tracked != op_key(node("batchnorm", **bn, w=1, b=2, rm=-1, rv=-1))


def test_the_optimizer_costs_what_it_runs() -> None:
    """Updating in backward, the optimizer node only counts the step (its backward nodes' measured costs
    hold the update); storing gradients, it costs the profile's measured pass per trained element."""
    from poet.boards import load_board
    from poet.graph.tracer import trace
    from poet.models.zoo import get_model

    board = load_board("nrf52840")
    prof = load_profile("nrf52840")
    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 4)
    assert g.updates_in_backward and costed(g, board, prof, estimate=True).nodes[-1].compute_s == 0.0
    bert, bspec = get_model("bert-tiny")
    b = trace(bert, "bert-tiny", bspec.input_shape, bspec.classes, 1, bspec.input_dtype)
    assert not b.updates_in_backward
    sgd = prof["ops"]["sgd()"]
    opt = costed(b, board, prof, estimate=True).nodes[-1]
    assert opt.compute_s == pytest.approx(sgd["time_s"] * work(b.nodes[-1]) / sgd["work"])
    assert work(b.nodes[-1]) > 100 * sgd["work"]  # scaled to BERT-tiny's trained elements, not the profile's


def test_a_model_whose_frozen_layers_need_int8_storage_profiles_as_solve_plans_it() -> None:
    """ShuffleNetV2 x0.5 `last:1` on the nRF52840: its static-int8 prefix ends at the first chunk, and its
    frozen fp32 units fit flash only with their weights stored int8, as `poet solve`'s default precision
    stores them. `poet profile` refused it ("fit neither flash nor the SD card"); it now measures that graph."""
    from poet.graph.tracer import traced
    from poet.models.zoo import ModelChoice
    from poet.plan.cost.memory import pool_for
    from poet.plan.transform.rewrites import for_profile

    board = load_board("nrf52840")
    _, g = traced(ModelChoice("shufflenetv2-0.5", batch=1, train="last:1"))
    made = for_profile(g, board, int(load_profile("nrf52840")["runtime_static_bytes"]))
    assert made is not None
    planned, _ = made
    assert pool_for(planned).flash.total <= board.model_flash_bytes
    assert {"conv2d_q", "conv2d_i8", "slice"} <= {n.op for n in planned.nodes}
