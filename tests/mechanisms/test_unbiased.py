"""The unbiased randomizer (docs/math.md §15) against independent math: the plain linear program over
every unbiased ε-DP randomizer on the same output grid, exact integer arithmetic for ε-DP and for
unbiasedness, a chi-square test of the sampler against its exact rows, and its bad inputs."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from labeldp.mechanisms import ParameterError, PublishedMechanism, integer_grid, release_labels
from labeldp.mechanisms.factory import sampler_of
from labeldp.mechanisms.unbiased_program import (
    PRIOR_FLOOR,
    optimize_unbiased,
    output_grid,
    solve_unbiased,
)
from labeldp.mechanisms.unbiased_weights import MAX_UNBIASED_EPSILON, TOTAL, UnbiasedWeights
from tests.support import oracles
from tests.support.seeded import SeededRandom
from tests.support.stats import chi_square_ok

GRID = 40  # small enough for the plain LP (k·|O| variables, k²·|O| constraints)


def cases(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(2, 7))
        y = np.sort(rng.choice(np.arange(0, 40), k, replace=False)).astype(float)
        p = rng.dirichlet(np.full(k, rng.choice([0.3, 1.0, 5.0])))
        if rng.random() < 0.3:  # a point the prior gives no mass
            p[rng.integers(k)] = 0.0
            p /= p.sum()
        out.append((y, p, float(math.exp(rng.uniform(math.log(0.05), math.log(8.0))))))
    return out


@pytest.mark.parametrize(("y", "p", "eps"), cases(30, 42))
def test_the_program_matches_the_plain_lp(y: np.ndarray, p: np.ndarray, eps: float) -> None:
    grid = output_grid(y, eps, GRID)
    reference = oracles.unbiased_lp_optimum(y, p, eps, grid)
    solution = solve_unbiased(y, p, eps, grid)
    assert abs(solution.variance - reference) <= 1e-9 * reference
    assert solution.lower_bound <= reference * (1 + 1e-9)  # a certificate, not only a value
    # the exact integer randomizer built from it is unbiased, ε-DP and just as good
    used = solution.outputs
    weights = UnbiasedWeights.from_base(eps, grid[used], solution.base[used], y)
    exact = float(p @ weights.variances(y))
    assert abs(exact - reference) <= 1e-9 * reference
    assert_exact(weights, y, eps)


def assert_exact(weights: UnbiasedWeights, y: np.ndarray, eps: float) -> None:
    """Every row sums to 2^53; every output's weights differ by at most e^ε across rows (60-digit
    decimals); every row's mean is its label within 1e-9 of the range (exact rationals)."""
    table = [[int(v) for v in row] for row in weights.table]
    assert all(sum(row) == TOTAL for row in table)
    with localcontext() as ctx:
        ctx.prec = 60
        bound = Decimal(eps).exp()
        for j in range(weights.m):
            column = [row[j] for row in table]
            assert min(column) >= 1
            assert Decimal(max(column)) <= bound * Decimal(min(column))
    outputs = [Fraction(v) for v in weights.outputs.tolist()]
    span = Fraction(float(y[-1] - y[0]))
    for row, label in zip(table, y.tolist(), strict=True):
        mean = sum((z * w for z, w in zip(outputs, row, strict=True)), Fraction(0)) / TOTAL
        assert abs(mean - Fraction(label)) <= span * Fraction(1, 10**9)
    assert weights.implemented_epsilon <= eps


def test_the_optimum_stops_moving_as_the_grid_gets_finer() -> None:
    """At the reach ``optimize_unbiased`` settles on (doubled until the optimum leaves the grid's
    ends), a 513-point grid (every other point is the 257-point grid's) moves the optimum by less
    than 10⁻³ of it, and a grid reaching twice as far at a similar spacing changes nothing."""
    y = np.arange(10.0)
    p = np.random.default_rng(3).dirichlet(np.ones(10))
    for eps in (0.1, 1.0, 4.0):
        reach = 1.0
        while True:
            fine = solve_unbiased(y, p, eps, output_grid(y, eps, 513, reach=reach))
            if fine.outputs[0] > 0 and fine.outputs[-1] < fine.grid.size - 1:
                break
            reach *= 2.0
        coarse = solve_unbiased(y, p, eps, output_grid(y, eps, 257, reach=reach)).variance
        wide = solve_unbiased(y, p, eps, output_grid(y, eps, 1025, reach=2 * reach)).variance
        assert fine.variance <= coarse * (1 + 1e-9)  # the finer grid holds every other coarse point
        assert coarse - fine.variance <= 1e-3 * fine.variance
        assert abs(wide - fine.variance) <= 1e-3 * fine.variance


