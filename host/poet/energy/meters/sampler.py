"""Meters read by polling a file (Linux hwmon, iio, powercap): one reading per period on the host clock.

The samples are stamped with time.time() (Unix seconds), the clock poet.device stamps each step's
STEP and DONE with, so a recording lines up with a trace with no offset. Wall time rather than
time.monotonic(): it is the one clock a logger in another process, or on another NTP-synced
machine (an INA219 on a Pi beside the host), shares with the host. A thread does the polling; tests call
`sample()` themselves with a fake clock instead (`start(thread=False)`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from poet.energy.meters.base import MeterError, Recording, SampleBuffer


def read_number(path: Path) -> int:
    """One integer from a sysfs attribute; a missing or unreadable file is a one-line error."""
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        raise MeterError(f"{path} does not exist: the sensor's driver is not loaded or the path moved") from None
    except PermissionError:
        raise MeterError(f"{path} is not readable by this user: run as root or grant read access "
                         f"(e.g. sudo chmod o+r {path})") from None
    except (OSError, ValueError) as exc:
        raise MeterError(f"cannot read a number from {path}: {exc}") from None


class PollingMeter:
    """A Meter (base.Meter) over a function that reads one value: watts, or a counter in uJ."""

    def __init__(self, name: str, period_s: float, read: Callable[[], float], *, counter: bool = False,
                 max_energy_range_uj: int | None = None, clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.period_s = period_s
        self._read = read
        self._counter = counter
        self._clock = clock
        self._buf = SampleBuffer(name, period_s, max_energy_range_uj)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def clock_s(self) -> float:
        return self._clock()

    def sample(self) -> None:
        t, v = self._clock(), self._read()
        with self._lock:
            if self._buf.t_s and t <= self._buf.t_s[-1]:
                # Two reads within one clock tick (a window read right after a poll): the newer
                # value stands for that instant rather than breaking the clock's order.
                self._buf.values[-1] = v
                return
            self._buf.t_s.append(t)
            self._buf.values.append(v)

    def start(self, thread: bool = True) -> None:
        self._buf = SampleBuffer(self.name, self.period_s, self._buf.max_energy_range_uj)
        self._stop.clear()
        self.sample()
        if thread:
            self._thread = threading.Thread(target=self._run, name=f"poet-meter-{self.name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        nxt = self._clock() + self.period_s
        while not self._stop.wait(max(0.0, nxt - self._clock())):
            self.sample()
            nxt += self.period_s

    def stop(self) -> Recording:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()
        return self._recording()

    def _recording(self) -> Recording:
        with self._lock:
            buf = SampleBuffer(self.name, self.period_s, self._buf.max_energy_range_uj,
                               list(self._buf.t_s), list(self._buf.values))
        return buf.recording(counter=self._counter)

    def read_energy_j(self) -> float:
        """Joules from start() to now: a fresh reading, then the recording so far integrated."""
        self.sample()
        with self._lock:
            if len(self._buf.t_s) < 2:
                return 0.0      # nothing has been integrated yet
        return float(self._recording().energy_j()[-1])
