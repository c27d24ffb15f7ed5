"""emissions.csv with codecarbon's columns, in codecarbon's order and units, so its dashboards read poet's runs.

The columns are the fields of codecarbon 3.3.2's EmissionsData (codecarbon/output_methods/
emissions_data.py), in their order, which is the order codecarbon's FileOutput writes them in.
Units are codecarbon's: duration in s, emissions in kg CO2eq, emissions_rate in kg/s, powers in W,
energies in kWh (PUE included, as codecarbon applies it to the energy), ram_total_size in GiB
(codecarbon divides bytes by 1024**3 and calls it GB). Inside poet everything is joules and grams;
this is the one place that converts (DESIGN.md, conventions).

How a board fills the columns: the board is one power domain in poet's model (CPU plus the
storage it pages to), so all of its energy is cpu_energy and gpu/ram energies are 0;
cpu_model is the board's name with the numbers' provenance (emulated / measured); tracking_mode
is "machine" (the board runs nothing but the step); utilisation and water are not measured (0,
codecarbon's defaults).
"""

from __future__ import annotations

import csv
import datetime
import io
import platform
import uuid
from dataclasses import dataclass
from pathlib import Path

from poet import __version__
from poet.energy.carbon import Intensity
from poet.errors import UsageError
from poet.files import SMALL, read_text, write_atomic

CODECARBON_VERSION = "3.3.2"  # the version whose EmissionsData the columns below copy
COLUMNS: tuple[str, ...] = (
    "timestamp", "project_name", "run_id", "experiment_id", "duration", "emissions", "emissions_rate",
    "cpu_power", "gpu_power", "ram_power", "cpu_energy", "gpu_energy", "ram_energy", "energy_consumed",
    "water_consumed", "country_name", "country_iso_code", "region", "cloud_provider", "cloud_region", "os",
    "python_version", "codecarbon_version", "cpu_count", "cpu_model", "gpu_count", "gpu_model", "longitude",
    "latitude", "ram_total_size", "tracking_mode", "cpu_utilization_percent", "gpu_utilization_percent",
    "ram_utilization_percent", "ram_used_gb", "on_cloud", "pue", "wue",
)
J_PER_KWH = 3.6e6
GIB = 1024**3


@dataclass(frozen=True)
class RunRecord:
    """One finished run as poet knows it (joules, seconds, grams); row() turns it into codecarbon's units."""

    energy_j: float  # board energy, PUE included
    duration_s: float
    co2_g: float
    grid: Intensity
    board: str
    provenance: str  # emulated | measured
    ram_bytes: int
    pue: float = 1.0
    project_name: str = "poet"
    experiment: str = ""  # e.g. "cnn-digits on nrf52840": runs of one experiment share its experiment_id
    run_id: str = ""  # a uuid4 is made when empty, as codecarbon does
    os: str = "bare metal (poet runtime)"  # the board's, not the host's: the run happens on the board
    cpu_count: int = 1
    timestamp: datetime.datetime | None = None  # run end; now when None

    def row(self) -> dict[str, object]:
        kwh = self.energy_j / J_PER_KWH
        kg = self.co2_g / 1e3
        c = self.grid.country
        when = self.timestamp or datetime.datetime.now()
        experiment = uuid.uuid5(uuid.NAMESPACE_URL, f"poet:{self.project_name}:{self.experiment}")
        values: dict[str, object] = {
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%S"),  # codecarbon's format, local time
            "project_name": self.project_name,
            "run_id": self.run_id or str(uuid.uuid4()),
            "experiment_id": str(experiment),
            "duration": self.duration_s,
            "emissions": kg,
            "emissions_rate": kg / self.duration_s if self.duration_s > 0 else 0.0,
            "cpu_power": self.energy_j / self.duration_s if self.duration_s > 0 else 0.0,
            "gpu_power": 0.0,
            "ram_power": 0.0,
            "cpu_energy": kwh,
            "gpu_energy": 0.0,
            "ram_energy": 0.0,
            "energy_consumed": kwh,
            "water_consumed": 0.0,
            "country_name": c.name if c else "",
            "country_iso_code": c.alpha3 if c else "",  # codecarbon's codes are alpha-3
            "region": "",
            "cloud_provider": "",
            "cloud_region": "",
            "os": self.os,
            "python_version": platform.python_version(),
            "codecarbon_version": f"poet {__version__} (codecarbon {CODECARBON_VERSION} columns)",
            "cpu_count": self.cpu_count,
            "cpu_model": f"{self.board} ({self.provenance})",
            "gpu_count": 0,
            "gpu_model": "",
            "longitude": "",
            "latitude": "",
            "ram_total_size": self.ram_bytes / GIB,
            "tracking_mode": "machine",
            "cpu_utilization_percent": 0.0,
            "gpu_utilization_percent": 0.0,
            "ram_utilization_percent": 0.0,
            "ram_used_gb": 0.0,
            "on_cloud": "N",
            "pue": self.pue,
            "wue": 0.0,
        }
        assert tuple(values) == COLUMNS
        return values


def _backup(path: Path) -> Path:
    """Rename a file with other columns out of the way as codecarbon does: NAME.bak, then NAME_0.bak, ...
    (rename moves a link itself, never what it points to)."""
    bak = path.with_name(path.name + ".bak")
    i = 0
    while bak.exists() or bak.is_symlink():
        bak = path.with_name(f"{path.name}_{i}.bak")
        i += 1
    path.rename(bak)
    return bak


def _existing(path: Path) -> str | None:
    """The text of the emissions file at `path`, or None when it is not one poet can append to: not a
    regular file (a link, a FIFO, a device: read through files.read_text, never followed or read forever),
    too large, not UTF-8."""
    try:
        return read_text(path, "emissions file", limit=SMALL, follow=False)
    except UsageError:
        return None


def has_row(path: str | Path, run_id: str) -> bool:
    """Whether the emissions file at `path` holds a row of run `run_id` (False for one poet cannot read:
    `append` keeps such a file aside and starts a new one)."""
    text = _existing(Path(path))
    if text is None:
        return False
    try:
        return any(row.get("run_id") == run_id for row in csv.DictReader(io.StringIO(text)))
    except csv.Error:
        return False


def append(path: str | Path, record: RunRecord) -> Path | None:
    """Append a row to path (made with a header when missing or empty).

    A file whose header is another set of columns is renamed to *.bak first and a new file is
    started, as codecarbon's FileOutput does; so is one poet cannot read as a CSV (a link, a device,
    not text). The renamed file's path is returned, else None. The file is rewritten whole
    (files.write_atomic: a fresh temporary renamed over it), so a full disk leaves the old rows.
    """
    path = Path(path)
    backed_up = None
    text = ""
    header: list[str] | None = None
    if path.exists() or path.is_symlink():
        old = _existing(path)
        if old is not None and old.strip():
            header = next(csv.reader(io.StringIO(old)), None)
        if old is None or (old.strip() and (header is None or sorted(header) != sorted(COLUMNS))):
            backed_up = _backup(path)
            header = None
        elif header is not None:
            text = old if old.endswith("\n") else old + "\n"
    out = io.StringIO(newline="")
    out.write(text)
    # an existing file keeps its own column order (codecarbon accepts any order of the same set)
    w = csv.DictWriter(out, fieldnames=header if header else list(COLUMNS))
    if not header:
        w.writeheader()
    w.writerow(record.row())
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, out.getvalue())
    return backed_up
