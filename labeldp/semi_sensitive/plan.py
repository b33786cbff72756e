"""Whether the hybrid runs its label phase at all, and how it splits ε: a public rule.

The paper's split ``ε₁ = min(0.6ε, 3)`` buys a warm start from the non-sensitive columns with most of a
small ε, and the DP-SGD phase, left with ``ε₂ = ε − ε₁``, then runs with much more noise. That pays when
the DP-SGD phase can still fine-tune the warm start and not wash it out. The rule: measure the noise of
each DP-SGD step's averaged clipped gradient in units of the clip norm, ``σ(ε₂, δ, q, T)/B`` (σ
calibrated by the accountant for the run's schedule, ``B`` the expected batch); run the label phase
with the paper's split when it is at most ``MAX_STEP_NOISE``, and otherwise spend all of ``(ε, δ)`` on
DP-SGD from a random start (``ε₁ = 0``: no label release). Everything it reads is public (ε, δ, the
number of examples through ``q``, the batch and the epochs), so the choice costs no privacy.
``MAX_STEP_NOISE`` was fitted once on UCI Adult (``benchmarks/bench_semi_sensitive.py``; docs/
semi-sensitive.md): between the largest value at which the hybrid won and the smallest at which it lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from labeldp.mechanisms.epsilon import float_at_most
from labeldp.semi_sensitive.accounting import DpSgdSchedule, calibrate_noise
from labeldp.semi_sensitive.budget import HybridBudget

# σ/B: the hybrid won on Adult at 1.77/1024 (ε = 5) and lost at 2.81/1024 (ε = 3); the geometric middle
MAX_STEP_NOISE = 2.2e-3


@dataclass(frozen=True)
class HybridPlan:
    """What the service runs for a total ``(ε, δ)``: the budget (``epsilon_labels == 0``: DP-SGD
    only) and the DP-SGD phase's noise multiplier under the paper's split, which decided it."""

    budget: HybridBudget
    split_noise_multiplier: float  # σ of the DP-SGD phase if the paper's split were used
    batch_size: int

    @property
    def label_phase(self) -> bool:
        return self.budget.epsilon_labels > 0

    @property
    def step_noise(self) -> float:
        return self.split_noise_multiplier / self.batch_size


def plan_hybrid(epsilon: float, delta: float, examples: int, batch_size: int, epochs: float) -> HybridPlan:
    """The service's default plan for ``examples`` training examples (module docstring)."""
    schedule = DpSgdSchedule.of(examples, batch_size, epochs)
    paper = HybridBudget.split(epsilon, delta)
    sigma = calibrate_noise(schedule, paper.epsilon_dpsgd, paper.delta)
    if sigma / batch_size <= MAX_STEP_NOISE:
        return HybridPlan(paper, sigma, batch_size)
    alone = HybridBudget(paper.epsilon, paper.delta, 0.0, float_at_most(Fraction(paper.epsilon)))
    return HybridPlan(alone, sigma, batch_size)
