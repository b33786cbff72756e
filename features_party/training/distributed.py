"""Training on a Dask cluster: the join as a Dask merge, LightGBM's Dask learner, one exported model.

The steps mirror ``fit.fit`` with each one where the data is:

- the received release and the feature table are read as partitions (Parquet row groups) and joined
  by a Dask merge on ``example_id``; examples over a user-level bound (bin code ``m``) are dropped;
- the validation split is the same hash of the example ID, evaluated per partition;
- the encoder's categories are the top ``MAX_CATEGORIES`` values of each categorical column over the
  whole training split, counted by a Dask reduction (so the encoding is the one ``fit`` would choose);
- ``lightgbm.dask.DaskLGBMRegressor`` trains on the workers with the release's loss, on the noisy
  labels (or the unbiased targets), and the booster is brought back (``to_local``) and wrapped in the
  same debiasing step and ``Pipeline`` as a single-process model, so export and serving do not change;
- validation losses are summed per partition on the workers;
- a feature-aware release (``groups``) is debiased row by row as ``fit.fit`` does: each row's own
  mechanism's unbiased target, weighted ``1 / target_error`` of that mechanism (normalized to mean 1
  over the training split), validated per row with its own mechanism.

Only gradient boosting runs here (a linear model's imputation and scaling would need their own
reductions); LightGBM is an optional extra (``pip install 'labeldp[scale]'``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from sklearn.pipeline import Pipeline

from features_party.training.fit import (
    HGB_ITERATIONS,
    STANDARD_ERROR,
    Debias,
    Encoder,
    Trained,
    TrainingError,
    check_regression,
    encoder_for,
    final_step,
    standard_error,
    validation_losses,
    validation_mask,
)
from labeldp.mechanisms import GroupedNoise
from labeldp.mechanisms.debias import ReleaseNoise, UnbiasedNoise

LGBM_OBJECTIVE = {"squared": "regression", "absolute": "regression_l1", "poisson": "poisson"}


def _with_split(part: pd.DataFrame, fraction: float) -> pd.DataFrame:
    ids = pa.array(part["example_id"].astype(str), pa.string())
    return part.assign(_validation=validation_mask(ids, fraction) if len(part) else np.zeros(0, bool))


def _first_rows(frame: Any, n: int) -> pd.DataFrame:
    """Up to ``n`` rows from the first non-empty partition (``head`` over all partitions would gather
    the whole frame here)."""
    for i in range(frame.npartitions):
        rows = frame.get_partition(i).head(n, npartitions=1)
        if len(rows):
            return rows
    raise TrainingError("the training split is empty")


def _category_counts(part: pd.DataFrame, column: str) -> pd.Series:
    """Value counts of one categorical column, its values read as text the way the encoder reads them."""
    values = pc.cast(pa.array(part[column]), pa.string())
    pairs = pc.value_counts(values).to_pylist() if len(values) else []
    counts = {p["values"]: p["counts"] for p in pairs if p["values"] is not None}
    return pd.Series(counts, dtype="int64")


def _encoded(part: pd.DataFrame, encoder: Encoder) -> pd.DataFrame:
    table = pa.Table.from_pandas(part[encoder.columns], preserve_index=False)
    names = [f"f{i}" for i in range(len(encoder.columns))]
    return pd.DataFrame(encoder.transform(table), index=part.index, columns=names)


def _losses(
    part: pd.DataFrame,
    model: Any,
    encoder: Encoder,
    noise: ReleaseNoise,
    loss: str,
    groups: GroupedNoise | None,
) -> pd.DataFrame:
    """Per partition of the validation split: summed losses and the example count."""
    if not len(part):
        return pd.DataFrame({"noisy": [0.0], "unbiased": [0.0], "unbiased_sq": [0.0], "n": [0]})
    bins = part["bin"].to_numpy(dtype=np.int64)
    rows = None if groups is None else (groups, part["group"].to_numpy(dtype=np.int64))
    predicted = model.predict(_encoded(part, encoder).to_numpy())
    noisy, unbiased = validation_losses(predicted, bins, noise, loss, rows)
    return pd.DataFrame(
        {
            "noisy": [float(noisy.sum())],
            "unbiased": [float(unbiased.sum())],
            "unbiased_sq": [float(np.square(unbiased).sum())],
            "n": [len(part)],
        }
    )


def fit_on_cluster(
    client: Any,
    release_file: str,
    feature_file: str,
    schema: dict[str, str],
    noise: ReleaseNoise,
    loss: str,
    *,
    debias: Debias = "affine",
    validation_fraction: float = 0.2,
    iterations: int = HGB_ITERATIONS,
    groups: GroupedNoise | None = None,
) -> Trained:
    """Train a LightGBM regressor on the cluster ``client`` is connected to; the files are paths the
    workers can read (the features party's data directory, shared); ``groups``: a feature-aware
    release's mechanisms (its file has a ``group`` column)."""
    import dask.dataframe as dd
    from dask.base import compute
    from lightgbm.dask import DaskLGBMRegressor

    unbiased = isinstance(noise, UnbiasedNoise)
    if unbiased and groups is not None:
        raise TrainingError("an unbiased release has no groups")  # the receiver refuses such a message
    if not unbiased:
        check_regression(loss, debias, grouped=groups is not None)
    if not 0 < validation_fraction < 1:
        raise TrainingError("validation_fraction must be in (0, 1)")
    columns = ["example_id", "bin"] if groups is None else ["example_id", "bin", "group"]
    release = dd.read_parquet(release_file, columns=columns, split_row_groups=True)
    features = dd.read_parquet(feature_file, split_row_groups=True)
    encoder = encoder_for(schema, list(features.columns), linear=False)
    joined = release.merge(features[["example_id", *encoder.columns]], on="example_id", how="inner")
    # over a user-level bound (the capped code, no group): no label information
    kept = joined["bin"] < noise.m if groups is None else (joined["bin"] < noise.m) | (joined["group"] >= 0)
    informative = joined[kept]
    split_meta = informative._meta.assign(_validation=pd.Series(dtype=bool))
    split = informative.map_partitions(_with_split, validation_fraction, meta=split_meta)
    train = split[~split["_validation"]]
    valid = split[split["_validation"]]
    counted = [
        train.map_partitions(_category_counts, c, meta=pd.Series(dtype="int64"))
        .compute()  # one (value, count) series per partition, concatenated: small
        .groupby(level=0)
        .sum()
        for c in encoder.categorical
    ]
    train_rows, capped = (int(n) for n in compute(train.shape[0], (~kept).sum()))
    if train_rows < 10:
        raise TrainingError(f"only {train_rows} examples with label information are in the training split")
    sample = pa.Table.from_pandas(_first_rows(train, 1000)[encoder.columns], preserve_index=False)
    encoder.fit_with([{str(v): int(n) for v, n in c.items()} for c in counted], sample)
    names = [f"f{i}" for i in range(len(encoder.columns))]
    X = train.map_partitions(_encoded, encoder, meta=pd.DataFrame({n: pd.Series(dtype=float) for n in names}))
    if groups is None:
        target = noise.unbiased_targets if debias == "unbiased" else (lambda b: noise.bin_values[b])
        values = train["bin"].map_partitions(
            lambda b: pd.Series(target(b.to_numpy(dtype=np.int64)), index=b.index),
            meta=pd.Series(dtype=float),
        )
        weight = None
    else:
        values = train[["bin", "group"]].map_partitions(
            _grouped_targets, groups, debias != "none", meta=pd.Series(dtype=float)
        )
        raw = train["group"].map_partitions(_inverse_errors, groups, meta=pd.Series(dtype=float))
        weight = (raw / raw.mean().compute()).to_dask_array(lengths=True) if debias != "none" else None
    estimator = DaskLGBMRegressor(
        client=client,
        objective=LGBM_OBJECTIVE["squared" if unbiased else loss],
        n_estimators=iterations,
        verbose=-1,
    )
    # arrays, as the exported pipeline passes them (its encoder's output has no column names)
    estimator.fit(
        X.to_dask_array(lengths=True),
        values.to_dask_array(lengths=True),
        sample_weight=weight,
        categorical_feature=list(range(len(encoder.categorical))) or "auto",
    )
    local = estimator.to_local()
    # a grouped release's targets are corrected already, row by row
    final = final_step(local, noise, debias, groups)
    pipeline = Pipeline([("encode", encoder.transformer), ("model", final)])
    losses_meta = pd.DataFrame(
        {name: pd.Series(dtype=float) for name in ("noisy", "unbiased", "unbiased_sq")}
        | {"n": pd.Series(dtype="int64")}
    )
    sums = (
        valid.map_partitions(_losses, final, encoder, noise, loss, groups, meta=losses_meta).sum().compute()
    )
    n = int(sums["n"])
    used: Debias = "none" if unbiased else debias  # an unbiased release has nothing to undo
    trained = Trained(pipeline, encoder.columns, encoder.categorical, noise, loss, used, {})
    trained.metrics = {
        "examples_capped": capped,
        "train_examples": train_rows,
        "validation_examples": n,
        "validation_loss_vs_noisy_labels": float(sums["noisy"]) / max(n, 1),
        "validation_loss_vs_binned_true_labels_unbiased": float(sums["unbiased"]) / max(n, 1),
        STANDARD_ERROR: standard_error(float(sums["unbiased"]), float(sums["unbiased_sq"]), n),
    }
    if groups is not None:
        trained.metrics["group_count"] = groups.count
    return trained


def _grouped_targets(part: pd.DataFrame, groups: GroupedNoise, unbiased: bool) -> pd.Series:
    """A partition's per-row targets: each row's own mechanism's unbiased target (or noisy value)."""
    bins, rows = part["bin"].to_numpy(dtype=np.int64), part["group"].to_numpy(dtype=np.int64)
    values = groups.unbiased_targets(bins, rows) if unbiased else groups.noisy_values(bins, rows)
    return pd.Series(values, index=part.index)


def _inverse_errors(part: pd.Series, groups: GroupedNoise) -> pd.Series:
    """``GroupedNoise.precision`` of each row (normalized over the whole split by the caller)."""
    return pd.Series(groups.precision(part.to_numpy(dtype=np.int64)), index=part.index)
