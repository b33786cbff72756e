"""A model's prices for requested examples: each example's predicted label distribution on the
dataset's support, grouped by the public rule of ``labeldp.priors``.

* **regression**: the model's debiased prediction ``μ`` with one spread ``σ`` for every example, read
  from the model's held-out metric against the binned true labels (an unbiased estimate, computed from
  the release's noise: never from a label of the examples priced) at its upper end, mean + 2 standard
  errors: ``σ`` is its square root under squared loss, √(π/2) times it under absolute loss; at least
  what the model leaves unexplained of the release's noisy prior (``Var_π(y) − Var(μ)`` over the
  examples priced), at most that prior's spread (a model that predicts worse than the prior adds
  nothing), and at least one grid step (the estimate can even be negative on a small validation split,
  and an unbiased release's is noisy);
* **classes** (RR-Top-k releases): the classifier's probabilities of the reported classes, placed on
  their support points; the classes the release did not report share the mass it estimated for them
  (the noisy prior's, ``BinsNoise.outside_mass``) evenly.

An example without a feature row gets no group. Predictions run a batch at a time, so pricing many
examples holds the model's working memory for one batch only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from features_party.pricing.grants import SPREAD_METRIC
from features_party.storage.orm import TrainingJob
from features_party.training.fit import STANDARD_ERROR, Trained, TrainedClassifier
from labeldp.common.errors import DomainError
from labeldp.mechanisms import PublishedMechanism, Support
from labeldp.priors import TWO_POINT_FLOOR, Priced, price_classes, price_values

PREDICT_BATCH = 1 << 20  # rows predicted at a time
# σ is read at the estimate's upper end: a prior too narrow for the truth puts labels in bins far from
# them, one too wide only costs some of the gain (measured: BENCHMARKS.md, feature-aware releases)
SPREAD_ERRORS = 2.0


@dataclass(frozen=True)
class Prices:
    priced: Priced
    rule: str  # the public rule that produced the groups, in words


def spread(
    job: TrainingJob, support: Support, prior: npt.ArrayLike | None, predicted: npt.ArrayLike | None = None
) -> float:
    """The regression model's σ (module docstring; ``spread_of``) from its training job's metrics and
    its ``predicted`` values of the examples priced."""
    metric = job.metrics.get(SPREAD_METRIC)
    if not isinstance(metric, int | float) or not math.isfinite(metric):
        raise DomainError(
            "model-not-priceable", f"model {job.id} has no held-out {SPREAD_METRIC}", status=409
        )
    error = job.metrics.get(STANDARD_ERROR)  # absent on models trained before it was kept: 0
    return spread_of(
        float(metric),
        float(error) if isinstance(error, int | float) else 0.0,
        job.loss,
        support,
        prior,
        predicted,
    )


def spread_of(
    metric: float,
    error: float,
    loss: str,
    support: Support,
    prior: npt.ArrayLike | None,
    predicted: npt.ArrayLike | None = None,
) -> float:
    """σ from the held-out estimate ``metric`` and its standard error, at the estimate's upper end
    (``SPREAD_ERRORS`` standard errors above it) — and at least what the model leaves unexplained of
    the noisy ``prior``'s variance, ``Var_π(y) − Var(f(x))`` over the ``predicted`` values (a
    calibrated model's error; the held-out estimate of an unbiased release can land far below the
    truth: prices at ε = 1, once in five, 1,619² against a model error of about 2,850²). At most the
    prior's own spread, at least one grid step. ``prior`` ``None``: the model's release states no
    estimate of its labels (a feature-aware release whose every example had a group publishes the
    uniform prior, which no example used): the estimate's upper end alone, at least one grid step."""
    values = support.values
    step = float(np.min(np.diff(values))) if values.size > 1 else 1.0
    upper = metric + SPREAD_ERRORS * error
    deviation = math.sqrt(max(upper, 0.0)) if loss == "squared" else max(upper, 0.0) * math.sqrt(math.pi / 2)
    if prior is None:
        return max(deviation, step)
    p = np.asarray(prior, dtype=np.float64)
    p = p / p.sum()
    variance = max(float(p @ values**2 - (p @ values) ** 2), 0.0)
    f = np.asarray(predicted if predicted is not None else [], dtype=np.float64)
    f = f[np.isfinite(f)]
    if f.size > 1:
        deviation = max(deviation, math.sqrt(max(variance - float(np.var(f)), 0.0)))
    return max(min(deviation, math.sqrt(variance)), step)


