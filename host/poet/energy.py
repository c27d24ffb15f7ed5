"""The first energy account's names, kept for its callers (poet.run prints `render` after a run).

The account now lives in poet.accounting (charging rules, the EDD, folding, diffs) and
its terminal report in poet.report; `render` here is exactly what `poet report TRACE`
prints with no flags.
"""

from __future__ import annotations

from poet.accounting import KINDS, Account, Charge, account, charges
from poet.boards import Board
from poet.report import render as _render
from poet.tracefile import Trace

__all__ = ["KINDS", "Account", "Charge", "account", "charges", "render"]


def render(trace: Trace, board: Board, top: int = 5) -> str:
    return _render(account(trace, board), trace, board, top=top)
