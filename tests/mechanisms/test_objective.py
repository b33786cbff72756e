"""The model objective (docs/math.md §12): its bins are the exact optimum of its own objective (the
per-label loss at the objective ε, checked against the LP over every DP mechanism at that ε), the labels
are still randomized at the release's ε, and the identities the derivation rests on hold exactly."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from labeldp.mechanisms import (
    ParameterError,
    PublishedMechanism,
    RROnBins,
    explicit_support,
    optimize_rr_on_bins,
    optimize_rr_top_k,
    release_labels,
    sampler_of,
)
from labeldp.mechanisms.debias import BinsNoise
from labeldp.mechanisms.objective import (
    LEARNING_AWARE_FROM_EPSILON,
    effective_examples,
    model_objective_epsilon,
    objective_epsilon,
)
from tests.mechanisms.test_optimize_exact import LOSS_NAMES, random_prior, relative_gap, shift
from tests.mechanisms.test_published_mechanism import over_the_wire
from tests.support import oracles
from tests.support.seeded import SeededRandom

REL = 1e-9


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_model_objective_bins_match_lp_at_the_objective_epsilon(loss: str) -> None:
    """The bins minimize the per-label loss at ε_L over *every* ε_L-DP mechanism (Theorem 5's LP),
    while the sampler randomizes at ε."""
    rng = np.random.default_rng({"squared": 21, "absolute": 22, "poisson": 23}[loss])
    checked = 0
    while checked < 40:
        k = int(rng.integers(1, 9))
        eps = float(math.exp(rng.uniform(math.log(0.05), math.log(6))))
        n = int(rng.integers(10, 10**6))
        eps_l = model_objective_epsilon(eps, n, float(rng.choice([1.0, 30.0, 1000.0])))
        if eps_l > 8:  # the LP solver's tolerance is ~1e-9 up to e^8 (the optimizer's own LP test)
            continue
        checked += 1
        y, p = random_prior(rng, k, loss)
        order = np.argsort(y)
        ys, ps = y[order], p[order]
        mech = optimize_rr_on_bins(y, p, eps, loss, optimize_at=eps_l)
        assert mech.epsilon == eps and mech.objective_epsilon == eps_l
        at_l = RROnBins(eps_l, mech.support, mech.support_bins, mech.bin_values, mech.loss)
        ours = at_l.expected_loss(ys, ps) - shift(ys, ps, loss)
        outputs = oracles.lp_output_set(ys, ps, eps_l, loss)
        lp = oracles.lp_optimum(ys, ps, eps_l, outputs, oracles.LOSSES[loss]) - shift(ys, ps, loss)
        scale = max(
            abs(shift(ys, ps, loss)), float(np.sum(ps * oracles.LOSSES[loss](np.full(k, ps @ ys), ys)))
        )
        assert relative_gap(ours, lp, scale) <= REL, f"k={k} eps={eps:.4g} eps_l={eps_l:.4g}"
        rows = mech.transition_matrix()  # randomized at ε: every column's ratio is at most e^ε
        assert np.all(rows.max(axis=0) <= math.exp(eps) * rows.min(axis=0) * (1 + 1e-12))
        assert mech.implemented_epsilon <= eps


def test_rr_top_k_chooses_k_at_the_objective_epsilon_and_randomizes_at_epsilon() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        p = rng.dirichlet(np.full(int(rng.integers(2, 12)), 0.5))
        eps = float(rng.uniform(0.05, 4))
        eps_l = eps + float(rng.uniform(0, 6))
        mech = optimize_rr_top_k(p, eps, optimize_at=eps_l)
        assert mech.top.tolist() == optimize_rr_top_k(p, eps_l).top.tolist()
        assert mech.epsilon == eps and mech.threshold.implemented_epsilon <= eps


def test_objective_epsilon_formula() -> None:
    """e^{ε_L} − 1 = n_eff·(e^ε − 1)²/e^ε (checked in exact rationals against a float exp), never below
    ε, growing with n and ε; the label objective has none."""
    for eps in (0.01, 0.3, 1.0, 4.0, 8.0, 30.0):
        for n in (1_000, 43_074, 10**7):
            n_eff = effective_examples(n, 1000.0)
            eps_l = model_objective_epsilon(eps, n, 1000.0)
            g = Fraction(math.expm1(eps))
            gain = Fraction(n_eff) * g * g / (g + 1)
            if gain > g:  # the formula, not the floor at ε
                assert math.isclose(math.expm1(eps_l), float(gain), rel_tol=1e-9)
            else:
                assert eps_l == eps
            assert eps_l >= eps
            assert model_objective_epsilon(eps, 2 * n, 1000.0) >= eps_l
            assert model_objective_epsilon(eps * 1.1, n, 1000.0) >= eps_l
    assert model_objective_epsilon(700.0, 10**9, 1.0) == 700.0  # capped, finite
    assert objective_epsilon("label", 1.0, 10**6) is None
    assert effective_examples(10, 1000.0) == 1.0
    for bad in (0.5, math.inf, math.nan, 1e13):
        with pytest.raises(ParameterError):
            model_objective_epsilon(1.0, 1000, bad)
    with pytest.raises(ParameterError):
        objective_epsilon("loss", 1.0, 1000)  # type: ignore[arg-type]


def _within_bin_means(y: np.ndarray, p: np.ndarray, bins: np.ndarray, m: int) -> np.ndarray:
    mass = np.bincount(bins, weights=p, minlength=m)
    return np.bincount(bins, weights=p * y, minlength=m) / mass


def test_the_identities_the_derivation_rests_on() -> None:
    """docs/math.md §12 with v = the bins' conditional means: (a) the affine-debiased noise's variance is
    V = (m/g)·Σ P_j (v_j − v̄)² + ((g + m)/g²)·Σ_j (v_j − v̄)², computed here from the exact transition
    matrix; (b) the per-label loss at any ε' is Bias + [m·Σ P_j (v_j − v̄)² + Σ_j (v_j − v̄)²]/(g' + m)."""
    rng = np.random.default_rng(9)
    for _ in range(200):
        k = int(rng.integers(2, 30))
        y = np.sort(rng.normal(0, 10, k))
        p = rng.dirichlet(np.ones(k))
        m = int(rng.integers(2, k + 1))
        cuts = np.sort(rng.choice(np.arange(1, k), size=m - 1, replace=False))
        bins = np.searchsorted(cuts, np.arange(k), side="right")
        v = _within_bin_means(y, p, bins, m)
        mass = np.bincount(bins, weights=p, minlength=m)
        bias = float(np.dot(p, (v[bins] - y) ** 2))
        spread_p = float(np.dot(mass, (v - v.mean()) ** 2))
        spread = float(np.sum((v - v.mean()) ** 2))
        eps = float(rng.uniform(0.05, 8))
        g = math.expm1(eps)
        noise = BinsNoise(v, eps, math.exp(eps) / (g + m), 1.0 / (g + m))  # nominal probabilities
        t = noise.transition()  # P(output | true bin)
        variance = t @ v**2 - (t @ v) ** 2
        debiased = float(np.dot(mass, variance)) / noise.a**2
        assert math.isclose(debiased, (m / g) * spread_p + (g + m) / g**2 * spread, rel_tol=1e-9)
        eps_prime = eps + float(rng.uniform(0, 5))
        at = RROnBins(eps_prime, explicit_support(y), bins, v)
        nominal = math.expm1(eps_prime)
        expected = bias + (m * spread_p + spread) / (nominal + m)
        rows = at.transition_matrix()  # the integer thresholds: within 2^-60 of nominal
        assert math.isclose(at.expected_loss(y, p), expected, rel_tol=1e-9, abs_tol=1e-9)
        assert np.allclose(rows[np.arange(k), bins], math.exp(eps_prime) / (nominal + m), rtol=1e-12)


def test_published_objective_round_trips_and_validates() -> None:
    y = np.arange(40, dtype=float)
    rel = release_labels(np.repeat(y, 50), y, 2.0, objective="model", rng=SeededRandom(1))
    published = rel.published()
    assert published.objective == "model"
    assert published.objective_epsilon == rel.mechanism.objective_epsilon
    assert published.objective_epsilon is not None
    assert published.objective_epsilon > published.epsilon_randomize
    assert sampler_of(published).objective_epsilon == published.objective_epsilon
    again = PublishedMechanism.model_validate_json(published.model_dump_json())
    assert again == published
    fields = published.model_dump()
    for changes in (
        {"objective": "label"},
        {"objective_epsilon": None},
        {"objective_epsilon": published.epsilon_randomize / 2},
    ):
        with pytest.raises(ValueError):
            PublishedMechanism(**{**fields, **changes})
    label = release_labels(np.repeat(y, 50), y, 2.0, objective="label", rng=SeededRandom(1)).published()
    assert label.objective == "label" and label.objective_epsilon is None
    # RR-on-Bins named, no objective: the loss's default at ε₂ (model for squared, label for Poisson;
    # label for both below LEARNING_AWARE_FROM_EPSILON)
    by_default = release_labels(
        np.repeat(y, 50), y, 2.0, mechanism="rr_on_bins", rng=SeededRandom(1)
    ).published()
    assert (by_default.objective, by_default.objective_epsilon) == ("model", published.objective_epsilon)
    poisson = release_labels(
        np.repeat(y, 50), y, 2.0, "poisson", mechanism="rr_on_bins", rng=SeededRandom(1)
    ).published()
    assert poisson.objective == "label" and poisson.objective_epsilon is None
    small = release_labels(np.repeat(y, 50), y, 0.15, mechanism="rr_on_bins", rng=SeededRandom(1))
    assert small.epsilon_randomize < LEARNING_AWARE_FROM_EPSILON <= 0.2
    assert small.published().objective == "label"
    # neither named: the unbiased randomizer from ε₂ = LEARNING_AWARE_FROM_EPSILON up, RR below it
    assert release_labels(np.repeat(y, 50), y, 2.0, rng=SeededRandom(1)).published().kind == "unbiased"
    below = release_labels(np.repeat(y, 50), y, 0.15, rng=SeededRandom(1)).published()
    assert (below.kind, below.objective) == ("rr_on_bins", "label")


@pytest.mark.parametrize("kind", ["rr_on_bins", "rr_top_k"])
def test_a_model_objective_crosses_the_wire_and_rebuilds_the_same_sampler(kind: str) -> None:
    prior = np.array([0.3, 0.25, 0.2, 0.1, 0.08, 0.05, 0.02])
    mech = (
        optimize_rr_on_bins(np.arange(7.0), prior, 0.8, "squared", optimize_at=5.0)
        if kind == "rr_on_bins"
        else optimize_rr_top_k(prior, 0.8, optimize_at=5.0)
    )
    published = mech.describe(prior=prior, epsilon_prior=0.2)
    assert (published.objective, published.objective_epsilon) == ("model", 5.0)
    assert over_the_wire(published) == published
    rebuilt = sampler_of(published)
    assert np.array_equal(rebuilt.transition_matrix(), mech.transition_matrix())
    assert rebuilt.describe(prior=prior, epsilon_prior=0.2) == published
    label = sampler_of(published.model_copy(update={"objective": "label", "objective_epsilon": None}))
    assert over_the_wire(label.describe(prior=prior, epsilon_prior=0.2)).objective == "label"
