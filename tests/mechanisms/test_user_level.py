"""User-level privacy in the mechanism library: contribution bounding, calibration, choosing τ.

Checked against independent math: the exact output distribution of a tiny universe (every labeling of
one user, every output), the exact discrete Laplace law of the prior's noise, the exact distribution
of the exponential mechanism that picks a private bound.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from labeldp.mechanisms import (
    PublishedMechanism,
    choose_contribution_bound,
    contribution_ranks,
    examples_per_user,
    integer_grid,
    noisy_counts,
    optimal_mechanism,
    plan_user_split,
    private_contribution_bound,
    private_prior,
    release_labels,
    release_user_labels,
)
from labeldp.mechanisms.epsilon import user_level_cost
from labeldp.mechanisms.validation import ParameterError
from tests.support.seeded import SeededRandom
from tests.support.stats import ALPHA, chi_square_ok


def population(users: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(user key per example, example key per example) with a heavy-tailed number of examples per user."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(rng.zipf(1.7, users), 200)
    user = np.repeat(np.arange(users, dtype=np.int64) * 7919 + 13, counts)
    examples = rng.integers(-(2**63), 2**63 - 1, user.size, dtype=np.int64)
    return user, examples


# -- contribution bounding ----------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(1, 6), st.randoms(use_true_random=False))
def test_the_kept_set_ignores_labels_and_order(salt: int, bound: int, shuffle: object) -> None:
    """Identical kept set under any permutation of the rows and any change of the labels, and at most
    τ kept per user: the choice sees keys and the salt, never a label."""
    users, examples = population(300)
    kept = set(examples[contribution_ranks(users, examples, salt) < bound].tolist())
    order = np.arange(users.size)
    shuffle.shuffle(order)  # type: ignore[attr-defined]
    again = set(examples[order][contribution_ranks(users[order], examples[order], salt) < bound].tolist())
    assert kept == again
    per_user = np.bincount(
        np.unique(users, return_inverse=True)[1][contribution_ranks(users, examples, salt) < bound]
    )
    assert per_user.max() <= bound
    # through the release: labels drawn twice, the capped examples are the same ones
    support = integer_grid(0, 4)
    rng = np.random.default_rng(salt % 2**32)
    capped = [
        release_user_labels(
            rng.integers(0, 5, users.size), users, examples, support, 2.0, "squared", bound, salt=salt
        ).capped
        for _ in range(2)
    ]
    assert np.array_equal(capped[0], capped[1])
    assert set(examples[~capped[0]].tolist()) == kept


def test_bounds_are_nested() -> None:
    users, examples = population(500)
    ranks = contribution_ranks(users, examples, 99)
    for small, large in itertools.pairwise([1, 2, 3, 5, 8]):
        assert np.all((ranks < small) <= (ranks < large))
    counts = examples_per_user(users)
    assert int((ranks < 3).sum()) == int(np.minimum(counts, 3).sum())


# -- calibration -------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.01, 30),
    st.one_of(st.integers(1, 500), st.sampled_from(["auto", "private"])),
    st.integers(1, 400),
    st.integers(2, 2000),
)
def test_one_release_never_costs_a_user_more_than_epsilon_user(
    epsilon_user: float, bound: int | str, users: int, k: int
) -> None:
    """ε_τ + ε₁ + τ·ε₂ <= ε_user as exact rationals, for every τ the release could end with."""
    counts = np.full(users, 3)
    try:
        split = plan_user_split(epsilon_user, bound, counts, k)  # type: ignore[arg-type]
    except ParameterError:
        return  # e.g. ε₂ would underflow at a huge τ: refused before anything happens
    for tau in [split.bound] if split.bound else [1, 2, 7, 1000]:
        budget = split.for_bound(tau)
        cost = user_level_cost(budget.epsilon_bound, budget.epsilon_prior, budget.epsilon_randomize, tau)
        assert cost <= Fraction(epsilon_user)
        exposure = Fraction(budget.epsilon_prior) / budget.prior_contribution_bound + Fraction(
            budget.epsilon_randomize
        )
        assert (
            exposure <= Fraction(budget.epsilon_example) <= split.max_example_exposure + Fraction(1, 10**12)
        )


def test_a_published_user_level_mechanism_checks_its_own_accounting() -> None:
    users, examples = population(200)
    result = release_user_labels(
        np.zeros(users.size), users, examples, integer_grid(0, 3), 1.0, "squared", 4, salt=1
    )
    published = result.published()
    assert published.privacy_unit == "user" and published.contribution_bound == 4
    assert published.capped_bin == published.m and published.bin_codes == published.m + 1
    body = published.model_dump()
    for change in (
        {"epsilon_randomize": published.epsilon_randomize * 1.01},  # τ·ε₂ would exceed ε_user
        {"contribution_bound": 5},
        {"epsilon_example": published.epsilon_randomize},  # below ε₁/τ_p + ε₂
        {"contribution_bound": None},
    ):
        with pytest.raises(ValueError):
            PublishedMechanism.model_validate({**body, **change})
    example_level = release_labels(np.zeros(100), integer_grid(0, 3), 1.0).published().model_dump()
    with pytest.raises(ValueError):
        PublishedMechanism.model_validate({**example_level, "contribution_bound": 2})


# -- the guarantee, by exact enumeration --------------------------------------------------------------
@pytest.mark.parametrize("bound", [1, 2, 3])
def test_changing_one_users_labels_moves_any_output_by_at_most_e_to_the_tau_eps2(bound: int) -> None:
    """Tiny universe: user A has 4 examples, B 2, C 1; support {0, 1, 2}. For the mechanism a release
    uses, enumerate every labeling of A (3⁴, the others fixed) and every output of A's examples: the
    exact output probability (kept examples follow the sampler's transition, capped ones are the code
    m with certainty) never changes by more than e^(τ·ε₂) — and does reach beyond e^((τ-1)·ε₂), so
    the bound is the one that holds, not a looser count of kept examples."""
    users = np.array([1, 1, 1, 1, 2, 2, 3], dtype=np.int64)
    examples = np.array([11, 12, 13, 14, 21, 22, 31], dtype=np.int64)
    support = integer_grid(0, 2)
    eps2 = 0.7
    mechanism = optimal_mechanism(support, np.array([0.5, 0.3, 0.2]), eps2, "squared")
    transition = mechanism.transition_matrix()  # exact, k × m
    kept = contribution_ranks(users, examples, salt=5) < bound
    a_kept = np.flatnonzero(kept[:4])
    assert a_kept.size == bound
    m = mechanism.m
    worst = 0.0
    outputs = list(itertools.product(range(m), repeat=a_kept.size))
    probabilities = []
    for labels in itertools.product(range(3), repeat=4):
        row = [math.prod(transition[labels[i], out[j]] for j, i in enumerate(a_kept)) for out in outputs]
        probabilities.append(row)
    p = np.asarray(probabilities)
    for x, y in itertools.combinations(range(p.shape[0]), 2):
        ratio = np.max(np.maximum(p[x] / p[y], p[y] / p[x]))
        worst = max(worst, float(ratio))
    assert math.log(worst) <= bound * mechanism.implemented_epsilon + 1e-12
    assert math.log(worst) > (bound - 1) * mechanism.implemented_epsilon
    # and the release path puts the capped examples on code m, the kept ones on real bins
    result = release_user_labels(
        np.zeros(7), users, examples, support, 10.0, "squared", bound, salt=5, epsilon_prior=1.0
    )
    assert np.array_equal(result.capped, ~kept)
    assert np.all(result.bin_indices[kept] < result.mechanism.m)


# -- the prior's noise --------------------------------------------------------------------------------
@pytest.mark.parametrize(("eps", "bound"), [(1.0, 1), (1.0, 4), (0.5, 10)])
def test_prior_noise_is_discrete_laplace_with_scale_two_tau_over_epsilon(eps: float, bound: int) -> None:
    """KS test (α = 1e-6) of the histogram's noise against the exact discrete Laplace CDF of scale 2τ/ε₁."""
    support = integer_grid(0, 19_999)
    noise = noisy_counts(np.zeros(10), support, eps, contribution_bound=bound)
    noise[0] -= 10
    scale = 2 * bound / eps
    q = math.exp(-1 / scale)
    grid = np.arange(-int(60 * scale) - 5, int(60 * scale) + 6)
    cdf = np.cumsum((1 - q) / (1 + q) * q ** np.abs(grid))
    ecdf = np.searchsorted(np.sort(noise), grid, side="right") / noise.size
    assert float(np.max(np.abs(ecdf - cdf))) <= float(stats.kstwo.ppf(1 - ALPHA, noise.size))
    assert abs(noise.var() / (2 * q / (1 - q) ** 2) - 1) < 0.1


