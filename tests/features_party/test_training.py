"""Training on a release joined to features: the unbiased validation loss estimates the loss against
the binned true labels, debiasing helps, and bad requests are refused clearly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pytest

from features_party.training.fit import TrainingError, fit, validation_mask
from labeldp.mechanisms import optimize_rr_on_bins
from labeldp.mechanisms.debias import BinsNoise
from labeldp.samples import weeks_worked
from tests.support.seeded import SeededRandom


def census_release(
    eps: float, n: int = 60_000
) -> tuple[pa.Table, pa.Table, dict[str, str], BinsNoise, np.ndarray]:
    ds = weeks_worked()
    table = ds.table.slice(0, n)
    y = np.asarray(table.column("work").to_numpy(), dtype=float)
    ids = pa.array([f"w{i}" for i in range(n)], pa.string())
    sup = ds.support
    mech = optimize_rr_on_bins(sup, sup.counts(y), eps, "squared")
    bins = mech.randomize(y, rng=SeededRandom(1))
    release = pa.table({"example_id": ids, "bin": pa.array(bins, pa.uint16())})
    features = ds.features.slice(0, n).append_column("example_id", ids)
    schema = {c: ("numeric" if c == "age" else "categorical") for c in ds.features.column_names}
    binned_true = mech.values_of(mech.bin_of(y))
    return release, features, schema, BinsNoise.of(mech.bin_values, mech.epsilon), binned_true


def test_split_is_deterministic_and_close_to_the_fraction() -> None:
    ids = pa.array([f"id-{i}" for i in range(20_000)])
    a, b = validation_mask(ids, 0.2), validation_mask(ids, 0.2)
    assert np.array_equal(a, b) and abs(a.mean() - 0.2) < 0.02


def test_unbiased_validation_loss_matches_the_loss_against_binned_true_labels() -> None:
    release, features, schema, noise, binned_true = census_release(1.0)
    trained = fit(release, features, schema, noise, "squared", model="hgb", debias="affine")
    valid = validation_mask(release.column("example_id").combine_chunks(), 0.2)
    predictions = trained.predict(features.filter(pa.array(valid)))
    actual = float(np.mean((predictions - binned_true[valid]) ** 2))
    estimate = trained.metrics["validation_loss_vs_binned_true_labels_unbiased"]
    # the estimator is unbiased; its noise over ~12k examples is a few percent
    assert abs(estimate - actual) / actual < 0.1, (estimate, actual)
    assert (
        trained.metrics["validation_loss_vs_noisy_labels"] > actual
    )  # noisy labels look worse than they are


def test_affine_debiasing_beats_none_against_the_true_binned_labels() -> None:
    release, features, schema, noise, binned_true = census_release(0.5)
    valid = validation_mask(release.column("example_id").combine_chunks(), 0.2)
    errors = {}
    for debias in ("none", "affine", "unbiased"):
        trained = fit(release, features, schema, noise, "squared", model="linear", debias=debias)
        errors[debias] = float(
            np.mean((trained.predict(features.filter(pa.array(valid))) - binned_true[valid]) ** 2)
        )
        if debias == "unbiased":  # a model of the binned label's mean, clipped into the bins' values
            assert type(trained.model[-1]).__name__ == "UnbiasedRegressor"
            assert (trained.model[-1].lower, trained.model[-1].upper) == noise.span
            assert noise.span == (min(noise.bin_values), max(noise.bin_values))
    assert errors["affine"] < errors["none"] and errors["unbiased"] < errors["none"], errors
    assert math.isfinite(errors["affine"])


def test_bad_requests_are_refused() -> None:
    release, features, schema, noise, _ = census_release(1.0, n=2000)
    with pytest.raises(TrainingError, match="Poisson"):
        fit(release, features, schema, noise, "poisson", debias="unbiased")
    with pytest.raises(TrainingError, match="loss"):
        fit(release, features, schema, noise, "hinge")
    with pytest.raises(TrainingError, match="validation_fraction"):
        fit(release, features, schema, noise, "squared", validation_fraction=1.0)
    with pytest.raises(TrainingError, match="in both"):
        fit(release.slice(0, 5), features, schema, noise, "squared")


def income_release(eps: float) -> tuple[pa.Table, pa.Table, dict[str, str], BinsNoise, np.ndarray]:
    from labeldp.mechanisms import randomized_response
    from labeldp.samples import adult_income

    ds = adult_income()
    y = np.asarray(ds.table.column("label").to_numpy(), dtype=np.int64)
    ids = pa.array([f"a{i}" for i in range(len(y))], pa.string())
    noisy = randomized_response(y, 2, eps, rng=SeededRandom(4))
    release = pa.table({"example_id": ids, "bin": pa.array(noisy, pa.uint16())})
    features = ds.features.append_column("example_id", ids)
    schema = {
        c: (
            "categorical"
            if pa.types.is_string(ds.features.schema.field(c).type)
            or pa.types.is_large_string(ds.features.schema.field(c).type)
            else "numeric"
        )
        for c in ds.features.column_names
    }
    return release, features, schema, BinsNoise.of([0.0, 1.0], eps), y


def test_binary_classifier_on_randomized_response_labels() -> None:
    from sklearn.metrics import roc_auc_score

    from features_party.training.fit import fit_classifier

    release, features, schema, noise, y = income_release(1.0)
    valid = validation_mask(release.column("example_id").combine_chunks(), 0.2)
    held_out = features.filter(pa.array(valid))
    results = {}
    for debias in ("none", "affine"):
        trained = fit_classifier(release, features, schema, noise, debias=debias)
        p = trained.positive_probability(held_out)
        results[debias] = (roc_auc_score(y[valid], p), float(p.mean()), trained.metrics, p)
    auc, mean_affine, metrics, p_affine = results["affine"]
    assert auc > 0.8  # against the TRUE labels, learned from ε = 1 randomized response
    # the noisy labels have a positive rate pulled towards 1/2; the affine correction restores it
    assert abs(mean_affine - y[valid].mean()) < abs(results["none"][1] - y[valid].mean())
    assert abs(mean_affine - y[valid].mean()) < 0.03
    actual_error = float(np.mean(p_affine.round() != y[valid]))
    assert abs(metrics["validation_error_vs_true_labels_unbiased"] - actual_error) < 0.03, (
        metrics,
        actual_error,
    )
    assert p_affine.shape == (valid.sum(),)


def test_stepped_boosting_reports_progress_and_matches_a_single_fit() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    from features_party.training.fit import HGB_ITERATIONS, HGB_STEP, fit_in_steps

    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 4))
    y = X[:, 0] * 3 + rng.normal(size=3000)
    reports: list[dict[str, float]] = []
    stepped = HistGradientBoostingRegressor(max_iter=HGB_ITERATIONS, early_stopping=False)
    fit_in_steps(stepped, X, y, reports.append)
    single = HistGradientBoostingRegressor(max_iter=HGB_ITERATIONS, early_stopping=False).fit(X, y)
    assert np.allclose(stepped.predict(X), single.predict(X))
    assert [r["iterations"] for r in reports] == list(range(HGB_STEP, HGB_ITERATIONS + 1, HGB_STEP))
    assert reports[-1]["eta_s"] == 0 and all(r["training_examples"] == 3000 for r in reports)
    assert all(r["iterations_total"] == HGB_ITERATIONS for r in reports)  # a progress bar's length
    assert all(a["elapsed_s"] <= b["elapsed_s"] for a, b in itertools.pairwise(reports))
