"""Feature-aware releases in the library: each group's labels follow the mechanism optimal for the
group's prior at the whole ε, the examples without a group are one ordinary release, and what a
release publishes besides noisy outputs does not depend on the labels."""

from __future__ import annotations

import numpy as np
import pytest

from labeldp.mechanisms import (
    NO_GROUP,
    BinsNoise,
    ParameterError,
    SecureRandom,
    integer_grid,
    optimal_mechanism,
    release_grouped_labels,
)
from labeldp.mechanisms.objective import model_objective_epsilon
from tests.support.stats import ALPHA, chi_square_ok

SUPPORT = integer_grid(0, 20)


def priors() -> np.ndarray:
    """Three groups: mass near 3, near 10, near 17."""
    x = np.arange(21.0)
    return np.stack([np.exp(-((x - c) ** 2) / 8.0) for c in (3.0, 10.0, 17.0)])


def labels_and_groups(n: int) -> tuple[np.ndarray, np.ndarray]:
    draw = SecureRandom()
    groups = draw.integers_below(4, n) - 1  # -1 (no group), 0, 1, 2
    centre = np.array([10, 3, 10, 17])[groups + 1]
    labels = np.clip(centre + draw.integers_below(9, n) - 4, 0, 20).astype(float)
    return labels, groups


@pytest.mark.parametrize(("eps", "objective"), [(0.5, "label"), (2.0, "label"), (0.5, "model"), (2.0, None)])
def test_each_group_is_released_by_the_mechanism_optimal_for_its_prior(
    eps: float, objective: str | None
) -> None:
    """Under the release's objective (None: the loss's default, the model objective): each group's
    bins are optimized at the ε that objective derives from every example of the release."""
    labels, groups = labels_and_groups(300_000)
    out = release_grouped_labels(labels, groups, priors(), SUPPORT, eps, "squared", objective=objective)  # type: ignore[arg-type]
    published = out.published_groups()
    optimize_at = None if objective == "label" else model_objective_epsilon(eps, labels.size)
    assert optimize_at is None or optimize_at > eps  # the model objective's bins are not the label's
    for g, p in enumerate(priors()):
        expected = optimal_mechanism(SUPPORT, p, eps, "squared", optimize_at=optimize_at)
        assert np.array_equal(out.group_mechanisms[g].support_bins, expected.support_bins)
        assert np.allclose(out.group_mechanisms[g].bin_values, expected.bin_values)
        assert published[g].epsilon_prior == 0.0 and published[g].epsilon_randomize == eps
        at = groups == g
        matrix = expected.transition_matrix()
        for y in np.unique(labels[at]):
            rows = at & (labels == y)
            if rows.sum() < 2000:
                continue
            observed = np.bincount(out.bin_indices[rows], minlength=expected.m)
            ok, ratio = chi_square_ok(observed, matrix[int(y)], alpha=ALPHA)
            assert ok, f"group {g}, label {y}: chi-square at {ratio:.2f} of its critical value"
    # the examples without a group are one ordinary release: a noisy prior at ε₁, the rest at ε₂
    assert out.fallback is not None
    fb = out.fallback
    assert fb.epsilon_prior > 0 and fb.epsilon_prior + fb.epsilon_randomize <= eps
    assert np.array_equal(out.bin_indices[groups == NO_GROUP], fb.bin_indices)
    assert out.published() == fb.published()
    # ... whose model objective counts every example of the release, as the groups' does
    assert all(m.objective_epsilon == optimize_at for m in published)
    if optimize_at is not None:
        assert out.published().objective_epsilon == model_objective_epsilon(fb.epsilon_randomize, labels.size)


def test_every_group_mechanism_is_epsilon_dp_for_any_prior() -> None:
    """Hostile priors (a point mass, zeros almost everywhere, a spike at an edge): each group's
    mechanism keeps every ratio P(o | y) / P(o | y') within e^ε."""
    hostile = np.zeros((3, 21))
    hostile[0, 0] = 1.0
    hostile[1, [5, 20]] = [1e-300, 1.0]
    hostile[2] = 1.0
    eps = 1.0
    out = release_grouped_labels(np.zeros(3), np.array([0, 1, 2]), hostile, SUPPORT, eps, "squared")
    for mechanism in out.group_mechanisms:
        t = mechanism.transition_matrix()
        assert np.all(t > 0)
        assert np.max(t.max(axis=0) / t.min(axis=0)) <= np.exp(mechanism.implemented_epsilon) * (1 + 1e-12)
        assert mechanism.implemented_epsilon <= eps


