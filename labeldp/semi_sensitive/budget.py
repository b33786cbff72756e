"""How a semi-sensitive release spends its (ε, δ): the paper's split and group privacy.

The hybrid runs two phases on the same examples: a label-only randomized-response release (ε₁, 0) and
DP-SGD on every feature (ε₂, δ). Basic composition makes the whole (ε₁ + ε₂, δ); the split is chosen
so that the sum never exceeds the requested ε *exactly* (no rounding upwards), like every other split
in labeldp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from labeldp.mechanisms.epsilon import float_at_least, float_at_most
from labeldp.mechanisms.validation import ParameterError, check_epsilon

LABEL_PHASE_SHARE = Fraction(3, 5)  # ε₁ = min(0.6·ε, 3): the paper's split
LABEL_PHASE_CAP = 3


def check_delta(delta: float, name: str = "delta") -> float:
    """δ must be a finite probability in (0, 1): δ = 0 makes Gaussian noise infinite."""
    value = float(delta)
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise ParameterError(f"{name} must be in (0, 1), got {delta!r}", name)
    return value


@dataclass(frozen=True)
class HybridBudget:
    """One hybrid release's guarantee: ``(ε₁, 0)`` for the label phase, ``(ε₂, δ)`` for DP-SGD."""

    epsilon: float
    delta: float
    epsilon_labels: float  # ε₁, randomized response on the labels only
    epsilon_dpsgd: float  # ε₂, DP-SGD on labels and semi-sensitive features

    def __post_init__(self) -> None:
        if Fraction(self.epsilon_labels) + Fraction(self.epsilon_dpsgd) > Fraction(self.epsilon):
            raise ParameterError("ε₁ + ε₂ exceeds ε", "epsilon")

    @classmethod
    def split(cls, epsilon: float, delta: float) -> HybridBudget:
        """The paper's split ``ε₁ = min(0.6·ε, 3)``, ``ε₂ = ε − ε₁``, both rounded down exactly."""
        eps = check_epsilon(epsilon)
        first = float_at_most(min(LABEL_PHASE_SHARE * Fraction(eps), Fraction(LABEL_PHASE_CAP)))
        second = float_at_most(Fraction(eps) - Fraction(first))
        return cls(eps, check_delta(delta), first, second)

    def per_user(self, contribution_bound: int) -> tuple[float, float]:
        """The guarantee per *user* who contributes at most ``τ`` examples: each phase stretched by
        group privacy (phase 1: ``τ·ε₁``, δ stays 0; phase 2: ``(τ·ε₂, δ·Σ_{i<τ} e^{iε₂})``), then
        composed: ``(τ·ε₁ + τ·ε₂, δ_τ)``, rounded up."""
        eps1, _ = group_privacy(self.epsilon_labels, 0.0, contribution_bound)
        eps2, delta = group_privacy(self.epsilon_dpsgd, self.delta, contribution_bound)
        return float_at_least(Fraction(eps1) + Fraction(eps2)), delta


def group_privacy(epsilon: float, delta: float, group: int) -> tuple[float, float]:
    """``(kε, δ·(e^{kε} − 1)/(e^ε − 1))``: an (ε, δ) guarantee for one example, stretched to ``k``
    examples of one user (group privacy, Vadhan 2017, Lemma 2.2), rounded up so never understated."""
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta) if delta else 0.0
    if int(group) != group or group < 1:
        raise ParameterError(f"group must be a positive integer, got {group!r}", "group")
    k = int(group)
    if k == 1:
        return eps, dlt
    eps_k = float_at_least(Fraction(eps) * k)
    # Σ_{i<k} e^{iε} = (e^{kε} − 1)/(e^ε − 1), summed directly so ε → 0 stays exact (k terms)
    growth = math.fsum(math.exp(min(i * eps, 700.0)) for i in range(k))  # δ caps at 1 anyway
    return eps_k, min(1.0, math.nextafter(dlt * growth, math.inf)) if dlt else 0.0
