"""Jetson power rails from the on-module INA3221, in either of the two sysfs layouts Jetsons ship.

Older L4T (TX1, TX2, Nano; NVIDIA's downstream `ina3221x` iio driver):
    /sys/bus/i2c/drivers/ina3221x/<bus>-<addr>/iio:device<N>/
        rail_name_<k>, in_power<k>_input (mW), in_current<k>_input (mA), in_voltage<k>_input (mV), k = 0..2
    (L4T Development Guide, "Power Management for Jetson TX2/Nano", software-based power
    consumption modeling; the names and mW unit as read by tegrastats-era tools).
Newer L4T and mainline (the upstream hwmon `ina3221` driver):
    /sys/bus/i2c/drivers/ina3221/<bus>-<addr>/hwmon/hwmon<N>/
        in<k>_label, in<k>_input (bus voltage, mV), curr<k>_input (mA), k = 1..3
    (kernel Documentation/hwmon/ina3221.rst; it has no power attribute: "current and power
    are calculated host-side", so power = in x curr).

A meter sums the named rails. VDD_IN (the module's input) is the default where it exists;
the sub-rails (VDD_CPU, VDD_GPU, ...) are parts of it and must not be added to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from poet.energy.meters.base import MeterError
from poet.energy.meters.sampler import PollingMeter, read_number

I2C_DRIVERS = Path("/sys/bus/i2c/drivers")


@dataclass(frozen=True)
class Rail:
    name: str
    layout: str          # "iio" (ina3221x) or "hwmon" (ina3221)
    read_w: Callable[[], float]


def _iio_rails(root: Path) -> list[Rail]:
    rails = []
    for dev in sorted(root.glob("ina3221x/*/iio:device*")):
        for k in range(3):
            name_f, power_f = dev / f"rail_name_{k}", dev / f"in_power{k}_input"
            if name_f.exists() and power_f.exists():
                rails.append(Rail(name_f.read_text().strip(), "iio",
                                  lambda f=power_f: read_number(f) * 1e-3))            # mW -> W
    return rails


def _hwmon_rails(root: Path) -> list[Rail]:
    rails = []
    for dev in sorted(root.glob("ina3221/*/hwmon/hwmon*")):
        for k in (1, 2, 3):
            label, v, i = dev / f"in{k}_label", dev / f"in{k}_input", dev / f"curr{k}_input"
            if label.exists() and v.exists() and i.exists():
                rails.append(Rail(label.read_text().strip(), "hwmon",
                                  lambda v=v, i=i: read_number(v) * 1e-3 * read_number(i) * 1e-3))  # mV x mA
    return rails


def find_rails(root: Path = I2C_DRIVERS) -> list[Rail]:
    return _iio_rails(root) + _hwmon_rails(root)


def rail_reader(names: Sequence[str] | None = None, root: Path = I2C_DRIVERS) -> tuple[list[str], Callable[[], float]]:
    rails = find_rails(root)
    if not rails:
        raise MeterError(f"no INA3221 rails under {root} (neither ina3221x/*/iio:device*/rail_name_k nor "
                         "ina3221/*/hwmon/hwmon*/in<k>_label): not a Jetson, or the driver is not loaded")
    by_name = {r.name: r for r in rails}
    want = list(names) if names else (["VDD_IN"] if "VDD_IN" in by_name else [])
    if not want:
        raise MeterError(f"no VDD_IN rail here; name the rails to sum with rails=[...] (found: {', '.join(by_name)})")
    missing = [n for n in want if n not in by_name]
    if missing:
        raise MeterError(f"no INA3221 rail named {', '.join(missing)} (found: {', '.join(by_name)})")
    chosen = [by_name[n] for n in want]
    return want, lambda: sum(r.read_w() for r in chosen)


class Ina3221Meter(PollingMeter):
    def __init__(self, rails: Sequence[str] | None = None, period_s: float = 0.01, *, root: Path = I2C_DRIVERS,
                 clock: Callable[[], float] = time.time) -> None:
        names, read = rail_reader(rails, root)
        super().__init__(f"ina3221:{'+'.join(names)}", period_s, read, clock=clock)
