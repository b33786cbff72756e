"""Public label supports: the finite grids that labels are snapped to before any mechanism runs.

A support is a public parameter. Every builder takes its bounds as arguments and never looks at the
labels, so choosing a grid leaks nothing (privacy invariant 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.validation import ParameterError, check_bounds, finite_vector

MAX_SUPPORT_SIZE = 1_000_000


@dataclass(frozen=True, eq=False)
class Support:
    """Sorted, distinct label values ``y_1 < ... < y_k``.

    ``snap`` clips a label to ``[y_1, y_k]`` and maps it to the nearest support point (ties go to the
    lower point). Evenly spaced grids snap arithmetically, others by binary search on midpoints.
    """

    values: FloatArray
    _step: float | None = field(default=None, repr=False)
    _midpoints: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        values = finite_vector(self.values, "support")
        if values.size > MAX_SUPPORT_SIZE:
            raise ParameterError(
                f"support has {values.size} points; at most {MAX_SUPPORT_SIZE} are supported"
            )
        if np.any(np.diff(values) <= 0):
            raise ParameterError("support must be strictly increasing (sorted, no duplicate values)")
        values.setflags(write=False)
        mid = (values[1:] + values[:-1]) / 2
        mid.setflags(write=False)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "_midpoints", mid)

    @property
    def k(self) -> int:
        return int(self.values.size)

    @property
    def lo(self) -> float:
        return float(self.values[0])

    @property
    def hi(self) -> float:
        return float(self.values[-1])

    def snap(self, labels: ArrayLike, name: str = "labels") -> IntArray:
        """Index of the support point each label maps to (after clipping to the support's range)."""
        y = finite_vector(labels, name, allow_empty=True)
        if self.k == 1:
            return np.zeros(y.size, dtype=np.int64)
        if self._step is not None:
            idx = np.rint((y - self.values[0]) / self._step)
            np.clip(idx, 0, self.k - 1, out=idx)
            return idx.astype(np.int64)
        return np.searchsorted(self._midpoints, y, side="left").astype(np.int64)

    def counts(self, labels: ArrayLike, name: str = "labels") -> IntArray:
        """Histogram of the labels on the support (after snapping)."""
        return np.bincount(self.snap(labels, name), minlength=self.k).astype(np.int64)

    def __len__(self) -> int:
        return self.k

    def __repr__(self) -> str:
        return f"Support(k={self.k}, lo={self.lo:g}, hi={self.hi:g})"


def integer_grid(lo: int, hi: int, step: int = 1) -> Support:
    """``lo, lo+step, ..., hi``: counts and other integer labels (e.g. weeks worked 0..52)."""
    if int(lo) != lo or int(hi) != hi or int(step) != step:
        raise ParameterError("integer_grid needs integer lo, hi and step")
    check_bounds(lo, hi)
    if step <= 0:
        raise ParameterError(f"step must be a positive integer, got {step!r}")
    if (hi - lo) % step:
        raise ParameterError(f"hi - lo must be a multiple of step; got lo={lo}, hi={hi}, step={step}")
    k = (int(hi) - int(lo)) // int(step) + 1  # counted before anything is allocated
    if k > MAX_SUPPORT_SIZE:
        raise ParameterError(f"the grid has {k} points; at most {MAX_SUPPORT_SIZE} are supported", "support")
    values = np.arange(int(lo), int(hi) + 1, int(step), dtype=np.float64)
    return Support(values, _step=float(step))


def uniform_grid(lo: float, hi: float, k: int) -> Support:
    """``k`` evenly spaced points on ``[lo, hi]`` (both ends included)."""
    lo, hi = check_bounds(lo, hi)
    if int(k) != k or k < 2:
        raise ParameterError(f"k must be an integer >= 2, got {k!r}")
    values = np.linspace(lo, hi, int(k))
    return Support(values, _step=(hi - lo) / (int(k) - 1))


def log_grid(lo: float, hi: float, k: int, *, include_zero: bool = False) -> Support:
    """``k`` log-spaced points on ``[lo, hi]`` (``lo > 0``) for heavy-tailed values such as
    purchase amounts; ``include_zero`` adds 0 as an extra point for "no conversion"."""
    lo, hi = check_bounds(lo, hi)
    if lo <= 0:
        raise ParameterError(f"log_grid needs lo > 0, got lo={lo!r}")
    if int(k) != k or k < 2:
        raise ParameterError(f"k must be an integer >= 2, got {k!r}")
    values = np.geomspace(lo, hi, int(k))
    if include_zero:
        values = np.concatenate(([0.0], values))
    return Support(values)


def explicit_support(values: ArrayLike) -> Support:
    """An explicit list of public label values (any order; duplicates are an error)."""
    arr = finite_vector(values, "support")
    ordered = np.sort(arr)
    if np.any(np.diff(ordered) == 0):
        raise ParameterError("support must not contain duplicate values")
    return Support(ordered)


def as_support(support: Support | ArrayLike) -> Support:
    return support if isinstance(support, Support) else explicit_support(support)
