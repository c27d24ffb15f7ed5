"""Every bad input a user can give ends in one clear line on stderr and a non-zero exit, never a traceback."""

import re
import subprocess
import sys

import pytest
from poet.boards import load_board
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.paths import profile_to_read
from poet.plan.cost.costs import costed, load_profile
from poet.plan.cost.memory import budget_for
from poet.plan.strategies.poet_milp import min_arena_budget


@pytest.fixture(autouse=True)
def _workspace(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's schedules/, runs/ and profiles/ in a temporary workspace (with the shipped
    profiles), so the tests never rewrite the repository's files."""
    import shutil

    from conftest import REPO

    ws = tmp_path_factory.mktemp("workspace")
    shutil.copytree(REPO / "profiles", ws / "profiles")
    monkeypatch.setenv("POET_WORKSPACE", str(ws))


def poet(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poet", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def one_line_error(r: subprocess.CompletedProcess, status: int, *words: str) -> None:
    assert r.returncode == status, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("poet: ")
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_unknown_board():
    one_line_error(poet("solve", "--board", "nrf9999", "--ram", "128k"), 2, "unknown board 'nrf9999'",
                   "nrf52840")


def test_bad_ram():
    one_line_error(poet("solve", "--ram", "abc"), 2, "cannot read size 'abc'", "96k")


def test_ram_below_fixed_part():
    one_line_error(poet("solve", "--ram", "8k"), 2, "below the fixed part", "raise --ram")


def test_ram_above_board():
    one_line_error(poet("solve", "--ram", "1m"), 2, "more than nrf52840 has")


def test_unknown_model():
    one_line_error(poet("graph", "--model", "resnet1000"), 2, "unknown model", "cnn-digits")


def test_missing_trace():
    one_line_error(poet("report", "nope.json"), 2, "does not exist")


def test_budget_below_smallest_feasible_names_the_smallest():
    board = load_board("nrf52840")
    prof = load_profile("nrf52840")
    model, spec = get_model("cnn-digits")
    g = trace(model, "cnn-digits", spec.input_shape, spec.classes, 16)
    cg = costed(g, board, prof)
    fixed = budget_for(g, board.ram_bytes, int(prof["runtime_static_bytes"])).fixed
    smallest = fixed + min_arena_budget(cg, 2 * cg.one_pass_s)
    r = poet("solve", "--model", "cnn-digits", "--ram", str(smallest - 64), "--deadline", "2x", "--time-limit", "3600")
    one_line_error(r, 1, "below the smallest feasible budget", f"({smallest} B")
    ok = poet("solve", "--model", "cnn-digits", "--ram", str(smallest), "--deadline", "2x", "--time-limit", "3600",
              "-o", "/dev/null")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("cmd", [["--help"], ["solve", "--help"], ["train", "--help"], ["demo", "--help"]])
def test_help(cmd):
    r = poet(*cmd)
    assert r.returncode == 0 and "usage: poet" in r.stdout


def test_qemu_missing(tmp_path):
    import os

    env = dict(os.environ, POET_QEMU=str(tmp_path / "qemu-system-arm"))
    r = poet("train", "--ram", "200k", "--epochs", "1", "--run-dir", str(tmp_path / "run"), env=env)
    one_line_error(r, 1, "qemu-system-arm not found", "make setup")


def _qemu_pids_in(directory) -> list[int]:
    import os

    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if b"qemu-system-arm" in cmd and cwd == str(directory):
            pids.append(int(pid))
    return pids


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_stops_qemu_and_keeps_finished_steps(tmp_path, sig):
    """Ctrl-C, and a supervisor's SIGTERM or a closed terminal's SIGHUP alike: the finished steps saved,
    one line saying so and by what, 128 + the signal."""
    import os
    import signal
    import time

    signum = signal.Signals[sig]

    run = tmp_path / "run"
    env = dict(os.environ, POET_WORKSPACE=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "poet", "train", "--model", "mlp-digits", "--ram", "200k",
                             "--epochs", "1000", "--run-dir", str(run), "--profile",
                             str(profile_to_read("nrf52840"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:
            if "step   3/" in line:
                break
        assert _qemu_pids_in(run), "QEMU should be running in the run directory"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum  # as `poet profile` and every command stopped by a signal
    last = err.strip().splitlines()[-1]
    said = {"SIGINT": "Ctrl-C"}.get(sig, sig)
    assert f"stopped by {said};" in last and "resume with `poet train --resume" in last, last
    assert "Traceback" not in err
    time.sleep(0.2)
    assert not _qemu_pids_in(run)
    from poet.energy.tracefile import Trace

    assert len(Trace.load(run / "trace.json").steps) >= 3


def test_a_frozen_prefix_too_big_for_fp32_is_planned_in_static_int8(tmp_path) -> None:
    """MobileNetV2-0.35's 32x32 maps do not fit 256 KiB in fp32: the frozen prefix is planned in static
    int8, the trained head's BN, ReLU and pool fused and the trained tensors updated in backward (no
    gradients kept), which brings the smallest budget from 553.9 KiB down to 204.5 KiB: it plans on
    the nRF52840 (the int8 prefix's 96 KiB depthwise conv, its input and output, runs in place: under 96 KiB)."""
    r = poet("solve", "--model", "mobilenetv2-cifar-0.35", "--batch", "1", "--train", "last:2", "--board",
             "nrf52840", "--ram", "256k", "-o", str(tmp_path / "s.poet"))
    assert r.returncode == 0, r.stderr
    assert "planning with the frozen prefix in static int8" in r.stdout
    assert re.search(r"gradients \(none: updated in backward\) +0 B", r.stdout), r.stdout
    # what it chose, layer by layer: the stem conv with its batch norm folded and its ReLU fused, the last
    # int8 layer handing fp32 to the trained head
    assert re.search(r"relu1/forward +conv2d_q +3x32x32 -> 16x32x32 +k3 s1, conv1 \+ bn1 \+ ReLU, 436 B weights, "
                     r"int8 out", r.stdout), r.stdout
    layers = [line for line in r.stdout.splitlines() if re.search(r" (conv2d_q|add_q) ", line)]
    assert len(layers) == 70 and layers[-1].endswith("fp32 out") and "residual add" in "".join(layers)
    peak, budget = map(int, re.search(r"peak arena +(\d+) B of (\d+) B budget", r.stdout).groups())
    assert peak < 96 * 1024 and peak <= budget
    assert re.search(r"instructions, \d+ computes made in place over their input", r.stdout), r.stdout
    assert (tmp_path / "s.poet").exists()


def test_frozen_weights_larger_than_flash_stream_from_the_sd_card(tmp_path) -> None:
    r = poet("solve", "--model", "resnet18-cifar", "--batch", "1", "--train", "last:1", "--board", "nrf52840",
             "--ram", "256k", "-o", str(tmp_path / "s.poet"))
    # the frozen prefix in static int8 still takes 10.66 MiB: the largest conv weights go to the SD card
    assert r.returncode == 0, r.stderr
    assert re.search(r"frozen weights on the SD card \(flash cannot hold them\): 9 static-int8 convolutions, "
                     r"9.98 MiB, each read through a 4.5 KiB stream buffer", r.stdout), r.stdout
    assert re.search(r"layer4/1/bn2/forward +2.25 MiB in 513 reads", r.stdout)
    assert re.search(r"RAM +weight stream buffer \(one SD read\) +4.5 KiB", r.stdout)
    assert re.search(r"SD +frozen int8 weights, streamed a few channels per read +9.98 MiB", r.stdout)
    assert (tmp_path / "s.poet").exists()


def test_frozen_weights_that_fit_neither_flash_nor_the_card_are_one_line(tmp_path) -> None:
    r = poet("solve", "--model", "bert-tiny", "--batch", "1", "--train", "last:1", "--board", "mkr1000",
             "--ram", "32k", "-o", str(tmp_path / "s.poet"))
    one_line_error(r, 2, "frozen weights fit neither mkr1000's flash nor its SD card", "flash would need 1.15 MiB "
                   "of the 160.0 KiB the firmware leaves",
                   "only convolutions and dense layers whose frozen weights are stored int8 can stream")
    assert not (tmp_path / "s.poet").exists()


def test_data_that_does_not_fit_the_model(tmp_path):
    # digits (8x8) are upsampled for square image models (lenet's 1x32x32), not for a 12-feature one
    (tmp_path / "mynet.py").write_text("from torch import nn\n"
                                       "def build():\n    return nn.Sequential(nn.Linear(12, 10))\n")
    r = subprocess.run([sys.executable, "-m", "poet", "train", "--model", "mynet:build", "--input-shape", "12",
                        "--classes", "10", "--ram", "200k", "--run-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    one_line_error(r, 2, "--data digits: samples of shape (64,)", "do not fit model mynet:build", "(12,)")
    assert not (tmp_path / "run").exists()


def test_user_model_from_module_factory(tmp_path):
    (tmp_path / "mynet.py").write_text(
        "from torch import nn\n"
        "def build():\n"
        "    return nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))\n")
    out = tmp_path / "g.json"
    r = subprocess.run([sys.executable, "-m", "poet", "graph", "--model", "mynet:build", "--input-shape", "12",
                        "--classes", "3", "--batch", "4", "-o", str(out)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "mynet:build: batch 4, " in r.stdout
    from poet.graph.training_graph import TrainingGraph

    g = TrainingGraph.from_json(out)
    assert [n.op for n in g.nodes if n.kind == "forward"] == ["linear", "relu", "linear"]
    assert g.param_bytes == 4 * (12 * 8 + 8 + 8 * 3 + 3)
    one_line_error(poet("graph", "--model", "mynet:build"), 2, "cannot load model 'mynet:build'")
    r = subprocess.run([sys.executable, "-m", "poet", "graph", "--model", "mynet:build"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    one_line_error(r, 2, "--input-shape is needed for mynet:build")


def test_a_user_model_that_says_its_input_shape_needs_no_flag(tmp_path):
    (tmp_path / "described.py").write_text(
        "from torch import nn\n"
        "class Net(nn.Sequential):\n"
        "    input_shape = (1, 4, 4)\n"
        "    classes = 3\n"
        "    def __init__(self):\n"
        "        super().__init__(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32, 3))\n"
        "def bad():\n"
        "    m = Net()\n"
        "    m.input_shape = 'x'\n"
        "    return m\n")
    out = tmp_path / "g.json"
    r = subprocess.run([sys.executable, "-m", "poet", "graph", "--model", "described:Net", "--batch", "2", "-o",
                        str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    from poet.graph.training_graph import TrainingGraph

    g = TrainingGraph.from_json(out)
    assert g.input_shape == [1, 4, 4] and g.classes == 3
    r = subprocess.run([sys.executable, "-m", "poet", "graph", "--model", "described:bad"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    one_line_error(r, 2, "described:bad: its input_shape attribute 'x' is not one sample's shape")


def test_argparse_mistakes_are_one_line_too():
    one_line_error(poet("graph", "--batch", "x"), 2, "--batch: 'x' is not a whole number from 1 to 65535",
                   "poet graph --help")
    one_line_error(poet("frobnicate"), 2, "invalid choice: 'frobnicate'")


def _in(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poet", *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)


def test_graph_errors_from_user_models_are_one_line(tmp_path):
    (tmp_path / "bad.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "def raises():\n"
        "    raise ValueError('no such width')\n"
        "class Sorts(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.body = nn.Sequential(nn.Linear(4, 4))\n"
        "        self.fc = nn.Linear(4, 2)\n"
        "    def forward(self, x):\n"
        "        return self.fc(torch.sort(self.body(x), 1).values)\n"
        "def chain():\n"
        "    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))\n")
    one_line_error(_in(tmp_path, "graph", "--model", "bad:raises", "--input-shape", "4"), 2,
                   "building model 'bad:raises' failed: ValueError: no such width")
    one_line_error(_in(tmp_path, "graph", "--model", "bad:Sorts", "--input-shape", "4", "--classes", "2"), 2,
                   "model: sort is not in the runtime's op set; supported: linear")
    one_line_error(_in(tmp_path, "graph", "--model", "bad:chain", "--input-shape", "5", "--classes", "2"), 1,
                   "fails on a batch of shape [16, 5] (float32): RuntimeError")
    one_line_error(_in(tmp_path, "graph", "--model", "bad:chain", "--input-shape", "4", "--classes", "3"), 1,
                   "returns [16, 2], expected logits [16, 3]")
    one_line_error(poet("graph", "--model", "mlp-digits", "--train", "last:9"), 2,
                   "--train last:9: the model has only 4 layers with parameters")
    one_line_error(poet("graph", "--model", "lenet", "--layers", "2"), 2, "--layers and --hidden size the bert")
    one_line_error(poet("graph", "--model", "lenet", "--train", "layers:conv9"), 2,
                   "--train layers:conv9: the model has no module 'conv9' (did you mean conv2, conv1?)")
    one_line_error(poet("graph", "--model", "lenet", "--train", "last:1+layers:conv2@2"), 2,
                   "'conv2@2': NAME@R takes a share 0 < R <= 1 of the conv's input channels")


def test_graph_check_and_train_modes(tmp_path):
    out = tmp_path / "g.json"
    r = poet("graph", "--model", "bert", "--layers", "1", "--hidden", "64", "--batch", "2", "--train", "last:2",
             "--check", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "bert: batch 2, " in r.stdout and "B frozen" in r.stdout
    assert "the graph matches PyTorch's step" in r.stdout
    from poet.graph.training_graph import TrainingGraph

    g = TrainingGraph.from_json(out)
    assert g.train == "last:2" and [n for n, _ in g.params if n not in g.frozen] == [
        "pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias"]


def test_solve_plans_a_graph_file(tmp_path):
    g = tmp_path / "g.json"
    assert poet("graph", "--model", "mlp-digits", "-o", str(g)).returncode == 0
    out = tmp_path / "s.poet"
    r = poet("solve", "--graph", str(g), "--ram", "80k", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "[solve] poet for mlp-digits" in r.stdout and out.stat().st_size > 0
    (tmp_path / "bad.json").write_text("{\"model\": 1}")
    one_line_error(poet("solve", "--graph", str(tmp_path / "bad.json"), "--ram", "80k"), 2,
                   "graph file", "no \"nodes\"", "poet graph -o FILE")
    one_line_error(poet("solve", "--graph", str(tmp_path / "none.json"), "--ram", "80k"), 2,
                   "--graph", "none.json does not exist")


REF_DIR = __import__("pathlib").Path(__file__).resolve().parents[1] / "../shared/benchmarks/poet-reference"


@pytest.mark.parametrize("ram,words", [("0", ["--ram 0", "more than 0"]), ("abc", ["cannot read size", "abc"])])
def test_solve_bad_ram(ram, words):
    one_line_error(poet("solve", "--ram", ram), 2, *words)


def test_solve_deadline_below_compute_only_time():
    one_line_error(poet("solve", "--ram", "200k", "--deadline", "0.9x"), 2, "below the compute-only time")


def test_solve_graph_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [')
    one_line_error(poet("solve", "--ram", "64k", "--graph", str(bad)), 2, "not JSON", "line 1")
    cyc = tmp_path / "cycle.json"
    cyc.write_text('{"nodes": [{"id": 0, "name": "a", "bytes": 4, "deps": [1], "compute_s": 1, "compute_j": 1},'
                   ' {"id": 1, "name": "b", "bytes": 4, "deps": [0], "compute_s": 1, "compute_j": 1}]}')
    one_line_error(poet("solve", "--ram", "64k", "--graph", str(cyc)), 2, "cycle", "a -> b -> a")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    one_line_error(poet("solve", "--ram", "64k", "--graph", str(empty)), 2, "no \"nodes\"")
    one_line_error(poet("solve", "--ram", "64k", "--graph", str(tmp_path / "none.json")), 2, "does not exist")


def test_solve_strategy_on_a_reference_graph():
    path = REF_DIR / "linear.m0.json"
    if not path.exists():
        pytest.skip("reference instances absent")
    r = poet("solve", "--graph", str(path), "--ram", "3300", "--deadline", "1.0x", "--semantics", "reference",
             "--time-limit", "3600")
    assert r.returncode == 0 and "status optimal" in r.stdout and "0.105044 J" in r.stdout, r.stdout + r.stderr
    r = poet("solve", "--graph", str(path), "--ram", "3300", "--deadline", "1.0x", "--semantics", "reference",
             "--strategy", "dtr")
    one_line_error(r, 1, "dtr found no plan")
    one_line_error(poet("solve", "--graph", str(path), "--ram", "3300"), 2, "parameters and gradients",
                   "--semantics reference")
    one_line_error(poet("solve", "--graph", str(path), "--ram", "3300", "--semantics", "reference",
                        "--deadline", "1.5x", "-o", "x.poet"), 2, "drop -o")


def test_solve_baseline_strategy_on_a_model():
    r = poet("solve", "--model", "mlp-digits", "--ram", "100k", "--strategy", "chen-greedy", "-o", "/dev/null")
    assert r.returncode == 0, r.stderr
    assert "plan: chen-greedy via heuristic, status feasible" in r.stdout


def test_sweep_writes_csv_and_figures(tmp_path):
    import csv
    r = poet("sweep", "--model", "mlp-digits", "--ram", "60k:100k:3", "--deadline", "1.2x,3x",
             "--strategies", "poet,remat-only,page-only,capuchin,dtr,checkpoint-all", "--jobs", "2",
             "--time-limit", "3600",
             "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert len(rows) == 3 * 2 * 6
    assert {x["strategy"] for x in rows} == {"poet", "remat-only", "page-only", "capuchin", "dtr", "checkpoint-all"}
    for name in ("fig3_energy_vs_ram.png", "fig4_energy_vs_deadline.png", "fig5_overhead_vs_capuchin.png"):
        assert (tmp_path / name).stat().st_size > 1000
    by = {(x["strategy"], x["ram_bytes"], x["deadline_x"]): x for x in rows}
    assert any(x["status"] == "feasible" for x in rows), "no baseline fits anywhere: the comparison tests nothing"
    for (_s, ram, d), x in by.items():  # poet is at least as good as every strategy wherever they fit
        p = by[("poet", ram, d)]
        if x["status"] in ("optimal", "feasible"):
            assert p["status"] == "optimal" and float(p["energy_j"]) <= float(x["energy_j"]) * (1 + 1e-9)


@pytest.mark.parametrize("args,words", [
    (["--ram", "64k:32k:4"], ["LOW <= HIGH"]),
    (["--ram", "32k:64k"], ["LOW:HIGH:COUNT"]),
    (["--ram", "64k", "--strategies", "poet,magic"], ["unknown magic"]),
])
def test_sweep_bad_input(args, words):
    one_line_error(poet("sweep", *args), 2, *words)


# ---------------------------------------------------------------- poet profile: the port, one line each

@pytest.fixture
def pty_board():
    """A pty whose far end answers HELLO as a board speaking protocol 5 (a newer firmware than this poet)."""
    import os
    import select
    import struct
    import threading

    from poet.device.framing import FrameReader, encode_frame
    from poet.device.protocol import HELLO, HELLO_REPLY

    master, slave = os.openpty()
    stop = threading.Event()

    def board() -> None:
        reader = FrameReader()
        while not stop.is_set():
            if not select.select([master], [], [], 0.05)[0]:
                continue
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            for msg_type, seq, _ in reader.feed(data):
                if msg_type == HELLO:
                    hello = struct.pack("<HBBIIII", 5, 3, 0, 1000, 262144, 200000, 1 << 20)
                    hello += b"nrf52840".ljust(16, b"\0") + bytes(5)
                    os.write(master, encode_frame(HELLO_REPLY, seq, hello))

    t = threading.Thread(target=board, daemon=True)
    t.start()
    yield os.ttyname(slave)
    stop.set()
    t.join(timeout=2)
    os.close(master)
    os.close(slave)


def test_profile_port_that_does_not_exist():
    one_line_error(poet("profile", "--port", "/dev/ttyNOSUCH0", "--model", "mlp-digits"), 2,
                   "no serial port /dev/ttyNOSUCH0", "poet boards")


def test_profile_port_another_program_holds(pty_board):
    import serial

    holder = serial.Serial()
    holder.port, holder.exclusive = pty_board, True
    holder.open()
    try:
        one_line_error(poet("profile", "--port", pty_board, "--model", "mlp-digits"), 1, f"{pty_board} is busy")
    finally:
        holder.close()


def test_profile_board_with_another_protocol(pty_board):
    one_line_error(poet("profile", "--port", pty_board, "--model", "mlp-digits"), 1,
                   f"the nrf52840 on {pty_board} speaks protocol 5, this poet speaks 4", "update poet")


def test_graph_lists_the_layers_train_modes_count():
    r = poet("graph", "--model", "lenet", "--train", "last:1+bias:3", "--list-layers")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("5 layers with parameters")
    assert lines[2].split() == ["5", "conv1:", "weight", "6x1x5x5", "frozen,", "bias", "6", "frozen"]
    assert lines[4].split()[:2] == ["3", "fc1:"] and lines[4].endswith("bias 120 trained")
    assert lines[6].split() == ["1", "fc3:", "weight", "10x84", "trained,", "bias", "10", "trained"]


def test_a_reader_that_closes_the_pipe_ends_poet_quietly():
    """`poet ... | head`: the reader gone before poet writes (here it never reads), poet stops as Unix tools do,
    status 141 (128 + SIGPIPE) and nothing on stderr, not an error line about the pipe."""
    proc = subprocess.Popen([sys.executable, "-m", "poet", "graph", "--model", "lenet", "--list-layers"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and err == b"", err
