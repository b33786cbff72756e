"""Exact discrete Laplace sampling (Canonne, Kamath & Steinke 2020, Algorithms 1–2).

``P(Z = z) ∝ exp(−|z| / scale)`` for a rational scale, using only uniform integers and exact
rational Bernoullis: no floating point touches the distribution, so the noise has exactly the
claimed privacy loss (unlike inverse-CDF sampling in doubles). Used for the private prior, where
only ``k`` draws are needed per release.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from labeldp.mechanisms._types import IntArray
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.validation import ParameterError

_HALF = Fraction(1, 2)


def bernoulli_exp_neg(gamma: Fraction, rng: SecureRandom) -> bool:
    """True with probability ``exp(−gamma)`` for rational ``gamma >= 0``."""
    if gamma < 0:
        raise ParameterError("gamma must be >= 0")
    whole = int(gamma)
    for _ in range(whole):
        if not _bernoulli_exp_neg_unit(Fraction(1), rng):
            return False
    return _bernoulli_exp_neg_unit(gamma - whole, rng)


def _bernoulli_exp_neg_unit(gamma: Fraction, rng: SecureRandom) -> bool:
    """``exp(−gamma)`` for ``gamma`` in [0, 1]: the parity of the first failure in a Poisson-like chain."""
    k = 1
    while rng.bernoulli(gamma / k):
        k += 1
    return k % 2 == 1


def sample_discrete_laplace(scale: Fraction, n: int, rng: SecureRandom) -> IntArray:
    """``n`` i.i.d. draws with ``P(z) ∝ exp(−|z|/scale)``; ``scale = t/s`` as an exact fraction."""
    if scale <= 0:
        raise ParameterError("scale must be > 0")
    t, s = scale.numerator, scale.denominator  # exp(−|z|·s/t)
    out = np.empty(n, dtype=np.int64)
    for idx in range(n):
        out[idx] = _one(s, t, rng)
    return out


def _one(s: int, t: int, rng: SecureRandom) -> int:
    while True:
        u = rng.randbelow(t)
        if not bernoulli_exp_neg(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp_neg(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.bernoulli(_HALF)
        if negative and y == 0:
            continue
        return -y if negative else y
