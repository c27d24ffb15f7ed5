"""Progress bars on long work (training epochs, profiling, uploads, solves), drawn with tqdm.

One rule for every bar: it is drawn on stderr, and only when the caller asked for bars (`shown`, a
typed flag the CLI passes; the library's default is none) and that stream is a terminal (tqdm's
disable=None). Piped or captured, nothing of a bar is written, so logs keep only poet's own lines.
A bar is cleared when it closes: the line said after it (an epoch's summary) takes its place.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from tqdm import tqdm

Say = Callable[[str], None]


def bar(total: float | None, desc: str, *, shown: bool, unit: str = "it", file: TextIO | None = None,
        **kw: Any) -> tqdm:
    """A tqdm bar on `file` (default: stderr as it is now), disabled unless `shown` and the stream is a tty."""
    return tqdm(total=total, desc=desc, unit=unit, file=file, disable=None if shown else True, leave=False,
                dynamic_ncols=True, **kw)


def drawn(b: tqdm) -> bool:
    """Whether `b` is on the screen: open, enabled and past its delay. tqdm's close() clears a bar only
    when this holds, so a bar redrawn before its delay is over would be left on the screen."""
    return not b.disable and b.last_print_t >= b.start_t + b.delay


def above(b: tqdm, say: Say) -> Say:
    """`say` for the bar's lifetime: the bar is cleared before a line and drawn again after it, so the line
    (on stdout, the same terminal) never lands inside the bar."""
    def said(msg: str = "") -> None:
        if not drawn(b):
            say(msg)
            return
        with b.get_lock():
            b.clear(nolock=True)
            say(msg)
            b.refresh(nolock=True)
    return said


def sent_bytes(b: tqdm) -> Callable[[int, int], None]:
    """A Link.upload `progress(done, total)` callback that advances `b` by the bytes of one blob."""
    last = 0

    def progress(done: int, _total: int) -> None:
        nonlocal last
        b.update(done - last)
        last = done
    return progress


@contextlib.contextmanager
def ticker(desc: str, limit_s: float | None, *, shown: bool, file: TextIO | None = None, every_s: float = 0.5,
           delay_s: float = 1.0) -> Iterator[tqdm]:
    """Elapsed time against a time limit while the block runs (a solver that reports nothing as it goes),
    ticked by a thread that is stopped and joined however the block ends. Drawn only after `delay_s`,
    so a quick solve leaves no trace; with no finite limit, elapsed time alone."""
    total = limit_s if limit_s is not None and math.isfinite(limit_s) and limit_s > 0 else None
    limit = tqdm.format_interval(total or 0)
    fmt = f"{{desc}}: {{percentage:3.0f}}%|{{bar}}| {{elapsed}} of the {limit} time limit" if total else \
        "{desc}: {elapsed}"
    # past the limit the bar would sit full while the work goes on (building the MILP, presolve and reading
    # the plan out are not in the solver's limit): elapsed time alone then, the limit named
    over = f"{{desc}}: {{elapsed}} (time limit {limit}, for the search alone)"
    # miniters=0, mininterval=0: every tick draws (the thread sets the pace), an unchanged count too
    with bar(total, desc, shown=shown, unit="s", file=file, bar_format=fmt, miniters=0, mininterval=0,
             delay=delay_s) as b:
        if b.disable:
            yield b
            return
        stop = threading.Event()
        t0 = time.monotonic()

        def tick() -> None:
            while not stop.wait(every_s):
                elapsed = time.monotonic() - t0
                if total and elapsed > total:
                    b.bar_format = over
                b.update((min(elapsed, total) if total else 0.0) - b.n)

        thread = threading.Thread(target=tick, name="poet-ticker", daemon=True)
        thread.start()
        try:
            yield b
        finally:
            stop.set()
            thread.join()
