"""Exact attack advantages against independent math: brute-force enumeration of every decision rule
(1e-12), subset enumeration for the worst case, real sampled attacks (Wilson intervals, α = 1e-6), and
the Clopper–Pearson ε lower bound from 10⁶ canaries (never above the implemented ε, within 10% of it,
and above the claim for a broken sampler)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from labeldp.mechanisms import (
    PublishedMechanism,
    RRTopK,
    integer_grid,
    optimize_rr_on_bins,
    optimize_rr_top_k,
    sampler_of,
    uniform_grid,
)
from labeldp.mechanisms.advantage import advantages, channel_advantages, target_prior, targets_of
from labeldp.mechanisms.empirical import attack, epsilon_lower_bound, targets_from_noisy_model
from labeldp.mechanisms.validation import ParameterError
from tests.support.seeded import SeededRandom
from tests.support.stats import ALPHA, wilson

TOL = 1e-12


def regression(prior: list[float], eps: float) -> PublishedMechanism:
    support = uniform_grid(0.0, 50.0, len(prior))
    mech = optimize_rr_on_bins(support, prior, eps, "squared")
    return mech.describe(prior=np.asarray(prior) / sum(prior), epsilon_prior=0.1)


def classes(prior: list[float], eps: float) -> PublishedMechanism:
    return optimize_rr_top_k(prior, eps).describe(prior=np.asarray(prior) / sum(prior), epsilon_prior=0.1)


MECHANISMS = {
    "bins-3": lambda: regression([0.3, 0.2, 0.1, 0.05, 0.05, 0.3], 1.0),
    "bins-1": lambda: regression([0.01, 0.01, 0.96, 0.01, 0.01], 0.05),
    "bins-many": lambda: regression([0.1] * 10, 4.0),
    "top-k-partial": lambda: classes([0.5, 0.3, 0.1, 0.05, 0.05], 0.5),
    "top-k-all": lambda: classes([0.25, 0.25, 0.25, 0.25], 3.0),
}


def brute_force(published: PublishedMechanism, p: np.ndarray) -> dict[str, np.ndarray]:
    """Every quantity from the full k × m transition, with the attacker's best rule found by trying
    every map from outputs to targets."""
    M = published.transition_matrix()
    targets = targets_of(published)
    n_t, m = int(targets.max()) + 1, published.m
    y = np.asarray(published.support)
    out: dict[str, list[float]] = {k: [] for k in ("without", "with", "mult", "mult_exp", "trusts", "mse")}
    for row in p:
        joint = np.zeros((n_t, m))
        for i, t in enumerate(targets):
            joint[t] += row[i] * M[i]
        q = joint.sum(axis=1)
        out["without"].append(max(q[t] for t in range(n_t)))
        best = max(
            sum(joint[rule[z], z] for z in range(m)) for rule in itertools.product(range(n_t), repeat=m)
        )
        out["with"].append(best)
        shifts = []
        for z in range(m):
            pz = joint[:, z].sum()
            s = 0.0
            for t, u in itertools.permutations(range(n_t), 2):
                if q[t] > 0 and q[u] > 0 and pz > 0:
                    s = max(s, abs(np.log(joint[t, z] / joint[u, z]) - np.log(q[t] / q[u])))
            shifts.append((pz, s))
        out["mult"].append(max(s for pz, s in shifts if pz > 0))
        out["mult_exp"].append(sum(pz * s for pz, s in shifts))
        own = _own_target(published)
        out["trusts"].append(
            float(all(joint[own[z], z] >= joint[:, z].max() * (1 - 1e-12) for z in range(m)))
        )
        mu = row @ y
        e_var = 0.0
        for z in range(m):
            pz = row @ M[:, z]
            if pz > 0:
                w = row * M[:, z] / pz
                e_var += pz * (w @ (y * y) - (w @ y) ** 2)
        out["mse"].append((row @ (y * y) - mu * mu) - e_var)
    return {k: np.asarray(v) for k, v in out.items()}


def _own_target(published: PublishedMechanism) -> list[int]:
    """The target each output bin reports."""
    if published.kind == "rr_on_bins":
        return list(range(published.m))
    bins = np.asarray(published.support_bins)
    return [int(np.flatnonzero(bins == z)[0]) for z in range(published.m)]


def random_priors(k: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.4), size=n)
    p[:3] = 0.0  # edge cases: certainty, and a prior with exact zeros
    p[0, 0] = 1.0
    p[1, :2] = 0.5
    p[2] = 1.0 / k
    return p


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_exact_advantages_match_brute_force(name: str) -> None:
    published = MECHANISMS[name]()
    p = random_priors(len(published.support), 40, seed=len(name))
    exact = advantages(published, p)
    brute = brute_force(published, p)
    assert np.allclose(exact.success_without, brute["without"], rtol=0, atol=TOL)
    assert np.allclose(exact.success_with, brute["with"], rtol=0, atol=TOL)
    assert np.allclose(exact.multiplicative, brute["mult"], rtol=0, atol=1e-9)
    assert np.allclose(exact.multiplicative_expected, brute["mult_exp"], rtol=0, atol=1e-9)
    assert np.array_equal(exact.trusts, brute["trusts"].astype(bool))
    if published.kind == "rr_on_bins":
        assert exact.mse_reduction is not None
        assert np.allclose(exact.mse_reduction, brute["mse"], rtol=1e-9, atol=1e-9)
    # the dense channel computation agrees (it is what baselines use)
    dense = channel_advantages(p, published.transition_matrix(), targets_of(published), published.support)
    assert np.allclose(dense.success_with, exact.success_with, atol=TOL)
    assert np.allclose(dense.multiplicative, exact.multiplicative, atol=1e-9)
    # and no example exceeds the data-independent bounds
    assert exact.additive.max() <= published.worst_case_additive_advantage + TOL
    assert exact.multiplicative.max() <= published.max_multiplicative_advantage + 1e-9


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_worst_case_is_the_maximum_over_priors(name: str) -> None:
    """The maximum of the additive advantage over all priors is attained at a uniform prior on some
    set of targets (docs/math.md §11); enumerate every set and compare with h − 1/m."""
    published = MECHANISMS[name]()
    targets = targets_of(published)
    n_t = int(targets.max()) + 1
    best = 0.0
    for size in range(1, n_t + 1):
        for chosen in itertools.combinations(range(n_t), size):
            p = np.zeros(len(targets))
            for t in chosen:  # all of the target's mass on its first support point
                p[int(np.flatnonzero(targets == t)[0])] = 1.0 / size
            best = max(best, float(brute_force(published, p[None, :])["with"][0] - 1.0 / size))
    assert published.worst_case_additive_advantage == pytest.approx(best, abs=TOL)
    assert published.max_multiplicative_advantage == published.implemented_epsilon


def test_binary_rr_matches_the_papers_closed_form() -> None:
    """Binary RR: advantage max(0, q − max(η, 1 − η)), trusted exactly when η is in [1 − q, q]."""
    published = classes([0.5, 0.5], 1.0)
    q = published.threshold.keep_probability
    eta = np.linspace(0, 1, 101)
    result = advantages(published, np.stack([1 - eta, eta], axis=1))
    assert np.allclose(result.additive, np.maximum(0, q - np.maximum(eta, 1 - eta)), atol=TOL)
    assert np.array_equal(result.trusts, (eta >= 1 - q - 1e-12) & (eta <= q + 1e-12))
    interior = (eta > 0) & (eta < 1)
    assert np.allclose(result.multiplicative[interior], published.implemented_epsilon, rtol=1e-12)
    assert published.worst_case_additive_advantage == pytest.approx(q - 0.5, abs=TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bins-3", "top-k-partial", "bins-many"])
def test_sampled_attacks_agree_with_the_exact_advantage(name: str) -> None:
    """Draw labels from per-example priors, randomize with the real sampler, attack with the
    posterior: the attack's accuracy with and without the release falls in Wilson intervals around
    the exact success probabilities (α = 1e-6 each)."""
    published = MECHANISMS[name]()
    k, n = len(published.support), 200_000
    rng = np.random.default_rng(7)
    kinds = random_priors(k, 8, seed=3)
    p = kinds[rng.integers(0, kinds.shape[0], n)]
    labels = (p.cumsum(axis=1) > rng.random(n)[:, None]).argmax(axis=1)
    mech = sampler_of(published)
    values = np.asarray(published.support)[labels]
    outputs = mech.randomize(values if published.kind == "rr_on_bins" else labels, rng=SeededRandom(11))
    truth = targets_of(published)[labels]
    result = attack(published, target_prior(published, p), outputs, truth)
    exact = advantages(published, p)
    for right, expected in (
        (result.right_without, exact.success_without),
        (result.right_with, exact.success_with),
    ):
        lo, hi = wilson(np.array([right.sum()]), np.array([n]), ALPHA)
        assert lo[0] <= expected.mean() <= hi[0]


def test_the_noisy_model_inversion_recovers_the_target_prior() -> None:
    for name in ("bins-3", "top-k-all"):
        published = MECHANISMS[name]()
        q = target_prior(published, random_priors(len(published.support), 30, seed=5))
        class_of_bin = np.argsort(np.asarray(published.support_bins))  # RR-Top-k reporting every class
        by_bin = q if published.kind == "rr_on_bins" else q[:, class_of_bin]
        g = by_bin @ published.bin_transition()  # P(released bin | x)
        assert np.allclose(targets_from_noisy_model(published, g), q, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_canaries_bound_epsilon_from_below_and_tightly(epsilon: float) -> None:
    """10⁶ binary canaries through one release: the Clopper–Pearson bound never exceeds the
    implemented ε and comes within 10% of it."""
    published = classes([0.5, 0.5], epsilon)
    labels = np.arange(1_000_000) % 2
    outputs = sampler_of(published).randomize(labels, rng=SeededRandom(int(epsilon * 10)))
    bound = epsilon_lower_bound(published, labels, outputs, alpha=1e-6)
    assert bound.epsilon_low <= published.implemented_epsilon
    assert bound.epsilon_low >= 0.9 * published.implemented_epsilon


def test_canaries_catch_a_sampler_that_spends_more_than_it_claims() -> None:
    """The black-box check fails a build whose sampler flips too few labels: outputs drawn at 1.5 ε
    under a mechanism that claims ε."""
    claimed = classes([0.5, 0.5], 1.0)
    broken = RRTopK(1.5, 2, np.array([0, 1]))
    labels = np.arange(1_000_000) % 2
    outputs = broken.randomize(labels, rng=SeededRandom(3))
    assert epsilon_lower_bound(claimed, labels, outputs).epsilon_low > claimed.implemented_epsilon


@pytest.mark.parametrize("few", [0, 1])
def test_the_canary_bound_holds_with_unbalanced_canaries(few: int) -> None:
    """30 canaries of one class and 20,000 of the other, 300 independent releases at α = 0.1: the
    bound may exceed the true ε in at most an α share of runs (here: checked at the 10⁻⁶ quantile of
    Binomial(300, 0.1)). Balanced canaries hide an upper Clopper–Pearson limit where the lower one
    belongs; 30 against 20,000 expose it (it then claims ε_low > ε in about 98% of runs)."""
    from scipy import stats

    published = classes([0.5, 0.5], 1.0)
    sampler = sampler_of(published)
    labels = np.r_[np.full(30, few), np.full(20_000, 1 - few)]
    runs, alpha = 300, 0.1
    over = 0
    for trial in range(runs):
        outputs = sampler.randomize(labels, rng=SeededRandom(1000 + trial))
        bound = epsilon_lower_bound(published, labels, outputs, alpha=alpha)
        over += bound.epsilon_low > published.implemented_epsilon
    assert over <= stats.binom.ppf(1 - ALPHA, runs, alpha), over


def test_bad_inputs_are_refused() -> None:
    published = MECHANISMS["bins-3"]()
    k = len(published.support)
    with pytest.raises(ParameterError, match="masses per row"):
        advantages(published, np.ones(k + 1))
    with pytest.raises(ParameterError, match="non-negative"):
        advantages(published, -np.ones(k))
    with pytest.raises(ParameterError, match="positive sum"):
        advantages(published, np.zeros(k))
    with pytest.raises(ParameterError, match="two different bins"):
        epsilon_lower_bound(published, np.zeros(10, dtype=int), np.zeros(10, dtype=int))
    with pytest.raises(ParameterError, match="alpha"):
        epsilon_lower_bound(published, np.arange(10) % 2, np.zeros(10, dtype=int), alpha=0)
    with pytest.raises(ParameterError, match="outputs must be bins"):
        attack(published, np.full((2, published.m), 1 / published.m), np.array([0, 99]), np.array([0, 0]))


def test_an_integer_support_regression_release_has_finite_numbers() -> None:
    support = integer_grid(0, 52)
    prior = np.exp(-np.abs(np.arange(53) - 40) / 5.0)
    published = optimize_rr_on_bins(support, prior, 2.0, "squared").describe(
        prior=prior / prior.sum(), epsilon_prior=0.2
    )
    summary = advantages(published, published.prior).summary()
    assert all(np.isfinite(v) for v in summary.values())
    assert 0 <= summary["mse_reduction_share"] <= 1
    assert summary["additive_max"] <= published.worst_case_additive_advantage + TOL
