"""Fitting a model on a received release joined to a feature table.

The validation split is a deterministic function of the example ID (a BLAKE2b hash), so it needs no
random generator and a retrained model sees the same split. Regression releases train
``HistGradientBoostingRegressor`` with the loss matched to the release (squared, absolute, Poisson) and
native categorical handling, or a linear baseline; ``debias`` is ``none``, ``affine`` (correct the
predictions) or ``unbiased`` (train on the unbiased targets; squared and absolute loss only, since the
targets can be negative). A release of the unbiased randomizer needs none of that: its outputs have the
label as their mean, so the estimator is fit by least squares to them (for either loss it serves: the
Poisson loss's best prediction is the mean too, and scikit-learn's Poisson losses refuse the negative
outputs) and only its predictions are clipped into the labels' range (``UnbiasedRegressor``; ``debias``
does not apply; gradient boosting stops early on held-out rows, which unbiased targets make a fair
judge). Validation reports the loss against the noisy labels and an unbiased estimate of the
loss against the binned true labels (``BinsNoise.unbiased_loss``, ``UnbiasedNoise.unbiased_loss``).

A feature-aware release randomized each group's examples with the group's own mechanism (the rest with
the release's): no correction applied to a model's predictions can undo a mixture of transitions, so
each row is debiased by its own mechanism before fitting (``GroupedNoise``). ``affine`` and
``unbiased`` then both train on every row's unbiased target, weighted ``1 / E[(target − label)²]`` of
its mechanism (normalized to mean 1: a noisier group counts less), and the model predicts with no
wrapper and no group (gradient boosting stops early on held-out rows, as for an unbiased release);
``none`` trains on the noisy values. Validation estimates each row's loss with
its own mechanism, so the estimate stays unbiased (``features_party.training.distributed.fit_on_cluster``
does the same on a cluster). Classification releases with groups are refused (``check_grouped``).

The result is one scikit-learn ``Pipeline`` (column encoding, the estimator, and the affine correction
or the classifier's debiasing as a wrapper of the estimator): it is what the service predicts with and
what ``GET /v1/models/{id}/artifact`` exports, so the two cannot disagree. Every type in it is
scikit-learn's, numpy's or the small ``labeldp_model`` package's (the wrappers and the release's
``BinsCorrection``), so the artifact loads without labeldp.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.common.errors import DomainError
from labeldp.mechanisms import BinsNoise, GroupedNoise, resolve_loss
from labeldp.mechanisms.debias import ReleaseNoise, UnbiasedNoise

if TYPE_CHECKING:
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
# scikit-learn (and labeldp_model's estimators, built on it) load where a model is fitted: they are
# half of the features party's start-up (tests/project/test_packaging.py)

ModelKind = Literal["hgb", "linear"]
Progress = Callable[[dict[str, float]], None]
HGB_ITERATIONS = 200
HGB_STEP = 25  # boosting iterations between progress reports (warm start)
EARLY_STOPPING_FRACTION = 0.1  # unbiased targets: rows gradient boosting holds out to stop early
EARLY_STOPPING_ROUNDS = 10
Debias = Literal["none", "affine", "unbiased"]
MAX_CATEGORIES = 250  # HistGradientBoosting handles at most 255 categories per feature
# scikit-learn's name for each regression loss a release can be optimized for (labeldp.mechanisms.losses)
SKLEARN_LOSS = {"squared": "squared_error", "absolute": "absolute_error", "poisson": "poisson"}


# the standard error of the held-out unbiased loss estimate: how far a pricing spread read from it can
# be trusted (features_party.pricing.prices.spread)
STANDARD_ERROR = "validation_loss_vs_binned_true_labels_unbiased_se"


def standard_error(total: float, squares: float, n: int) -> float:
    """The standard error of a mean of ``n`` values from their sum and sum of squares (0 below 2)."""
    if n < 2:
        return 0.0
    mean = total / n
    return math.sqrt(max(squares - n * mean * mean, 0.0) / (n - 1) / n)


class TrainingError(DomainError):
    """A training request that cannot work (kept on the job, or answered 422 before it starts)."""

    def __init__(self, message: str, code: str = "training-refused") -> None:
        super().__init__(code, message)


def validation_mask(ids: pa.Array, fraction: float) -> npt.NDArray[np.bool_]:
    """True for the examples in the validation split (a hash of the example ID, no randomness)."""
    if not 0 < fraction < 1:
        raise TrainingError("validation_fraction must be in (0, 1)")
    cut = int(fraction * 2**32)
    out = np.empty(len(ids), dtype=bool)
    for i, example_id in enumerate(ids.to_pylist()):
        digest = hashlib.blake2b(example_id.encode(), digest_size=4, person=b"labeldp-split").digest()
        out[i] = int.from_bytes(digest, "little") < cut
    return out


def feature_frame(table: pa.Table, columns: list[str], categorical: list[str]) -> pd.DataFrame:
    """The columns as the exported pipeline takes them: categorical ones as text, the rest as floats."""
    typed = {
        name: pc.cast(table.column(name), pa.string() if name in categorical else pa.float64())
        for name in columns
    }
    return pa.table(typed).to_pandas()


@dataclass
class Encoder:
    """The feature columns as the model sees them, as a scikit-learn ``ColumnTransformer`` (the first
    step of the exported pipeline). Categorical columns (read as text) keep their ``MAX_CATEGORIES``
    most frequent values of the training split; gradient boosting gets their ordinal codes (unseen and
    missing values missing) and numbers as they are; linear models get one-hot columns (unseen values
    all zero) and numbers with missing values imputed by the median and standardized."""

    columns: list[str]
    categorical: list[str]
    linear: bool = False
    transformer: ColumnTransformer | None = None

    @property
    def numeric(self) -> list[str]:
        return [c for c in self.columns if c not in self.categorical]

    def frame(self, table: pa.Table) -> pd.DataFrame:
        return feature_frame(table, self.columns, self.categorical)

    def fit(self, table: pa.Table) -> Encoder:
        counts = []
        for name in self.categorical:
            pairs = pc.value_counts(pc.cast(table.column(name), pa.string()).combine_chunks()).to_pylist()
            counts.append({c["values"]: c["counts"] for c in pairs if c["values"] is not None})
        return self.fit_with(counts, table)

    def fit_with(self, counts: list[dict[str, int]], table: pa.Table) -> Encoder:
        """Fit with each categorical column's value counts over the training split given (e.g. summed
        over a cluster's partitions); ``table`` is the training split, or for gradient boosting any
        sample of it (ordinal codes and passed-through numbers learn nothing else from it)."""
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

        categories = [
            [v for v, _ in sorted(c.items(), key=lambda p: (-p[1], p[0]))[:MAX_CATEGORIES]] for c in counts
        ]
        if self.linear:
            encode: Any = OneHotEncoder(categories=categories, handle_unknown="ignore", sparse_output=False)
            scale: Any = make_pipeline(
                SimpleImputer(strategy="median", keep_empty_features=True), StandardScaler()
            )
        else:
            encode = OrdinalEncoder(
                categories=categories,
                handle_unknown="use_encoded_value",
                unknown_value=np.nan,
                encoded_missing_value=np.nan,
            )
            scale = "passthrough"
        self.transformer = ColumnTransformer(
            [("categorical", encode, self.categorical), ("numeric", scale, self.numeric)],
            verbose_feature_names_out=False,
        ).fit(self.frame(table))
        return self

    def transform(self, table: pa.Table) -> npt.NDArray[np.float64]:
        if self.transformer is None:
            raise TrainingError("the encoder is not fitted")
        return np.asarray(self.transformer.transform(self.frame(table)), dtype=np.float64)

    @property
    def categorical_mask(self) -> list[bool]:
        """Which of the transformed columns are category codes (categorical ones come first)."""
        return [True] * len(self.categorical) + [False] * len(self.numeric)


@dataclass
class Trained:
    """A fitted model: ``model`` is the exported scikit-learn ``Pipeline`` (encoding, estimator and the
    release's debiasing); it takes a data frame of the raw feature ``columns``."""

    model: Pipeline
    columns: list[str]
    categorical: list[str]
    noise: ReleaseNoise
    loss: str
    debias: Debias
    metrics: dict[str, float]

    def predict(self, features: pa.Table) -> npt.NDArray[np.float64]:
        frame = feature_frame(features, self.columns, self.categorical)
        return np.asarray(self.model.predict(frame), dtype=np.float64)


def fit_in_steps(
    estimator: Any,
    X: np.ndarray,
    y: np.ndarray,
    progress: Progress | None,
    sample_weight: np.ndarray | None = None,
) -> None:
    """Fit, reporting iterations, elapsed time and an ETA: gradient boosting is grown ``HGB_STEP``
    iterations at a time with warm starts (same result as one fit); other models in one go."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    if not isinstance(estimator, HistGradientBoostingClassifier | HistGradientBoostingRegressor):
        estimator.fit(X, y, sample_weight=sample_weight)
        return
    start = time.monotonic()
    total = int(estimator.max_iter)
    estimator.set_params(warm_start=True)
    done = 0
    while done < total:
        done = min(total, done + HGB_STEP)
        estimator.set_params(max_iter=done)
        estimator.fit(X, y, sample_weight=sample_weight)
        if int(estimator.n_iter_) < done:  # stopped early: growing it again would only add rounds
            total = done = int(estimator.n_iter_)
        elapsed = time.monotonic() - start
        if progress is not None:
            progress(
                {
                    "iterations": float(done),
                    "iterations_total": float(total),
                    "elapsed_s": elapsed,
                    "eta_s": elapsed / done * (total - done),
                    "training_examples": float(len(y)),
                }
            )


def regressor(model: ModelKind, loss: str, encoder: Encoder, *, early_stopping: bool = False) -> Any:
    """The unfitted estimator for a model kind and loss (also what the demo's baselines train).

    ``early_stopping``: gradient boosting holds out ``EARLY_STOPPING_FRACTION`` of its training rows
    and stops when their loss has not improved for ``EARLY_STOPPING_ROUNDS`` iterations — for an
    unbiased release, whose targets' noise is zero-mean, the held-out squared loss against the noisy
    targets is the loss against the true labels plus a constant, so it stops where the true loss does."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import PoissonRegressor, Ridge

    if model == "hgb":
        stopping: dict[str, Any] = {"early_stopping": False}
        if early_stopping:
            stopping = {
                "early_stopping": True,
                "validation_fraction": EARLY_STOPPING_FRACTION,
                "n_iter_no_change": EARLY_STOPPING_ROUNDS,
                "random_state": 0,  # the held-out rows, reproducibly (not a privacy-relevant draw)
            }
        return HistGradientBoostingRegressor(
            loss=SKLEARN_LOSS[loss],
            categorical_features=encoder.categorical_mask or None,
            max_iter=200,
            **stopping,
        )
    if loss == "poisson":
        return PoissonRegressor(alpha=1e-4, max_iter=300)
    return Ridge(alpha=1.0)


def encoder_for(schema: dict[str, str], features: pa.Table | list[str], *, linear: bool) -> Encoder:
    """An unfitted encoder for the schema's columns present in the feature table (or column names)."""
    names = features if isinstance(features, list) else features.column_names
    columns = [c for c in schema if c in names]
    return Encoder(columns, [c for c in columns if schema[c] == "categorical"], linear=linear)


def join_informative(
    release: pa.Table, features: pa.Table, noise: ReleaseNoise, groups: GroupedNoise | None = None
) -> tuple[pa.Table, int]:
    """The release joined to the features, without the examples over a user-level release's bound
    (bin code ``m`` and no group: their noisy label carries no information, so training on it would
    only add noise); and how many of the joined examples were such."""
    joined = release.join(features, keys="example_id", join_type="inner")
    informative = pc.less(joined.column("bin"), noise.m)
    if groups is not None:
        informative = pc.or_(informative, pc.greater_equal(joined.column("group"), 0))
    kept = joined.filter(informative)
    if kept.num_rows < 10:
        raise TrainingError(
            f"only {kept.num_rows} examples with label information are in both the release and the "
            "feature table"
        )
    return kept, joined.num_rows - kept.num_rows


def fit(
    release: pa.Table,
    features: pa.Table,
    schema: dict[str, str],
    noise: ReleaseNoise,
    loss: str,
    *,
    model: ModelKind = "hgb",
    debias: Debias = "affine",
    validation_fraction: float = 0.2,
    progress: Progress | None = None,
    groups: GroupedNoise | None = None,
) -> Trained:
    """``release`` has ``example_id, bin`` (and ``group`` for a feature-aware release, whose
    mechanisms ``groups`` holds); ``features`` has ``example_id`` and the schema's columns."""
    from sklearn.pipeline import Pipeline

    # an unbiased release has no groups (the receiver refuses such a message): ``groups`` with one are
    # several releases trained together, the unbiased one a mechanism among them
    of_unbiased = isinstance(noise, UnbiasedNoise)
    if not of_unbiased or groups is not None:
        check_regression(loss, debias, grouped=groups is not None)
    elif loss not in SKLEARN_LOSS:
        raise TrainingError(f"regression models take loss {sorted(SKLEARN_LOSS)}, got {loss!r}")
    joined, capped = join_informative(release, features, noise, groups)
    bins = np.asarray(joined.column("bin").to_numpy(), dtype=np.int64)
    row_groups = None if groups is None else np.asarray(joined.column("group").to_numpy(), dtype=np.int64)
    valid = validation_mask(joined.column("example_id").combine_chunks(), validation_fraction)
    if valid.all() or not valid.any():
        raise TrainingError("the validation split is empty or covers everything; change validation_fraction")
    encoder = encoder_for(schema, features, linear=model == "linear").fit(joined.filter(pa.array(~valid)))
    X = encoder.transform(joined)
    weight = None
    if groups is None or row_groups is None:
        target = noise.unbiased_targets(bins) if debias == "unbiased" else noise.bin_values[bins]
    elif debias == "none":
        target = groups.noisy_values(bins, row_groups)
    else:  # per row: its own mechanism's unbiased target, weighted by that mechanism's precision
        target, weight = groups.unbiased_targets(bins, row_groups), groups.weights(row_groups[~valid])
    # unbiased targets (an unbiased release's outputs; a grouped release's per-row targets) make the
    # held-out loss against them a fair judge of when to stop
    stop_early = of_unbiased or (groups is not None and debias != "none")
    estimator = regressor(model, "squared" if of_unbiased else loss, encoder, early_stopping=stop_early)
    fit_in_steps(estimator, X[~valid], target[~valid], progress, weight)
    # a grouped release's targets are corrected already, row by row
    final = final_step(estimator, noise, debias, groups)
    pipeline = Pipeline([("encode", encoder.transformer), ("model", final)])
    # an unbiased release alone has nothing to undo; with others, every row was debiased by its own
    used: Debias = "none" if of_unbiased and groups is None else debias
    trained = Trained(pipeline, encoder.columns, encoder.categorical, noise, loss, used, {})
    against_noisy, unbiased = validation_losses(
        final.predict(X[valid]),
        bins[valid],
        noise,
        loss,
        None if groups is None or row_groups is None else (groups, row_groups[valid]),
    )
    trained.metrics = {
        "examples_capped": int(capped),
        "train_examples": int((~valid).sum()),
        "validation_examples": int(valid.sum()),
        "validation_loss_vs_noisy_labels": float(np.mean(against_noisy)),
        "validation_loss_vs_binned_true_labels_unbiased": float(np.mean(unbiased)),
        STANDARD_ERROR: standard_error(
            float(np.sum(unbiased)), float(np.sum(np.square(unbiased))), unbiased.size
        ),
    }
    if groups is not None and row_groups is not None:
        trained.metrics["group_count"] = groups.count
        trained.metrics["train_examples_with_group"] = int((row_groups[~valid] >= 0).sum())
    return trained


def final_step(
    estimator: Any, noise: ReleaseNoise, debias: Debias, groups: GroupedNoise | None = None
) -> Any:
    """The pipeline's last step. A model of the labels' mean is clipped into where that mean must lie
    (``span``): an unbiased release's, an RR release's trained on unbiased targets
    (``debias="unbiased"``), a model of several releases or of a feature-aware one (its rows debiased
    one by one; with ``debias="none"`` its targets are the rows' noisy values, which lie there too);
    an RR release's with the affine correction (``debias="affine"``, clipped by the correction
    itself); a model of one RR release's noisy values (``debias="none"``) as it is."""
    from labeldp_model import AffineDebiasedRegressor, UnbiasedRegressor

    if groups is not None:
        return UnbiasedRegressor(estimator, *groups.span)
    if isinstance(noise, UnbiasedNoise) or debias == "unbiased":
        return UnbiasedRegressor(estimator, *noise.span)
    return AffineDebiasedRegressor(estimator, noise.correction) if debias == "affine" else estimator


def check_regression(loss: str, debias: Debias, *, grouped: bool = False) -> None:
    """The loss and debiasing a regression model can be trained with (``grouped``: a feature-aware
    release, whose ``affine`` trains on unbiased targets too)."""
    if loss not in SKLEARN_LOSS:
        raise TrainingError(f"regression models take loss {sorted(SKLEARN_LOSS)}, got {loss!r}")
    if loss == "poisson" and (debias == "unbiased" or (grouped and debias == "affine")):
        raise TrainingError(poisson_refusal(grouped), "invalid-debias")


def poisson_refusal(grouped: bool) -> str:
    if grouped:
        return (
            "a feature-aware release is debiased row by row with unbiased targets, which can be negative "
            "and Poisson regression cannot fit; use debias none, or squared loss"
        )
    return "unbiased targets can be negative, which Poisson regression cannot fit; use affine"


def check_grouped(classification: bool) -> None:
    """What a feature-aware release (groups) cannot train yet, refused when the job is asked for:
    classifiers — each group's RR-Top-k reports its own classes, and a class a group did not report
    has no unbiased indicator in that group."""
    if classification:
        raise TrainingError(
            "a feature-aware classification release (one RR-Top-k per group) cannot be debiased by this "
            "service yet; train on a release without priors",
            "unsupported-release",
        )


def validation_losses(
    predictions: npt.ArrayLike,
    bins: npt.NDArray[np.int64],
    noise: ReleaseNoise,
    loss: str,
    grouped: tuple[GroupedNoise, npt.NDArray[np.int64]] | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per validation example: the loss against its noisy label, and the unbiased estimate of the loss
    against its binned true label (``BinsNoise.unbiased_loss``; ``grouped``: the release's group
    mechanisms and each example's group, every example estimated with its own mechanism)."""
    predicted = np.asarray(predictions, dtype=np.float64)
    if loss == "poisson":
        predicted = np.maximum(predicted, 1e-9)
    ell = resolve_loss(loss)
    if grouped is not None:
        groups, row_groups = grouped
        return (
            np.asarray(ell(predicted, groups.noisy_values(bins, row_groups)), dtype=np.float64),
            groups.unbiased_loss(predicted, bins, row_groups, ell),
        )
    return (
        np.asarray(ell(predicted, noise.bin_values[bins]), dtype=np.float64),
        np.asarray(noise.unbiased_loss(predicted, bins, ell), dtype=np.float64),
    )


@dataclass
class TrainedClassifier(Trained):
    """A classifier of the reported classes (``bin_values``); ``predict`` gives class probabilities
    (the pipeline's last step is a ``ReleaseClassifier``)."""

    def predict(self, features: pa.Table) -> npt.NDArray[np.float64]:
        frame = feature_frame(features, self.columns, self.categorical)
        return np.asarray(self.model.predict_proba(frame), dtype=np.float64)

    def positive_probability(self, features: pa.Table) -> npt.NDArray[np.float64]:
        """For binary releases: the probability of the class whose value is 1."""
        return self.predict(features)[:, int(np.argmax(self.noise.bin_values))]


def fit_classifier(
    release: pa.Table,
    features: pa.Table,
    schema: dict[str, str],
    noise: BinsNoise,
    *,
    model: ModelKind = "hgb",
    debias: Debias = "affine",
    validation_fraction: float = 0.2,
    progress: Progress | None = None,
) -> TrainedClassifier:
    """Binary and categorical releases: learn P(reported class | x) on the noisy classes."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    from labeldp_model import ReleaseClassifier

    if debias == "unbiased":
        raise TrainingError("classifiers support debias none or affine")
    joined, capped = join_informative(release, features, noise)
    bins = np.asarray(joined.column("bin").to_numpy(), dtype=np.int64)
    valid = validation_mask(joined.column("example_id").combine_chunks(), validation_fraction)
    if valid.all() or not valid.any():
        raise TrainingError("the validation split is empty or covers everything; change validation_fraction")
    if np.unique(bins[~valid]).size < 2:
        raise TrainingError("the training split has a single class; nothing to learn")
    encoder = encoder_for(schema, features, linear=model == "linear").fit(joined.filter(pa.array(~valid)))
    X = encoder.transform(joined)
    if model == "hgb":
        estimator: Any = HistGradientBoostingClassifier(
            categorical_features=encoder.categorical_mask or None,
            max_iter=HGB_ITERATIONS,
            early_stopping=False,
        )
    else:
        estimator = LogisticRegression(max_iter=1000)
    fit_in_steps(estimator, X[~valid], bins[~valid], progress)
    final = ReleaseClassifier(estimator, noise.correction, debias=debias == "affine")
    pipeline = Pipeline([("encode", encoder.transformer), ("model", final)])
    trained = TrainedClassifier(pipeline, encoder.columns, encoder.categorical, noise, "zero_one", debias, {})
    predicted = np.argmax(final.predict_proba(X[valid]), axis=1)

    trained.metrics = {
        "examples_capped": int(capped),
        "train_examples": int((~valid).sum()),
        "validation_examples": int(valid.sum()),
        "validation_error_vs_noisy_labels": float(np.mean(predicted != bins[valid])),
        "validation_error_vs_true_labels_unbiased": noise.zero_one_error(predicted, bins[valid]),
    }
    return trained
