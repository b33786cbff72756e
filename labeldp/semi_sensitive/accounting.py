"""The DP-SGD phase's accountant: noise calibrated to (ε₂, δ) *before* training starts.

Adjacency is replace-one: two training sets differ in one example's semi-sensitive features and label
(the example set and its non-sensitive features are public). DP-SGD with Poisson sampling at rate
``q`` for ``T`` steps is ``T`` compositions of a Poisson-subsampled Gaussian; dp-accounting's
privacy-loss-distribution accountant supports that event under ``REPLACE_ONE`` directly (its
estimate is pessimistic: never below the true ε). The Rényi accountant does not support replace-one
for Poisson sampling, so it serves as the *second* accountant through the conversion
replace-one ⊂ two add/remove steps (group privacy of 2), which can only be looser: the test suite
checks that the two agree in that direction.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import dp_accounting
from dp_accounting import pld, rdp
from scipy.optimize import brentq

from labeldp.mechanisms.validation import ParameterError, check_epsilon
from labeldp.semi_sensitive.budget import check_delta

ACCOUNTANT = "dp_accounting.pld (replace-one, Poisson-subsampled Gaussian, pessimistic)"
_REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
_ADD_OR_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
_MIN_NOISE = 0.3  # below this a PLD of many steps grows too large to hold; no useful ε needs less
_MAX_NOISE = 1e4


@dataclass(frozen=True)
class DpSgdSchedule:
    """What the accountant needs to know about training: the sampling rate and the step count."""

    sampling_rate: float  # q: each example joins each step's batch independently with this probability
    steps: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sampling_rate) and 0.0 < self.sampling_rate <= 1.0):
            raise ParameterError(f"sampling_rate must be in (0, 1], got {self.sampling_rate!r}", "batch_size")
        if int(self.steps) != self.steps or self.steps < 1:
            raise ParameterError(f"steps must be a positive integer, got {self.steps!r}", "epochs")

    @classmethod
    def of(cls, examples: int, batch_size: int, epochs: float) -> DpSgdSchedule:
        """``q = batch_size / n`` and ``T = ⌈epochs / q⌉`` (an epoch is ``1/q`` expected batches)."""
        if examples < 1 or batch_size < 1:
            raise ParameterError("examples and batch_size must be positive", "batch_size")
        q = min(1.0, batch_size / examples)
        if not (math.isfinite(epochs) and epochs > 0):
            raise ParameterError(f"epochs must be > 0, got {epochs!r}", "epochs")
        return cls(q, max(1, math.ceil(epochs / q)))

    def event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        step = dp_accounting.PoissonSampledDpEvent(
            self.sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)
        )
        return dp_accounting.SelfComposedDpEvent(step, self.steps)


def epsilon_spent(schedule: DpSgdSchedule, noise_multiplier: float, delta: float) -> float:
    """ε at ``delta`` for the whole schedule, replace-one (the accountant that decides)."""
    accountant = pld.PLDAccountant(_REPLACE_ONE)
    accountant.compose(schedule.event(noise_multiplier))
    return float(accountant.get_epsilon(check_delta(delta)))


def epsilon_spent_rdp_bound(schedule: DpSgdSchedule, noise_multiplier: float, delta: float) -> float:
    """A second, independent upper bound on the same ε: Rényi accounting under add/remove, converted
    to replace-one by group privacy over two steps (``(2ε', (1 + e^ε')·δ')`` with ``δ'`` solved so
    the result holds at ``delta``)."""
    dlt = check_delta(delta)

    def add_remove(d: float) -> float:
        accountant = rdp.RdpAccountant(neighboring_relation=_ADD_OR_REMOVE)
        accountant.compose(schedule.event(noise_multiplier))
        return float(accountant.get_epsilon(d))

    # (1 + e^ε')·δ' = δ with ε' depending on δ': a few fixed-point rounds from δ' = δ/2 converge
    inner = dlt / 2
    for _ in range(50):
        eps = add_remove(inner)
        target = dlt / (1 + math.exp(min(eps, 700.0)))
        if target >= inner:
            break
        inner = target
    return 2 * add_remove(inner)


@functools.lru_cache(maxsize=256)
def calibrate_noise(schedule: DpSgdSchedule, epsilon: float, delta: float) -> float:
    """The smallest noise multiplier (to 1e-4 relative) whose ε at ``delta`` is at most ``epsilon``.

    ε falls smoothly with σ, nearly a power law, so the search runs on log σ against log ε: a bracket
    grown from σ = 1, then Brent's method — five to nine accountant runs where bisection to 1e-4 took
    about seventeen, each up to a second at small σ (a plan and the charge it precedes answered in 10 s
    before). The answer is then checked and, if it lands a hair above the budget, raised until the
    accountant agrees, so the returned σ never overspends. Cached: a pure function of its arguments,
    asked once by ``:plan`` and again by the charge it previews."""
    eps = check_epsilon(epsilon, "epsilon_dpsgd")
    dlt = check_delta(delta)

    @functools.cache
    def excess(log_sigma: float) -> float:  # log ε(σ) − log ε₂: positive while σ is too small
        spent = epsilon_spent(schedule, math.exp(log_sigma), dlt)
        return math.log(max(spent, 1e-300)) - math.log(eps)

    low, high = math.log(_MIN_NOISE), math.log(_MAX_NOISE)
    lo = hi = 0.0  # σ = 1
    step = math.log(1.5)
    if excess(hi) > 0:
        while excess(hi) > 0:
            lo, hi = hi, min(hi + step, high)
            if lo >= high:
                raise ParameterError(
                    "no noise level reaches this ε: train fewer steps or spend more ε", "epsilon"
                )
            step *= 2
    else:
        while excess(lo) <= 0:
            hi, lo = lo, max(lo - step, low)
            if hi <= low:  # even the least noise the accountant can hold spends less: use that
                return _MIN_NOISE
            step *= 2
    sigma = math.exp(brentq(excess, lo, hi, xtol=1e-6, rtol=1e-6))
    while epsilon_spent(schedule, sigma, dlt) > eps:
        sigma *= 1 + 1e-4
        if sigma > _MAX_NOISE:
            raise ParameterError("no noise level reaches this ε", "epsilon")
    return sigma