def test_a_prior_whose_interior_point_missed_a_mean_is_served_unbiased() -> None:
    """A regression found by the suite: a noisy histogram of weeks worked (3,967 noisy counts on
    0..52, ε₂ = 1.885 as a 4,000-label release at ε = 2 splits it) whose interior-point answer passed
    its variance certificate while the lowest label's row missed its mean by 6.5·10⁻⁸ weeks — past
    the receiver's 10⁻⁹ of the range, so the release failed after its charge. The shortcut now also
    checks the means; the answer is exact."""
    counts = [42, 0, 67, 71, 73, 72, 95, 91, 63, 48, 68, 76, 125, 98, 93, 94, 62, 104, 78, 103, 72, 69]
    counts += [72, 65, 97, 50, 63, 76, 67, 72, 63, 106, 118, 116, 68, 74, 83, 72, 82, 68, 80, 97, 97]
    counts += [35, 39, 73, 46, 16, 86, 76, 79, 56, 111]
    support = integer_grid(0, 52)
    eps = 1.8848913556677864
    prior = np.asarray(counts, dtype=float) / sum(counts)  # as normalize_counts gives it
    # (the interior point's path depends on the summation order: the suite runs BLAS on one thread,
    # where this prior took the shortcut)
    mech = optimize_unbiased(support, prior, eps)
    assert_exact(mech.weights, support.values, eps)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_on_two_points_the_optimum_is_debiased_randomized_response(eps: float) -> None:
    """Why the default keeps RR-on-Bins on binary supports (``UNBIASED_DEFAULT_MIN_SUPPORT``): RR
    keeping a label with q = e^ε/(1 + e^ε), debiased affinely, is an unbiased randomizer of variance
    q(1 − q)/(2q − 1)² for both labels (written out here), and the program finds nothing better — for
    a balanced prior and a skewed one — within its grid's 10⁻³."""
    q = math.exp(eps) / (1 + math.exp(eps))
    debiased_rr = q * (1 - q) / (2 * q - 1) ** 2
    for prior in ([0.5, 0.5], [0.9, 0.1]):
        mech = optimize_unbiased(np.array([0.0, 1.0]), np.array(prior), eps)
        variances = mech.weights.variances(np.array([0.0, 1.0]))
        assert np.all(np.abs(variances / debiased_rr - 1) < 1e-3), (prior, variances, debiased_rr)


def test_the_sampler_draws_its_exact_rows() -> None:
    """Chi-square at the fixed false-alarm rate of tests/support/stats.py, per support point."""
    support = integer_grid(0, 7)
    p = np.array([0.3, 0.2, 0.1, 0.05, 0.05, 0.1, 0.1, 0.1])
    mech = optimize_unbiased(support, p, 1.0)
    rows = mech.transition_matrix()
    rng = SeededRandom(7)
    n = 40_000
    for i in range(support.k):
        drawn = mech.randomize(np.full(n, support.values[i]), rng=rng)
        ok, ratio = chi_square_ok(np.bincount(drawn, minlength=mech.m), rows[i])
        assert ok, (i, ratio)
    mixed = np.repeat(support.values, 5_000)
    out = mech.values_of(mech.randomize(mixed, rng=rng))
    for i, label in enumerate(support.values):  # unbiased: each label's outputs average to it
        sample = out[i * 5_000 : (i + 1) * 5_000]
        assert abs(sample.mean() - label) <= 6 * math.sqrt(mech.weights.variances(support.values)[i] / 5_000)


def test_a_release_publishes_what_the_receiver_rebuilds() -> None:
    labels = np.random.default_rng(1).integers(0, 53, 5_000).astype(float)
    rel = release_labels(
        labels, integer_grid(0, 52), 2.0, "squared", mechanism="unbiased", rng=SeededRandom(2)
    )
    published = rel.published()
    assert published.kind == "unbiased" and published.support_bins == ()
    assert len(published.base_weights) == published.m and len(published.window_starts) == 53
    again = PublishedMechanism.model_validate(published.model_dump(mode="json"))
    assert again == published
    np.testing.assert_array_equal(sampler_of(again).transition_matrix(), rel.mechanism.transition_matrix())
    assert published.binning_loss_under_prior() == 0.0
    assert math.isclose(
        published.expected_loss_under_prior(), rel.mechanism.expected_loss(np.arange(53.0), rel.prior)
    )
    assert 0 < published.worst_case_additive_advantage < 1
    assert np.all(rel.bin_indices >= 0) and np.all(rel.bin_indices < published.m)
    assert rel.noisy_labels.min() < 0 and rel.noisy_labels.max() > 52  # outputs reach beyond [lo, hi]


