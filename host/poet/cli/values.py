"""The value types of poet's options: each checks its text while the command line is parsed, so a bad value
is refused in one line (exit 2) before anything is traced, solved or booted, and a resumed run's config.json
is checked by the same functions (poet.cli.resume)."""

from __future__ import annotations

import argparse
import math
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

from poet.errors import UsageError
from poet.files import kind as file_kind
from poet.graph import train_modes
from poet.units import parse_deadline

# Upper limits of the whole-number options: far beyond any real use, low enough that nothing
# downstream overflows (islice, float energy totals, struct fields) or runs for ever.
MAX_STEPS = 100_000


MAX_BATCH = 65535  # the model blob's batch field is u16 (docs/spec.md section 2)


def _whole(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from lo to hi, else one line saying so (exit 2).

    Checked while parsing, so a bad count is refused before anything is traced, solved or
    booted (`poet demo` starts QEMU long before it uses --steps)."""
    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:  # not a number, or more digits than int() takes
            v = lo - 1
        if not lo <= v <= hi:
            shown_text = text if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(f"{shown_text!r} is not a whole number from {lo} to {hi}")
        return v
    return parse


def _number(text: str) -> float:
    """A finite float: `nan` and `inf` parse as floats but are no setting's value."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def _positive(text: str) -> float:
    v = _number(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return v


def _non_negative(text: str) -> float:
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return v


# The board takes the learning rate and the optimizer's settings as float32 (the STEP message's
# "<f", the model blob's optimizer attributes): past float32's largest a pack overflows, below its
# smallest normal the value is a subnormal or 0 the board steps with instead of the one given.
F32_MAX = 3.4028234663852886e38


F32_TINY = 1.1754943508222875e-38  # the smallest normal float32


def _as_f32(v: float) -> float:
    """v as the board holds it: packed as the link packs it (float32, to nearest), inf where that overflows."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:
        return math.inf


def _learning_rate(text: str) -> float:
    v = _positive(text)
    if not _as_f32(v) <= F32_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is beyond float32 ({F32_MAX:.4g}), which the board takes "
                                         "the learning rate as")
    if _as_f32(v) < F32_TINY:
        raise argparse.ArgumentTypeError(f"{text!r} is below float32's smallest normal number ({F32_TINY:.4g}), "
                                         "which the board takes the learning rate as")
    return v


def _optimizer(text: str) -> str:
    """--optimizer: parse_optimizer's forms and ranges, each setting as the board holds it (float32): a
    beta or momentum that rounds to 1 never forgets (Adam's bias correction divides by 0), an eps that
    is 0 or subnormal in float32 makes Adam's update 0/0 wherever a gradient is 0."""
    from poet.graph.training_graph import parse_optimizer

    try:
        opt = parse_optimizer(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--optimizer ")) from None
    for key, v in opt.items():
        if key == "name":
            continue
        f = _as_f32(v)
        if key != "eps" and f >= 1.0:
            raise argparse.ArgumentTypeError(f"{text!r}: {key} {v!r} is 1 as float32, which the board takes it as; "
                                             "give at most 0.9999999")
        if f < F32_TINY and (key == "eps" or v != 0):
            raise argparse.ArgumentTypeError(f"{text!r}: {key} {v!r} is below float32's smallest normal number "
                                             f"({F32_TINY:.4g}), which the board takes it as"
                                             + ("" if key == "eps" else "; give 0 or a larger one"))
    return text


def _port(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty port: give the board's serial port, e.g. /dev/ttyACM0")
    return text


def _train_mode(text: str) -> str:
    """--train (poet.graph.train_modes); the model's layers and module names are checked when it is traced."""
    try:
        train_modes.parse(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--train {text!r}: ")) from None
    return text


def _output_file(text: str) -> str:
    """-o FILE: refused before any work when it cannot be a file poet writes (a folder, or in a folder
    that does not exist: poet makes no folder trees the user did not ask for). A device is written
    in place (/dev/null, /dev/stdout); one that refuses (/dev/full) is one line when written."""
    p = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name in it")
    if not p.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {p.parent} does not exist: make it first, or write elsewhere")
    return text


def _output_regular_file(text: str) -> str:
    """-o FILE that poet rewrites atomically (a new file renamed over it), and reads back to resume:
    it must be a regular file, or renaming would replace a device node."""
    _output_file(text)
    p = Path(text)
    if p.exists() and not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a regular file (a device or a pipe): give a file")
    return text


def _output_folder(text: str) -> str:
    """A folder poet writes into, made (with the folders above it, as asked) if missing."""
    p = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a folder")
    return text


def _input_file(text: str) -> str:
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not p.exists():
        if p.is_symlink():
            raise argparse.ArgumentTypeError(f"{text} is a link to {os.readlink(p)}, which does not exist")
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return text


def _planner_file(pipes: bool) -> Callable[[str], str]:
    """An argparse type for a file the planner reads (--graph, --profile, --precision-rules): a regular
    file, or with `pipes` a pipe (`<(...)`, /dev/stdin, a FIFO), which its reader reads once. Anything
    else is refused while parsing, saying what it is: a device would read forever (/dev/zero) or as
    empty (/dev/null), and a pipe given where the file is read more than once would wait for ever."""
    def check(text: str) -> str:
        _input_file(text)
        try:
            mode = os.stat(text).st_mode
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"{text}: cannot read it ({exc.strerror or exc})") from None
        if stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode)):
            return text
        link = f" (a link to {os.path.realpath(text)})" if os.path.islink(text) else ""
        if stat.S_ISFIFO(mode):
            raise argparse.ArgumentTypeError(f"{text}{link} is a pipe (FIFO): poet reads this file more than once; "
                                             f"save it to a file and give that")
        raise argparse.ArgumentTypeError(f"{text}{link} is {file_kind(mode)}, not a file: give a regular file")
    return check


# A deadline is a plausible time for one training step: a 400-digit one parses as an infinite float,
# which would reach the planner's solver as a bound of inf
DEADLINE_X_MAX = 1e6  # times one plain pass


DEADLINE_S_MAX = 365 * 24 * 3600.0  # a year


def _deadline_text(text: str) -> str:
    """--deadline: a multiple of one plain pass (1.5x) or a time (45ms), checked while parsing and kept as
    text (what it is in seconds needs the costed graph: _deadline)."""
    shown_text = text if len(text) <= 30 else text[:27] + "..."
    try:
        seconds = parse_deadline(text, 1.0)  # "x" as seconds of a 1 s pass: the multiple itself
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(repr(text), repr(shown_text))) from None
    multiple = text.strip().lower().endswith("x")
    if not seconds <= (DEADLINE_X_MAX if multiple else DEADLINE_S_MAX):
        limit = f"{DEADLINE_X_MAX:g} times one plain pass" if multiple else "a year"
        raise argparse.ArgumentTypeError(f"deadline {shown_text!r} is more than {limit} per training step: give "
                                         f"a deadline like 3x or 45ms")
    return text


def _deadlines(text: str) -> str:
    """sweep's --deadline: a comma-separated list of deadlines, each as _deadline_text."""
    for part in text.split(","):
        _deadline_text(part)
    return text


TIME_LIMIT_MAX = 365 * 24 * 3600.0  # a year: a limit beyond is no limit, and passes HiGHS a time of 1e300


def _time_limit(text: str) -> float:
    v = _positive(text)
    if v > TIME_LIMIT_MAX:
        raise argparse.ArgumentTypeError(f"{text[:30]!r} seconds is more than a year: give a time limit like 60")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number like 0.01") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1), e.g. 0.01 for 1%")
    return v


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape like 1,8,8") from None
    if not dims or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be at least 1")
    if math.prod(dims) > MAX_SAMPLE_ELEMS:
        raise argparse.ArgumentTypeError(f"{text!r}: {math.prod(dims):,} values in one sample; the model blob counts "
                                         f"a batch's input values in a u32 (at most {MAX_SAMPLE_ELEMS:,})")
    return dims


# The model blob's header counts the whole staged batch's input values as a u32 (x_elems, docs/spec.md
# section 2): one sample past it can never be staged, whatever the batch
MAX_SAMPLE_ELEMS = 2**32 - 1


def logic_input(text: str) -> int:
    """A meter's logic input for --markers: 0-7, or D0-D7 as the PPK2 labels them."""
    t = text.strip()
    n = t[1:] if t[:1] in ("D", "d") else t
    if not (n.isdigit() and 0 <= int(n) <= 7):
        raise argparse.ArgumentTypeError(f"{text!r} is not a logic input: give 0-7 or D0-D7")
    return int(n)


def meter_offset(text: str) -> float:
    """--meter-offset: the meter's clock minus the host's, seconds. Both are clocks a meter or time.time()
    gives (within MAX_CLOCK_S of 0), so no offset between them is larger."""
    from poet.energy.meters.base import MAX_CLOCK_S

    v = _number(text)
    if abs(v) > MAX_CLOCK_S:
        raise argparse.ArgumentTypeError(f"{text!r} is no offset between two clocks (at most {MAX_CLOCK_S:g} s "
                                         "either way)")
    return v
