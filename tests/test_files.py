"""poet/files.py: what a hostile file can make of a read or a write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from poet.errors import PoetError, UsageError
from poet.files import atomic, load_json, load_yaml, open_in_folder, read_bytes, read_text, write_atomic

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def test_a_yaml_alias_bomb_is_refused_before_it_expands() -> None:
    with pytest.raises(UsageError, match="alias|anchor"):
        load_yaml(BOMB, "profile p.yaml")
    with pytest.raises(UsageError, match="alias"):
        load_yaml("a: 1\nb: *x\n", "p")  # an alias without its anchor: still one line
    assert load_yaml("board: nrf52840\nops: [1, 2]\n", "p") == {"board": "nrf52840", "ops": [1, 2]}


def test_yaml_that_is_not_yaml_is_one_line() -> None:
    with pytest.raises(UsageError, match="line 2") as e:
        load_yaml("a: [1\nb: }\n", "p.yaml")
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="nested"):
        load_yaml("[" * 100_000, "p.yaml")


def test_json_takes_no_nan_infinity_or_bottomless_nesting() -> None:
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}', "[" * 1_000_000, '{"a": ' + "9" * 5000 + "}"):
        with pytest.raises(UsageError) as e:
            load_json(text, "graph g.json")
        assert str(e.value).startswith("graph g.json:") and "\n" not in str(e.value)
    assert load_json('{"a": [1, 2.5]}', "g") == {"a": [1, 2.5]}


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="character device"):
        read_bytes("/dev/zero", "--graph")
    (tmp_path / "link").symlink_to("/dev/urandom")
    with pytest.raises(UsageError, match="character device"):
        read_bytes(tmp_path / "link", "--graph")
    with pytest.raises(UsageError, match="a folder"):
        read_bytes(tmp_path, "--graph")
    with pytest.raises(UsageError, match="does not exist"):
        read_bytes(tmp_path / "none", "--graph")
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    with pytest.raises(UsageError, match="a link to .*does not exist"):
        read_bytes(tmp_path / "dangling", "--graph")
    (tmp_path / "big").write_bytes(b"x" * 2000)
    with pytest.raises(UsageError, match="more than"):
        read_bytes(tmp_path / "big", "f", limit=1000)
    (tmp_path / "f").write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not UTF-8"):
        read_text(tmp_path / "f", "f")


def test_a_link_is_refused_where_links_are_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("{}")
    (tmp_path / "state.json").symlink_to(tmp_path / "real")
    assert read_bytes(tmp_path / "state.json") == b"{}"
    with pytest.raises(UsageError, match="symbolic link"):
        read_bytes(tmp_path / "state.json", follow=False)


def test_a_pipe_is_read_once_where_pipes_are_taken(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="pipe"):  # no writer: refused at once, not a hang
        read_bytes(fifo, "--graph")
    r, w = os.pipe()
    os.write(w, b"hello")
    os.close(w)
    assert read_bytes(f"/proc/self/fd/{r}", "--graph", pipes=True) == b"hello"
    os.close(r)


def test_writes_replace_a_planted_link_and_never_follow_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.json").symlink_to(outside)
    write_atomic(run / "state.json", "new")
    assert outside.read_text() == "precious"
    assert not (run / "state.json").is_symlink() and (run / "state.json").read_text() == "new"
    assert sorted(p.name for p in run.iterdir()) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text("old")
    with pytest.raises(RuntimeError), atomic(tmp_path / "t.json") as f:
        f.write(b"half")
        raise RuntimeError("stopped")
    assert (tmp_path / "t.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_disk_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import poet.files

    real_fsync = os.fsync

    def full(fd: int) -> None:  # the disk fills as the data is flushed
        real_fsync(fd)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(poet.files.os, "fsync", full)
    with pytest.raises(PoetError, match=r"cannot write .*trace.json: no space left"):
        write_atomic(tmp_path / "trace.json", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_files_kept_open_in_a_folder_are_its_own(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("precious")
    (tmp_path / "run.lock").symlink_to(outside)
    with pytest.raises(UsageError, match="symbolic link"):
        open_in_folder(tmp_path / "run.lock", "the run's lock")
    os.link(outside, tmp_path / "qemu.log")
    with pytest.raises(UsageError, match="hard link"):
        open_in_folder(tmp_path / "qemu.log", "the emulator's log")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UsageError, match="pipe"):
        open_in_folder(tmp_path / "fifo", "x")
    fd = open_in_folder(tmp_path / "new.lock", "x")
    os.close(fd)
    assert outside.read_text() == "precious"
