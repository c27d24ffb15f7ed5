"""`poet demo` end to end on the emulated nRF52840, in a scratch workspace."""

import os
import re
import subprocess
import sys

from conftest import needs_qemu
from poet.plan.lowering.schedule import COMPUTE, Schedule


@needs_qemu
def test_demo_runs_the_whole_loop_and_report_repeats_it(tmp_path):
    env = dict(os.environ, POET_WORKSPACE=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "poet", "demo", "--steps", "3", "--time-limit", "3600"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for section in ("[trace]", "[profile]", "[budget]", "[solve]", "[lower]", "[train]", "[account]", "[check]"):
        assert section in out
    assert (tmp_path / "profiles" / "nrf52840.yaml").exists()
    sched = tmp_path / "runs" / "demo" / "schedule.poet"  # a demo is a `poet train` run: its schedule is its own
    assert f"schedule: {sched.stat().st_size} bytes" in out
    # the plan had to recompute, and the board's peak equals the planner's; it pages nothing: the input is the
    # staged batch, read in place (docs/spec.md section 1), and the MLP's activations cost less to recompute
    m = re.search(r"decisions\s+(\d+) recomputes, (\d+) page-ins, (\d+) page-outs", out)
    assert m and int(m.group(1)) > 0, out
    instrs = Schedule.decode(sched.read_bytes()).instrs
    assert [(i.op, i.node) for i in instrs if i.node == 0] == [(COMPUTE, 0)]  # never paged, freed or recomputed
    m = re.search(r"board peak arena (\d+) B = planner's (\d+) B", out)
    assert m and m.group(1) == m.group(2)
    assert len(re.findall(r"step +\d+/3 +loss \d+\.\d+", out)) == 3
    # the board's weights as close to float64 PyTorch's as float32 PyTorch's are (poet.graph.agreement)
    m = re.search(r"\[check\] board weights vs the same 3 steps in PyTorch on the host: (.*)", out)
    assert m and m.group(1).startswith("as close to exact arithmetic as PyTorch's float32"), out
    assert "test accuracy with the board's weights" in m.group(1)
    # `poet report` prints the same energy account from the saved trace
    rep = subprocess.run([sys.executable, "-m", "poet", "report", "runs/demo/trace.json"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout.strip() in out
