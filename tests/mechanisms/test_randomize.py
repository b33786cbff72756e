"""``randomize`` draws exactly the transition matrix, within fixed false-alarm rates (α = 1e-6)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import RROnBins, SecureRandom, integer_grid, optimize_rr_on_bins
from labeldp.mechanisms.randomized_response import KeepThreshold, rr_draw
from tests.support.scripted import ScriptedRandom
from tests.support.seeded import SeededRandom
from tests.support.stats import ALPHA, chi_square_ok, wilson

DRAWS = 1_200_000


def mechanism(eps: float, m_target: int | None = None) -> RROnBins:
    sup = integer_grid(0, 40)
    p = np.exp(-np.arange(41) / 8.0)
    mech = optimize_rr_on_bins(sup, p, eps, "squared")
    if m_target is not None:
        assert mech.m == m_target
    return mech


@pytest.mark.parametrize("eps", [0.3, 1.5, 4.0])
def test_joint_counts_match_transition_matrix(eps: float) -> None:
    mech = mechanism(eps)
    labels = SecureRandom().integers_below(41, DRAWS).astype(float)
    out = mech.randomize(labels)
    assert out.dtype == np.int64 and out.min() >= 0 and out.max() < mech.m
    true_bin = mech.bin_of(labels)
    joint = np.zeros((mech.m, mech.m))
    np.add.at(joint, (true_bin, out), 1)
    rows = joint.sum(axis=1, keepdims=True)
    bin_matrix = mech.transition_matrix()[np.searchsorted(mech.support_bins, np.arange(mech.m))]
    ok, ratio = chi_square_ok(joint, rows * bin_matrix)
    assert ok, f"chi-square statistic at {ratio:.2f} of its 1 - {ALPHA} quantile"
    lo, hi = wilson(joint, np.broadcast_to(rows, joint.shape))
    assert np.all((lo <= bin_matrix) & (bin_matrix <= hi))


def test_output_frequency_ratio_is_within_e_to_the_epsilon() -> None:
    """For any two inputs and any output, P(o | a) / P(o | b) <= e^ε (checked with Wilson bounds),
    and the keep/move ratio is actually attained (the mechanism is not over-noised)."""
    eps = 1.2
    sup = integer_grid(0, 9)
    mech = RROnBins(eps, sup, np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3]), np.array([0.5, 3.0, 5.5, 8.0]))
    per_bin = 400_000
    counts = np.zeros((mech.m, mech.m))
    first_support_point = np.searchsorted(mech.support_bins, np.arange(mech.m))
    for b in range(mech.m):
        labels = np.full(per_bin, mech.support.values[first_support_point[b]])
        counts[b] = np.bincount(mech.randomize(labels), minlength=mech.m)
    lo, hi = wilson(counts, np.full(counts.shape, per_bin), alpha=ALPHA / counts.size)
    bound = math.exp(eps)
    for a in range(mech.m):
        for b in range(mech.m):
            assert np.all(lo[a] <= bound * hi[b]), (a, b)
    keep_over_move_hi = hi[0, 0] / lo[1, 0]
    keep_over_move_lo = lo[0, 0] / hi[1, 0]
    assert keep_over_move_lo <= bound <= keep_over_move_hi


def test_threshold_implements_at_most_the_nominal_epsilon() -> None:
    for eps in (1e-6, 0.05, 0.5, 1.0, 3.3, 8.0, 30.0, 600.0):
        for m in (2, 3, 7, 256, 10_000):
            t = KeepThreshold.for_epsilon(eps, m)
            # exact rational check of the implemented ratio against e^ε with 60-digit arithmetic
            assert t.threshold * (m - 1) <= math.exp(eps) * ((1 << 64) - t.threshold) * (1 + 1e-15)
            assert t.implemented_epsilon <= eps
            # integer resolution: 2^64 − T is exact to one unit, so ε is exact to about e^ε/2^64
            assert eps - t.implemented_epsilon <= 4 * (math.exp(eps) + m) / 2**64 + 1e-12
    assert KeepThreshold.for_epsilon(1.0, 1).implemented_epsilon == 0.0


def test_seeded_stream_is_reproducible_and_secure_stream_is_not() -> None:
    mech = mechanism(1.0)
    labels = np.arange(41, dtype=float).repeat(100)
    a = mech.randomize(labels, rng=SeededRandom(7))
    b = mech.randomize(labels, rng=SeededRandom(7))
    assert np.array_equal(a, b)
    assert not np.array_equal(mech.randomize(labels), mech.randomize(labels))


def test_integers_below_is_uniform() -> None:
    for bound in (2, 3, 7, 1000, 2**31 + 11):
        draws = SecureRandom().integers_below(bound, 600_000)
        assert draws.min() >= 0 and draws.max() < bound
        cells = min(bound, 64)
        buckets = draws * cells // bound
        if bound <= 10**6:
            expected = np.bincount(np.arange(bound) * cells // bound, minlength=cells).astype(float)
        else:  # buckets of 2^31 values differ in size by at most one value
            expected = np.ones(cells)
        ok, ratio = chi_square_ok(np.bincount(buckets, minlength=cells), expected)
        assert ok, (bound, ratio)


def test_values_of_maps_indices_to_bin_values() -> None:
    mech = mechanism(2.0)
    idx = mech.randomize(np.arange(41.0))
    assert np.array_equal(mech.values_of(idx), mech.bin_values[idx])
    with pytest.raises(ValueError, match="indices"):
        mech.values_of(np.array([mech.m]))


def test_tiny_epsilon_never_makes_keeping_less_likely_than_moving() -> None:
    """With ε below about 1e-17 the 64-bit threshold cannot represent e^ε/(e^ε+m−1) without making
    'keep' less likely than a given move (an infinite privacy loss the other way): the sampler draws a
    uniform output instead, which is 0-DP, and says so."""
    for eps in (1e-20, 1e-18, 1e-17, 3e-17, 1e-16, 1e-15, 1e-12):
        for m in (2, 7, 1000, 65_535):
            t = KeepThreshold.for_epsilon(eps, m)
            assert t.uniform or t.threshold * m >= 2**64, (eps, m)
            assert 0.0 <= t.implemented_epsilon <= eps
            assert t.keep_probability >= t.move_probability
    t = KeepThreshold.for_epsilon(1e-18, 1000)
    assert t.uniform and t.implemented_epsilon == 0.0
    labels = np.repeat(np.arange(0, 1000, 100), 20_000)  # ten very different true outputs
    out = rr_draw(labels, t, SecureRandom())
    for label in np.unique(labels):  # the same uniform distribution whatever the label
        ok, ratio = chi_square_ok(np.bincount(out[labels == label] // 100, minlength=10), np.full(10, 0.1))
        assert ok, (label, ratio)


@pytest.mark.parametrize(("eps", "m"), [(1.0, 2), (0.3, 5), (4.0, 17)])
def test_the_keep_decision_is_the_exact_integer_threshold(eps: float, m: int) -> None:
    """The 64-bit word T − 1 keeps the label and the word T moves it, for the integer threshold T — a
    comparison made in floating point cannot tell the two apart (doubles hold 53 bits)."""
    threshold = KeepThreshold.for_epsilon(eps, m)
    t = threshold.threshold
    assert float(t - 1) == float(t)  # why floats would get one of them wrong
    truth = np.array([1, 1], dtype=np.int64)
    # the other output: the largest word is never rejected and picks the last one (m = 2 draws nothing)
    others = np.full(2 if m > 2 else 0, 0xFFFF_FFFF, dtype=np.uint32)
    stream = ScriptedRandom.of(np.array([t - 1, t], dtype=np.uint64), others)
    out = rr_draw(truth, threshold, stream)
    assert out.tolist() == [1, m - 1 if m > 2 else 0]  # T − 1 kept, T moved
    assert stream.stream == b""


def test_integers_below_rejects_the_words_that_would_bias_it() -> None:
    """Lemire's method: a 32-bit word whose low product falls under 2³² mod s is rejected and the next
    word decides. For s = 3 the word 0 is such a word (0 · 3 = 0 < 1): it must not become the value 0."""
    s = 3
    assert (1 << 32) % s == 1
    stream = ScriptedRandom.of(
        np.array([0, 0xFFFF_FFFF, 0x5555_5556], dtype=np.uint32), np.array([], np.uint32)
    )
    out = stream.integers_below(s, 2)
    # the first draw takes two words: 0 (rejected) and 2³² − 1 (the second value, ⌊(2³²−1)·3/2³²⌋ = 2);
    # the first value then takes the third word: ⌊0x55555556·3/2³²⌋ = 1
    assert out.tolist() == [1, 2]
    assert stream.stream == b""  # three words: the rejected one was replaced by a fresh one
    # every residue is equally likely: over all 2³² words each output keeps exactly ⌊2³²/3⌋ of them
    kept = [((1 << 32) - (1 << 32) % s) // s] * s
    assert sum(kept) == (1 << 32) - 1