def tampered(published: PublishedMechanism, **change: object) -> dict[str, object]:
    return {**published.model_dump(mode="json"), **change}


def test_a_tampered_description_is_refused() -> None:
    labels = np.random.default_rng(1).integers(0, 9, 2_000).astype(float)
    published = release_labels(
        labels, integer_grid(0, 8), 1.0, mechanism="unbiased", rng=SeededRandom(3)
    ).published()
    base = list(published.base_weights)
    starts, offsets = list(published.window_starts), list(published.window_offsets)
    moved = list(offsets)
    # 10^12 of 2^53 units moved along the capacities: its mean moves by ~10^-4 of an output's spacing
    moved[3] = offsets[3] - 10**12 if offsets[3] >= 10**12 else offsets[3] + 10**12
    for change in (
        {"base_weights": [*base[:-1], base[-1] + 2**40]},  # rows no longer fit 2^53 as published
        {"base_weights": base[:-1]},  # one weight short
        {"window_offsets": moved},
        {"window_starts": [*starts[:-1], len(base)]},  # a window past the last output
        {"implemented_epsilon": published.implemented_epsilon / 2},
        {"support_bins": list(range(9))},
        {"loss": "absolute"},
        {"objective": "model", "objective_epsilon": 5.0},
        {"epsilon_randomize": MAX_UNBIASED_EPSILON + 1, "epsilon": MAX_UNBIASED_EPSILON + 2},
    ):
        with pytest.raises(ValueError):
            PublishedMechanism.model_validate(tampered(published, **change))


def test_bad_input_is_refused_or_served_as_documented() -> None:
    # a support of one point: a clear error (every mechanism releases that point exactly)
    with pytest.raises(ParameterError, match="at least two points"):
        optimize_unbiased(np.array([3.0]), [1.0], 1.0)
    # ε beyond the program's numerically safe range: a clear error
    with pytest.raises(ParameterError, match="numerically safe"):
        optimize_unbiased(integer_grid(0, 4), np.ones(5), MAX_UNBIASED_EPSILON * 1.01)
    # the loss must be one whose best prediction is the mean
    for loss in ("absolute", "zero_one"):
        with pytest.raises(ParameterError):
            optimize_unbiased(integer_grid(0, 4), np.ones(5), 1.0, loss)
    # a prior with all its mass on one point: served, every point still unbiased (the public floor)
    support = integer_grid(0, 4)
    for point in (0, 2, 4):
        prior = np.zeros(5)
        prior[point] = 1.0
        mech = optimize_unbiased(support, prior, 1.0)
        assert_exact(mech.weights, support.values, 1.0)
        floored = (1 - PRIOR_FLOOR) * prior + PRIOR_FLOOR / 5
        grid = output_grid(support.values, 1.0)
        assert float(floored @ mech.weights.variances(support.values)) <= solve_unbiased(
            support.values, floored, 1.0, grid
        ).variance * (1 + 1e-9)


@pytest.mark.parametrize("eps", [0.01, 0.3, 12.0, MAX_UNBIASED_EPSILON])
def test_the_ends_of_the_epsilon_range(eps: float) -> None:
    support = integer_grid(0, 52)
    p = np.random.default_rng(5).dirichlet(np.ones(53))
    mech = optimize_unbiased(support, p, eps)
    assert_exact(mech.weights, support.values, eps)


def test_the_worst_case_advantage_bounds_every_prior_and_the_audit_reads_the_rows() -> None:
    """(S − 1)/S (docs/math.md §15.5) is at least the Bayes attacker's gain, by enumeration, under
    random priors, point masses and the prior that attains it; the canary test's ε bound stays below
    the implemented ε."""
    from labeldp.mechanisms.empirical import epsilon_lower_bound

    support = integer_grid(0, 6)
    p = np.random.default_rng(8).dirichlet(np.ones(7))
    published = optimize_unbiased(support, p, 1.5).describe(prior=p, epsilon_prior=0.1)
    rows = published.transition_matrix()
    bound = published.worst_case_additive_advantage
    rng = np.random.default_rng(9)
    for prior in [*rng.dirichlet(np.full(7, 0.3), 200), *np.eye(7)]:
        gain = float((prior[:, None] * rows).max(axis=0).sum() - prior.max())
        assert gain <= bound + 1e-12
    labels = np.repeat(np.arange(7), 3_000)
    outputs = sampler_of(published).randomize(labels.astype(float), rng=SeededRandom(4))
    measured = epsilon_lower_bound(published, labels, outputs, alpha=1e-6)
    assert 0 < measured.epsilon_low <= published.implemented_epsilon


