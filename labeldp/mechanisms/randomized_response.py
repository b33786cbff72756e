"""Randomized response with exact integer thresholds: the sampling core of every RR-style mechanism.

A label whose true output is ``j`` keeps ``j`` when a uniform 64-bit word falls below the threshold
``T = floor(2^64 · e^ε / (e^ε + m − 1))`` and otherwise moves to one of the other ``m − 1`` outputs,
chosen uniformly by rejection sampling. The implemented ratio between "keep" and any single "move" is
then exactly ``T·(m − 1) / (2^64 − T) <= e^ε``: the thresholds never spend more than the nominal ε,
and ``implemented_epsilon`` reports what they do spend, rounded up. When ε is so small that the
integer threshold would make "keep" *less* likely than a move (``T·m < 2^64``, around ε < 1e-17),
the output is drawn uniformly instead, which is 0-DP. Every label draws the same words and does the
same arithmetic whatever its value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.validation import ParameterError, check_epsilon

_TWO64 = 1 << 64
_PRECISION = 60  # decimal digits; far beyond the 20 digits a 64-bit threshold needs
MAX_OUTPUTS = 1 << 32  # the uniform draws are exact for up to 2^32 outputs


@dataclass(frozen=True)
class KeepThreshold:
    """Integer keep threshold for ε-randomized response over ``m`` outputs."""

    epsilon: float
    m: int
    threshold: int  # P(keep) = threshold / 2^64; 0 with m >= 2 means "uniform output" (see module)

    @classmethod
    def for_epsilon(cls, epsilon: float, m: int) -> KeepThreshold:
        if not 1 <= m <= MAX_OUTPUTS:
            raise ParameterError(f"m must be in 1..{MAX_OUTPUTS}, got {m}", "m")
        if m == 1:
            return cls(epsilon, 1, _TWO64)
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            # exp() is correctly rounded, so it may overshoot e^ε by half an ulp; shrink it by far
            # more than that so the threshold can only err towards less privacy loss.
            e = Decimal(epsilon).exp() * (1 - Decimal(10) ** (5 - _PRECISION))
            t = int((Decimal(_TWO64) * e / (e + (m - 1))).to_integral_value(rounding=ROUND_FLOOR))
        # Every other output must keep a positive probability, or the ratio would be infinite:
        # for huge ε the quotient rounds to 2^64 and has to be held one below it.
        t = min(t, _TWO64 - 1)
        if t * m < _TWO64:  # "keep" would be less likely than a move: fall back to a uniform draw
            t = 0
        return cls(epsilon, m, t)

    @property
    def uniform(self) -> bool:
        """The output ignores the label (0-DP): ε too small for a 64-bit threshold."""
        return self.m > 1 and self.threshold == 0

    @property
    def keep_probability(self) -> float:
        """P(output = the true output), exactly as the integer sampler implements it."""
        if self.m == 1:
            return 1.0
        if self.uniform:
            return 1.0 / self.m
        return self.threshold / _TWO64

    @property
    def move_probability(self) -> float:
        """P(output = one particular other output)."""
        if self.m == 1:
            return 0.0
        if self.uniform:
            return 1.0 / self.m
        return (_TWO64 - self.threshold) / (_TWO64 * (self.m - 1))

    @property
    def implemented_epsilon(self) -> float:
        """``log(P(keep) / P(one other output))`` of the integer thresholds, as the smallest double
        that is not below the exact value."""
        if self.m == 1 or self.uniform:
            return 0.0
        with localcontext() as ctx:
            ctx.prec = _PRECISION
            ratio = Decimal(self.threshold * (self.m - 1)) / Decimal(_TWO64 - self.threshold)
            exact = ratio.ln()
        approx = float(exact)
        return approx if Decimal(approx) >= exact else math.nextafter(approx, math.inf)

    def transition(self) -> FloatArray:
        """``T[i, j] = P(output j | true output i)``, exactly as sampled (``m × m``)."""
        t = np.full((self.m, self.m), self.move_probability)
        np.fill_diagonal(t, self.keep_probability)
        return t


def rr_draw(
    true_index: IntArray, threshold: KeepThreshold, rng: SecureRandom, *, outside: bool = False
) -> IntArray:
    """Randomized response on output indices ``0..m-1`` given each label's true output index.

    With ``outside`` (a property of the mechanism, never of the data), a true index of ``-1`` means
    "not one of the outputs" and such a label gets a uniform output; every label then makes the same
    three draws whatever its index."""
    n, m = int(true_index.size), threshold.m
    if m == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if threshold.uniform:
        return rng.integers_below(m, n)
    keep = rng.uint64(n) < np.uint64(threshold.threshold)  # threshold < 2^64 once m >= 2
    other = rng.integers_below(m - 1, n)
    other += other >= true_index  # skip the true output: uniform over the m − 1 others
    chosen = np.where(keep, true_index, other)
    if outside:
        chosen = np.where(true_index < 0, rng.integers_below(m, n), chosen)
    elif true_index.size and int(true_index.min()) < 0:
        raise ParameterError("true output indices must be >= 0 for this mechanism", "true_index")
    return chosen


def randomized_response(
    labels: ArrayLike, num_classes: int, epsilon: float, *, rng: SecureRandom | None = None
) -> IntArray:
    """ε-randomized response over classes ``0..num_classes-1`` (Warner; docs/math.md §5)."""
    eps = check_epsilon(epsilon)
    if int(num_classes) != num_classes or num_classes < 1:
        raise ParameterError(f"num_classes must be a positive integer, got {num_classes!r}", "num_classes")
    y = class_labels(labels, int(num_classes))
    return rr_draw(y, KeepThreshold.for_epsilon(eps, int(num_classes)), rng or SecureRandom())


def class_labels(labels: ArrayLike, num_classes: int, name: str = "labels") -> IntArray:
    """Validate integer class labels in ``0..num_classes-1``."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ParameterError(f"{name} must be one-dimensional, got shape {arr.shape}", name)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise ParameterError(f"{name} must be finite", name)
        if np.any(arr != np.round(arr)):
            raise ParameterError(f"{name} must be integer class indices", name)
    elif arr.dtype.kind not in "iu":
        raise ParameterError(f"{name} must be integer class indices, got dtype {arr.dtype}", name)
    out = arr.astype(np.int64)
    if out.size and (out.min() < 0 or out.max() >= num_classes):
        raise ParameterError(f"{name} must lie in 0..{num_classes - 1}", name)
    return out


def rr_transition_matrix(epsilon: float, m: int) -> FloatArray:
    """The nominal ``T[i, j] = P(output j | true output i)`` of ε-randomized response over ``m``
    outputs (``e^ε/(e^ε+m−1)`` on the diagonal); ``KeepThreshold.transition`` is the exact one."""
    if m == 1:
        return np.ones((1, 1))
    denom = math.exp(epsilon) + m - 1
    t = np.full((m, m), 1.0 / denom)
    np.fill_diagonal(t, math.exp(epsilon) / denom)
    return t
