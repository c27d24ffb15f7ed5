"""Profile files: every one poet reads is checked and a bad one refused in one line; every write
merges with the file on disk under a lock, so two `poet profile` runs into one file keep both
models' ops; a `poet profile` killed at any point leaves a usable file, the same command finishes
it, and no emulator of the killed run is left running."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from conftest import needs_tools
from poet.boards import load_board
from poet.cli import main
from poet.device.firmware import source_version
from poet.device.link import LinkClosed
from poet.device.profile import (
    ProfileInterrupted,
    existing_profile,
    lock_path,
    measured_nodes,
    merge_profiles,
    profile_graphs,
    write_profile,
)
from poet.errors import UsageError
from poet.graph.reference import weights_of
from poet.graph.tracer import trace
from poet.models.zoo import get_model
from poet.plan.cost.costs import load_profile, op_key

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "profiles" / "nrf52840.yaml"
needs_m4 = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")


def shipped() -> dict[str, Any]:
    return yaml.safe_load(SHIPPED.read_text())


def _edited(edit: Callable[[dict[str, Any]], None]) -> str:
    p = shipped()
    edit(p)
    return yaml.safe_dump(p, sort_keys=False)


def _first_op(p: dict[str, Any]) -> dict[str, Any]:
    return p["ops"][next(iter(p["ops"]))]


def _set_op(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(p: dict[str, Any]) -> None:
        _first_op(p)[field] = value
    return edit


def _measured_paging(p: dict[str, Any]) -> None:
    p["paging"] = {"used": "measured", "read_bytes_per_s": 0.0, "write_bytes_per_s": 1e6, "read_latency_s": 1e-4,
                   "write_latency_s": 1e-4, "read_w": 0.1, "write_w": 0.1}


# name -> the file's text (bytes for a binary file); each must be refused naming the file
BAD: dict[str, str | bytes] = {
    "not-yaml": "board: nrf52840\nops: [1, 2\n",
    "binary": b"\x00\x01\xfe\xff profile",
    "empty": "",
    "list": "- board: nrf52840\n- ops: {}\n",
    "scalar": "just some words\n",
    "nan": ".nan\n",
    "bad-explicit-int": "runtime_static_bytes: !!int many\n",
    "python-tag": "!!python/object/apply:os.system ['touch PWNED']\n",
    "python-tag-inside": _edited(lambda p: p.update(board="X")).replace(
        "board: X", "board: !!python/object/apply:os.system ['touch PWNED']"),
    "no-ops": _edited(lambda p: p.update(ops={})),
    "no-ops-section": _edited(lambda p: p.pop("ops")),
    "ops-a-list": _edited(lambda p: p.update(ops=[1, 2])),
    "op-not-a-mapping": _edited(lambda p: p["ops"].update({next(iter(p["ops"])): 3})),
    "negative-time": _edited(_set_op("time_s", -1e-3)),
    "nan-time": _edited(_set_op("time_s", float("nan"))),
    "inf-energy": _edited(_set_op("energy_j", float("inf"))),
    "text-time": _edited(_set_op("time_s", "fast")),
    "bool-energy": _edited(_set_op("energy_j", True)),
    "missing-time": _edited(lambda p: _first_op(p).pop("time_s")),
    "zero-work": _edited(_set_op("work", 0)),
    "huge-work": _edited(_set_op("work", 10**400)),
    "negative-static-bytes": _edited(lambda p: p.update(runtime_static_bytes=-1)),
    "fractional-static-bytes": _edited(lambda p: p.update(runtime_static_bytes=1.5)),
    "no-static-bytes": _edited(lambda p: p.pop("runtime_static_bytes")),
    "zero-paging-throughput": _edited(_measured_paging),
    "nan-cast-fit": _edited(lambda p: p["casts"]["fp32->fp16"].update(cycles_per_elem=float("nan"))),
    "paging-a-list": _edited(lambda p: p.update(paging=[1])),
}


def _write_bad(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"bad-{name}.yaml"
    content = BAD[name]
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _one_line_naming(err: str, path: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("poet: ") and path.name in lines[0] and "internal error" not in lines[0], err
    return lines[0]


@pytest.mark.parametrize("name", list(BAD))
def test_solve_refuses_a_bad_profile_in_one_line(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # a tag that ran would leave PWNED here
    bad = _write_bad(tmp_path, name)
    assert main(["solve", "--model", "mlp-digits", "--ram", "200k", "--profile", str(bad)]) == 2
    line = _one_line_naming(capsys.readouterr().err, bad)
    assert "poet profile --board nrf52840" in line and "--profile" in line  # what to do
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("name", ["not-yaml", "list", "python-tag", "negative-time", "zero-paging-throughput"])
def test_profile_refuses_to_resume_or_overwrite_a_bad_file(name: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`poet profile -o FILE` where FILE is no profile: refused before anything runs, FILE untouched."""
    monkeypatch.setenv("POET_WORKSPACE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    bad = _write_bad(tmp_path, name)
    before = bad.read_bytes()
    assert main(["profile", "--models", "mlp-digits", "--no-paging", "-o", str(bad)]) == 2
    _one_line_naming(capsys.readouterr().err, bad)
    assert bad.read_bytes() == before and not (tmp_path / "PWNED").exists()


def test_existing_profile_says_what_to_do_for_poet_profile(tmp_path: Path) -> None:
    bad = _write_bad(tmp_path, "negative-time")
    with pytest.raises(UsageError) as e:
        existing_profile(bad)
    msg = str(e.value)
    assert "\n" not in msg and bad.name in msg and "time_s" in msg and "-o" in msg
    assert existing_profile(tmp_path / "none-yet.yaml") is None
    # poet profile's own file after a first graph was interrupted may have no ops: resumable, not refused
    empty = tmp_path / "empty-ops.yaml"
    empty.write_text(_edited(lambda p: p.update(ops={}, models={})))
    assert existing_profile(empty) is not None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_output_is_refused_before_measuring(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="cannot write the profile"):
            existing_profile(ro / "p.yaml")
    finally:
        ro.chmod(0o700)


def test_a_missing_profile_given_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(UsageError, match="does not exist") as e:
        load_profile("nrf52840", missing)
    assert missing.name in str(e.value) and "\n" not in str(e.value)
    try:  # the command line may refuse it while parsing (exit 2 by SystemExit) or when it is read
        status = main(["solve", "--model", "mlp-digits", "--ram", "200k", "--profile", str(missing)])
    except SystemExit as exit_:
        status = exit_.code  # type: ignore[assignment]
    assert status == 2
    assert "does not exist" in _one_line_naming(capsys.readouterr().err, missing)


def test_another_firmwares_profile_is_used_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(_edited(lambda p: p.update(firmware="0.9")))
    notes: list[str] = []
    prof = load_profile("nrf52840", old, note=notes.append)
    assert prof["ops"] == shipped()["ops"]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "firmware 0.9" in notes[0] and source_version() in notes[0] and "poet profile --board nrf52840" in notes[0]
    same: list[str] = []
    load_profile("nrf52840", SHIPPED, note=same.append)
    assert SHIPPED.exists() and yaml.safe_load(SHIPPED.read_text())["firmware"] == source_version() and same == []
    # solve still plans with it (the shipped profiles of some boards lag the firmware)
    assert main(["solve", "--model", "mlp-digits", "--ram", "200k", "--profile", str(old)]) == 0
    assert not capsys.readouterr().err


# ---------------------------------------------------------------- merging under the lock

def _made(fw: str = "1.2", source: str = "emulated") -> dict[str, Any]:
    return {"board": "nrf52840", "firmware": fw, "date": "2024-01-01", "source": source, "tick_hz": 1_000_000_000,
            "runtime_static_bytes": 28672, "compute": {"used": "emulated", "why": "test"}, "settings": {},
            "models": {}, "paging": {"used": "datasheet", "reason": "not measured yet"}, "ops": {}}


def _op(t: float, samples: int = 3) -> dict[str, Any]:
    return {"work": 100, "samples": samples, "time_s": t, "energy_j": t / 10, "provenance": "emulated"}


def _finish(p: dict[str, Any], model: str, **ops: dict[str, Any]) -> None:
    p["ops"].update(ops)
    p["models"][f"{model} batch 16"] = {"done": True, "ops": len(ops)}


def test_interleaved_writers_keep_each_others_work(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    a, b = _made(), _made()  # two runs that both started before the file existed
    _finish(a, "mlp", **{"linear(a)": _op(1e-3)})
    write_profile(a, path)
    _finish(b, "cnn", **{"conv2d(b)": _op(2e-3)})
    written = write_profile(b, path)
    assert written is b and set(b["ops"]) == {"linear(a)", "conv2d(b)"}  # what b reports is what is on disk
    _finish(a, "tiny", **{"relu(c)": _op(3e-4)})  # a, still holding only its own, writes again
    write_profile(a, path)
    on_disk = load_profile("nrf52840", path)
    assert set(on_disk["ops"]) == {"linear(a)", "conv2d(b)", "relu(c)"}
    assert set(on_disk["models"]) == {"mlp batch 16", "cnn batch 16", "tiny batch 16"}
    assert list(on_disk["ops"]) == sorted(on_disk["ops"]) and on_disk == a
    assert lock_path(path).exists() and not path.with_name(path.name + ".tmp").exists()


def test_merge_rules() -> None:
    ours, disk = _made(), _made()
    ours["ops"] = {"x": _op(1.0, samples=3), "y": _op(1.0, samples=3), "mine": _op(5.0)}
    disk["ops"] = {"x": _op(2.0, samples=30), "y": _op(2.0, samples=3), "theirs": _op(6.0)}
    disk["paging"] = {"used": "datasheet", "fit": {"done": True}}
    disk["casts"] = {"done": True}
    disk["settings"] = {"min_repeats": 9}
    ours["settings"] = {"min_repeats": 1}
    m = merge_profiles(ours, disk)
    assert m["ops"]["x"]["time_s"] == 2.0  # more samples: the better-settled median
    assert m["ops"]["y"]["time_s"] == 1.0  # a tie: ours, the later measurement
    assert {"mine", "theirs"} <= set(m["ops"])
    assert m["paging"] == disk["paging"] and m["casts"] == disk["casts"]  # finished sections we lack
    assert m["settings"] == {"min_repeats": 1}
    ours["paging"] = {"used": "datasheet", "fit": {"done": True, "mine": 1}}
    assert merge_profiles(ours, disk)["paging"]["fit"]["mine"] == 1
    # another firmware's (or source's, or an older poet's) file is replaced, not mixed in
    for other in (_made(fw="1.1"), _made(source="measured"), {k: v for k, v in disk.items() if k != "models"}):
        other["ops"] = {"theirs": _op(6.0)}
        assert set(merge_profiles(ours, other)["ops"]) == {"mine", "x", "y"}


def test_a_file_that_is_no_profile_appearing_mid_run_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("- not\n- a profile\n")
    a = _made()
    _finish(a, "mlp", **{"linear(a)": _op(1e-3)})
    write_profile(a, path)
    assert set(load_profile("nrf52840", path)["ops"]) == {"linear(a)"}


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from poet.device.profile import write_profile
    path, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    prof = {"board": "nrf52840", "firmware": "1.2", "date": "d", "source": "emulated", "tick_hz": 1,
            "runtime_static_bytes": 0, "compute": {}, "settings": {}, "models": {}, "paging": {}, "ops": {}}
    for k in range(n):
        prof["ops"][f"{me}({k})"] = {"time_s": 1e-3, "energy_j": 1e-4, "samples": 1}
        write_profile(prof, path)
""")


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Two processes rewriting one file as fast as they can: without the lock and the merge under it,
    one's read-merge-write overwrites the other's ops."""
    path, n = tmp_path / "p.yaml", 40
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, str(n)], stderr=subprocess.PIPE)
             for who in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    ops = set(yaml.safe_load(path.read_text())["ops"])
    assert ops == {f"{who}({k})" for who in ("a", "b") for k in range(n)}


