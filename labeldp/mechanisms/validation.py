"""Argument checks shared by every mechanism; each error names the offending argument.

Every bad argument raises ``ParameterError`` (a ``ValueError``), so the services can answer a
machine-readable 4xx for it at their boundary instead of guessing which ``ValueError`` was a bug.
"""

from __future__ import annotations

import math

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray

# exp(ε) must stay a finite double; far beyond any meaningful privacy guarantee anyway.
MAX_EPSILON = 700.0


class ParameterError(ValueError):
    """A mechanism was given an argument it cannot work with; ``parameter`` names it."""

    def __init__(self, message: str, parameter: str = "") -> None:
        super().__init__(message)
        self.parameter = parameter


def check_epsilon(value: float, name: str = "epsilon") -> float:
    try:
        eps = float(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ParameterError(f"{name} must be a number, got {value!r}", name) from exc
    if not math.isfinite(eps) or eps <= 0:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}", name)
    if eps > MAX_EPSILON:
        raise ParameterError(f"{name} must be <= {MAX_EPSILON}, got {value!r}", name)
    return eps


def finite_vector(values: ArrayLike, name: str, *, allow_empty: bool = False) -> FloatArray:
    """A 1-D float64 copy of ``values``; rejects NaN, infinities, wrong shapes and (optionally) empty."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ParameterError(f"{name} must be numeric", name) from exc
    if arr.ndim != 1:
        raise ParameterError(f"{name} must be one-dimensional, got shape {arr.shape}", name)
    if arr.size == 0 and not allow_empty:
        raise ParameterError(f"{name} must not be empty", name)
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ParameterError(f"{name} must be finite; position {bad} is {arr[bad]!r}", name)
    return arr


def check_bounds(lo: float, hi: float) -> tuple[float, float]:
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise ParameterError(f"lo and hi must be finite, got lo={lo!r}, hi={hi!r}", "lo")
    if not lo_f < hi_f:
        raise ParameterError(f"lo must be < hi, got lo={lo!r}, hi={hi!r}", "lo")
    return lo_f, hi_f
