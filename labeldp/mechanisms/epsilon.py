"""Exact ε bookkeeping between what the ledger charges and the floats the mechanisms use.

The ledger charges integer micro-ε. A mechanism must never spend more than that, so every ε it
receives is the largest double *not above* the exact charged amount, and the split ε = ε₁ + ε₂ holds
as an inequality of exact rationals (ε₁ + ε₂ ≤ ε), never of rounded floats.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from labeldp.mechanisms.validation import ParameterError, check_epsilon


def float_at_most(value: Fraction | Decimal | int) -> float:
    """The largest double that is not above ``value`` (exactly)."""
    exact = Fraction(value)
    approx = float(exact)  # correctly rounded to nearest: at most one step above
    return approx if Fraction(approx) <= exact else math.nextafter(approx, -math.inf)


def split_epsilon(total: float, prior: float) -> tuple[float, float]:
    """``(ε₁, ε₂)`` for a total ε and the prior's part ε₁: ε₂ is the largest double with
    ``ε₁ + ε₂ <= ε`` exactly (basic composition never exceeds the total)."""
    eps = check_epsilon(total)
    eps_prior = check_epsilon(prior, "epsilon_prior")
    if not eps_prior < eps:
        raise ParameterError(f"epsilon_prior must be < epsilon ({eps_prior!r} >= {eps!r})", "epsilon_prior")
    eps_randomize = float_at_most(Fraction(eps) - Fraction(eps_prior))
    return eps_prior, check_epsilon(eps_randomize, "epsilon_randomize")


def within(parts: tuple[float, ...], total: float) -> bool:
    """Whether the exact sum of ``parts`` is at most ``total`` (no rounding)."""
    return sum((Fraction(p) for p in parts), Fraction(0)) <= Fraction(total)
