"""`poet export`: a self-contained folder from which the user's own firmware trains and predicts, with
no host attached (issue 47; docs/spec.md section 7).

It plans exactly as `poet train` of the same options (the same graph, rewrites, plan cache and initial
weights: poet.run.inputs, poet.run.plans), so a device stepping through the bundle computes what a
host-driven run uploads, bit for bit. Then it adds the forward schedule predict runs, checks that both
fit the board, and writes the folder beside its final name, renaming it into place only when whole: a
refusal or a failure leaves nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poet.boards import Board, load_board
from poet.energy.fmt import fmt_j, fmt_s
from poet.errors import PoetError, UsageError
from poet.export import sources
from poet.export.bundle import Bundle, make_bundle
from poet.paths import shown
from poet.plan.cost.memory import check_ram
from poet.plan.lowering.lower import forward_lowered, model_blob
from poet.plan.lowering.modelblob import ModelBlob
from poet.plan.lowering.schedule import Schedule
from poet.progress import Say
from poet.run.inputs import check_request, initial_weights, model_graph, run_data
from poet.run.plans import cached_or_solved, run_graph
from poet.settings import RunConfig
from poet.units import format_size


@dataclass(frozen=True)
class ExportResult:
    """What was written, and what the device needs for it."""

    out: Path
    bundle_bytes: int  # in the device's flash, read in place
    pool_bytes: int  # the RAM pool poet_init needs
    card_bytes: int  # streamed int8 weights on the aux storage (card.img); 0: no card
    steps_per_epoch: int
    plan: dict  # the plan's summary (plan.json's dict, as `poet train` keeps it)


def export(cfg: RunConfig, out: Path, say: Say = print, bars: bool = False) -> ExportResult:
    """Write the folder `out` (new, or an empty folder) for a device that trains itself as `poet train
    cfg` would train it. Everything it can be refused for is checked before anything is written."""
    if cfg.schedule:
        raise UsageError("--schedule: poet export plans the step itself (and the forward pass with it)")
    _check_out(out)
    prof = check_request(cfg, say)
    assert prof is not None and cfg.plan.ram is not None
    board = load_board(cfg.board)
    check_ram(cfg.plan.ram, board.ram_bytes, board.name)
    model, g = model_graph(cfg)
    data, per_epoch = run_data(cfg, g)
    # train plans with the firmware's static RAM from the board's HELLO; with no board, the profile's,
    # which `poet profile` recorded from that HELLO (as `poet solve` plans): the same budget, the same plan
    plan, sched = cached_or_solved(cfg.plan, g, board, int(prof["runtime_static_bytes"]), say, bars, prof)
    g_run, prefix = run_graph(g, plan)
    w0, _ = initial_weights(model, prefix, data, say)
    blob = model_blob(g_run)
    train_s, forward = Schedule.decode(sched), forward_lowered(blob).schedule
    # a snapshot undoes a diverged step exactly; it costs the trained weights' and optimizer state's
    # bytes again, so the pool keeps one when --ram holds it (docs/device.md)
    bundle = make_bundle(blob, w0, train_s, forward, cfg.lr)
    if bundle.pool_bytes > cfg.plan.ram:
        bundle = make_bundle(blob, w0, train_s, forward, cfg.lr, snapshot=False)
    encoded = bundle.encode()
    aux = blob.split_weights(w0)[2]
    _check_fits(cfg, board, plan, forward, bundle, encoded)
    needs = _needs(cfg, board, plan, per_epoch, bundle, encoded, aux)
    say("\n[export] " + "\n  ".join(needs))
    result = ExportResult(out, len(encoded), bundle.pool_bytes, len(aux), per_epoch, plan)
    _write_folder(out, lambda tmp: _write(tmp, cfg, board, blob, result, encoded, aux, needs))
    say(f"\n[export] wrote {shown(out)}: bundle.bin ({format_size(len(encoded))}), bundle.c/.h, runtime/, Makefile, "
        f"CMakeLists.txt{', card.img' if aux else ''}, README.md, export.json")
    return result


def _check_out(out: Path) -> None:
    """A new folder, or an empty one: an export never writes over (or into) what is there."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"-o {out} exists and is not a folder: give a new folder")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"-o {out} is not empty: give a new or empty folder (an export never writes over files)")