def test_the_release_draws_its_prior_at_scale_two_tau_over_epsilon_prior() -> None:
    """Same seeded stream: the released prior is exactly the kept examples' histogram with noise of
    scale 2τ/ε₁ — not 2/ε₁, and not over all examples."""
    users, examples = population(400)
    labels = (examples % 5 + 5) % 5
    support = integer_grid(0, 4)
    result = release_user_labels(
        labels, users, examples, support, 2.0, "squared", 3, salt=8, epsilon_prior=0.5, rng=SeededRandom(3)
    )
    kept = contribution_ranks(users, examples, 8) < 3
    expected = private_prior(labels[kept], support, 0.5, contribution_bound=3, rng=SeededRandom(3))
    assert np.array_equal(result.prior, expected)
    wrong = private_prior(labels[kept], support, 0.5, rng=SeededRandom(3))
    assert not np.array_equal(result.prior, wrong)


# -- choosing τ ---------------------------------------------------------------------------------------
def test_auto_minimizes_binning_plus_noise_over_the_examples_kept() -> None:
    """The choice is the argmin of B(ε₂) + V(ε₂)/kept(τ), each recomputed here from the mechanism's
    exact transition; the release-level loss is reported beside it."""
    users, _ = population(3000, seed=2)
    counts = examples_per_user(users)
    support = integer_grid(0, 20)
    prior = np.exp(-np.arange(21) / 4)
    prior = prior / prior.sum()
    for eps in (1.0, 4.0, 16.0):
        choice = choose_contribution_bound(counts, support, prior, eps, "squared")
        assert choice.risks[choice.candidates.index(choice.bound)] == min(choice.risks)
        for tau, risk, loss in zip(choice.candidates, choice.risks, choice.expected_losses, strict=True):
            mechanism = optimal_mechanism(support, prior, float(Fraction(eps) / tau), "squared")
            values, bins = mechanism.bin_values, mechanism.support_bins
            binning = float(np.dot(prior, (values[bins] - support.values) ** 2))
            t = mechanism.transition_matrix()  # k × m: the noisy value's law for each label
            a = t[int(np.argmax(prior)), bins[int(np.argmax(prior))]] - (
                t[0, 1 - bins[0]] if mechanism.m > 1 else 0.0
            )
            mean, second = t @ values, t @ values**2
            noise = float(np.dot(prior, second - mean**2)) / a**2 if mechanism.m > 1 else 0.0
            kept = int(np.minimum(counts, tau).sum())
            assert risk == pytest.approx(binning + noise / kept, rel=1e-9)
            mean_label = float(np.dot(prior, support.values))
            constant = float(np.dot(prior, (support.values - mean_label) ** 2))
            expected = (
                kept * mechanism.expected_loss(support.values, prior) + (counts.sum() - kept) * constant
            )
            assert loss == pytest.approx(expected / counts.sum(), rel=1e-12)
    # with one example per user there is nothing to choose
    assert choose_contribution_bound(np.ones(500, dtype=np.int64), support, prior, 2.0, "squared").bound == 1


def test_a_private_bound_follows_the_exponential_mechanism_exactly() -> None:
    """Chi-square (α = 1e-6) of 20,000 draws against the exact exponential-mechanism distribution."""
    counts = np.array([1] * 50 + [2] * 30 + [3] * 10 + [6] * 8 + [9] * 2)
    eps, q, top = 0.3, 0.9, 10
    bounds = np.arange(1, top + 1)
    at_most = np.searchsorted(np.sort(counts), bounds, side="right")
    weights = np.exp(-eps * np.abs(at_most - q * counts.size) / 2)
    draws = [private_contribution_bound(counts, eps, quantile=q, max_bound=top) for _ in range(20_000)]
    observed = np.bincount(np.asarray(draws) - 1, minlength=top)
    ok, ratio = chi_square_ok(observed, weights / weights.sum(), alpha=ALPHA)
    assert ok, ratio
    # ε large: the quantile (3, 4 and 5 all have 90 of 100 users at or below them)
    assert private_contribution_bound(counts, 30.0, quantile=q, max_bound=top) in (3, 4, 5)
