"""Children that stand in for a board (QEMU, the Linux runtime) die with the poet that started them.

Every exit path poet controls stops them (context managers, Ctrl-C); this covers the ones it does
not: SIGKILL, the OOM killer, a crash of the interpreter. Without it an emulator is re-parented to
init and keeps a core busy, holding its run folder, until someone finds it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: the child between fork and exec should do as little
    as it can (no dynamic loading, no imports)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # a libc without prctl (e.g. a static musl build of Python)
        return None


_PRCTL = _prctl()


def die_with_poet() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen: the child gets SIGKILL when this process dies.

    Linux only (prctl PR_SET_PDEATHSIG); elsewhere None, so the child outlives a killed poet as
    before: macOS and Windows have no such per-process request (a kqueue watcher or a job object
    would be needed), and poet's stand-ins run on Linux.

    The signal is tied to the *thread* that forks, not the process: the child is killed when that
    thread exits. poet opens its devices (and so forks its stand-ins) in the thread that then uses
    them for the whole `with open_device(...)` block, the main thread in the CLI, so that thread
    outlives every use of the child.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()  # taken before fork: in the child, getpid() is the child's own
    kill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        # poet may have died between fork and prctl; then no signal will ever come and the child is
        # already init's (or a subreaper's): go now, before exec, rather than run unowned
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def die_with_parent() -> None:
    """In the child itself, for a child forked by something other than Popen (a multiprocessing worker):
    SIGKILL to this process when its parent's forking thread ends, as die_with_poet asks. Linux only.

    If the parent is already gone by the time the request is made, no signal would ever come: exit now.
    A parent that died before this call began is not seen (this process cannot know its first parent):
    the caller watches for that some other way (plan/sweep.py watches poet's pipe)."""
    prctl = _PRCTL
    if prctl is None:
        return
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
