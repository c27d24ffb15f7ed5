"""Reading what a user hands poet, and writing what poet makes, without being led astray by the file.

Every file poet reads may be hostile or plain wrong: a link to /dev/zero, a FIFO, a 1 KB YAML whose
aliases expand to gigabytes, a JSON nested a million deep. Every file poet writes sits in a folder
someone else may have prepared: a link planted at `state.json.tmp` would make a write land outside.
So:

- `read_bytes` opens a path once, takes only a regular file (or, where asked, a pipe such as
  `<(...)` or /dev/stdin, read once), and refuses more than `limit` bytes, saying what the path is;
- `load_yaml` refuses anchors and aliases (the billion-laughs bomb) before anything expands, and
  `load_json` refuses NaN, infinities and nesting too deep to parse, each in one line;
- `write_atomic` / `atomic` write a fresh temporary (O_EXCL, a name nobody could plant) and rename
  it over the target: rename replaces a link instead of following it, a stop mid-write leaves the
  previous file, and a full disk names the file and leaves no temporary;
- `open_in_folder` opens a file poet keeps open in a folder (a lock, a log) without following a
  link, and refuses anything but a regular file with one name (a hard link would write elsewhere too).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from poet.errors import PoetError, UsageError

MB = 1 << 20
# What a file poet reads for its settings (a profile, a board, a config, a state, a plan) may
# hold: the largest shipped profile is about 40 KB, a graph of ResNet-18 about 2 MB
SMALL = 64 * MB


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words a user knows."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _what(path: Path, what: str) -> str:
    return f"{what} {path}" if what else str(path)


def read_bytes(path: str | os.PathLike[str], what: str = "", *, limit: int = SMALL, pipes: bool = False,
               follow: bool = True) -> bytes:
    """The whole of `path`, opened once. Refused (UsageError, one line naming `what` and the path):
    a missing file, a folder, a device, a socket, a pipe unless `pipes`, a link unless `follow`, and
    more than `limit` bytes."""
    p = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # NONBLOCK: opening a FIFO does not wait
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        if p.is_symlink():
            raise UsageError(f"{_what(p, what)}: a link to {os.readlink(p)}, which does not exist") from None
        raise UsageError(f"{_what(p, what)} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise UsageError(f"{_what(p, what)} is a symbolic link, which poet does not follow here "
                             "(a folder handed over could point it anywhere)") from None
        raise UsageError(f"{_what(p, what)}: cannot open it ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) and pipes:
            os.set_blocking(fd, True)
        elif not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{_what(p, what)} is {kind(st.st_mode)}, not a file: give a regular file")
        elif st.st_size > limit:
            raise UsageError(f"{_what(p, what)} is {st.st_size / MB:.1f} MB, more than such a file can be "
                             f"({limit / MB:.0f} MB): not the file meant?")
        else:
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # a pipe, or a file that grows while read
                raise UsageError(f"{_what(p, what)} holds more than such a file can ({limit / MB:.0f} MB): "
                                 "not the file meant?")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], what: str = "", **kw: Any) -> str:
    """read_bytes, as UTF-8; a file that is not text is refused in one line."""
    data = read_bytes(path, what, **kw)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{_what(Path(path), what)} is not UTF-8 text (byte {exc.start}): not the file meant?") \
            from None


class _NoAliases(yaml.SafeLoader):
    """YAML without anchors and aliases: no file poet reads needs them, and they are how a kilobyte
    expands to all the memory there is (the billion laughs). Refused when composed, before any
    expansion."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            raise yaml.MarkedYAMLError(None, None, "an alias (*name): poet's files do not use them",
                                       self.peek_event().start_mark)
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise yaml.MarkedYAMLError(None, None, "an anchor (&name): poet's files do not use them",
                                       event.start_mark)
        return super().compose_node(parent, index)


def load_yaml(text: str, what: str) -> Any:
    """`text` as YAML (safe types only, no anchors or aliases); a parse error is one UsageError line."""
    try:
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506 - _NoAliases is a SafeLoader
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{what}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise UsageError(f"{what}: nested too deep to be one of poet's files") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number poet takes")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text[:20]} is too large for a float")
    return x


def load_json(text: str | bytes, what: str) -> Any:
    """`text` as JSON, without NaN or infinities (JSON has neither; Python's parser takes them) and
    without nesting too deep to parse; a failure is one UsageError line."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise UsageError(f"{what}: nested too deep to be one of poet's files") from None
    except ValueError as exc:  # JSONDecodeError, a constant, a number of more digits than int() takes
        raise UsageError(f"{what}: not valid JSON ({' '.join(str(exc).split())})") from None


def _disk_error(path: Path, exc: OSError) -> PoetError:
    reason = "no space left on the disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    return PoetError(f"cannot write {path}: {reason} (the file is as it was before; nothing half-written is left)")


def _mode_for(path: Path) -> int:
    """The permissions a write of `path` leaves: those of the file it replaces, else what open() would
    give a new file (0666 less the umask)."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    mask = os.umask(0o022)  # the only way to read the umask is to set it: put back at once
    os.umask(mask)
    return 0o666 & ~mask


def remove_temporaries(folder: Path, names: tuple[str, ...]) -> list[str]:
    """Remove what an `atomic` write of one of `names` in `folder` left when its process was killed
    (SIGKILL, a power cut: no handler runs) before the rename: `.<name>.<random>.tmp`. Only for a folder
    the caller holds (a run's lock), where no write of poet's is under way. The names removed."""
    gone = []
    for entry in os.listdir(folder):
        if entry.endswith(".tmp") and any(entry.startswith(f".{n}.") for n in names):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / entry)  # a link is removed, never followed
                gone.append(entry)
    return sorted(gone)


@contextlib.contextmanager
def atomic(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file to write `path`'s new content into; on leaving the block it replaces `path`
    (rename: a link at `path` is replaced, not followed). An exception inside the block, a full disk
    included, leaves `path` as it was and no temporary behind."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")  # O_EXCL: never a planted link
    except OSError as exc:
        raise _disk_error(p, exc) from None
    try:
        os.fchmod(fd, _mode_for(p))  # mkstemp's 0600 would hide a run's results from the group a plain write shows
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # the rename must not reach the disk before the data
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _disk_error(p, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` by `data` (atomic(): never through a link, never half-written)."""
    with atomic(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def open_in_folder(path: str | os.PathLike[str], what: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """A descriptor on `path` (created if missing), refused in one line if `path` is a link, not a
    regular file, or a file with other names (a hard link: writing it would change the other)."""
    p = Path(path)
    try:
        fd = os.open(p, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{what} {p} is a symbolic link: poet does not write through links in a folder it "
                             "keeps (remove it)") from None
        raise PoetError(f"cannot write {p}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        why = kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} names (a hard link)"
        raise UsageError(f"{what} {p} is {why}: poet writes only its own files in a folder it keeps (remove it)")
    os.set_blocking(fd, True)
    return fd


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether writing `a` would replace `b`'s content: the same file (a link to it, a hard link of it, the
    same path spelled another way) or, where either is missing, the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where their names lead
        return os.path.realpath(a) == os.path.realpath(b)


def not_an_input(flag: str, out: str | os.PathLike[str] | None,
                 inputs: list[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Refuse (one line, exit 2), before anything is read or written, an output that is one of the command's
    inputs: `poet solve --graph g.json -o g.json` replaced the graph with its schedule."""
    if out is None:
        return
    for what, p in inputs:
        if p is not None and Path(p).exists() and same_file(out, p):
            raise UsageError(f"{flag} {out} is the file {what} reads: poet never writes over a file it reads; "
                             "give another file")
