"""Edge cases (k = 1, one label value, all mass in one cell, tiny and huge ε) and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import (
    explicit_support,
    integer_grid,
    log_grid,
    optimize_rr_on_bins,
    private_prior,
    randomized_response,
    release_labels,
    uniform_grid,
)


def test_single_support_point() -> None:
    mech = optimize_rr_on_bins([3.0], [1.0], 1.0)
    assert mech.m == 1 and mech.bin_values.tolist() == [3.0]
    assert mech.randomize(np.array([-5.0, 3.0, 100.0])).tolist() == [0, 0, 0]
    assert mech.implemented_epsilon == 0.0
    assert mech.expected_loss([3.0], [1.0]) == 0.0


def test_all_mass_in_one_cell_gives_one_bin_at_that_value() -> None:
    for loss in ("squared", "absolute", "poisson"):
        p = np.zeros(10)
        p[4] = 1.0
        mech = optimize_rr_on_bins(np.arange(10.0), p, 2.0, loss)
        assert mech.m == 1 and mech.bin_values[0] == pytest.approx(4.0)
        assert mech.expected_loss(np.arange(10.0), p) == pytest.approx(
            0.0 if loss != "poisson" else 4 - 4 * math.log(4)
        )


def test_release_of_a_single_label_value() -> None:
    rel = release_labels(np.full(1000, 7.0), integer_grid(0, 10), 1.0)
    assert rel.bin_indices.shape == (1000,)
    assert rel.epsilon == pytest.approx(1.0)
    assert np.isclose(rel.prior.sum(), 1.0)


def test_release_unpacks_as_mechanism_prior_and_bins() -> None:
    labels = np.arange(100.0) % 11
    rel = release_labels(labels, integer_grid(0, 10), 2.0, epsilon_prior=0.5)
    mech, prior, bins = rel
    assert mech is rel.mechanism and prior is rel.prior and bins is rel.bin_indices
    assert rel.epsilon_prior == 0.5 and rel.epsilon_randomize == 1.5 and mech.epsilon == 1.5
    assert bins.shape == labels.shape and np.isclose(prior.sum(), 1.0)


def test_tiny_epsilon_gives_a_single_bin_at_the_prior_optimum() -> None:
    y = np.arange(20.0)
    p = np.linspace(1, 2, 20)
    mech = optimize_rr_on_bins(y, p, 1e-6, "squared")
    assert mech.m == 1
    assert mech.bin_values[0] == pytest.approx(np.dot(p / p.sum(), y))


def test_huge_epsilon_keeps_every_value_and_remains_dp() -> None:
    y = np.arange(6.0)
    mech = optimize_rr_on_bins(y, np.ones(6), 60.0, "squared")
    assert mech.m == 6 and np.allclose(mech.bin_values, y)
    assert np.array_equal(mech.randomize(y), np.arange(6))
    assert mech.threshold.threshold < 2**64  # moves keep a positive probability
    assert mech.implemented_epsilon <= 60.0


def test_labels_outside_the_support_are_clipped_then_snapped() -> None:
    mech = optimize_rr_on_bins(np.arange(0.0, 11.0), np.ones(11), 50.0)
    assert mech.bin_of(np.array([-100.0, 0.4, 0.5, 0.6, 1e9])).tolist() == [0, 0, 0, 1, 10]


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: optimize_rr_on_bins([1.0, np.nan], [0.5, 0.5], 1.0), "values"),
        (lambda: optimize_rr_on_bins([1.0, np.inf], [0.5, 0.5], 1.0), "values"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, np.nan], 1.0), "probs"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.5], 0.0), "epsilon"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.5], -1.0), "epsilon"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.5], math.nan), "epsilon"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.5], math.inf), "epsilon"),
        (lambda: optimize_rr_on_bins([], [], 1.0), "probs"),
        (lambda: optimize_rr_on_bins([1.0, 1.0], [0.5, 0.5], 1.0), "values"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.3, 0.2], 1.0), "values and probs"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, -0.5], 1.0), "probs"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.0, 0.0], 1.0), "probs"),
        (lambda: optimize_rr_on_bins([-1.0, 2.0], [0.5, 0.5], 1.0, "poisson"), "values"),
        (lambda: optimize_rr_on_bins([1.0, 2.0], [0.5, 0.5], 1.0, "hinge"), "loss"),
        (lambda: release_labels([-1.0, 2.0], integer_grid(0, 5), 1.0, "poisson"), "labels"),
        (lambda: release_labels([1.0, np.nan], integer_grid(0, 5), 1.0), "labels"),
        (lambda: release_labels([], integer_grid(0, 5), 1.0), "labels"),
        (lambda: release_labels([1.0], integer_grid(0, 5), 1.0, epsilon_prior=1.0), "epsilon_prior"),
        (lambda: release_labels([1.0], integer_grid(0, 5), 1.0, epsilon_prior=0.0), "epsilon_prior"),
        (lambda: private_prior([1.0, 2.0], integer_grid(0, 5), 0.0), "epsilon"),
        (lambda: private_prior([1.0, np.inf], integer_grid(0, 5), 1.0), "labels"),
        (lambda: randomized_response([0, 3], 3, 1.0), "labels"),
        (lambda: randomized_response([0, 1], 0, 1.0), "num_classes"),
        (lambda: randomized_response([0.5], 2, 1.0), "labels"),
        (lambda: explicit_support([1.0, 2.0, 1.0]), "duplicate"),
        (lambda: uniform_grid(5.0, 1.0, 10), "lo"),
        (lambda: uniform_grid(0.0, 1.0, 1), "k"),
        (lambda: log_grid(0.0, 100.0, 10), "lo"),
        (lambda: integer_grid(0, 10, 3), "step"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call: object, argument: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=argument):
        call()


def test_custom_loss_on_a_huge_support_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"custom \(callable\) losses support at most"):
        optimize_rr_on_bins(np.arange(5000.0), np.ones(5000), 1.0, lambda a, b: (a - b) ** 4)


def test_randomize_rejects_non_finite_labels() -> None:
    mech = optimize_rr_on_bins(np.arange(5.0), np.ones(5), 1.0)
    with pytest.raises(ValueError, match="labels"):
        mech.randomize(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="values and probs"):
        mech.expected_loss([1.0, 2.0], [1.0])
