"""Energy, time and gCO2eq of a training run: predicted before it, after its first epochs, and compared at its end.

carbontracker (Anthony et al. 2020) measures the first epochs and multiplies their mean by the
number of epochs. poet knows more: every step runs the same schedule, so a step is the unit that
repeats, not an epoch. The prediction here is what was measured so far, plus the mean step of
the measured epochs times the steps still to run, plus the mean per-epoch overhead (work that is
not a training step, such as an evaluation pass, measured apart) times the epochs still to run.
An epoch of a different length (a short last epoch) or an overhead that scales with epochs, not
steps, does not bias it. docs/carbon.md says more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from poet.energy.carbon import BOARD_PUE, Intensity, grams_co2, intensity

J_PER_KWH = 3.6e6


def si(value: float, unit: str) -> str:
    """A value with an SI prefix chosen so that 1 <= mantissa < 1000 (energies of a board run span 1e-9..1e3 J)."""
    if value == 0:
        return f"0 {unit}"
    for scale, prefix in ((1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"), (1e-12, "p")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def clock(seconds: float) -> str:
    """h:mm:ss as carbontracker prints it, with milliseconds: a board step takes milliseconds."""
    ms = round(seconds * 1e3)
    return f"{ms // 3_600_000}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


@dataclass(frozen=True)
class Prediction:
    """Totals of a whole run, predicted or actual; energy includes the PUE, as codecarbon's does."""

    epochs: int
    steps: int
    energy_j: float
    time_s: float
    co2_g: float
    basis: str  # how it was made, e.g. "plan" or "2 of 5 epochs measured"
    grid: Intensity

    @property
    def energy_kwh(self) -> float:
        return self.energy_j / J_PER_KWH

    def line(self, what: str = "predicted") -> str:
        return (f"{what} for {self.epochs} epoch(s), {self.steps} step(s) ({self.basis}): time {clock(self.time_s)}, "
                f"energy {si(self.energy_j, 'J')} ({self.energy_kwh:.3g} kWh), {si(self.co2_g, 'g')}CO2eq "
                f"[{self.grid.line()}]")


def _totals(epochs: int, steps: int, energy_j: float, time_s: float, basis: str, grid: Intensity | None,
            pue: float) -> Prediction:
    grid = grid if grid is not None else intensity()
    energy_j *= pue  # as codecarbon: the energy columns already include the PUE
    return Prediction(epochs, steps, energy_j, time_s, grams_co2(energy_j, grid.g_per_kwh, pue=1.0), basis, grid)


def plan_prediction(energy_per_step_j: float, time_per_step_s: float, steps: int, epochs: int = 1,
                    grid: Intensity | None = None, pue: float = BOARD_PUE) -> Prediction:
    """Before a run: the planner's modelled energy and time of one step (Plan.energy_j, Plan.time_s) x steps.

    No per-epoch overhead is known before a run, so none is added; grid None is the world average.
    """
    if steps < 0 or not _non_negative(energy_per_step_j, time_per_step_s):
        raise ValueError("steps, energy and time per step must be finite and >= 0")
    return _totals(epochs, steps, energy_per_step_j * steps, time_per_step_s * steps, "plan", grid, pue)


@dataclass(frozen=True)
class Epoch:
    """What one epoch cost, measured (a power meter) or modelled (trace x board model)."""

    steps: int
    energy_j: float  # of its training steps
    time_s: float
    overhead_j: float = 0.0  # of the rest of the epoch (e.g. an evaluation pass), measured apart from the steps
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        # a NaN or an infinity here would surface as a prediction of nan J, or fail in clock()
        if self.steps < 0 or not _non_negative(self.energy_j, self.time_s, self.overhead_j, self.overhead_s):
            raise ValueError(f"an epoch's steps, energies and times must be finite and >= 0: {self}")


def _non_negative(*xs: float) -> bool:
    return all(math.isfinite(x) and x >= 0 for x in xs)


