"""Where poet reads and writes.

The repository's profiles/ and schedules/ are shipped inputs: poet reads them and never writes
them. What a run makes (profiles it measures, schedules, runs/, sweeps/) goes to the workspace:
$POET_WORKSPACE if set, else workspace/ in the repository (ignored by git). A profile is read
from the workspace when poet measured one there, else from the shipped ones. Refreshing the
shipped files is asking for it: POET_WORKSPACE=. in the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PROFILES = REPO_ROOT / "profiles"


def workspace() -> Path:
    given = os.environ.get("POET_WORKSPACE")
    return Path(given) if given else REPO_ROOT / "workspace"


def profile_file(board: str) -> Path:
    """Where `poet profile` writes the board's profile."""
    return workspace() / "profiles" / f"{board}.yaml"


def profile_to_read(board: str) -> Path:
    """The profile the planner uses: the one measured into the workspace, else the shipped one."""
    measured = profile_file(board)
    return measured if measured.exists() else SHIPPED_PROFILES / f"{board}.yaml"


def schedule_file(model: str, board: str) -> Path:
    return workspace() / "schedules" / f"{model}.{board}.poet"


def sweep_dir(model: str) -> Path:
    return workspace() / "sweeps" / model


def runs_dir() -> Path:
    return workspace() / "runs"


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def write_output(path: Path, data: bytes) -> None:
    """Write a file the user named with -o, in place (it may be /dev/null or /dev/stdout); a failure
    (a full disk, /dev/full, a file the system will not let us write) is one line naming the file."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        from poet.errors import PoetError
        raise PoetError(f"cannot write {path}: {exc.strerror or exc}") from None
