"""A run folder from elsewhere never makes poet write outside it (issue 45).

A real run on the emulated nRF52840, stopped after 2 of its 4 steps; copies of it get links planted:
- at every name poet reads or writes there (its own files, QEMU's log and SD card image, the account's
  plots, emissions and meter recording), each to a file outside holding a valid copy of the run's file,
  so a resume that followed it would even succeed: the resume is refused in one line, exit 2, and no
  file outside changes;
- at the temporaries poet once wrote by fixed names (state.json.tmp, checkpoint.tmp.npz, ...), which it
  no longer opens: the resume runs to its end, and no file outside changes.
A full disk mid-run names the file and leaves neither a temporary nor a changed checkpoint behind, and
a damaged plan cache is solved again, never shipped to the board.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, needs_tools
from poet.cli import main
from poet.plan.lowering.schedule import Schedule
from poet.run.folder import IN_PLACE, RUN_ENTRIES

pytestmark = needs_tools("qemu-system-arm", "arm-none-eabi-gcc")

RUN = ["train", "--model", "mlp-digits", "--ram", "200k", "--epochs", "1", "--data-limit", "64"]  # 4 steps
# names poet wrote its temporaries under before poet.files.atomic (a fresh O_EXCL name each time)
OLD_TEMPORARIES = ("state.json.tmp", "checkpoint.tmp.npz", "trace.json.tmp", "weights.pt.tmp", "report.txt.tmp",
                   "plan.json.tmp", "config.json.tmp", "schedule.poet.tmp", "emissions.csv.tmp", "meter.csv.tmp",
                   "qemu.log.tmp", "poet-swap.bin.tmp", *(f"{p}.tmp" for p in ("energy.edd.png", "energy.power.png")))


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(workspace, run): RUN stopped by Ctrl-C after 2 of its 4 steps. Tests change copies of it only."""
    import poet.cli as cli

    ws = tmp_path_factory.mktemp("workspace")
    (ws / "profiles").mkdir()
    (ws / "profiles" / "nrf52840.yaml").write_bytes((REPO / "profiles" / "nrf52840.yaml").read_bytes())
    real_say = cli.say

    def say_and_stop(msg: str) -> None:
        real_say(msg)
        if "epoch 1/1 step   2/4" in msg:
            raise KeyboardInterrupt

    run = ws / "runs" / "stopped"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("POET_WORKSPACE", str(ws))
        mp.setattr(cli, "say", say_and_stop)
        assert main([*RUN, "--run-dir", str(run)]) == 130
    assert json.loads((run / "state.json").read_text())["global_step"] == 2
    return ws, run


def _copy(run: Path, name: str) -> Path:
    return Path(shutil.copytree(run, run.parent / name, symlinks=True))


