"""A profile stopped midway (the board went away, Ctrl-C): the one line that says so, and its status.
Shared by the three measurements (ops, paging, casts), each of which saves what finished first."""

from __future__ import annotations

from poet.errors import PoetError, signal_of, stopped_by


class ProfileInterrupted(PoetError):
    """The board went away (or Ctrl-C) mid-profile; what finished is saved."""


def went(exc: BaseException) -> str:
    return f"stopped by {stopped_by(exc)}" if isinstance(exc, KeyboardInterrupt) else "the board went away"


def exit_status(exc: BaseException) -> int:
    return 128 + signal_of(exc) if isinstance(exc, KeyboardInterrupt) else 1  # 130: the shell's code for Ctrl-C
