"""Linux RAPL through powercap: /sys/class/powercap/intel-rapl:N/{name,energy_uj,max_energy_range_uj}.

Units and wrap, from the kernel's Documentation/power/powercap/powercap.rst and
Documentation/ABI/testing/sysfs-class-powercap: `energy_uj` is the zone's energy counter in
micro-joules, `max_energy_range_uj` the range of that counter (it starts again from 0 after
it), `name` the zone ("package-0", "dram", "core", ...). The counter is read as is; wraps are
undone in base.counter_deltas_uj as (b - a) mod (max + 1), so energy is never negative.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from poet.energy.meters.base import MeterError
from poet.energy.meters.sampler import PollingMeter, read_number

POWERCAP = Path("/sys/class/powercap")


def find_zone(name: str = "package-0", root: Path = POWERCAP) -> Path:
    zones = sorted(p for p in root.glob("intel-rapl:*") if (p / "name").exists())
    for z in zones:
        if (z / "name").read_text().strip() == name:
            return z
    seen = ", ".join(f"{z.name}={(z / 'name').read_text().strip()}" for z in zones) or "none"
    raise MeterError(f"no RAPL zone named {name!r} under {root} (zones: {seen}); "
                     "RAPL needs an Intel/AMD x86 host with the intel_rapl driver")


class RaplMeter(PollingMeter):
    def __init__(self, zone: str = "package-0", period_s: float = 0.01, *, root: Path = POWERCAP,
                 clock: Callable[[], float] = time.time) -> None:
        d = find_zone(zone, root)
        self.zone_dir = d
        super().__init__(f"rapl:{zone}", period_s, lambda: read_number(d / "energy_uj"), counter=True,
                         max_energy_range_uj=read_number(d / "max_energy_range_uj"), clock=clock)
