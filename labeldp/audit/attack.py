"""The attack the features party could mount, scored against the truth (``labeldp audit attack``).

The features party holds features and the released bins. It trains a model of ``P(released bin | x)``
(gradient boosting), inverts the randomized response into ``P(label's bin | x)`` (its prior about each
example's label from the features), and combines that with the example's own released bin by Bayes'
rule. Cross-fitting (two halves by a hash of the example ID) keeps the two apart: the model that
scores an example never saw that example's released bin, so "without the release" means the features
and everyone else's bins.

Reported beside each other: the measured accuracy of guessing each example's target (its bin, or
class) without and with its released bin — the measured additive advantage, with a Wilson interval —
and the exact expected advantages for the same priors (``labeldp.mechanisms.advantage``); optionally
the same priors against a baseline channel (Laplace noise), for the demo's comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sklearn.ensemble import HistGradientBoostingClassifier

from features_party.training.fit import Encoder, validation_mask
from labeldp.mechanisms import PublishedMechanism, explicit_support
from labeldp.mechanisms.advantage import Advantages, advantages, targets_of
from labeldp.mechanisms.empirical import attack, targets_from_noisy_model

ITERATIONS = 60
MIN_EXAMPLES = 100
FLOOR = 1e-4  # the inverted estimate keeps every bin possible: a fitted model is never a certainty


class AuditInputError(ValueError):
    """Inputs that cannot be audited (missing columns, too few joined examples)."""


@dataclass(frozen=True)
class AttackResult:
    measured: dict[str, float]  # accuracy without / with the release against the true targets
    exact: Advantages  # per example, for the attacker's priors
    support_priors: np.ndarray  # n × k: each example's prior over the support (for baselines)
    true_labels: np.ndarray


def run_attack(
    published: PublishedMechanism,
    released: pa.Table,
    features: pa.Table,
    truth: pa.Table,
    *,
    alpha: float = 0.05,
) -> AttackResult:
    """``released``: ``example_id, bin`` (as delivered); ``features``: ``example_id`` and feature
    columns; ``truth``: ``example_id, label``. Examples in all three (and with label information) are
    attacked."""
    for name, table, needed in (
        ("released", released, ("example_id", "bin")),
        ("features", features, ("example_id",)),
        ("truth", truth, ("example_id", "label")),
    ):
        missing = [c for c in needed if c not in table.column_names]
        if missing:
            raise AuditInputError(f"{name} needs the column(s) {', '.join(missing)}")
    joined = (
        released.select(["example_id", "bin"])
        .join(truth.select(["example_id", "label"]), keys="example_id", join_type="inner")
        .join(features, keys="example_id", join_type="inner")
    )
    joined = joined.filter(pc.less(joined.column("bin"), published.m))  # capped clicks carry nothing
    if joined.num_rows < MIN_EXAMPLES:
        raise AuditInputError(
            f"only {joined.num_rows} examples are in the release, the truth and the features "
            f"(at least {MIN_EXAMPLES} are needed)"
        )
    columns = [c for c in features.column_names if c != "example_id"]
    if not columns:
        raise AuditInputError("features has no feature column besides example_id")
    categorical = [
        c
        for c in columns
        if not pa.types.is_floating(joined.schema.field(c).type)
        and not pa.types.is_integer(joined.schema.field(c).type)
    ]
    outputs = np.asarray(joined.column("bin").to_numpy(), dtype=np.int64)
    labels = np.asarray(pc.cast(joined.column("label"), pa.float64()).to_numpy(zero_copy_only=False))
    # two folds by a hash of the example ID (the features party's own deterministic split)
    half = validation_mask(joined.column("example_id").combine_chunks(), 0.5)
    noisy_probs = np.zeros((joined.num_rows, published.m))
    for score in (half, ~half):
        train = ~score
        encoder = Encoder(columns, categorical).fit(joined.filter(pa.array(train)))
        X = encoder.transform(joined)
        seen = np.unique(outputs[train])
        if seen.size < 2:  # one bin only: the model predicts it with certainty
            noisy_probs[np.ix_(score, seen)] = 1.0
            continue
        model = HistGradientBoostingClassifier(
            max_iter=ITERATIONS, categorical_features=encoder.categorical_mask or None, early_stopping=False
        )
        model.fit(X[train], outputs[train])
        noisy_probs[np.ix_(score, model.classes_.astype(np.int64))] = model.predict_proba(X[score])
    target_priors = targets_from_noisy_model(published, noisy_probs, FLOOR)
    support_priors = _spread_to_support(published, target_priors)
    truth_targets = targets_of(published)[explicit_support(published.support).snap(labels)]
    measured = attack(published, target_priors, outputs, truth_targets).summary(alpha)
    return AttackResult(measured, advantages(published, support_priors), support_priors, labels)


def _spread_to_support(published: PublishedMechanism, target_priors: np.ndarray) -> np.ndarray:
    """A prior over targets as one over the support: within a bin, in the proportions of the noisy
    prior the release published (RR-Top-k: targets are the support points already)."""
    if published.kind != "rr_on_bins":  # RR-Top-k's classes, the unbiased randomizer's support points
        return target_priors
    bins = np.asarray(published.support_bins, dtype=np.int64)
    prior = np.asarray(published.prior, dtype=np.float64) + 1e-12  # no point of a bin left impossible
    within = prior / np.bincount(bins, weights=prior, minlength=published.m)[bins]
    return np.asarray(target_priors[:, bins] * within[None, :])
