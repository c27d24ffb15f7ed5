"""A run's settings as typed records: what `poet solve`, `poet train` and `poet demo` are asked.

The command line (poet.cli) parses into these and the library takes only these. They sit below both
the planner and the run, so each can name the other's settings without importing it. A run's folder
keeps them as config.json (config_json); `poet train --resume` checks each value there with the
option's own parser and makes the records again (run_config). A new setting is a field here and an
option of the parser, named alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from poet.models.synthetic import NAMED
from poet.models.zoo import ModelChoice
from poet.units import parse_size

T = TypeVar("T")


@dataclass(frozen=True)
class PlanRequest:
    """What to plan for: the options `poet solve` and `poet train` share."""

    ram: int | None = None  # bytes the training step may hold in RAM in all (DESIGN.md "Memory")
    deadline: str = "3x"  # a multiple of one plain pass (1.5x) or a time (45ms)
    strategy: str = "poet"
    solver: str = "highs"
    time_limit_s: float = 60.0
    gap: float = 0.0
    profile: Path | None = None  # None: the board's (workspace, else shipped)
    precision: str = "fp32"  # fp32 | greedy | auto
    precision_rules: Path | None = None  # None: poet's data/precision.yaml


@dataclass(frozen=True)
class RunConfig:
    """What a run is asked: the model, the plan, the data and the run's own settings. config.json holds
    it flat (config_json), and `poet train --resume` reads it back through train's options (poet.cli.resume)."""

    board: str = "nrf52840"
    model: ModelChoice = ModelChoice()
    plan: PlanRequest = PlanRequest()
    data: str = "digits"  # digits, mfcc, machine-sound, a folder of .npy arrays, or module:factory
    data_limit: int | None = None  # the first N training samples
    epochs: int = 3
    order: str = "host"  # each epoch's sample order: host (numpy's shuffle) or device (poet_train_epoch's)
    lr: float = 0.1
    optimizer: str = "sgd"  # sgd, momentum[:M] or adam[:BETA1,BETA2,EPS]
    budget_j: float | None = None  # refuse a run predicted to need more
    battery_mah: float | None = None  # with volts: refuse a run the battery cannot carry
    volts: float | None = None
    force: bool = False  # run even over budget_j or the battery
    country: str | None = None  # the grid's carbon intensity
    carbon_intensity: float | None = None  # gCO2eq/kWh instead of the country's
    checkpoint_every: int = 1
    no_feature_cache: bool = False  # compute the frozen prefix every epoch even where the plan would keep its features
    schedule: Path | None = None  # run this schedule file instead of planning
    meter: str | None = None  # BACKEND[:ARG] recorded over the steps
    run_dir: Path | None = None  # default workspace/runs/<time>-<model>
    made_by: str = "train"  # "demo": a folder `poet demo` may rewrite


# The flat form: one key per setting, named as the `poet train` option that sets it (its argparse dest),
# so the command line and config.json are one namespace and a config is checked by the options' own
# parsers. A field's key is its name but for these two, whose options are named otherwise.
RENAMED = {("model", "name"): "model", ("plan", "time_limit_s"): "time_limit"}
# not a setting of the run: a resume's folder is the one --resume gives
NOT_SAVED = {"run_dir"}
# the keys every config.json has had since the first run folders: one without any of them was changed or
# damaged. A key added since (weights, and every option added from now on) takes its default when missing.
FIRST_KEYS = ("board", "model", "batch", "seed", "train", "data", "data_limit", "epochs", "ram", "deadline", "lr",
              "optimizer", "strategy", "solver", "time_limit", "gap", "profile", "budget_j", "battery_mah", "volts",
              "force", "country", "carbon_intensity", "checkpoint_every", "schedule", "input_shape", "classes",
              "layers", "hidden", "meter", "precision", "precision_rules")


def _flat(record: Any, outer: str = "") -> Iterator[tuple[str, Any]]:
    for f in fields(record):
        v = getattr(record, f.name)
        if is_dataclass(v):
            yield from _flat(v, f.name)
        elif f.name not in NOT_SAVED:
            yield RENAMED.get((outer, f.name), f.name), v


def config_json(cfg: RunConfig) -> dict[str, Any]:
    """The run's settings as config.json holds them: flat (RENAMED), JSON values, the files they name made
    absolute, so a resume from another folder reads the same files (or is refused for a missing one),
    never others of the same name. made_by only when a command other than train made the run."""
    flat: dict[str, Any] = {}
    for key, v in _flat(cfg):
        if key == "made_by" and v == "train":
            continue
        if isinstance(v, Path):
            v = str(v.resolve())
        elif isinstance(v, tuple):
            v = list(v)
        flat[key] = v
    data = flat["data"]  # a dataset's name, module:factory, or a folder
    if data and data != "digits" and data not in NAMED and Path(data).exists():
        flat["data"] = str(Path(data).resolve())
    meter = flat["meter"]
    if isinstance(meter, str) and meter.startswith("file:"):
        flat["meter"] = "file:" + str(Path(meter[5:]).resolve())
    return flat


# every key config.json has (the test that train has an option for each reads this)
CONFIG_KEYS = tuple(k for k, _ in _flat(RunConfig()) if k != "made_by")


def _value(hint: Any, v: Any) -> Any:
    """An option's value (argparse's, or config.json's checked by it) as the record's field holds it."""
    if v is None:
        return None
    args = get_args(hint) or (hint,)
    if Path in args:
        return Path(v) if v else None
    if any(get_origin(a) is tuple for a in args):
        return tuple(v)
    if int in args and isinstance(v, str):  # --ram: a size as given (256k), parsed once, here
        return parse_size(v)
    return v


def _record(cls: type[T], values: Mapping[str, Any], outer: str = "") -> T:
    hints = get_type_hints(cls)
    kw: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]  # cls is a dataclass
        hint = hints[f.name]
        if isinstance(hint, type) and is_dataclass(hint):
            kw[f.name] = _record(hint, values, f.name)
            continue
        key = RENAMED.get((outer, f.name), f.name)
        if key in values:
            kw[f.name] = _value(hint, values[key])
    return cls(**kw)


def run_config(values: Mapping[str, Any]) -> RunConfig:
    """The records from options by key (a parsed command line's, or a config.json's checked by the
    options' parsers); a setting absent keeps its record's default, keys of no setting are left."""
    return _record(RunConfig, values)


def model_choice(values: Mapping[str, Any]) -> ModelChoice:
    return _record(ModelChoice, values, "model")


def plan_request(values: Mapping[str, Any]) -> PlanRequest:
    return _record(PlanRequest, values, "plan")
