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
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from benchmarks.bench_generalization import matrices, schema_of
from benchmarks.common import write
from features_party.pricing.prices import spread_of, two_point_scale
from features_party.training.fit import STANDARD_ERROR, Encoder, fit
from labeldp.mechanisms import (
    MAX_GROUPS,
    GroupedNoise,
    priors_verdict,
    release_grouped_labels,
    release_labels,
)
from labeldp.mechanisms.debias import release_noise
from labeldp.priors import price_classes, price_values
from labeldp.samples import LabelDataset, adult_income, diamond_prices, weeks_worked

EPSILONS = tuple(float(e) for e in os.environ.get("LABELDP_BENCH_EPSILONS", "0.5,1,2,4,8").split(","))
RUNS = int(os.environ.get("LABELDP_BENCH_RUNS", "5"))
STAGE_1 = float(os.environ.get("LABELDP_STAGE_1", "0.2"))
GROUPS = int(os.environ.get("LABELDP_GROUPS", "32"))
DAYS = int(os.environ.get("LABELDP_DAYS", "7"))  # the daily scenario's days
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
    X: np.ndarray  # the encoded features (LP-2ST's classifiers)
    encoder: Encoder
    binary: bool  # scored by the error rate (%) of the prediction rounded at 0.5, not by RMSE


def _released(ids: pa.Array, bins: np.ndarray, groups: np.ndarray | None = None) -> pa.Table:
    columns = {"example_id": ids, "bin": pa.array(bins, pa.uint16())}
    if groups is not None:
        columns["group"] = pa.array(groups, pa.int16())
    return pa.table(columns)


def run_stages(
    ds: LabelDataset, split: Split, eps: float, stages: list[np.ndarray]
) -> tuple[Any, Any, float, list[bool]]:
    """The loop over ``stages`` (row indices, each released once at ε): the first by the default
    release, each later one priced by the model trained on every earlier stage (the trainer's
    ``also_release_ids``) and released with those priors where the public rule says they pay
    (``priors_verdict``), else as without them. Returns the model trained on every stage, the first
    stage's model, the first pricing's σ and each later stage's verdict."""
    table, schema, support = split.table, split.schema, split.support
    ids = table.column("example_id").combine_chunks()

    def labels(rows: np.ndarray) -> np.ndarray:
        return np.clip(split.y[rows], ds.lo, ds.hi)

    rel1 = release_labels(labels(stages[0]), support, eps, "squared", mechanism=STAGE_1_MECHANISM)
    pub1 = rel1.published()
    noise1 = release_noise(pub1)
    # as the trainer combines releases (features_party.training.jobs.combined): each later release's
    # groups, then its own mechanism; the first release's rows -1 (its own)
    mechanisms: list[Any] = []
    pieces = [(stages[0], np.asarray(rel1.bin_indices), np.full(stages[0].size, -1))]

    def train_on_all() -> Any:
        rows = np.concatenate([p[0] for p in pieces])
        if len(pieces) == 1:
            return fit(
                _released(ids.take(pa.array(rows)), pieces[0][1]),
                table.take(pa.array(rows)),
                schema,
                noise1,
                "squared",
            )
        released = _released(
            ids.take(pa.array(rows)),
            np.concatenate([p[1] for p in pieces]),
            np.concatenate([p[2] for p in pieces]),
        )
        groups = GroupedNoise.of_published(pub1, tuple(mechanisms))
        return fit(released, table.take(pa.array(rows)), schema, noise1, "squared", groups=groups)

    first_model: Any = None
    first_sigma = float("nan")
    verdicts: list[bool] = []  # per later stage: whether the priors paid (``priors_verdict``)
    for stage in stages[1:]:
        model = train_on_all()
        first_model = first_model or model
        predicted = model.predict(table.take(pa.array(stage)))
        metrics = model.metrics
        sigma = spread_of(metrics[METRIC], metrics[STANDARD_ERROR], "squared", support, pub1.prior, predicted)
        first_sigma = sigma if np.isnan(first_sigma) else first_sigma
        priced = price_values(predicted, sigma, support, GROUPS, scale=two_point_scale(pub1))
        verdict = priors_verdict(
            priced.priors, np.bincount(priced.groups, minlength=priced.count), support, eps
        )
        verdicts.append(verdict.pays)
        if not verdict.pays:  # the public rule: release this stage as without priors
            plain = release_labels(labels(stage), support, eps, "squared")
            mechanisms.append(plain.published())
            pieces.append((stage, np.asarray(plain.bin_indices), np.full(stage.size, len(mechanisms) - 1)))
            continue
        rel = release_grouped_labels(labels(stage), priced.groups, priced.priors, support, eps)
        offset = len(mechanisms)
        mechanisms.extend(rel.published_groups())
        mechanisms.append(rel.published())
        pieces.append(
            (
                stage,
                np.asarray(rel.bin_indices),
                np.where(rel.groups >= 0, offset + rel.groups, len(mechanisms) - 1),
            )
        )
    return train_on_all(), first_model, first_sigma, verdicts


