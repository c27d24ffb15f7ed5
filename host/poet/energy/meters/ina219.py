"""INA219 on a Raspberry Pi's I2C bus, through the kernel's hwmon driver (ina2xx).

/sys/class/hwmon/hwmonN/ with name = "ina219". Units from the kernel's
Documentation/hwmon/ina2xx.rst and Documentation/hwmon/sysfs-interface.rst: in1_input is
the bus voltage in mV, curr1_input the current in mA, power1_input the power in uW.
power1_input is what the chip itself computed (its power register) and is preferred; a
driver without it gives in1 x curr1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from poet.energy.meters.base import MeterError
from poet.energy.meters.sampler import PollingMeter, read_number

HWMON = Path("/sys/class/hwmon")


def find_hwmon(chip: str = "ina219", root: Path = HWMON, index: int = 0) -> Path:
    found = sorted(p for p in root.glob("hwmon*") if (p / "name").exists()
                   and (p / "name").read_text().strip() == chip)
    if len(found) <= index:
        raise MeterError(f"no {chip} under {root} ({len(found)} found): enable I2C and load the driver, e.g. "
                         f"`echo {chip} 0x40 | sudo tee /sys/bus/i2c/devices/i2c-1/new_device` "
                         "(a shunt-resistor device-tree overlay sets the scale)")
    return found[index]


def power_reader(d: Path) -> Callable[[], float]:
    if (d / "power1_input").exists():
        return lambda: read_number(d / "power1_input") * 1e-6            # uW -> W
    return lambda: read_number(d / "in1_input") * 1e-3 * read_number(d / "curr1_input") * 1e-3  # mV x mA


class Ina219Meter(PollingMeter):
    def __init__(self, period_s: float = 0.001, *, index: int = 0, root: Path = HWMON,
                 clock: Callable[[], float] = time.time) -> None:
        d = find_hwmon("ina219", root, index)
        self.hwmon_dir = d
        super().__init__(f"ina219:{d.name}", period_s, power_reader(d), clock=clock)