@dataclass
class RunPredictor:
    """Feed it each epoch as it ends; after `after` epochs it predicts the run, at the end it compares.

    total_steps is the run's step count (the epochs need not be of equal length).
    """

    epochs: int
    total_steps: int
    grid: Intensity | None = None
    pue: float = BOARD_PUE
    after: int = 1  # carbontracker's epochs_before_pred, default 1 as there
    # the first epoch whose steps are like those left: a run keeping features (poet.run.features) pays its
    # first epoch's steps apart, so the steps left are predicted from the second on
    like_rest: int = 0
    seen: list[Epoch] = field(default_factory=list)
    prediction: Prediction | None = None

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.total_steps < self.epochs:
            raise ValueError(f"a run needs >= 1 epoch and >= 1 step per epoch (got {self.epochs} epochs, "
                             f"{self.total_steps} steps)")
        if not 1 <= self.after <= self.epochs:
            raise ValueError(f"after={self.after}: predict after 1..{self.epochs} epochs")
        if not 0 <= self.like_rest < self.after:
            raise ValueError(f"like_rest={self.like_rest}: one of the {self.after} epochs predicted from")

    def add(self, epoch: Epoch) -> Prediction | None:
        """Record an epoch; returns the prediction on the epoch it is made (the `after`-th), else None."""
        if len(self.seen) == self.epochs:
            raise ValueError(f"all {self.epochs} epochs were already recorded")
        self.seen.append(epoch)
        if len(self.seen) == self.after:
            self.prediction = self.predict()
            return self.prediction
        return None

    def predict(self) -> Prediction:
        """Measured so far + mean step x steps left + mean epoch overhead x epochs left."""
        if not self.seen:
            raise ValueError("no epoch measured yet: use plan_prediction before a run")
        done = measured(self.seen)
        steps_seen = sum(e.steps for e in self.seen)
        if steps_seen == 0:
            raise ValueError("the measured epochs ran no step")
        steps_left = self.total_steps - steps_seen
        if steps_left < 0:
            raise ValueError(f"{steps_seen} steps measured, more than the run's {self.total_steps}")
        epochs_left = self.epochs - len(self.seen)
        like = self.seen[self.like_rest:] if len(self.seen) > self.like_rest else self.seen
        steps_like = sum(e.steps for e in like) or steps_seen
        step_j = sum(e.energy_j for e in like) / steps_like
        step_s = sum(e.time_s for e in like) / steps_like
        over_j = sum(e.overhead_j for e in self.seen) / len(self.seen)
        over_s = sum(e.overhead_s for e in self.seen) / len(self.seen)
        energy = done[0] + step_j * steps_left + over_j * epochs_left
        time = done[1] + step_s * steps_left + over_s * epochs_left
        return _totals(self.epochs, self.total_steps, energy, time,
                       f"{len(self.seen)} of {self.epochs} epochs measured", self.grid, self.pue)

    def actual(self) -> Prediction:
        """The run's totals from every epoch recorded (call it when the run has ended)."""
        e, t = measured(self.seen)
        steps = sum(x.steps for x in self.seen)
        return _totals(len(self.seen), steps, e, t, f"{len(self.seen)} epochs measured", self.grid, self.pue)


def measured(epochs: Sequence[Epoch]) -> tuple[float, float]:
    """(joules, seconds) of the given epochs, steps and overhead together."""
    return (sum(e.energy_j + e.overhead_j for e in epochs), sum(e.time_s + e.overhead_s for e in epochs))


def per_epoch_extrapolation(seen: Sequence[Epoch], epochs: int) -> tuple[float, float]:
    """carbontracker's prediction, for comparison: the mean measured epoch x the number of epochs (J, s)."""
    e, t = measured(seen)
    return e / len(seen) * epochs, t / len(seen) * epochs


@dataclass(frozen=True)
class Comparison:
    predicted: Prediction
    actual: Prediction

    @property
    def energy_error(self) -> float:
        """(predicted - actual) / actual: positive when the prediction was high."""
        return _rel(self.predicted.energy_j, self.actual.energy_j)

    @property
    def time_error(self) -> float:
        return _rel(self.predicted.time_s, self.actual.time_s)

    def lines(self) -> list[str]:
        return [self.actual.line("actual"),
                f"prediction error ({self.predicted.basis}): energy {self.energy_error:+.3%}, "
                f"time {self.time_error:+.3%}"]


def _rel(predicted: float, actual: float) -> float:
    if actual == 0:
        return 0.0 if predicted == 0 else float("inf")
    return (predicted - actual) / actual


def compare(predicted: Prediction, actual: Prediction) -> Comparison:
    return Comparison(predicted, actual)