def one_run(ds: LabelDataset, split: Split, eps: float, seed: int) -> dict[str, float]:
    table, schema, y, test, support = split.table, split.schema, split.y, split.test, split.support
    train = np.flatnonzero(~test)
    ids = table.column("example_id").combine_chunks()
    features_test = table.filter(pa.array(test))

    def rmse(model: Any, name: str) -> float:
        """RMSE on the true labels (on 0/1 labels: the root of the Brier score), and for 0/1 labels also
        the error rate (%) of the prediction rounded at 0.5 (``name_error``)."""
        predicted = model.predict(features_test)
        if split.binary:
            out[f"{name}_error"] = float(100 * np.mean((predicted >= 0.5) != (y[test] >= 0.5)))
        return float(np.sqrt(np.mean((predicted - y[test]) ** 2)))

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
        out[name] = rmse(trained, name)

    # two stages
    first = stage_1_mask(train.size, seed.to_bytes(8, "little"))
    final, model1, sigma, verdicts = run_stages(ds, split, eps, [train[first], train[~first]])
    out["priors_used"] = float(verdicts[0])
    out["two_stage"] = rmse(final, "two_stage")
    out["sigma"] = sigma
    out["stage_1_model"] = rmse(model1, "stage_1_model")
    if split.binary:
        out["lp_2st"], out["lp_2st_error"] = lp_2st(split, eps, train, first)
    return out


def classifier(split: Split) -> HistGradientBoostingClassifier:
    return HistGradientBoostingClassifier(categorical_features=split.encoder.categorical_mask, max_iter=200)


def lp_2st(split: Split, eps: float, train: np.ndarray, first: np.ndarray) -> tuple[float, float]:
    """LP-2ST (Ghazi et al. 2021) on the same stages: stage 1 by randomized response at the whole ε
    (RRWithPrior on the uniform prior); a classifier on its noisy labels; stage 2 by RRWithPrior on
    each example's predicted class probabilities — here RR-Top-k on the mean of 1,024 quantile groups of
    them (``labeldp.priors.price_classes``); the final classifier on both stages' noisy labels as they
    are. RMSE of its probability and error rate (%) on the test split's true labels."""
    X, y, support = split.X, (split.y >= 0.5).astype(np.int64), split.support
    s1, s2 = train[first], train[~first]
    uniform = np.full((1, 2), 0.5)
    r1 = release_grouped_labels(y[s1], np.zeros(s1.size, np.int64), uniform, support, eps, "zero_one")
    model1 = classifier(split).fit(X[s1], r1.noisy_labels)
    priced = price_classes(model1.predict_proba(X[s2]), MAX_GROUPS)
    r2 = release_grouped_labels(y[s2], priced.groups, priced.priors, support, eps, "zero_one")
    rows = np.concatenate([s1, s2])
    final = classifier(split).fit(X[rows], np.concatenate([r1.noisy_labels, r2.noisy_labels]))
    probability = final.predict_proba(X[split.test])[:, 1]
    error = float(100 * np.mean(final.predict(X[split.test]) != y[split.test]))
    return float(np.sqrt(np.mean((probability - y[split.test]) ** 2))), error