def _predict(trained: Trained, features: pa.Table) -> npt.NDArray[np.float64]:
    parts = [
        trained.predict(features.slice(start, PREDICT_BATCH))
        for start in range(0, features.num_rows, PREDICT_BATCH)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


def on_support(
    probabilities: npt.NDArray[np.float64], mechanism: PublishedMechanism
) -> npt.NDArray[np.float64]:
    """Probabilities of the reported classes (rows summing to the reported mass 1 − π) as masses on
    every support point: a reported class's at its point, π shared evenly by the unreported ones."""
    bins = np.asarray(mechanism.support_bins, dtype=np.int64)
    out = np.zeros((probabilities.shape[0], bins.size))
    reported = bins >= 0
    out[:, reported] = probabilities[:, bins[reported]]
    unreported = int((~reported).sum())
    if unreported:
        outside = float(sum(p for p, b in zip(mechanism.prior, bins, strict=True) if b < 0))
        out[:, ~reported] = outside / unreported
    return out


def price(
    ids: pa.Array,
    table: pa.Table,
    job: TrainingJob,
    trained: Trained,
    mechanism: PublishedMechanism,
    max_groups: int,
) -> Prices:
    """Groups and group priors of ``ids`` (in their order) from ``trained``'s predictions on the rows of
    the feature table ``table`` that have them."""
    position = pc.index_in(ids, value_set=table.column("example_id"))
    has = np.asarray(pc.is_valid(position).to_numpy(zero_copy_only=False), dtype=bool)
    rows = table.take(pc.drop_null(position)) if has.any() else table.slice(0, 0)
    support = Support(np.asarray(mechanism.support, dtype=np.float64))
    if isinstance(trained, TrainedClassifier):
        probabilities = np.full((len(ids), support.k), np.nan)
        if has.any():
            probabilities[has] = on_support(_predict(trained, rows).reshape(int(has.sum()), -1), mechanism)
        priced = price_classes(probabilities, max_groups)
        rule = (
            "quantiles of the predicted probability of the higher class; a group's prior the mean of its "
            "members' predicted class probabilities"
            if support.k == 2
            else "the most likely predicted class, then quantiles of its probability; a group's prior the "
            "mean of its members' predicted class probabilities"
        )
        return Prices(priced, rule)
    predicted = np.full(len(ids), np.nan)
    if has.any():
        predicted[has] = _predict(trained, rows)
    # the release's noisy prior bounds σ when it is an estimate of the labels (ε₁ > 0)
    sigma = spread(job, support, mechanism.prior if mechanism.epsilon_prior > 0 else None, predicted)
    scale = two_point_scale(mechanism)
    a, b = scale or (float(support.values[0]), float(support.values[-1]))
    rule = (
        f"quantiles of the predicted value, normal spread σ={sigma:.6g} (the held-out error's upper end, at "
        "least what the model leaves unexplained of its release's prior); a group's prior the sum of its "
        "members' normal distributions on the support's cells"
        if support.k != 2
        else "on two points the predicted mean is the distribution: P(upper) = (μ − a)/(b − a) within "
        f"[{TWO_POINT_FLOOR}, {1 - TWO_POINT_FLOOR}] (a = {a:.6g}, b = {b:.6g}: what the model predicts for "
        "each point), quantiles of it; a group's prior the mean of its members'"
    )
    return Prices(price_values(predicted, sigma, support, max_groups, scale=scale), rule)


def two_point_scale(mechanism: PublishedMechanism) -> tuple[float, float] | None:
    """On two points, what a model trained on ``mechanism``'s release predicts for a label at each: the
    value of its bin (RR-on-Bins: the trainer's correction recovers the binned label), or the point
    itself (the unbiased randomizer: its outputs' mean is the label)."""
    if len(mechanism.support) != 2 or mechanism.kind == "unbiased":
        return None
    values = np.asarray(mechanism.bin_values, dtype=np.float64)[np.asarray(mechanism.support_bins)]
    return float(values[0]), float(values[1])