def test_an_interrupted_first_graph_keeps_another_firmwares_profile(tmp_path: Path) -> None:
    """Nothing measured yet: the file there (firmware 1.1's, still usable) is not replaced by an empty one."""
    path = tmp_path / "p.yaml"
    path.write_text(_edited(lambda p: p.update(firmware="1.1")))
    before = path.read_bytes()

    class Gone:
        board = load_board("nrf52840")
        hello = SimpleNamespace(fw_version="1.2", tick_hz=1_000_000_000, pool_bytes=200_000)
        provenance, emulated, runtime_static = "emulated", True, 28672

        def load_model(self, *_: Any) -> None:
            raise LinkClosed("the board went away")

    model, spec = get_model("mlp-digits")
    g = trace(model, "mlp-digits", spec.input_shape, spec.classes, 16)
    with pytest.raises(ProfileInterrupted, match="nothing saved"):
        profile_graphs(Gone(), [(g, weights_of(model))], progress=lambda _m: None, save=path,
                       existing=yaml.safe_load(before))
    assert path.read_bytes() == before


# ---------------------------------------------------------------- real `poet profile` runs (QEMU)

PROFILE = [sys.executable, "-m", "poet", "profile", "--board", "nrf52840", "--emulate", "--no-paging",
           "--repeats", "1", "--max-repeats", "1"]