def _cell(runs: list[dict[str, float]], name: str) -> tuple[float, float]:
    values = [r[name] for r in runs]
    return float(np.mean(values)), float(np.std(values))


def make_split(ds: LabelDataset) -> tuple[Split, float, float]:
    """The dataset's 80/20 split by a hash of the row, and the non-private model's test RMSE and (0/1
    labels: its classifier's) error rate (%)."""
    features = ds.features
    schema = schema_of(features)
    X, _, test, encoder = matrices(ds)
    ids = pa.array([f"example-{i}" for i in range(features.num_rows)])  # the trainer splits on these
    binary = ds.support.k == 2
    table_ = features.append_column("example_id", ids)
    split = Split(table_, schema, ds.labels, test, ds.support, X, encoder, binary)
    truth = np.clip(ds.labels[~test], ds.lo, ds.hi)
    if binary:
        fitted = classifier(split).fit(X[~test], truth.astype(np.int64))
        probability = fitted.predict_proba(X[test])[:, 1]
        wrong = fitted.predict(X[test]) != ds.labels[test]
        rmse = float(np.sqrt(np.mean((probability - ds.labels[test]) ** 2)))
        return split, rmse, float(100 * np.mean(wrong))
    model = HistGradientBoostingRegressor(categorical_features=encoder.categorical_mask, max_iter=200)
    predicted = model.fit(X[~test], truth).predict(X[test])
    return split, float(np.sqrt(np.mean((predicted - ds.labels[test]) ** 2))), float("nan")


def table(ds: LabelDataset) -> tuple[str, list[dict[str, object]]]:
    split, non_private, non_private_error = make_split(ds)
    binary = split.binary
    if binary:  # the default on two points is RR-on-Bins: no second one-stage column
        lines = [
            "| ε | one stage | two stages | gap closed | LP-2ST | error %: one stage | two stages | LP-2ST "
            "| stage 2 on priors | non-private (error %) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines = [
            "| ε | one stage (default) | one stage (RR-on-Bins) | two stages | gap closed "
            "| stage 2 on priors | non-private |",
            "|---|---|---|---|---|---|---|",
        ]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        runs = [one_run(ds, split, eps, seed) for seed in range(RUNS)]
        one, one_std = _cell(runs, "one_stage")
        rr, rr_std = _cell(runs, "one_stage_rr")
        two, two_std = _cell(runs, "two_stage")
        closed = f"{(one - two) / (one - non_private):.0%}" if one > non_private else "–"
        used = sum(r["priors_used"] for r in runs)  # runs whose stage 2 the public rule put on priors
        if binary:
            cells = [f"{one:,.4g} ± {one_std:,.2g}", f"{two:,.4g} ± {two_std:,.2g}", closed]
            for name in ("lp_2st", "one_stage_error", "two_stage_error", "lp_2st_error"):
                mean, std = _cell(runs, name)
                cells.append(f"{mean:,.4g} ± {std:,.2g}")
            cells.append(f"{used:g} of {RUNS}")
            cells.append(f"{non_private:,.4g} ({non_private_error:.4g})")
        else:
            cells = [f"{one:,.4g} ± {one_std:,.2g}", f"{rr:,.4g} ± {rr_std:,.2g}"]
            cells += [f"{two:,.4g} ± {two_std:,.2g}", closed, f"{used:g} of {RUNS}", f"{non_private:,.4g}"]
        lines.append(f"| {eps:g} | {' | '.join(cells)} |")
        print(lines[-1], flush=True)
        rows.append({"epsilon": eps, "non_private": non_private, "runs": runs})
    return "\n".join(lines), rows