def _check_fits(cfg: RunConfig, board: Board, plan: dict, forward: Schedule, bundle: Bundle, encoded: bytes) -> None:
    """Refuse, naming what does not fit where: the forward schedule's arena in the budget's arena, the
    bundle in the flash the board leaves for a model, the device's pool in the board's RAM."""
    ram = cfg.plan.ram
    arena = plan["arena_budget"]
    if forward.arena_bytes > arena:
        raise UsageError(f"the forward schedule needs {forward.arena_bytes} B of arena, the pool at --ram "
                         f"{format_size(ram or 0)} leaves {arena} B: raise --ram")
    if len(encoded) > board.model_flash_bytes:
        raise UsageError(f"the bundle (model {len(bundle.model)} B, frozen weights {len(bundle.frozen)} B, weights "
                         f"{len(bundle.weights)} B, schedules {len(bundle.train) + len(bundle.forward)} B) is "
                         f"{len(encoded)} B; {board.name} leaves {board.model_flash_bytes} B of flash for a model "
                         f"(model_flash_bytes in boards/{board.name}.yaml): choose a smaller model")
    if bundle.pool_bytes > board.ram_bytes:
        raise UsageError(f"the device's pool needs {bundle.pool_bytes} B of RAM (the training pool, a snapshot to undo "
                         f"a diverged step, the instructions' ticks), more than {board.name}'s {board.ram_bytes} B: "
                         "lower --ram or train fewer layers")


def _needs(cfg: RunConfig, board: Board, plan: dict, per_epoch: int, bundle: Bundle, encoded: bytes,
           aux: bytes) -> list[str]:
    """The plan's predicted time and energy per step and per epoch, and what the device needs where."""
    step_s, step_j = plan["time_s"], plan["energy_j"]
    lines = [f"the plan predicts per step {fmt_s(step_s).strip()} and {fmt_j(step_j).strip()}; per epoch "
             f"({per_epoch} steps of {cfg.model.batch}) {fmt_s(step_s * per_epoch).strip()} and "
             f"{fmt_j(step_j * per_epoch).strip()}",
             f"RAM: poet_init's pool {bundle.pool_bytes} B ({format_size(bundle.pool_bytes)}; planned at --ram "
             f"{format_size(cfg.plan.ram or 0)}; {board.name} has {format_size(board.ram_bytes)})",
             "a diverged step is undone from a snapshot in the pool" if bundle.snapshot else
             "no room for a snapshot at this --ram: a non-finite loss stops a step before any update; weights "
             "that turn non-finite stop the device until poet_restore (docs/device.md)",
             f"flash: the bundle {len(encoded)} B ({format_size(len(encoded))} of the "
             f"{format_size(board.model_flash_bytes)} {board.name} leaves for a model)"]
    if aux:
        lines.append(f"SD card: {len(aux)} B of streamed int8 weights (card.img)")
    return lines


