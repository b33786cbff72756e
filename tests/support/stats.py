"""Statistical acceptance tests with a fixed false-alarm rate."""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 1e-6  # each test below fails a correct implementation with probability at most ALPHA


def chi_square_ok(
    observed: np.ndarray, expected_probs: np.ndarray, alpha: float = ALPHA
) -> tuple[bool, float]:
    """Pearson chi-square goodness of fit over cells with positive expected probability."""
    observed = np.asarray(observed, float).ravel()
    probs = np.asarray(expected_probs, float).ravel()
    if np.any(observed[probs == 0] > 0):
        return False, np.inf
    keep = probs > 0
    expected = probs[keep] / probs[keep].sum() * observed.sum()
    counts = observed[keep]
    # Cochran's rule: cells expecting fewer than 5 are pooled into one (a coarser partition is still a
    # valid test; without it one draw in a cell expecting 0.002 fails a correct sampler far more often
    # than alpha — seen once in CI on the staircase's far tail)
    small = expected < 5
    if small.any() and not small.all():
        expected = np.append(expected[~small], expected[small].sum())
        counts = np.append(counts[~small], counts[small].sum())
    stat = float(np.sum((counts - expected) ** 2 / expected))
    critical = float(stats.chi2.ppf(1 - alpha, df=max(expected.size - 1, 1)))
    return stat <= critical, stat / critical


def wilson(successes: np.ndarray, n: np.ndarray, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Wilson score interval for binomial proportions."""
    z = float(stats.norm.ppf(1 - alpha / 2))
    s, n = np.asarray(successes, float), np.asarray(n, float)
    phat = s / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * np.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half