def daily_table(ds: LabelDataset) -> tuple[str, list[dict[str, object]]]:
    """The daily scenario: the training split cut into ``DAYS`` days by a keyed hash of the row (no
    label read); day 1 released by the default, each later day priced by the model trained on every
    earlier day's release and released once with those priors; the model trained on all days against
    the one-stage release of the same examples (each released once at ε either way)."""
    split, non_private, _ = make_split(ds)
    lines = [
        f"| ε | one stage (default) | {DAYS} daily stages | gap closed | days on priors | non-private |",
        "|---|---|---|---|---|---|",
    ]
    rows: list[dict[str, object]] = []
    for eps in EPSILONS:
        runs = []
        for seed in range(RUNS):
            train = np.flatnonzero(~split.test)
            day = day_of(train.size, seed.to_bytes(8, "little"))
            final, _, _, verdicts = run_stages(ds, split, eps, [train[day == d] for d in range(DAYS)])
            single = release_labels(np.clip(split.y[train], ds.lo, ds.hi), split.support, eps, "squared")
            released = _released(
                split.table.column("example_id").combine_chunks().take(pa.array(train)), single.bin_indices
            )
            trained = fit(
                released,
                split.table.take(pa.array(train)),
                split.schema,
                release_noise(single.published()),
                "squared",
            )
            test = split.table.filter(pa.array(split.test))
            score = {"daily": final, "one_stage": trained}
            run = {
                k: float(np.sqrt(np.mean((m.predict(test) - split.y[split.test]) ** 2)))
                for k, m in score.items()
            }
            run["days_on_priors"] = float(sum(verdicts))
            runs.append(run)
        one, one_std = _cell(runs, "one_stage")
        daily_, daily_std = _cell(runs, "daily")
        closed = f"{(one - daily_) / (one - non_private):.0%}" if one > non_private else "–"
        on_priors = _cell(runs, "days_on_priors")[0]
        lines.append(
            f"| {eps:g} | {one:,.4g} ± {one_std:,.2g} | {daily_:,.4g} ± {daily_std:,.2g} | {closed} | "
            f"{on_priors:.3g} of {DAYS - 1} | {non_private:,.4g} |"
        )
        print(lines[-1], flush=True)
        rows.append({"epsilon": eps, "non_private": non_private, "runs": runs})
    return "\n".join(lines), rows


def day_of(n: int, key: bytes) -> np.ndarray:
    """Each row's day, by a keyed hash of the row id: chosen without reading any label."""
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        h = hashlib.blake2b(f"row-{i}".encode(), key=key, digest_size=8).digest()
        out[i] = int.from_bytes(h, "little") % DAYS
    return out


def main(names: list[str] | None = None) -> None:
    """``python -m benchmarks.bench_feature_aware [prices] [weeks] [adult] [daily]``."""
    sets = {"prices": diamond_prices, "weeks": weeks_worked, "adult": adult_income}
    results: dict[str, object] = {}
    text = []
    for name in names or [*sets, "daily"]:
        print(f"## {name}", flush=True)
        if name == "daily":
            t, rows = daily_table(diamond_prices())
            text.append(
                f"### daily, prices (RMSE on the test split's true labels; {RUNS} runs; G = {GROUPS})\n\n{t}"
            )
        else:
            t, rows = table(sets[name]())
            metric = "RMSE (root Brier score) and error rate (%)" if name == "adult" else "RMSE"
            text.append(
                f"### {name} ({metric} on the test split's true labels; {RUNS} runs; "
                f"stage 1 {STAGE_1:.0%}, G = {GROUPS})\n\n{t}"
            )
        results[name] = rows
    write("_".join(["feature_aware", *(names or [])]), "\n\n".join(text), results)


if __name__ == "__main__":
    main(sys.argv[1:])
