"""The pricing spread σ of a regression model (``features_party.pricing.prices.spread``): read at the
upper end of its held-out estimate, at least what the model leaves unexplained of the release's noisy
prior, never wider than that prior, never below a grid step. A too-narrow σ was the failure: an
unbiased release's held-out estimate is noisy (and was once −8·10¹¹), and the old rule priced it at one
grid step — every group's prior a point mass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from features_party.pricing.prices import SPREAD_ERRORS, spread
from features_party.storage.orm import TrainingJob
from features_party.training.fit import STANDARD_ERROR
from labeldp.mechanisms import uniform_grid

SUPPORT = uniform_grid(0.0, 100.0, 101)  # grid step 1
PRIOR = np.full(101, 1 / 101)  # spread √((101² − 1)/12) ≈ 29.15
WIDEST = math.sqrt((101**2 - 1) / 12)


def job(loss: str, **metrics: float) -> TrainingJob:
    return TrainingJob(id="m", loss=loss, metrics=dict(metrics))


@pytest.mark.parametrize(
    ("loss", "metric", "error", "expected"),
    [
        ("squared", 100.0, 0.0, 10.0),  # the estimate itself when it is exact
        ("squared", 100.0, 50.0, math.sqrt(100.0 + SPREAD_ERRORS * 50.0)),  # its upper end
        ("squared", -400.0, 250.0, math.sqrt(-400.0 + SPREAD_ERRORS * 250.0)),  # negative, uncertain
        ("squared", -400.0, 1.0, 1.0),  # negative and certain: one grid step
        ("squared", 5_000.0, 10.0, WIDEST),  # worse than the prior: the prior's spread
        ("absolute", 8.0, 1.0, (8.0 + SPREAD_ERRORS) * math.sqrt(math.pi / 2)),
        ("absolute", 80.0, 1.0, WIDEST),
    ],
)
def test_the_spread_is_the_estimates_upper_end_between_a_grid_step_and_the_priors(
    loss: str, metric: float, error: float, expected: float
) -> None:
    got = spread(
        job(loss, validation_loss_vs_binned_true_labels_unbiased=metric, **{STANDARD_ERROR: error}),
        SUPPORT,
        PRIOR,
    )
    assert got == pytest.approx(expected, rel=1e-12)


def test_a_model_trained_before_the_standard_error_was_kept_prices_at_its_estimate() -> None:
    assert (
        spread(job("squared", validation_loss_vs_binned_true_labels_unbiased=100.0), SUPPORT, PRIOR) == 10.0
    )


def test_a_narrow_prior_bounds_the_spread_by_its_own() -> None:
    prior = np.zeros(101)
    prior[[40, 60]] = 0.5  # spread 10
    got = spread(job("squared", validation_loss_vs_binned_true_labels_unbiased=900.0), SUPPORT, prior)
    assert got == pytest.approx(10.0, rel=1e-12)


def test_the_spread_is_at_least_what_the_predictions_leave_unexplained_of_the_prior() -> None:
    """``Var_π(y) − Var(μ)``: a held-out estimate that landed low (prices at ε = 1, once in five runs:
    1,619² against a model error near 2,850²) no longer narrows every group's prior."""
    predicted = np.linspace(20.0, 80.0, 1001)  # Var ≈ 301
    unexplained = math.sqrt(WIDEST**2 - float(np.var(predicted)))
    low = job("squared", validation_loss_vs_binned_true_labels_unbiased=25.0, **{STANDARD_ERROR: 0.0})
    assert spread(low, SUPPORT, PRIOR, predicted) == pytest.approx(unexplained, rel=1e-12)
    high = job("squared", validation_loss_vs_binned_true_labels_unbiased=800.0, **{STANDARD_ERROR: 0.0})
    assert spread(high, SUPPORT, PRIOR, predicted) == pytest.approx(math.sqrt(800.0), rel=1e-12)
    # unpriced examples (NaN) do not count; predictions that vary more than the prior leave nothing
    with_gaps = np.append(predicted, [np.nan] * 50)
    assert spread(low, SUPPORT, PRIOR, with_gaps) == pytest.approx(unexplained, rel=1e-12)
    assert spread(low, SUPPORT, PRIOR, np.array([0.0, 100.0] * 50)) == pytest.approx(5.0, rel=1e-12)


def test_a_release_that_states_no_estimate_of_its_labels_bounds_nothing() -> None:
    """A feature-aware release whose every example had a group publishes the uniform prior (ε₁ = 0),
    which no example used: it neither floors nor caps σ."""
    low = job("squared", validation_loss_vs_binned_true_labels_unbiased=25.0, **{STANDARD_ERROR: 0.0})
    assert spread(low, SUPPORT, None, np.linspace(20.0, 80.0, 1001)) == 5.0
    wide = job("squared", validation_loss_vs_binned_true_labels_unbiased=5_000.0, **{STANDARD_ERROR: 0.0})
    assert spread(wide, SUPPORT, None) == pytest.approx(math.sqrt(5_000.0), rel=1e-12)
