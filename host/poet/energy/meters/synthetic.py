"""A made-up op timeline with known per-op power, and what a meter would record of it.

Used by the accuracy test and benchmarks/meter_accuracy.py: the truth is known, so the
energy align.py recovers can be checked op by op.

The meter is an integrating one (each sample is the mean power over the period it opens,
as INA2xx conversions, Joulescope's averaged output and counter reads are), plus Gaussian
noise proportional to the signal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poet.energy.meters.align import Event
from poet.energy.meters.base import Recording

OP_KINDS = ("conv2d/forward", "conv2d/backward", "linear/forward", "linear/backward", "relu/forward",
            "relu/backward", "page_in", "page_out", "recompute", "optimizer")


@dataclass(frozen=True)
class Timeline:
    events: list[Event]          # keys: (index, kind)
    power_w: np.ndarray          # true power of each op
    idle_w: float                # power between ops (interpreter work, left unattributed)

    @property
    def energy_j(self) -> np.ndarray:
        return self.power_w * np.array([e.end_s - e.start_s for e in self.events])


def timeline(n_ops: int = 200, *, min_s: float = 20e-6, max_s: float = 20e-3, min_w: float = 5e-3,
             max_w: float = 30e-3, max_idle_s: float = 30e-6, idle_w: float = 3e-3, seed: int = 0) -> Timeline:
    """Ops with log-uniform durations and uniform powers, short idle stretches between them."""
    rng = np.random.default_rng(seed)
    dur = np.exp(rng.uniform(np.log(min_s), np.log(max_s), n_ops))
    power = rng.uniform(min_w, max_w, n_ops)
    idle = rng.uniform(0.0, max_idle_s, n_ops)
    kinds = rng.integers(0, len(OP_KINDS), n_ops)
    t = float(rng.uniform(0.0, 1e-3))      # start off the meter's sample grid
    events = []
    for i in range(n_ops):
        events.append(Event(t, t + float(dur[i]), (i, OP_KINDS[kinds[i]])))
        t += float(dur[i] + idle[i])
    return Timeline(events, power, idle_w)


def render(tl: Timeline, period_s: float, *, noise: float = 0.02, seed: int = 0,
           margin_s: float = 2e-3, start_s: float = 0.0) -> Recording:
    """The recording an integrating meter with this period and relative noise makes of the timeline,
    its first sample at `start_s` (a host-clock recording starts near time.time(), not at 0)."""
    # Relative times inside: at ~1.7e9 s a float64 resolves only 0.2 us, too coarse for short ops.
    starts = np.array([e.start_s for e in tl.events]) - start_s
    ends = np.array([e.end_s for e in tl.events]) - start_s
    t_end = float(ends.max()) + margin_s
    # True energy as a function of time, exactly: idle everywhere, plus each op's excess.
    grid = np.arange(0.0, t_end + period_s, period_s)

    def energy_at(t: np.ndarray) -> np.ndarray:
        inside = np.clip(t[:, None], starts[None, :], ends[None, :]) - starts[None, :]
        return tl.idle_w * t + inside @ (tl.power_w - tl.idle_w)

    e = energy_at(grid)
    mean_p = np.diff(e) / period_s
    rng = np.random.default_rng(seed + 1_000_003)
    p = np.maximum(mean_p * (1.0 + noise * rng.standard_normal(mean_p.size)), 0.0)
    return Recording.of_power("synthetic", period_s, grid[:-1] + start_s, p)
