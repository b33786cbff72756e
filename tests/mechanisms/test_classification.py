"""Randomized response and RR-Top-k against their exact transition matrices."""

from __future__ import annotations

import math

import numpy as np

from labeldp.mechanisms import SecureRandom, optimize_rr_top_k, randomized_response
from labeldp.mechanisms.randomized_response import rr_transition_matrix
from tests.support.stats import chi_square_ok


def joint(labels: np.ndarray, out: np.ndarray, c: int, m: int | None = None) -> np.ndarray:
    table = np.zeros((c, c if m is None else m))
    np.add.at(table, (labels, out), 1)
    return table


def test_randomized_response_distribution() -> None:
    for c, eps in ((2, 0.5), (5, 2.0)):
        labels = SecureRandom().integers_below(c, 1_000_000)
        out = randomized_response(labels, c, eps)
        table = joint(labels, out, c)
        ok, ratio = chi_square_ok(table, table.sum(axis=1, keepdims=True) * rr_transition_matrix(eps, c))
        assert ok, ratio


def test_rr_top_k_picks_the_k_that_maximizes_the_keep_probability() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = rng.dirichlet(np.full(8, 0.5))
        eps = float(rng.uniform(0.1, 4))
        mech = optimize_rr_top_k(p, eps)
        order = np.argsort(-p)
        best = max(range(1, 9), key=lambda k: p[order[:k]].sum() * math.exp(eps) / (math.exp(eps) + k - 1))
        assert mech.k == best
        assert set(mech.top.tolist()) == set(order[:best].tolist())


def test_rr_top_k_distribution_and_dp_ratio() -> None:
    p = np.array([0.4, 0.3, 0.2, 0.05, 0.05])
    mech = optimize_rr_top_k(p, 1.0)
    assert mech.k == 3
    labels = SecureRandom().integers_below(5, 1_000_000)
    out = mech.randomize(labels)  # bin indices: bin j reports class mech.top[j]
    assert set(mech.classes_of(out).tolist()) <= set(mech.top.tolist())
    table = joint(labels, out, 5, mech.k)
    matrix = mech.transition_matrix()  # classes × bins
    ok, ratio = chi_square_ok(table, table.sum(axis=1, keepdims=True) * matrix)
    assert ok, ratio
    cols = matrix
    assert np.max(cols[:, None, :] / cols[None, :, :]) <= math.exp(1.0) + 1e-12
