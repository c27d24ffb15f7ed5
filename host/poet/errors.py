"""The one exception type a user's mistake turns into: one line, a hint, an exit status."""


class PoetError(Exception):
    """A failure the user can act on. The CLI prints `poet: <message>` and exits with `status`.

    status 2 = the command line or an input file was wrong; 1 = the work itself failed.
    """

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class UsageError(PoetError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=2)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where a Ctrl-C's KeyboardInterrupt would be (cli.main installs the
    handlers): every path that stops cleanly on a Ctrl-C (train's checkpoint, profile's partial save,
    the planner's HiGHS threads and second core) does on these too. A supervisor stops a process with
    SIGTERM; a closed terminal, SIGHUP."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for: Terminated's, else SIGINT (2)."""
    return int(getattr(exc, "signum", 2))


def stopped_by(exc: BaseException) -> str:
    """What stopped the work, in a user's words: 'Ctrl-C', 'SIGTERM' or 'SIGHUP'."""
    return {2: "Ctrl-C", 15: "SIGTERM", 1: "SIGHUP"}.get(signal_of(exc), "a signal")
