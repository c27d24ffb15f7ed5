"""Whether a run's predicted energy fits in a battery: capacity (mAh) x voltage (V) x the usable fraction.

The energy of a cell is its charge times its voltage: 1 mAh = 3.6 C, so E = mAh x 3.6 x V joules
at the nominal voltage (the mean voltage over a discharge, which is what a nominal voltage is).
Not all of it can be used, so a fraction is taken, 0.8 unless told:
- Battery University, BU-802c "How low can a battery be discharged?": devices that stop a Li-ion
  cell at its 3.0 V cut-off leave about 5% in it; high current draw or cold push the voltage to the
  cut-off early and can leave 30% behind.
- a 3.3 V board fed through a linear regulator drops out well above a Li-ion cell's 3.0 V cut-off,
  so its own cut-off is higher still.
0.8 sits between BU-802c's 95% (cut-off at 3.0 V, moderate load) and 70% (early cut-off); a user
with a measured discharge curve passes their own fraction. The run's energy is the board's
modelled (or measured) energy; a regulator's loss is in the fraction, not added to the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poet.energy.predict import si
from poet.errors import UsageError

USABLE_FRACTION = 0.8  # see the module's docstring for why
COULOMB_PER_MAH = 3.6  # 1 mAh = 1e-3 A x 3600 s
FORCE_FLAG = "--force"
CAPACITY_FLAG, VOLTS_FLAG = "--battery-mah", "--volts"
# What a battery can be, so that a typo (or a denormal, whose joules round to 0 and then divide) is
# refused rather than judged: from 0.01 mAh (below a 1 F supercapacitor's ~0.8 mAh at 3 V, the smallest
# store that could carry a step) to 1e7 mAh (10,000 Ah, a stationary battery bank); from 0.5 V (a
# discharged NiMH cell behind a boost converter) to 1,000 V (an electric car's pack is 400-800 V).
MIN_MAH, MAX_MAH = 0.01, 1e7
MIN_V, MAX_V = 0.5, 1000.0
MIN_FRACTION = 0.01  # a usable fraction below 1% is not a battery worth judging a run against


def _within(x: float, lo: float, hi: float) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


def battery_energy_j(capacity_mah: float, voltage_v: float, usable_fraction: float = USABLE_FRACTION) -> float:
    """The joules a battery can give a run: mAh x 3.6 C/mAh x V x the usable fraction. A value no battery
    has is one UsageError line naming its flag; call it before a run starts to refuse one early."""
    if not _within(capacity_mah, MIN_MAH, MAX_MAH):
        raise UsageError(f"{CAPACITY_FLAG} {capacity_mah!r}: not a battery's capacity (from {MIN_MAH:g} to "
                         f"{MAX_MAH:g} mAh)")
    if not _within(voltage_v, MIN_V, MAX_V):
        raise UsageError(f"{VOLTS_FLAG} {voltage_v!r}: not a battery's nominal voltage (from {MIN_V:g} to "
                         f"{MAX_V:g} V)")
    if not _within(usable_fraction, MIN_FRACTION, 1.0):
        raise UsageError(f"usable battery fraction {usable_fraction!r}: must be from {MIN_FRACTION:g} to 1")
    return capacity_mah * COULOMB_PER_MAH * voltage_v * usable_fraction


@dataclass(frozen=True)
class BatteryCheck:
    needed_j: float
    capacity_mah: float
    voltage_v: float
    usable_fraction: float
    available_j: float

    @property
    def fits(self) -> bool:
        return self.needed_j <= self.available_j

    @property
    def margin_j(self) -> float:
        """Joules left at the end of the run (negative: short by that much)."""
        return self.available_j - self.needed_j

    @property
    def margin_fraction(self) -> float:
        """margin_j as a fraction of the usable energy."""
        return self.margin_j / self.available_j

    @property
    def runs(self) -> float:
        """How many such runs the usable energy covers."""
        return self.available_j / self.needed_j if self.needed_j > 0 else float("inf")

    def line(self) -> str:
        battery = (f"{self.capacity_mah:g} mAh at {self.voltage_v:g} V, {self.usable_fraction:.0%} usable = "
                   f"{si(self.available_j, 'J')}")
        if self.fits:
            return (f"battery: {battery}; the run needs {si(self.needed_j, 'J')}: fits, {si(self.margin_j, 'J')} "
                    f"({self.margin_fraction:.1%}) to spare ({self.runs:.3g} such runs)")
        return (f"battery: {battery}; the run needs {si(self.needed_j, 'J')}: does not fit, short by "
                f"{si(-self.margin_j, 'J')} ({self.needed_j / self.available_j - 1:.1%} over)")


def check_battery(needed_j: float, capacity_mah: float, voltage_v: float,
                  usable_fraction: float = USABLE_FRACTION) -> BatteryCheck:
    if not (math.isfinite(needed_j) and needed_j >= 0):
        raise ValueError(f"needed energy {needed_j} J is not a finite number >= 0")
    return BatteryCheck(needed_j, capacity_mah, voltage_v, usable_fraction,
                        battery_energy_j(capacity_mah, voltage_v, usable_fraction))


def refusal(check: BatteryCheck) -> str | None:
    """The one line a command refuses to start with when the run does not fit, or None when it does."""
    if check.fits:
        return None
    return (f"the run needs {si(check.needed_j, 'J')} but the battery ({check.capacity_mah:g} mAh at "
            f"{check.voltage_v:g} V, {check.usable_fraction:.0%} usable) gives {si(check.available_j, 'J')}: "
            f"use fewer steps, a bigger battery, or {FORCE_FLAG} to start anyway")
