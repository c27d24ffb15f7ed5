"""Children that stand in for a board (QEMU, the Linux runtime) die with the poet that started them.

Every exit path poet controls stops them (context managers, Ctrl-C); this covers the ones it does
not: SIGKILL, the OOM killer, a crash of the interpreter. Without it an emulator is re-parented to
init and keeps a core busy, holding its run folder, until someone finds it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

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


# the signals that stop poet: Ctrl-C, and the CLI's SIGTERM and SIGHUP (cli.main)
STOPPING = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """The signals that stop poet, held while a child is forked, then acted on.

    Python runs a signal's handler at the next bytecode of the main thread, and right after a fork that
    bytecode is an at-fork hook's (logging's _releaseLock), whose exception Python prints as "Exception
    ignored" and drops: a Ctrl-C that landed as poet started its second core was lost, and the solve ran
    on to its time limit (found under load, issue 45). While held a handler only records the signal;
    once the child is started the recorded handler runs here, where its KeyboardInterrupt goes up.
    Only handlers poet's Python runs are held (ignored signals stay ignored), and only in the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        got.append(signum)

    saved = {}
    for sig in STOPPING:
        handler = signal.getsignal(sig)
        if callable(handler):
            saved[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if got:
            saved[signal.Signals(got[0])](got[0], None)  # type: ignore[operator]


def spawn(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen of a child that dies with poet (die_with_poet), started with the stopping
    signals held (signals_held): a Ctrl-C as it starts stops poet, and the child, which the caller
    never got, is stopped first."""
    proc: subprocess.Popen[bytes] | None = None
    try:
        with signals_held():
            proc = subprocess.Popen(argv, preexec_fn=die_with_poet(), **kw)
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    return proc
