"""Debiasing a feature-aware release row by row (``GroupedNoise``), against independent math: each
row's unbiased target averages, over many draws of its own mechanism, to its binned true label (a
normal bound at a fixed false-alarm rate); ``target_error`` equals the exact sum over the transition
matrix; the weights are the inverse errors normalized to mean 1; the per-row loss estimate is
unbiased."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.mechanisms import (
    GroupedNoise,
    PublishedMechanism,
    integer_grid,
    optimal_mechanism,
    release_grouped_labels,
    resolve_loss,
    target_error,
)
from labeldp.mechanisms.validation import ParameterError

Z = 4.9  # two-sided normal bound: a false alarm ~1e-6 per comparison, a few dozen comparisons here


def exact_error(published: PublishedMechanism) -> float:
    """``Σ_i π_i Σ_o P(o | s_i) (ỹ_o − s_i)²`` over the full k × m transition matrix."""
    from labeldp.mechanisms import BinsNoise

    noise = BinsNoise.of_published(published)
    u = noise.unbiased_targets(np.arange(noise.m))
    s = np.asarray(published.support)
    rows = published.transition_matrix()
    p = np.asarray(published.prior)
    return float(np.sum(p[:, None] * rows * (u[None, :] - s[:, None]) ** 2))


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_target_error_is_the_exact_sum_over_the_transition(epsilon: float) -> None:
    support = integer_grid(0, 30)
    prior = np.exp(-0.5 * ((support.values - 8) / 4) ** 2)
    regression = optimal_mechanism(support, prior / prior.sum(), epsilon, "squared")
    published = regression.describe(prior=prior, epsilon_prior=0.0, epsilon_total=epsilon)
    assert target_error(published) == pytest.approx(exact_error(published), rel=1e-9)
    classes = integer_grid(0, 5)
    skewed = np.array([0.5, 0.3, 0.1, 0.05, 0.03, 0.02])
    top_k = optimal_mechanism(classes, skewed, epsilon, "zero_one")  # may leave classes unreported
    published = top_k.describe(prior=skewed, epsilon_prior=0.0, epsilon_total=epsilon)
    assert target_error(published) == pytest.approx(exact_error(published), rel=1e-9)


def released(n: int, epsilon: float = 1.0) -> tuple[GroupedNoise, np.ndarray, np.ndarray, np.ndarray]:
    """``n`` labels on 0..20 in three groups (low, middle, high) and a quarter without a group,
    released by ``release_grouped_labels`` under the label objective (the CSPRNG: no seed); the row
    noise as the receiver derives it, each row's group, its released bin and its binned true label
    ``Φ_g(y)`` under its own mechanism."""
    support = integer_grid(0, 20)
    rng = np.random.default_rng(7)  # test data only: the labels and groups, not the noise
    groups = rng.integers(-1, 3, n)
    centre = np.array([3.0, 10.0, 17.0])
    y = np.clip(np.round(centre[np.maximum(groups, 0)] + rng.normal(0, 2, n)), 0, 20).astype(np.int64)
    priors = np.exp(-0.5 * ((support.values[None, :] - centre[:, None]) / 2.5) ** 2)
    release = release_grouped_labels(y, groups, priors, support, epsilon, "squared", objective="label")
    mechanisms = (*release.published_groups(), release.published())
    noise = GroupedNoise.of_published(mechanisms[-1], mechanisms[:-1])
    at = np.where(groups < 0, noise.count, groups)
    truth = np.empty(n)
    for j, m in enumerate(mechanisms):
        truth[at == j] = np.asarray(m.bin_values)[np.asarray(m.support_bins)[y[at == j]]]
    return noise, release.bin_indices, groups, truth


def test_per_row_targets_average_to_the_binned_true_label() -> None:
    n = 400_000
    noise, bins, groups, truth = released(n)
    targets = noise.unbiased_targets(bins, groups)
    assert targets.shape == (n,) and np.all(np.isfinite(targets))
    at = np.where(groups < 0, noise.count, groups)
    checked = set()
    for j in range(noise.count + 1):
        for value in np.unique(truth[at == j]):
            rows = (at == j) & (truth == value)
            if rows.sum() < 2000:
                continue
            t = targets[rows]
            z = (t.mean() - value) / (t.std(ddof=1) / np.sqrt(t.size))
            assert abs(z) < Z, (j, value, t.mean(), z)
            checked.add(j)
    assert checked == set(range(noise.count + 1))  # every mechanism, the release's own included


def test_weights_are_inverse_errors_with_mean_one() -> None:
    noise, _, groups, _ = released(20_000)
    w = noise.weights(groups)
    assert w.mean() == pytest.approx(1.0)
    at = np.where(groups < 0, noise.count, groups)
    for j in range(noise.count + 1):
        for i in range(noise.count + 1):
            ratio = w[at == j][0] / w[at == i][0]
            assert ratio == pytest.approx(noise.errors[i] / noise.errors[j], rel=1e-12)
    assert np.all(noise.errors > 0)
    with pytest.raises(ParameterError):
        noise.weights(np.array([noise.count]))  # a group the release does not have


def test_per_row_loss_estimates_the_loss_against_binned_labels() -> None:
    n = 300_000
    noise, bins, groups, truth = released(n, epsilon=2.0)
    ell = resolve_loss("squared")
    for f in (np.full(n, 9.0), truth.copy()):  # a fixed prediction, and the perfect one (last)
        estimate = noise.unbiased_loss(f, bins, groups, ell)
        actual = ell(f, truth)
        z = (estimate.mean() - actual.mean()) / (estimate.std(ddof=1) / np.sqrt(n))
        assert abs(z) < Z, (estimate.mean(), actual.mean())
    # the perfect prediction looks bad against the noisy values (the randomization's variance), far
    # beyond the standard error of its unbiased estimate, which the z-test above found centred on 0
    perfect = noise.unbiased_loss(truth, bins, groups, ell)
    naive = ell(truth, noise.noisy_values(bins, groups)).mean()
    assert naive > 100 * perfect.std(ddof=1) / np.sqrt(n), naive