def test_what_is_published_besides_outputs_does_not_depend_on_the_labels() -> None:
    """Two label vectors, one group assignment: the group mechanisms (all of them) are identical —
    they are functions of the priors alone. Without a fallback example, the fallback mechanism is the
    uniform prior's (public) for both."""
    groups = np.array([0, 0, 1, 2, 2, 2])
    a = release_grouped_labels(np.array([3.0, 4, 10, 17, 16, 18]), groups, priors(), SUPPORT, 1.0)
    b = release_grouped_labels(np.array([20.0, 0, 0, 0, 20, 5]), groups, priors(), SUPPORT, 1.0)
    assert a.published_groups() == b.published_groups()
    assert a.fallback is None and a.published() == b.published()
    assert np.allclose(a.published().prior, 1 / 21)


def test_classes_get_rr_top_k_on_their_groups_prior() -> None:
    p = np.array([[0.9, 0.1], [0.5, 0.5], [0.05, 0.95]])
    out = release_grouped_labels(
        np.array([0.0, 1, 1]), np.array([0, 1, 2]), p, integer_grid(0, 1), 1.0, "zero_one"
    )
    assert [m.kind for m in out.group_mechanisms] == ["rr_top_k"] * 3


@pytest.mark.parametrize(
    ("groups", "group_priors", "match"),
    [
        (np.array([0, 3]), priors(), "groups must lie"),
        (np.array([0]), priors(), "one entry per label"),
        (np.array([0, 0]), priors()[:, :5], "k masses"),
    ],
)
def test_bad_groups_are_refused(groups: np.ndarray, group_priors: np.ndarray, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        release_grouped_labels(np.array([1.0, 2.0]), groups, group_priors, SUPPORT, 1.0)


def test_a_user_level_release_keeps_its_bounding_and_split_and_randomizes_groups_at_its_epsilon_2() -> None:
    """τ = 2 of each user's three examples are kept whatever the groups; the kept grouped examples
    follow their group's mechanism at the release's ε₂, the capped ones carry the release's code m and
    no group; every group's description states the release's split (its ε₁ included)."""
    from labeldp.mechanisms import contribution_ranks, release_grouped_user_labels

    n = 120_000
    labels, groups = labels_and_groups(n)
    users = np.arange(n) // 3
    keys = np.arange(n, dtype=np.int64) * 7919 + 11
    out = release_grouped_user_labels(
        labels, groups, priors(), users, keys, SUPPORT, 3.0, "squared", 2, salt=99
    )
    kept = contribution_ranks(users, keys, 99) < 2
    m = out.fallback_mechanism.m
    assert np.all(out.bin_indices[~kept] == m) and np.all(out.groups[~kept] == NO_GROUP)
    assert np.array_equal(out.groups[kept], groups[kept])
    assert out.user is not None and out.user.contribution_bound == 2
    eps2 = out.user.epsilon_randomize
    for g, (p, centre) in enumerate(zip(priors(), (3, 10, 17), strict=True)):
        published = out.published_groups()[g]
        assert published.privacy_unit == "user" and published.epsilon_randomize == eps2
        assert published.epsilon_prior == out.user.epsilon_prior > 0
        # the squared loss's default objective (model), at the ε it derives from the kept examples
        at_model = model_objective_epsilon(eps2, int(kept.sum()))
        expected = optimal_mechanism(SUPPORT, p, eps2, "squared", optimize_at=at_model)
        at = kept & (groups == g) & (labels == centre)
        observed = np.bincount(out.bin_indices[at], minlength=expected.m)
        ok, ratio = chi_square_ok(observed, expected.transition_matrix()[centre], alpha=ALPHA)
        assert ok, f"group {g}: chi-square at {ratio:.2f} of its critical value"


def test_priors_pay_when_a_model_on_their_groups_is_expected_to_err_less_than_on_the_default() -> None:
    """The public rule of ``priors_verdict`` (docs/math.md §14): a model's expected error as the model
    objective counts it — binning error plus the targets' variance over n / capacity — on the group
    mechanisms, each under its group's prior, against the default mechanism (its kind and ε₂ as a
    release without priors would have them) under the pooled prior; each side recomputed here from the
    mechanisms' own rows. Sharp priors pay; priors that all say the same wide thing do not (the
    default's unbiased randomizer has no binning error to pay)."""
    from labeldp.mechanisms import optimal_mechanism, prior_split, priors_verdict
    from labeldp.mechanisms.factory import default_mechanism

    support = integer_grid(0, 20)
    s = support.values
    sizes = np.array([9_000, 15_000, 6_000])
    n, effective = 30_000, 30.0  # n / the default capacity 1,000
    sharp = np.array([norm_on(s, c, 1.0) for c in (3.0, 10.0, 17.0)])
    wide = np.tile(np.full(21, 1 / 21), (3, 1))

    def error(rows: np.ndarray, values: np.ndarray, phi: np.ndarray, prior: np.ndarray) -> float:
        """Σ_y π(y)·[(Φ(y) − y)² + E[(z − Φ(y))² | y] / n_eff], z over the unbiased targets ``values``."""
        p = prior / prior.sum()
        spread = (rows * (values[None, :] - phi[:, None]) ** 2).sum(axis=1)
        return float(p @ ((phi - s) ** 2 + spread / effective))

    at = model_objective_epsilon(4.0, n)
    eps_prior, eps2 = prior_split(4.0, n, 21)
    assert default_mechanism("squared", eps2, n, 21) == "unbiased"
    verdicts = {}
    for name, priors in (("sharp", sharp), ("wide", wide)):
        verdict = verdicts[name] = priors_verdict(priors, sizes, support, 4.0)
        grouped = 0.0
        for p, size in zip(priors, sizes, strict=True):
            published = optimal_mechanism(support, p, 4.0, "squared", optimize_at=at).describe(
                prior=p, epsilon_prior=0.0
            )
            noise = BinsNoise.of_published(published)
            targets = noise.unbiased_targets(np.arange(noise.m))
            rows = noise.transition()[np.asarray(published.support_bins)]
            phi = np.asarray(published.bin_values)[np.asarray(published.support_bins)]
            grouped += size * error(rows, targets, phi, p)
        assert verdict.with_priors == pytest.approx(grouped / n, rel=1e-9)
        pooled = sizes @ priors / n
        own = optimal_mechanism(support, pooled, eps2, "squared", kind="unbiased").describe(
            prior=pooled, epsilon_prior=eps_prior
        )
        without = error(own.transition_matrix(), np.asarray(own.bin_values), s, pooled)
        assert verdict.mechanism_without == "unbiased"
        assert verdict.without_priors == pytest.approx(without, rel=1e-9)
    assert verdicts["sharp"].pays and not verdicts["wide"].pays


def norm_on(values: np.ndarray, centre: float, spread: float) -> np.ndarray:
    p = np.exp(-0.5 * ((values - centre) / spread) ** 2) + 1e-9
    return p / p.sum()


@pytest.mark.parametrize(
    ("priors", "sizes", "match"),
    [
        (np.full((2, 21), 1 / 21), np.array([1, 2, 3]), "per group"),
        (np.full((2, 20), 1 / 20), np.array([1, 2]), "per group"),
        (np.full((2, 21), 1 / 21), np.array([0, 0]), "per group"),
        (np.full((2, 21), 1 / 21), np.array([-1, 3]), "per group"),
    ],
)
def test_a_verdict_refuses_sizes_that_do_not_fit_the_priors(
    priors: np.ndarray, sizes: np.ndarray, match: str
) -> None:
    from labeldp.mechanisms import priors_verdict

    with pytest.raises(ParameterError, match=match):
        priors_verdict(priors, sizes, integer_grid(0, 20), 1.0)


def test_a_verdict_on_the_callers_own_group_mechanisms_is_the_verdict() -> None:
    """The preview hands ``priors_verdict`` the group mechanisms it optimized for its expected loss:
    the verdict must be the one it would compute itself (the same ε and objective)."""
    from labeldp.mechanisms import Mechanism, optimal_mechanism, priors_verdict

    support = integer_grid(0, 20)
    sizes = np.array([9_000, 0, 6_000])
    priors = np.array([norm_on(support.values, c, 2.0) for c in (4.0, 10.0, 15.0)])
    at = model_objective_epsilon(2.0, 15_000)
    given: list[Mechanism | None] = [
        optimal_mechanism(support, p, 2.0, "squared", optimize_at=at) for p in priors
    ]
    given[1] = None  # an empty group: never optimized
    mine, its = (
        priors_verdict(priors, sizes, support, 2.0, mechanisms=given),
        priors_verdict(priors, sizes, support, 2.0),
    )
    # Equal up to rounding: the verdict optimizes on the priors renormalized, which can move a bin's
    # value by an ulp (numpy 2.4); another ε or objective would move them by far more than 1e-12.
    assert mine.mechanism_without == its.mechanism_without
    assert (mine.with_priors, mine.without_priors) == pytest.approx(
        (its.with_priors, its.without_priors), rel=1e-12
    )
    at_another = [
        None if m is None else optimal_mechanism(support, p, 2.0, "squared")
        for m, p in zip(given, priors, strict=True)
    ]
    other = priors_verdict(priors, sizes, support, 2.0, mechanisms=at_another).with_priors
    assert other != pytest.approx(its.with_priors, rel=1e-12)  # the comparison can tell mechanisms apart
