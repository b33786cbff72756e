"""Argument checks shared by every mechanism; each error names the offending argument."""

from __future__ import annotations

import math

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray

# exp(ε) must stay a finite double; far beyond any meaningful privacy guarantee anyway.
MAX_EPSILON = 700.0


def check_epsilon(value: float, name: str = "epsilon") -> float:
    try:
        eps = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {value!r}") from exc
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if eps > MAX_EPSILON:
        raise ValueError(f"{name} must be <= {MAX_EPSILON}, got {value!r}")
    return eps


def finite_vector(values: ArrayLike, name: str, *, allow_empty: bool = False) -> FloatArray:
    """A 1-D float64 copy of ``values``; rejects NaN, infinities, wrong shapes and (optionally) empty."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} must be finite; position {bad} is {arr[bad]!r}")
    return arr


def check_bounds(lo: float, hi: float) -> tuple[float, float]:
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise ValueError(f"lo and hi must be finite, got lo={lo!r}, hi={hi!r}")
    if not lo_f < hi_f:
        raise ValueError(f"lo must be < hi, got lo={lo!r}, hi={hi!r}")
    return lo_f, hi_f
