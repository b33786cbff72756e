"""The public grouping rule of feature-aware priors, against direct computations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from labeldp.mechanisms import ParameterError, integer_grid, uniform_grid
from labeldp.priors import (
    MAX_GROUPS,
    NO_GROUP,
    TWO_POINT_FLOOR,
    check_group_priors,
    price_classes,
    price_values,
)
from labeldp.priors.grouping import quantile_groups


def direct_prior(mu: np.ndarray, sigma: float, values: np.ndarray) -> np.ndarray:
    """The sum over members of N(μ_i snapped to the grid, σ²) on the support's cells, member by member."""
    cuts = np.concatenate([[-np.inf], (values[1:] + values[:-1]) / 2, [np.inf]])
    snapped = values[np.abs(values[None, :] - mu[:, None]).argmin(axis=1)]
    masses = norm.cdf((cuts[None, 1:] - snapped[:, None]) / sigma) - norm.cdf(
        (cuts[None, :-1] - snapped[:, None]) / sigma
    )
    total = masses.sum(axis=0)
    return total / total.sum()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400), st.integers(1, 40), st.floats(5.0, 500.0))
def test_value_groups_are_quantiles_and_priors_are_the_members_sum(n: int, groups: int, sigma: float) -> None:
    support = uniform_grid(0.0, 1000.0, 41)
    mu = np.linspace(-50.0, 1050.0, n) + np.pi / 7  # off the cells' midpoints (no ties to break)
    priced = price_values(mu, sigma, support, groups)
    g = priced.groups
    assert g.min() == 0 and priced.count <= min(groups, n) and g.max() == priced.count - 1
    assert np.all(np.diff(g) >= 0)  # numbered in increasing prediction
    sizes = np.bincount(g)
    assert sizes.max() - sizes.min() <= max(1, n // groups + 1)  # nearly equal sizes
    assert np.allclose(priced.priors.sum(axis=1), 1.0)
    for j in range(priced.count):
        expected = direct_prior(np.clip(mu[g == j], 0, 1000), max(sigma, 12.5), support.values)
        floor = expected.max() * 1e-12
        expected = np.maximum(expected, floor) / np.maximum(expected, floor).sum()
        assert np.allclose(priced.priors[j], expected, rtol=1e-9, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-5, 5) | st.floats(-1e6, 1e6), min_size=1, max_size=300),
    st.integers(1, MAX_GROUPS),
)
def test_quantile_groups_follow_their_definition(scores: list[float], groups: int) -> None:
    """Against the definition by counting (ties likely): a score's rank is how many scores are smaller,
    its group rank·G // n, the groups renumbered 0, 1, … in increasing score."""
    score = np.asarray(scores, dtype=np.float64)
    n = score.size
    bucket = (score[None, :] < score[:, None]).sum(axis=1) * groups // n
    expected = np.searchsorted(np.unique(bucket), bucket)
    assert np.array_equal(quantile_groups(score, groups), expected)


def test_unpriced_examples_get_no_group_and_equal_predictions_share_one() -> None:
    mu = np.array([np.nan, 3.0, 3.0, 3.0, 3.0, 7.0, np.nan])
    priced = price_values(mu, 1.0, integer_grid(0, 9), 4)
    assert priced.groups[0] == priced.groups[-1] == NO_GROUP
    assert len(set(priced.groups[1:5].tolist())) == 1 and priced.groups[5] != priced.groups[1]


def test_on_two_points_a_predicted_mean_is_its_distribution_on_the_models_scale() -> None:
    """A regression model of a 0/1 label predicts ``a + (b − a)·P(1)`` (``a``, ``b``: its release's bin
    values): the prior reads P(1) back, kept within [0.05, 0.95] — a prior (1, 0) merged its group's
    labels into one bin and its rows carried none (Adult: the final model then predicted 0 for all)."""
    support = integer_grid(0, 1)
    a, b = 0.03, 0.74
    p1 = np.array([0.1, 0.3, 0.6, 0.9, 0.0, 1.0])
    mu = np.append(a + (b - a) * p1, [-0.9, 1.6, np.nan])  # debiased predictions go beyond the range
    priced = price_values(mu, 0.4, support, 9, scale=(a, b))
    expected = np.clip(np.append(p1, [0.0, 1.0]), TWO_POINT_FLOOR, 1 - TWO_POINT_FLOOR)
    assert priced.groups[-1] == NO_GROUP
    np.testing.assert_allclose(priced.priors[priced.groups[:-1], 1], expected, rtol=1e-12)
    # without a scale the points are their own values; the spread plays no part
    plain = price_values(p1, 123.0, support, 9)
    np.testing.assert_allclose(plain.priors[plain.groups, 1], np.clip(p1, 0.05, 0.95), rtol=1e-12)
    # a model whose release merged both points predicts nothing: every example at one half
    merged = price_values(mu[:-1], 0.4, support, 9, scale=(0.2, 0.2))
    assert merged.count == 1 and np.allclose(merged.priors, 0.5)


def test_binary_classes_group_by_the_positive_probability_and_average_it() -> None:
    p1 = np.array([0.1, 0.2, 0.8, 0.9, np.nan])
    priced = price_classes(np.c_[1 - p1, p1], 2)
    assert priced.groups.tolist() == [0, 0, 1, 1, NO_GROUP]
    assert np.allclose(priced.priors, [[0.85, 0.15], [0.15, 0.85]])


def test_more_classes_group_by_the_likeliest_class() -> None:
    rows = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    priced = price_classes(rows, 3)
    assert priced.groups[0] == priced.groups[1] != priced.groups[2]
    assert np.allclose(priced.priors[priced.groups[2]], [0.1, 0.1, 0.8])


@pytest.mark.parametrize(
    ("priors", "match"),
    [
        ([[0.5, np.nan]], "finite"),
        ([[0.5, -0.1]], "finite"),
        ([[0.0, 0.0]], "positive"),
        ([[1.0, 2.0, 3.0]], "2 masses"),
        ([[1.0, 1e301]], "finite"),
        (np.ones((5, 2)), "between 1 and 4"),
        (np.ones((0, 2)), "between 1 and 4"),
    ],
)
def test_hostile_group_priors_are_refused(priors: list[list[float]], match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        check_group_priors(priors, 2, 4)


def test_the_group_bound_is_checked() -> None:
    with pytest.raises(ParameterError, match="max_groups"):
        price_values([1.0], 1.0, integer_grid(0, 9), MAX_GROUPS + 1)
    with pytest.raises(ParameterError, match="support size"):
        price_values([1.0], 1.0, uniform_grid(0.0, 1.0, 10_000), 1000)
    assert np.allclose(check_group_priors([[2.0, 2.0], [0.0, 1e300]], 2, 4), [[0.5, 0.5], [0.0, 1.0]])
