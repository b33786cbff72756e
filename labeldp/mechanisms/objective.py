"""What a release's bins are optimized for: each label, or the model trained on the release.

``label`` is the paper's objective: the expected loss of one released label (Algorithm 2 at the ε the
labels are randomized with). ``model`` is the error of a model that learns from ``n`` released labels:
the bins' own error (a bias more data never removes) plus the affine-debiased noise's variance over an
effective sample size ``n_eff = n / capacity``, which averages away. To first order that error is
Algorithm 2's objective at a larger **objective ε** ``ε_L`` with

    e^{ε_L} − 1 = n_eff · (e^ε − 1)² / e^ε,

so the same exact optimizer (and the same linear program as its check) serves both; the labels are
still randomized at ε. docs/math.md §12 derives it. Everything here reads public quantities only: ε,
the number of released examples (the listed IDs) and the declared capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from labeldp.mechanisms.validation import MAX_EPSILON, ParameterError, check_epsilon

ObjectiveName = Literal["label", "model"]
OBJECTIVES: tuple[ObjectiveName, ...] = get_args(ObjectiveName)
# The default for each loss from LEARNING_AWARE_FROM_EPSILON up: model where the generalization benchmark
# shows that it never loses to the label objective or a baseline (squared loss; BENCHMARKS.md,
# "Generalization"), label elsewhere; below that ε, label for every loss.
DEFAULT_OBJECTIVES: dict[str, ObjectiveName] = {"squared": "model"}
# Below this ε (the one the labels are randomized with, ε₂) the defaults are not learning-aware: a model
# cannot average away the unbiased randomizer's variance, and the label objective's few wide bins train
# the best model for every loss measured (BENCHMARKS.md, "The unbiased randomizer against RR-on-Bins":
# weeks at ε = 0.1, 479 against 565 for the model objective; prices tied). From it up the default
# mechanism is the unbiased randomizer where it runs (``factory.default_mechanism``).
LEARNING_AWARE_FROM_EPSILON = 0.2  # the grid's cells: ε₂ ≤ 0.082 at ε = 0.1, ≥ 0.23 at ε = 0.3
# Examples' worth of parameters a model fits: n_eff = n / capacity. Fitted once on public synthetic
# data for the features party's gradient boosting (benchmarks/bench_generalization.py, "capacity").
DEFAULT_MODEL_CAPACITY = 1000.0
MAX_MODEL_CAPACITY = 1e12


def default_objective(loss: str, epsilon: float | None = None) -> ObjectiveName:
    """The objective a release of ``loss`` whose labels are randomized at ``epsilon`` uses unless its
    request names one (a public rule; ``None``: ε not yet known, the loss's own default)."""
    if epsilon is not None and epsilon < LEARNING_AWARE_FROM_EPSILON:
        return "label"
    return DEFAULT_OBJECTIVES.get(loss, "label")


def check_objective(objective: str) -> ObjectiveName:
    if objective not in OBJECTIVES:
        raise ParameterError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}", "objective"
        )
    return objective


def check_model_capacity(capacity: float) -> float:
    value = float(capacity)
    if not math.isfinite(value) or not 1.0 <= value <= MAX_MODEL_CAPACITY:
        raise ParameterError(
            f"model_capacity must be a number in [1, {MAX_MODEL_CAPACITY:g}], got {capacity!r}",
            "model_capacity",
        )
    return value


def effective_examples(examples: int, capacity: float) -> float:
    """``n / capacity``, at least one example."""
    if examples < 0:
        raise ParameterError(f"examples must be non-negative, got {examples}", "examples")
    return max(examples / check_model_capacity(capacity), 1.0)


def model_objective_epsilon(epsilon: float, examples: int, capacity: float = DEFAULT_MODEL_CAPACITY) -> float:
    """``ε_L`` for labels randomized at ``epsilon`` that train a model on ``examples`` of them:
    ``log(1 + n_eff·e^ε·(1 − e^{−ε})²)``, never below ``epsilon`` (a model is never worse served by
    finer bins than one label is), nor above ``MAX_EPSILON`` (where the bins are exact anyway).
    Computed in logs, so it is finite for every ε."""
    eps = check_epsilon(epsilon)
    n_eff = effective_examples(examples, capacity)
    log_gain = math.log(n_eff) + eps + 2.0 * math.log(-math.expm1(-eps))
    eps_l = log_gain + math.log1p(math.exp(-log_gain)) if log_gain > 0 else math.log1p(math.exp(log_gain))
    return max(eps, min(eps_l, MAX_EPSILON))


def objective_epsilon(
    objective: ObjectiveName, epsilon: float, examples: int, capacity: float = DEFAULT_MODEL_CAPACITY
) -> float | None:
    """The ε the bins are optimized at: ``None`` for ``label`` (the randomization's own ε)."""
    if check_objective(objective) == "label":
        return None
    return model_objective_epsilon(epsilon, examples, capacity)


@dataclass(frozen=True)
class Objective:
    """A release's objective as its request states it: the name and, for ``model``, the declared
    capacity of the model that will train on it."""

    name: ObjectiveName
    model_capacity: float = DEFAULT_MODEL_CAPACITY

    def __post_init__(self) -> None:
        check_objective(self.name)
        object.__setattr__(self, "model_capacity", check_model_capacity(self.model_capacity))

    @classmethod
    def of(
        cls, objective: Objective | ObjectiveName | None, loss: str, epsilon: float | None = None
    ) -> Objective:
        """``objective`` as asked, or when it is ``None`` the default for ``loss`` and the ε the labels
        are randomized at (``default_objective``)."""
        if isinstance(objective, Objective):
            return objective
        return cls(default_objective(loss, epsilon) if objective is None else objective)

    def epsilon_for(self, epsilon: float, examples: int) -> float | None:
        """The ε the bins are optimized at for ``examples`` labels randomized at ``epsilon``."""
        return objective_epsilon(self.name, epsilon, examples, self.model_capacity)