def test_the_trainers_validation_estimate_is_unbiased_exactly() -> None:
    """``UnbiasedNoise.unbiased_loss`` averaged over a label's exact output distribution is the loss
    against the label itself, for both losses (docs/math.md §15.6)."""
    from labeldp.mechanisms.debias import release_noise
    from labeldp.mechanisms.losses import resolve_loss

    support = integer_grid(1, 9)
    p = np.random.default_rng(2).dirichlet(np.ones(9))
    for loss in ("squared", "poisson"):
        published = optimize_unbiased(support, p, 1.0, loss).describe(prior=p, epsilon_prior=0.1)
        noise = release_noise(published)
        rows = published.transition_matrix()
        ell = resolve_loss(loss)
        outputs = np.arange(published.m)
        for f in (0.5, 3.0, 7.5):
            per_output = noise.unbiased_loss(np.full(published.m, f), outputs, ell)
            expected = rows @ per_output
            truth = np.asarray(ell(np.full(9, f), support.values), dtype=float)
            np.testing.assert_allclose(expected, truth, rtol=1e-7, atol=1e-7)


def test_the_validation_estimate_stays_bounded_where_the_square_of_a_label_is_not_estimable() -> None:
    """On 41 points at ε = 1 the optimal randomizer's rows have rank 40: no ``h`` gives
    ``E[h(z) | y] = y²`` at every point, and the least-norm solution of the near-singular system reached
    10¹⁴ (the prices grid at ε = 8: 10¹⁶), so a validation loss read −8·10¹¹ and priced nothing.
    There ``h(z) = z² − v̄`` (``v̄`` the prior-averaged variance): the model's part ``f² − 2f·z`` stays
    exactly unbiased for every label, the whole estimate is unbiased for a label drawn from the
    release's prior, and it is as large as the outputs' squares, not more (docs/math.md §15.6)."""
    from labeldp.mechanisms import uniform_grid
    from labeldp.mechanisms.debias import UnbiasedNoise, release_noise
    from labeldp.mechanisms.losses import resolve_loss

    support = uniform_grid(0.0, 100.0, 41)
    p = np.random.default_rng(1).dirichlet(np.ones(41))
    published = optimize_unbiased(support, p, 1.0).describe(prior=p, epsilon_prior=0.1)
    rows = published.transition_matrix()
    assert np.linalg.matrix_rank(rows) < support.k  # the case: y² is not estimable
    noise = release_noise(published)
    assert isinstance(noise, UnbiasedNoise)
    ell = resolve_loss("squared")
    outputs = np.arange(published.m)
    z = np.asarray(published.bin_values)
    assert np.abs(noise.square_estimator).max() <= (z**2).max()
    prior = np.asarray(published.prior) / np.sum(published.prior)
    zero = rows @ noise.unbiased_loss(np.zeros(published.m), outputs, ell)
    for f in (5.0, 37.5, 90.0):
        expected = rows @ noise.unbiased_loss(np.full(published.m, f), outputs, ell)
        truth = np.asarray(ell(np.full(41, f), support.values), dtype=float)
        # the model's part, for every label: exact
        np.testing.assert_allclose(expected - zero, truth - support.values**2, rtol=1e-9, atol=1e-6)
        # the whole, for a label drawn from the prior: exact
        assert float(prior @ expected) == pytest.approx(float(prior @ truth), rel=1e-9)


def test_an_unbiased_releases_target_error_is_its_outputs_variance_around_the_label() -> None:
    """A model trained on several releases weighs an unbiased release's rows by ``1 / target_error``:
    ``Σ_y π(y) Σ_z P(z | y)·(z − y)²``, summed here term by term."""
    from labeldp.mechanisms.debias import target_error

    support = integer_grid(1, 9)
    p = np.random.default_rng(3).dirichlet(np.ones(9))
    published = optimize_unbiased(support, p, 1.0).describe(prior=p, epsilon_prior=0.1)
    rows, z, prior = published.transition_matrix(), published.bin_values, np.asarray(published.prior)
    expected = sum(
        prior[i] / prior.sum() * rows[i, j] * (z[j] - y) ** 2
        for i, y in enumerate(support.values)
        for j in range(published.m)
    )
    assert target_error(published) == pytest.approx(float(expected), rel=1e-9)
