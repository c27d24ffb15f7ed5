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
