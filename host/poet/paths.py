"""Where poet writes: profiles/, schedules/ and runs/ under the workspace (the repository by default).

POET_WORKSPACE points them elsewhere, e.g. a temporary directory in tests, so a
run never touches the checked-in profiles and schedules unless asked to.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def workspace() -> Path:
    return Path(os.environ.get("POET_WORKSPACE", REPO_ROOT))


def profile_file(board: str) -> Path:
    return workspace() / "profiles" / f"{board}.yaml"


def schedule_file(model: str, board: str) -> Path:
    return workspace() / "schedules" / f"{model}.{board}.poet"


def runs_dir() -> Path:
    return workspace() / "runs"


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
