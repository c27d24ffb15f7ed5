"""A Linux board (rpi4, jetson) reached as ssh://user@host[:port]: the target, and the link to the
runtime `poet flash` installed there. Shared by flashing (poet.flash) and the link (poet.device),
so neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from poet.errors import UsageError


@dataclass(frozen=True)
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def ssh(self, *cmd: str) -> list[str]:
        return ["ssh", *(["-p", str(self.port)] if self.port else []), self.dest, *cmd]

    def scp(self, sources: list[str], remote: str) -> list[str]:
        return ["scp", *(["-P", str(self.port)] if self.port else []), *sources, f"{self.dest}:{remote}"]


def parse_ssh(url: str) -> SshTarget:
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        u, port = None, None
    if u is None or u.scheme != "ssh" or not u.hostname or u.path not in ("", "/"):
        raise UsageError(f"--port {url}: a Linux board is reached as ssh://user@host[:port]")
    return SshTarget(u.hostname, u.username, port)


REMOTE_DIR = ".poet"   # in the login's home directory


def runtime_over_ssh(url: str, board: str, args: Sequence[str] = ()) -> list[str]:
    """The link to a Linux board: the installed runtime speaking on ssh's stdin/stdout, started with
    `args` (its sizes: firmware.runtime_args). BatchMode because stdin carries the protocol: a password
    prompt could never be answered."""
    t = parse_ssh(url)
    return ["ssh", "-T", "-o", "BatchMode=yes", *(["-p", str(t.port)] if t.port else []), t.dest,
            f"{REMOTE_DIR}/poet", board, *args]
