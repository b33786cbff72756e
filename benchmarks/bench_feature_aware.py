"""Feature-aware releases (issue 41): the publisher's final model after a two-stage loop, against the
one-stage release of the same examples at the same ε per example, and the non-private model.

The loop, with the service's own code at each step: the training split is cut by a keyed hash of the
row (no label read) into stage 1 (``STAGE_1`` of it) and stage 2; stage 1 is an ordinary release by
the service's default (``release_labels``: the unbiased randomizer for these losses and ε, or
``LABELDP_STAGE_1_MECHANISM``); the publisher's trainer (``features_party.training.fit.fit``) trains
on it and states its held-out loss with its standard error; the pricing spread σ follows the service's
rule (``features_party.pricing.prices.spread_of``) and the public rule groups stage 2
(``labeldp.priors.price_values``); stage 2 is released with one RR-on-Bins per group at the whole ε
(``release_grouped_labels``, the release's default objective); the final model is the trainer's on
both stages (``also_release_ids``: every row its own mechanism's unbiased target, weighted by its
precision). Every example is released once, at ε: the one-stage release charges the same.

The one-stage baseline is the service's default release trained by the service's trainer (the
unbiased randomizer from ε₂ = 0.2 on these supports); the RR-on-Bins one stage (model objective, the
default before issue 42) is shown beside it.

Metrics: RMSE of the final model on the test split's true labels (20% by a hash of the row), mean ±
std over ``RUNS``, and the share of the gap between the default one-stage model and the non-private
one that the loop closes. Benchmark data splits are seeded (never a service's noise: the releases draw
from the CSPRNG).
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sklearn.ensemble import HistGradientBoostingRegressor

from benchmarks.bench_generalization import schema_of
from benchmarks.common import write
from features_party.pricing.prices import spread_of
from features_party.training.fit import STANDARD_ERROR, Encoder, fit, validation_mask
from labeldp.mechanisms import GroupedNoise, release_grouped_labels, release_labels
from labeldp.mechanisms.debias import release_noise
from labeldp.priors import price_values
from labeldp.samples import LabelDataset, diamond_prices, weeks_worked

EPSILONS = tuple(float(e) for e in os.environ.get("LABELDP_BENCH_EPSILONS", "0.5,1,2,4,8").split(","))
RUNS = int(os.environ.get("LABELDP_BENCH_RUNS", "5"))
STAGE_1 = float(os.environ.get("LABELDP_STAGE_1", "0.2"))
GROUPS = int(os.environ.get("LABELDP_GROUPS", "32"))
STAGE_1_MECHANISM: Any = os.environ.get("LABELDP_STAGE_1_MECHANISM") or None  # None: the default
METRIC = "validation_loss_vs_binned_true_labels_unbiased"


def stage_1_mask(n: int, key: bytes) -> np.ndarray:
    """Stage 1 by a keyed hash of the row id: chosen without reading any label."""
    out = np.empty(n, dtype=bool)
    for i in range(n):
        h = hashlib.blake2b(f"row-{i}".encode(), key=key, digest_size=8).digest()
        out[i] = int.from_bytes(h, "little") / 2**64 < STAGE_1
    return out


@dataclass
class Split:
    table: pa.Table  # features with example_id
    schema: dict[str, str]
    y: np.ndarray
    test: np.ndarray
    support: Any


def _released(ids: pa.Array, bins: np.ndarray, groups: np.ndarray | None = None) -> pa.Table:
    columns = {"example_id": ids, "bin": pa.array(bins, pa.uint16())}
    if groups is not None:
        columns["group"] = pa.array(groups, pa.int16())
    return pa.table(columns)


def one_run(ds: LabelDataset, split: Split, eps: float, seed: int) -> dict[str, float]:
    table, schema, y, test, support = split.table, split.schema, split.y, split.test, split.support
    train = np.flatnonzero(~test)
    ids = table.column("example_id").combine_chunks()
    features_test = table.filter(pa.array(test))

    def rmse(model: Any) -> float:
        return float(np.sqrt(np.mean((model.predict(features_test) - y[test]) ** 2)))

    def take(rows: np.ndarray) -> pa.Table:
        return table.take(pa.array(rows))

    out: dict[str, float] = {}
    y_train = np.clip(y[train], ds.lo, ds.hi)
    # one stage: every training example in one release at ε — the default, and RR-on-Bins beside it
    kinds: list[tuple[str, Any]] = [("one_stage", None), ("one_stage_rr", "rr_on_bins")]
    for name, mechanism in kinds:
        rel = release_labels(y_train, support, eps, "squared", mechanism=mechanism)
        released = _released(ids.take(pa.array(train)), rel.bin_indices)
        trained = fit(released, take(train), schema, release_noise(rel.published()), "squared")
        out[name] = rmse(trained)

    # two stages
    first = stage_1_mask(train.size, seed.to_bytes(8, "little"))
    s1, s2 = train[first], train[~first]
    rel1 = release_labels(np.clip(y[s1], ds.lo, ds.hi), support, eps, "squared", mechanism=STAGE_1_MECHANISM)
    pub1 = rel1.published()
    noise1 = release_noise(pub1)
    model1 = fit(_released(ids.take(pa.array(s1)), rel1.bin_indices), take(s1), schema, noise1, "squared")
    sigma = spread_of(model1.metrics[METRIC], model1.metrics[STANDARD_ERROR], "squared", support, pub1.prior)
    priced = price_values(model1.predict(take(s2)), sigma, support, GROUPS)
    rel2 = release_grouped_labels(np.clip(y[s2], ds.lo, ds.hi), priced.groups, priced.priors, support, eps)
    # both stages as the trainer combines them (features_party.training.jobs.combined): the stage-2
    # groups, then its own mechanism; stage-1 rows -1 (the first release's own)
    mechanisms = (*rel2.published_groups(), rel2.published())
    g2 = np.where(rel2.groups >= 0, rel2.groups, len(mechanisms) - 1)
    both = pa.concat_tables(
        [
            _released(ids.take(pa.array(s1)), rel1.bin_indices, np.full(s1.size, -1)),
            _released(ids.take(pa.array(s2)), rel2.bin_indices, g2),
        ]
    )
    final = fit(
        both,
        take(np.concatenate([s1, s2])),
        schema,
        noise1,
        "squared",
        groups=GroupedNoise.of_published(pub1, mechanisms),
    )
    out["two_stage"] = rmse(final)
    out["sigma"] = sigma
    out["stage_1_model"] = rmse(model1)
    return out


def _cell(runs: list[dict[str, float]], name: str) -> tuple[float, float]:
    values = [r[name] for r in runs]
    return float(np.mean(values)), float(np.std(values))


def table(ds: LabelDataset) -> tuple[str, list[dict[str, object]]]:
    features = ds.features
    schema = schema_of(features)
    test = validation_mask(pa.array([f"row-{i}" for i in range(features.num_rows)]), 0.2)
    ids = pa.array([f"example-{i}" for i in range(features.num_rows)])  # the trainer splits on these
    split = Split(features.append_column("example_id", ids), schema, ds.labels, test, ds.support)
    encoder = Encoder(list(schema), [c for c in schema if schema[c] == "categorical"])
    encoder.fit(features.filter(pa.array(~test)))
    X = encoder.transform(features)
    truth = np.clip(ds.labels[~test], ds.lo, ds.hi)
    model = HistGradientBoostingRegressor(categorical_features=encoder.categorical_mask, max_iter=200)
    predicted = model.fit(X[~test], truth).predict(X[test])
    non_private = float(np.sqrt(np.mean((predicted - ds.labels[test]) ** 2)))
    lines = [
        "| ε | one stage (default) | one stage (RR-on-Bins) | two stages | gap closed | non-private |",
        "|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        runs = [one_run(ds, split, eps, seed) for seed in range(RUNS)]
        one, one_std = _cell(runs, "one_stage")
        rr, rr_std = _cell(runs, "one_stage_rr")
        two, two_std = _cell(runs, "two_stage")
        closed = f"{(one - two) / (one - non_private):.0%}" if one > non_private else "–"
        lines.append(
            f"| {eps:g} | {one:,.4g} ± {one_std:,.2g} | {rr:,.4g} ± {rr_std:,.2g} | "
            f"{two:,.4g} ± {two_std:,.2g} | {closed} | {non_private:,.4g} |"
        )
        print(lines[-1], flush=True)
        rows.append({"epsilon": eps, "non_private": non_private, "runs": runs})
    return "\n".join(lines), rows


def main(names: list[str] | None = None) -> None:
    sets = {"prices": diamond_prices, "weeks": weeks_worked}
    results: dict[str, object] = {}
    text = []
    for name in names or list(sets):
        print(f"## {name}", flush=True)
        t, rows = table(sets[name]())
        text.append(
            f"### {name} (RMSE on the test split's true labels; {RUNS} runs; "
            f"stage 1 {STAGE_1:.0%}, G = {GROUPS})\n\n{t}"
        )
        results[name] = rows
    write("feature_aware", "\n\n".join(text), results)


if __name__ == "__main__":
    main(sys.argv[1:])
