"""Carbon intensity of the electricity a run uses (gCO2eq/kWh), offline: a bundled country table or an override.

data/carbon_intensity.csv is codecarbon 3.3.2's country table (Our World in Data's carbon intensity
of electricity generation, Ember and Energy Institute data, one year per country; MIT, see
data/COPYING.codecarbon and the file's header) with ISO 3166 alpha-2 codes added. With no country the
world average codecarbon uses for unknown countries is taken (475 g/kWh, IEA, 2018), and the
answer says so. Nothing here touches the network: a board run must not depend on it.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

from poet.errors import UsageError

# the flag names the train command uses, so every message names the same ones
COUNTRY_FLAG = "--country"
OVERRIDE_FLAG = "--carbon-intensity"
TABLE = "data/carbon_intensity.csv"
TABLE_SOURCE = "Our World in Data (Ember, Energy Institute) via codecarbon 3.3.2"
WORLD_SOURCE = f"world average (no {COUNTRY_FLAG})"

# The dirtiest grids (coal and lignite) emit about 1,000 gCO2eq/kWh; twice that is no grid, and a
# typo in --carbon-intensity (or a number that overflows the account) is refused instead
MAX_G_PER_KWH = 2000.0

# A board's PUE: it is not in a data centre, so nothing (cooling, power distribution) scales its
# energy; codecarbon's own default PUE is 1 as well. Multiply only when the board sits in a
# facility whose PUE is known.
BOARD_PUE = 1.0


@dataclass(frozen=True)
class Country:
    alpha3: str
    alpha2: str
    name: str
    g_per_kwh: float
    year: int
    source: str  # "owid" for a country, "iea" for the world average row


@dataclass(frozen=True)
class Intensity:
    """gCO2eq per kWh and where that number came from, as the output must say it."""

    g_per_kwh: float
    source: str
    country: Country | None = None  # the table row used, if any (codecarbon's country columns need it)

    def line(self) -> str:
        return f"carbon intensity {self.g_per_kwh:g} gCO2eq/kWh ({self.source})"


@functools.cache
def _table() -> tuple[dict[str, Country], Country]:
    """Countries by alpha-3 and alpha-2 code, and the world average row."""
    with resources.files("poet").joinpath(TABLE).open("r", encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    by_code: dict[str, Country] = {}
    world: Country | None = None
    for r in rows:
        c = Country(r["alpha3"], r["alpha2"], r["country"], float(r["g_per_kwh"]), int(r["year"]), r["source"])
        if c.alpha3 == "WORLD":
            world = c
            continue
        by_code[c.alpha3] = c
        by_code[c.alpha2] = c
    if world is None:  # a packaging mistake, not a user's
        raise RuntimeError(f"{TABLE} has no WORLD row")
    return by_code, world


def countries() -> list[Country]:
    """Every country in the table, by alpha-3 code."""
    by_code, _ = _table()
    return sorted({c.alpha3: c for c in by_code.values()}.values(), key=lambda c: c.alpha3)


def lookup(country: str) -> Country:
    """The table row of an ISO 3166 alpha-3 (FRA) or alpha-2 (FR) code, any case; one line if unknown."""
    by_code, _ = _table()
    code = country.strip().upper()
    if code in by_code:
        return by_code[code]
    raise UsageError(f"{COUNTRY_FLAG} {country}: not an ISO 3166 alpha-3 or alpha-2 code in poet's table of "
                     f"{len(countries())} countries (e.g. FRA or FR); give the grid's intensity instead with "
                     f"{OVERRIDE_FLAG} G_PER_KWH")


def intensity(country: str | None = None, override_g_per_kwh: float | None = None) -> Intensity:
    """The intensity to use: an override wins, else the country's table value, else the world average."""
    if override_g_per_kwh is not None:
        x = override_g_per_kwh
        if isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x <= MAX_G_PER_KWH:  # also NaN
            raise UsageError(f"{OVERRIDE_FLAG} {x!r}: not a grid's carbon intensity (from 0 to {MAX_G_PER_KWH:g} "
                             f"gCO2eq/kWh; coal emits about 1,000)")
        return Intensity(float(override_g_per_kwh), f"{OVERRIDE_FLAG} override")
    if country:
        c = lookup(country)
        return Intensity(c.g_per_kwh, f"{c.name} ({c.alpha3}) {c.year}, {TABLE_SOURCE}", c)
    _, world = _table()
    return Intensity(world.g_per_kwh, f"{WORLD_SOURCE}: IEA {world.year} via codecarbon 3.3.2", None)


def grams_co2(energy_j: float, g_per_kwh: float, pue: float = BOARD_PUE) -> float:
    """gCO2eq of energy_j joules drawn by the board, at a grid intensity and a PUE (1 J = 1/3.6e6 kWh)."""
    return energy_j * pue / 3.6e6 * g_per_kwh