def _outside(ws: Path) -> Path:
    d = ws / "elsewhere"
    d.mkdir(exist_ok=True)
    return d


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_link_at_any_name_a_run_uses_is_refused(stopped: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ws, run = stopped
    monkeypatch.setenv("POET_WORKSPACE", str(ws))
    elsewhere = _outside(ws) / "links"
    elsewhere.mkdir()
    # the run's own file where it has one (a resume that followed the link would read it and go on), else
    # a file poet would overwrite: a pid, a QEMU log, an SD card image, a report
    for name in RUN_ENTRIES:
        real = run / name
        (elsewhere / name).write_bytes(real.read_bytes() if real.is_file() else b"the user's own " + name.encode())
    before = _contents(elsewhere)
    assert set(p.name for p in run.iterdir()) <= set(RUN_ENTRIES)  # every file a run has written is checked
    for name in RUN_ENTRIES:
        planted = _copy(run, f"link-{name}")
        (planted / name).unlink(missing_ok=True)
        (planted / name).symlink_to(elsewhere / name)
        assert main(["train", "--resume", str(planted)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name} is a symbolic link" in err[0], (name, err)
        assert _contents(elsewhere) == before, name
        assert (planted / name).is_symlink()
    for name in IN_PLACE:  # written in place: a hard link would change the other name
        planted = _copy(run, f"hard-{name}")
        (planted / name).unlink(missing_ok=True)
        os.link(elsewhere / name, planted / name)
        assert main(["train", "--resume", str(planted)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{name} has 2 names (a hard link)" in err[0], (name, err)
        assert _contents(elsewhere) == before, name


def test_links_at_old_temporaries_are_never_followed_and_a_bad_cached_plan_is_solved_again(
        stopped: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, run = stopped
    monkeypatch.setenv("POET_WORKSPACE", str(ws))
    elsewhere = _outside(ws) / "temporaries"
    elsewhere.mkdir()
    resumed = _copy(run, "temporaries")
    for name in OLD_TEMPORARIES:
        (elsewhere / name).write_text(f"the user's {name}\n")
        (resumed / name).symlink_to(elsewhere / name)
    before = _contents(elsewhere)
    # the plan cache's entry says another peak than its schedule has: shipped, it would fail the first step
    (cache,) = (ws / "runs" / "plans").iterdir()
    plan = json.loads((cache / "plan.json").read_text())
    plan["peak_bytes"] += 4
    (cache / "plan.json").write_text(json.dumps(plan))

    assert main(["train", "--resume", str(resumed)]) == 0
    out = capsys.readouterr().out
    assert "does not verify" in out and "reusing the plan" not in out, out
    assert _contents(elsewhere) == before
    assert all((resumed / name).is_symlink() for name in OLD_TEMPORARIES)
    state = json.loads((resumed / "state.json").read_text())
    assert state["global_step"] == 4 and state["complete"]
    left = {p.name for p in resumed.iterdir()} - set(OLD_TEMPORARIES)
    assert left <= set(RUN_ENTRIES), left - set(RUN_ENTRIES)  # every file a run writes is checked, no temporary left
    assert json.loads((cache / "plan.json").read_text())["peak_bytes"] == plan["peak_bytes"] - 4  # solved again


def test_a_full_disk_mid_run_names_the_file_and_leaves_the_run_as_it_was(
        stopped: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    ws, run = stopped
    monkeypatch.setenv("POET_WORKSPACE", str(ws))
    resumed = _copy(run, "full-disk")
    before = _contents(resumed)
    real_savez = np.savez

    def savez_on_a_full_disk(f, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", savez_on_a_full_disk)
    assert main(["train", "--resume", str(resumed)]) == 1
    monkeypatch.setattr(np, "savez", real_savez)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.npz" in err[0] and "no space left" in err[0], err
    after = _contents(resumed)
    for name in ("checkpoint.npz", "state.json", "config.json", "plan.json", "schedule.poet"):
        assert after[name] == before[name], name
    assert not [n for n in after if n.endswith(".tmp")], sorted(after)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


def _set(**values: object):  # type: ignore[no-untyped-def]
    def change(cache: Path) -> None:
        plan = json.loads((cache / "plan.json").read_text())
        plan.update(values)
        (cache / "plan.json").write_text(json.dumps(plan))
    return change


def _schedule(change):  # type: ignore[no-untyped-def]
    def apply(cache: Path) -> None:
        p = cache / "schedule.poet"
        data = p.read_bytes()
        p.unlink()
        change(p, data)
    return apply


FOREIGN = Schedule(n_nodes=3, model_hash=0x1234, arena_bytes=64).encode()  # whole, of another model
# (id, damage to a copy of a verified cache entry, words of the note)
DAMAGES = [
    ("crc", _schedule(lambda p, d: p.write_bytes(_flip(d, 30))), "CRC-32"),
    ("foreign", _schedule(lambda p, d: p.write_bytes(FOREIGN)), "another model"),
    ("cut-short", _schedule(lambda p, d: p.write_bytes(d[:20])), "shorter than its header"),
    ("schedule-missing", _schedule(lambda p, d: None), "does not exist"),
    ("schedule-a-link", _schedule(lambda p, d: p.symlink_to("/dev/zero")), "symbolic link"),
    ("peak", lambda c: _set(peak_bytes=json.loads((c / "plan.json").read_text())["peak_bytes"] + 4)(c), "peaks at"),
    ("energy-nan", lambda c: (c / "plan.json").write_text((c / "plan.json").read_text().replace(
        '"energy_j": ', '"energy_j": NaN, "was": ')), "NaN"),
    ("energy-text", _set(energy_j="a lot"), "energy_j"),
    ("time-negative", _set(time_s=-1.0), "time_s"),
    ("key", _set(key="0123456789abcdef"), "another configuration"),
    ("streamed-foreign", _set(streamed=["no/such/weight"]), "this model does not have"),
    ("precision-garbage", _set(precision={"stored": [{"id": 10**6, "dtype": "fp16"}]}), "this model does not have"),
    ("plan-not-json", lambda c: (c / "plan.json").write_text("{cut"), "not valid JSON"),
]


@pytest.mark.parametrize("damage,words", [d[1:] for d in DAMAGES], ids=[d[0] for d in DAMAGES])
def test_a_cached_plan_that_does_not_verify_is_never_sent(stopped: tuple[Path, Path], tmp_path: Path,
                                                         damage, words: str) -> None:  # type: ignore[no-untyped-def]
    from poet.models.zoo import ModelChoice
    from poet.run.inputs import model_graph as _graph
    from poet.run.plans import cached_plan as _cached_plan
    from poet.settings import RunConfig

    ws, _ = stopped
    (entry,) = (ws / "runs" / "plans").iterdir()
    cache = Path(shutil.copytree(entry, tmp_path / entry.name))
    _, g = _graph(RunConfig(model=ModelChoice("mlp-digits")))
    said: list[str] = []
    got = _cached_plan(cache, g, entry.name, said.append)
    assert got is not None and not said  # the entry as the run left it verifies
    assert got[1] == (cache / "schedule.poet").read_bytes()
    damage(cache)
    assert _cached_plan(cache, g, entry.name, said.append) is None
    assert len(said) == 1 and "does not verify" in said[0] and words in said[0], said


def test_qemu_never_writes_through_a_link_in_its_folder(tmp_path: Path) -> None:
    """The emulator's own files in a run folder (QEMU's log; the SD card image its firmware opens by name):
    a link there is refused before QEMU starts."""
    from poet.device.emulator import LOG_FILE, SWAP_FILE, start_qemu
    from poet.errors import UsageError

    elf = tmp_path / "never-run.elf"
    elf.write_bytes(b"\x7fELF")
    target = tmp_path / "target"
    for name in (LOG_FILE, SWAP_FILE):
        target.write_text("the user's\n")
        wd = tmp_path / name
        wd.mkdir()
        (wd / name).symlink_to(target)
        with pytest.raises(UsageError, match="symbolic link"), start_qemu(elf, wd):
            pass
        assert target.read_text() == "the user's\n"


def test_a_run_s_files_are_readable_as_a_plain_write_leaves_them(tmp_path: Path) -> None:
    """poet.files.atomic's temporary is made 0600; the file it becomes has the permissions open() gives."""
    from poet.files import write_atomic

    mask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new", b"x")
        assert (tmp_path / "new").stat().st_mode & 0o777 == 0o640
        (tmp_path / "old").write_bytes(b"")
        (tmp_path / "old").chmod(0o604)
        write_atomic(tmp_path / "old", b"x")
        assert (tmp_path / "old").stat().st_mode & 0o777 == 0o604
    finally:
        os.umask(mask)