def _env(workspace: Path, tmpdir: Path) -> dict[str, str]:
    tmpdir.mkdir(parents=True, exist_ok=True)
    # TMPDIR: the run's QEMU works (its cwd) in a temporary folder under it, which tells its QEMU apart
    return {**os.environ, "POET_WORKSPACE": str(workspace), "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}


def _op_keys(*models: str) -> set[str]:
    keys = set()
    for name in models:
        model, spec = get_model(name)
        g = trace(model, name, spec.input_shape, spec.classes, 16)
        keys |= {op_key(n, g) for n in measured_nodes(g)}
    return keys


def _wrote_count(out: str) -> int:
    line = next(ln for ln in out.splitlines() if ln.startswith("wrote "))
    return int(line.split(": ", 1)[1].split(" op shapes", 1)[0])


@needs_m4
def test_two_profiles_into_one_file_keep_both(tmp_path: Path) -> None:
    out = tmp_path / "X.yaml"
    procs = [subprocess.Popen([*PROFILE, "--models", m, "-o", str(out)], env=_env(tmp_path, tmp_path / f"tmp-{m}"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in ("mlp-digits", "cnn-digits")]
    results = [p.communicate(timeout=600) for p in procs]
    for p, (o, e) in zip(procs, results, strict=True):
        assert p.returncode == 0, o + e
    prof = load_profile("nrf52840", out)
    assert set(prof["models"]) == {"mlp-digits batch 16", "cnn-digits batch 16"}
    assert _op_keys("mlp-digits", "cnn-digits") <= set(prof["ops"])
    # each `wrote` line counts what was on disk when it wrote; the later of the two, everything
    counts = [_wrote_count(o) for o, _ in results]
    assert max(counts) == len(prof["ops"]) and min(counts) <= len(prof["ops"])


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _qemus_under(tmpdir: Path) -> list[int]:
    """Live qemu-system processes working in a folder under tmpdir (the killed run's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if "qemu-system" in Path(cmd).name and Path(cwd).is_relative_to(tmpdir) and _state(int(entry.name)) != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def reap_qemus() -> Iterator[list[Path]]:
    """Folders whose QEMU the test started: whatever is left there is stopped at the end, pass or fail."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        for pid in _qemus_under(d):
            os.kill(pid, signal.SIGKILL)


def _gone_within(tmpdir: Path, limit_s: float = 15.0) -> list[int]:
    """The run's QEMUs still alive after up to limit_s (a bound to wait, not a timing assert)."""
    end = time.monotonic() + limit_s
    while (left := _qemus_under(tmpdir)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


@needs_m4
@pytest.mark.slow
def test_a_killed_profile_leaves_a_file_the_same_command_finishes(tmp_path: Path,
                                                                  reap_qemus: list[Path]) -> None:
    seed = int(os.environ.get("POET_TEST_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    args = ["--models", "mlp-digits", "cnn-digits"]

    ref = tmp_path / "ref.yaml"
    done = subprocess.run([*PROFILE, *args, "-o", str(ref)], env=_env(tmp_path, tmp_path / "tmp-ref"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    want = set(load_profile("nrf52840", ref)["ops"])
    assert _op_keys("mlp-digits", "cnn-digits") <= want

    out = tmp_path / "X.yaml"
    leaked: list[str] = []
    for k in range(rng.choice((2, 3))):
        tmpdir = tmp_path / f"tmp-kill-{k}"
        reap_qemus.append(tmpdir)
        p = subprocess.Popen([*PROFILE, *args, "-o", str(out)], env=_env(tmp_path, tmpdir),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert p.stdout is not None
        lines = rng.randint(2, 7)  # progress lines to let through, then a moment more, then SIGKILL
        seen = []
        for line in p.stdout:
            seen.append(line.rstrip())
            if len(seen) >= lines:
                break
        time.sleep(rng.uniform(0.0, 1.0))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        p.stdout.close()
        why = f"seed {seed}, kill {k} after {seen}"
        left = _gone_within(tmpdir)
        if left:  # stopped now so the next run has the cores; reported once the rest is checked too
            leaked.append(f"qemu {left} of kill {k} (after {seen[-1]!r})")
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        if out.exists():  # what a killed run leaves is a usable profile (or nothing yet), never half of one
            assert existing_profile(out) is not None, why

    again = subprocess.run([*PROFILE, *args, "-o", str(out)], env=_env(tmp_path, tmp_path / "tmp-again"),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, f"seed {seed}: {again.stdout}{again.stderr}"
    final = load_profile("nrf52840", out)
    assert set(final["ops"]) == want, f"seed {seed}"
    assert set(final["models"]) == {"mlp-digits batch 16", "cnn-digits batch 16"}
    assert not leaked, f"seed {seed}: a killed poet left its emulator running: {'; '.join(leaked)}"
