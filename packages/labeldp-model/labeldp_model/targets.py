"""Per-row targets and weights that make a loss on the released values an unbiased estimate of the loss
on the true (binned) labels — for scikit-learn, or any trainer that takes targets and sample weights.

With ``T = a·I + b·11ᵀ`` the release's transition between bins (``BinsCorrection``, docs/math.md §6)
and ``ŷ`` a row's released value:

- ``unbiased_targets``: ``ỹ = (ŷ − b·Σ_j v_j)/a`` has ``E[ỹ | y] = Φ(y)``, the true label's bin value.
  A loss that is affine in the label up to a term without the prediction — squared error, Poisson,
  cross-entropy — trained on ``ỹ`` has the gradient of the loss on ``Φ(y)`` in expectation.
- ``sample_rows``: any loss. Each row becomes ``m`` rows, one per bin value ``v_j``, weighted
  ``w_j = (1[ŷ = v_j] − b)/a``: ``Σ_j w_j ℓ(f, v_j)`` is the unbiased loss ``ℓ̃(f, ŷ)`` whose
  expectation given the label is ``ℓ(f, Φ(y))``. The weights are negative for the bins not released,
  which scikit-learn's gradient-boosting, logistic and SGD estimators accept.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleasedValuesError, ReleaseError
from labeldp_model.release import Release

Array = npt.NDArray[np.float64]
FLOAT32_ROUNDING = 1e-6  # relative: float32 keeps ~7 digits (its ulp is 1.2e-7 relative)


def correction_of(release: Release | BinsCorrection) -> BinsCorrection:
    """The release's one correction; a feature-aware release's rows were released by their groups' own
    mechanisms, which it does not describe: refused (train on the export's target and weight columns)."""
    if isinstance(release, Release) and release.group_count:
        raise ReleaseError(
            f"release {release.release_id} is feature-aware ({release.group_count} groups, each with its "
            f"own mechanism): one correction does not hold for its rows; train on its "
            f"{release.columns.get('target')!r} column weighted by {release.columns.get('weight')!r}"
        )
    return release.correction if isinstance(release, Release) else release


def checked_values(correction: BinsCorrection, released_values: npt.ArrayLike) -> Array:
    """The released values, each snapped to the release's bin value it is (boosters hand labels back as
    float32: a value within float32 rounding of a bin value is that value), refused otherwise (a capped
    row of a user-level release has none: drop it; a bin code or a true label is not one)."""
    values = np.asarray(released_values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(values)):
        raise ReleasedValuesError(
            "released values must be finite: drop the rows without one (capped rows of a user-level release)"
        )
    known = np.unique(np.asarray(correction.bin_values, dtype=np.float64))
    right = np.clip(np.searchsorted(known, values), 1, max(known.size - 1, 1))
    left = right - 1 if known.size > 1 else np.zeros_like(right)
    nearest = np.where(
        np.abs(values - known[left]) <= np.abs(values - known[right]), known[left], known[right]
    )
    stray = np.abs(values - nearest) > FLOAT32_ROUNDING * np.maximum(1.0, np.abs(nearest))
    if stray.any():
        raise ReleasedValuesError(
            f"{int(stray.sum())} values are not bin values of the release (first: {values[stray][0]!r}); "
            "pass the released_value column"
        )
    return nearest


def unbiased_targets(release: Release | BinsCorrection, released_values: npt.ArrayLike) -> Array:
    """``ỹ = (ŷ − b·Σ_j v_j)/a`` per row: its mean given the label is the label's bin value."""
    correction = correction_of(release)
    values = checked_values(correction, released_values)
    if correction.m == 1:
        return values
    correction._check_invertible()
    return (values - correction.b * float(np.sum(correction.bin_values))) / correction.a


def sample_rows(
    release: Release | BinsCorrection, released_values: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], Array, Array]:
    """``(row, target, weight)``: every row ``m`` times, once per bin value with weight
    ``(1[ŷ = v_j] − b)/a``. Fit with ``estimator.fit(X[row], target, sample_weight=weight)``: the
    weighted loss is unbiased for the loss on the true bins, whatever the loss (``m``× the rows)."""
    correction = correction_of(release)
    values = checked_values(correction, released_values)
    bins = np.asarray(correction.bin_values, dtype=np.float64)
    m, n = bins.size, values.size
    rows = np.repeat(np.arange(n, dtype=np.int64), m)
    targets = np.tile(bins, n)
    if m == 1:
        return rows, targets, np.ones(n)
    correction._check_invertible()
    chosen = (values[:, None] == bins[None, :]).astype(np.float64).reshape(-1)
    return rows, targets, (chosen - correction.b) / correction.a