def _write_folder(out: Path, write: Callable[[Path], None]) -> None:
    """Write into a temporary folder beside `out`, then rename it to `out`: a failure or Ctrl-C
    leaves no half-written folder, and neither do the folders above it that were made for it."""
    made = [p for p in (out.absolute().parent, *out.absolute().parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # a folder as mkdir would make it, not mkdtemp's private one
        write(tmp)
        try:
            os.rename(tmp, out)  # onto a missing or empty folder only
        except OSError as exc:
            raise PoetError(f"-o {out}: cannot put the export there ({exc.strerror or exc}): "
                            "another program wrote it meanwhile? give a new folder") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in made:  # the innermost first
            with contextlib.suppress(OSError):
                p.rmdir()
        raise


def _write(tmp: Path, cfg: RunConfig, board: Board, blob: ModelBlob, result: ExportResult, encoded: bytes,
           aux: bytes, needs: list[str]) -> None:
    (tmp / "bundle.bin").write_bytes(encoded)
    (tmp / "bundle.c").write_text(sources.bundle_c(encoded))
    (tmp / "bundle.h").write_text(sources.bundle_h(result.pool_bytes, len(encoded)))
    if aux:
        # the aux storage's image as the runtime addresses it (port_pager offsets): the streamed weights at
        # the model's aux offset, past the swap area (sparse: the swap area is a hole)
        with open(tmp / "card.img", "wb") as f:
            f.seek(blob.aux_at)
            f.write(aux)
    rel = sources.copy_runtime(tmp)
    (tmp / "Makefile").write_text(sources.makefile(rel))
    (tmp / "CMakeLists.txt").write_text(sources.cmakelists(rel))
    (tmp / "README.md").write_text(readme(cfg, board, result, needs))
    (tmp / "export.json").write_text(json.dumps(export_json(cfg, board, result, len(encoded)), indent=1) + "\n")


def export_json(cfg: RunConfig, board: Board, result: ExportResult, bundle_bytes: int) -> dict[str, Any]:
    plan = result.plan
    return {"model": cfg.model.name, "weights": str(cfg.model.weights.resolve()) if cfg.model.weights else None,
            "seed": cfg.model.seed, "batch": cfg.model.batch, "board": board.name, "ram": cfg.plan.ram,
            "train": cfg.model.train, "optimizer": cfg.optimizer, "lr": cfg.lr, "precision": cfg.plan.precision,
            "deadline": cfg.plan.deadline, "data": cfg.data, "steps_per_epoch": result.steps_per_epoch,
            "plan": {"strategy": plan.get("strategy"), "peak_bytes": plan["peak_bytes"],
                     "arena_budget": plan["arena_budget"], "recomputes": plan["recomputes"],
                     "page_ins": plan["page_ins"], "page_outs": plan["page_outs"],
                     "time_s": plan["time_s"], "energy_j": plan["energy_j"]},
            "pool_bytes": result.pool_bytes, "bundle_bytes": bundle_bytes, "flash_bytes": bundle_bytes,
            "card_bytes": result.card_bytes}


def readme(cfg: RunConfig, board: Board, result: ExportResult, needs: list[str]) -> str:
    card = ("\n- `card.img`: the aux storage's image as the runtime addresses it (offset 0 is `port_pager`'s "
            "offset 0): the frozen int8 weights streamed from the SD card. Put it where your port's pager reads.\n"
            if result.card_bytes else "\n")
    return f"""# {cfg.model.name} for {board.name}, trained on the device

Written by `poet export` (poet's docs/spec.md section 7): {cfg.model.name}, `--train {cfg.model.train}`,
`--ram {cfg.plan.ram}`, {cfg.optimizer} at lr {cfg.lr}, batch {cfg.model.batch}. The device trains
exactly as `poet train` with the same options would, bit for bit.

- `bundle.bin`: the bundle (model, frozen weights, initial weights, training and forward schedules).
- `bundle.c`, `bundle.h`: the same bytes as a C array `poet_bundle` (8-aligned, `poet_bundle_bytes`
  long), and `POET_BUNDLE_POOL_BYTES`, the RAM pool `poet_init` needs.{card}- `runtime/core/`: poet's portable
  runtime (no serial protocol); `poet.h` is the API.
- `Makefile` (`make`, or `make CC=arm-none-eabi-gcc CFLAGS=...`) and `CMakeLists.txt` (target `poet`):
  build `libpoet.a` from the runtime and `bundle.c`. Your firmware links it (and `-lm`) and implements
  the functions of `runtime/core/port.h` the runtime calls (ticks, and the pager when a plan pages).
- `export.json`: what was exported and what the plan predicts.

## Use

```c
#include "poet.h"
#include "bundle.h"

static poet_device_t dev;
static uint64_t pool[(POET_BUNDLE_POOL_BYTES + 7u) / 8u];

if (poet_init(&dev, poet_bundle, poet_bundle_bytes, pool, sizeof pool) != POET_OK) {{ /* refused */ }}
/* x: poet_batch(&dev) samples of poet_input_elems(&dev) floats; labels: poet_batch(&dev) class indices */
poet_train_step(&dev, x, labels, &info);   /* POET_E_DIVERGED: undone, the weights are as before */
poet_predict(&dev, x, n, out);             /* n samples, poet_output_elems(&dev) floats each */
```

## What the plan predicts

{chr(10).join(f"- {line}" for line in needs)}
"""
