"""What a run starts from, before any board: the request checked, the model's training graph, its data
and steps per epoch, and the initial weights. `poet train` uploads these to a board; `poet export`
freezes the same ones into a bundle, so a device training itself starts exactly where a host-driven
run would."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from poet.energy.battery import battery_energy_j
from poet.energy.carbon import intensity
from poet.errors import UsageError
from poet.files import read_bytes
from poet.graph.reference import Fed, state_tensors, weights_of
from poet.graph.tracer import traced
from poet.graph.training_graph import TrainingGraph, parse_optimizer, with_optimizer
from poet.models.datasets import Dataset, load_dataset
from poet.plan.transform.static_int8 import Int8Prefix
from poet.progress import Say
from poet.settings import RunConfig
from poet.units import parse_deadline

CALIBRATION_SAMPLES = 64  # training samples a static-int8 prefix's scales are calibrated on


def model_graph(cfg: RunConfig) -> tuple[torch.nn.Module, TrainingGraph]:
    """The model and its traced training graph, with the run's optimizer."""
    model, g = traced(cfg.model)
    return model, with_optimizer(g, parse_optimizer(cfg.optimizer))


def check_request(cfg: RunConfig, say: Say) -> dict[str, Any] | None:
    """What a run can be refused for without a board: checked before one is touched or the workspace
    written, so a refusal leaves nothing behind (no emulator booted, no run folder). Returns the
    profile the run plans with, read here once (None: --schedule plans nothing)."""
    if (cfg.battery_mah is None) != (cfg.volts is None):
        raise UsageError("--battery-mah and --volts go together (the battery's capacity and its nominal voltage)")
    if cfg.battery_mah is not None and cfg.volts is not None:
        battery_energy_j(cfg.battery_mah, cfg.volts)  # a capacity or voltage no battery has
    if cfg.schedule and (cfg.budget_j is not None or cfg.battery_mah is not None):
        raise UsageError("--budget-j and --battery-mah need a plan to predict the run from; drop --schedule")
    intensity(cfg.country, cfg.carbon_intensity)  # an unknown --country
    parse_deadline(cfg.plan.deadline, 1.0)  # its form; against the model's pass once the plan is costed
    if cfg.plan.ram is None:
        raise UsageError("--ram is required (what the training step may use in all, e.g. 128k)")
    if cfg.schedule:
        return None
    from poet.paths import profile_to_read
    from poet.plan.cost.costs import load_profile
    prof_path = cfg.plan.profile or profile_to_read(cfg.board)
    if prof_path.exists() or prof_path.is_symlink():  # a missing one: load_profile says what to do
        read_bytes(prof_path, "profile")  # a regular file of a profile's size: never /dev/zero read to the end
    prof = load_profile(cfg.board, cfg.plan.profile, note=lambda m: say(f"note: {m}"))
    if cfg.plan.precision != "fp32":
        from poet.plan.transform.precision import load_rules
        load_rules(cfg.plan.precision_rules)
    return prof


def run_data(cfg: RunConfig, g: TrainingGraph) -> tuple[Dataset, int]:
    """The run's data, fitted to the model, and its steps per epoch."""
    data = load_dataset(cfg.data, cfg.data_limit).fitted(tuple(g.input_shape), g.classes, g.model, g.loss, g.vocab)
    per_epoch = len(data.epoch_batches(g.batch, 0, cfg.model.seed))
    if per_epoch == 0:
        raise UsageError(f"--data {cfg.data}: {len(data.y_train)} samples make no full batch of {g.batch}")
    return data, per_epoch


def initial_weights(model: torch.nn.Module, prefix: Int8Prefix | None, data: Dataset,
                    say: Say) -> tuple[list[np.ndarray], Fed | None]:
    """The weights uploaded to the board, in the run graph's order, and for a static-int8 prefix what the
    host's PyTorch is fed to compute as the board does (evaluation)."""
    w = weights_of(model)
    if prefix is None:
        return w, None
    calib = data.x_train[:CALIBRATION_SAMPLES]
    w = prefix.weights(dict(zip((n for n, _ in state_tensors(model)), w, strict=True)), calib)
    say(f"[plan] {len(prefix.layers)} frozen ops run in static int8 ({len(prefix.folds) // 2} batch norms folded); "
        f"their {len(prefix.scales)} scales calibrated on the first {len(calib)} training samples")
    return w, prefix.fed(model, w)
