"""`poet train --resume RUN`: the run's settings from its config.json, each value checked by the `poet
train` option of its key, as the command line's would be."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from poet import settings
from poet.cli.parser import build_parser, subcommand
from poet.errors import UsageError
from poet.settings import RunConfig

# what --resume takes from the command line; everything else comes from the run's config.json
RESUME_OPTIONS = {"resume", "port", "emulate", "model", "data"}


def resumed(args: argparse.Namespace) -> RunConfig:
    """The settings of the run --resume continues: its config.json, each value checked as the command
    line's would be.

    Nothing in a run folder makes poet import code: a run of a model or data factory resumes only
    when the command line names the same factory (a folder from someone else may name any module)."""
    from poet.run.folder import saved_config

    run = Path(args.resume)
    cfg = saved_config(run)
    changed = sorted(args.given - RESUME_OPTIONS)
    if changed:
        opt = "--" + changed[0].replace("_", "-")
        was = cfg.get(changed[0])
        raise UsageError(f"{opt}: a resumed run keeps the settings it started with"
                         + (f" ({opt} {was} in {run / 'config.json'})" if was is not None else "")
                         + "; start a new run to change them")
    for key in ("model", "data"):
        v, opt = cfg[key], f"--{key}"
        factory = isinstance(v, str) and ":" in v and not (key == "data" and Path(v).exists())
        asked = getattr(args, key)
        if key in args.given and asked != v and not (Path(asked).exists() and Path(asked).resolve() == Path(v)):
            raise UsageError(f"{opt} {getattr(args, key)}: the run in {run} trains on {opt} {v}")
        if factory and key not in args.given:
            raise UsageError(f"the run in {run} uses {opt} {v}, code of your own: poet imports only code the command "
                             f"line names; if you trust it, resume with `poet train --resume {run} {opt} {v}`")
    return settings.run_config(_checked(cfg, run / "config.json"))


def _checked(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's config.json values, each checked and converted by the `poet train` option of its key, as the
    command line's would be (a NaN or negative lr in it is refused as --lr nan is), over train's defaults
    (what a key at null or false means). Keys that name no option (made_by) are not settings to check."""
    train = subcommand(build_parser(), "train")
    values = vars(train.parse_args([]))
    options = {a.dest: a for a in train._actions if a.option_strings}
    for key, v in config.items():
        if key in options and v is not None and v is not False:
            values[key] = _option_value(options[key], key, v, path)
    return values


def _option_value(action: argparse.Action, key: str, v: Any, path: Path) -> Any:
    """config.json's `v` for the option `action`, through the option's own type and choices."""
    opt = action.option_strings[-1]

    def damaged(why: str) -> UsageError:
        return UsageError(f"{path}: {why}: the file was changed or damaged, so the run cannot be resumed")

    if action.nargs == 0:  # a flag: true, or absent (false)
        if v is not True:
            raise damaged(f"argument {opt}: ignored explicit argument {json.dumps(v)[:40]}")
        return True
    if isinstance(v, list) and v and all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        text = ",".join(str(d) for d in v)  # a shape, as --input-shape takes it
    elif isinstance(v, (str, int, float)) and not isinstance(v, bool):
        text = str(v)
    else:
        raise damaged(f"{key} is {json.dumps(v)[:40]}, which is no value of {opt}")
    try:
        value = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise damaged(f"argument {opt}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise damaged(f"argument {opt}: invalid choice: {value!r} (choose from {choices})")
    return value
