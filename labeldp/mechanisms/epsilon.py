"""Exact ε bookkeeping between what the ledger charges and the floats the mechanisms use.

The ledger charges integer micro-ε. A mechanism must never spend more than that, so every ε it
receives is the largest double *not above* the exact charged amount, and the split ε = ε₁ + ε₂ holds
as an inequality of exact rationals (ε₁ + ε₂ ≤ ε), never of rounded floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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


def float_at_least(value: Fraction | Decimal | int) -> float:
    """The smallest double that is not below ``value`` (exactly): for reporting a cost, never under."""
    exact = Fraction(value)
    approx = float(exact)
    return approx if Fraction(approx) >= exact else math.nextafter(approx, math.inf)


def user_level_cost(
    epsilon_bound: float, epsilon_prior: float, epsilon_randomize: float, bound: int
) -> Fraction:
    """What one user-level release costs a user, exactly: choosing the bound privately (``ε_τ``), the
    prior (``ε₁``) and randomizing each of the user's at most ``bound`` kept labels (``τ·ε₂``)."""
    return Fraction(epsilon_bound) + Fraction(epsilon_prior) + bound * Fraction(epsilon_randomize)


@dataclass(frozen=True)
class UserBudget:
    """How one user-level release spends a user's ε (see the module docstring)."""

    epsilon_user: float
    contribution_bound: int  # τ: kept (randomized) examples per user
    prior_contribution_bound: int  # τ_p: examples per user in the prior's histogram
    epsilon_bound: float  # ε_τ: spent choosing τ privately (0 otherwise)
    epsilon_prior: float  # ε₁
    epsilon_randomize: float  # ε₂, per kept example

    def __post_init__(self) -> None:
        cost = user_level_cost(
            self.epsilon_bound, self.epsilon_prior, self.epsilon_randomize, self.contribution_bound
        )
        if cost > Fraction(self.epsilon_user):
            raise ParameterError("the user-level split exceeds epsilon_user", "epsilon_user")

    @property
    def epsilon_example(self) -> float:
        """The most ε any one example's label is exposed to: ``ε₁/τ_p + ε₂``, rounded up."""
        return float_at_least(
            Fraction(self.epsilon_prior) / self.prior_contribution_bound + Fraction(self.epsilon_randomize)
        )
