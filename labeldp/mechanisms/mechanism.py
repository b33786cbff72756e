"""The one interface every label mechanism implements, and the randomized response over bins they share.

Both mechanisms labeldp releases with are randomized response over ``m`` output bins: a public map
sends each support point to its bin (RR-on-Bins: intervals of the support; RR-Top-k: the ``k``
reported classes, with ``-1`` for a class outside them, which gets a uniform bin). The functions here
compute, for any such map, the exact transition matrix of the integer sampler, the draws and the
expected loss, so the two mechanisms differ only in how their map is chosen.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.losses import Loss, check_labels_for_loss
from labeldp.mechanisms.randomized_response import KeepThreshold
from labeldp.mechanisms.support import Support
from labeldp.mechanisms.validation import ParameterError, finite_vector

if TYPE_CHECKING:
    from labeldp.mechanisms.epsilon import UserBudget
    from labeldp.mechanisms.published import PublishedMechanism
    from labeldp.mechanisms.rng import SecureRandom

MechanismKind = Literal["rr_on_bins", "rr_top_k", "unbiased"]


class Mechanism(Protocol):
    """A label mechanism: from a public support onto ``m`` outputs (bins): randomized response over
    bins (RR-on-Bins, RR-Top-k) or the unbiased randomizer."""

    @property
    def kind(self) -> MechanismKind: ...

    @property
    def epsilon(self) -> float:
        """The nominal ε of the randomization (ε₂ of a release)."""

    @property
    def implemented_epsilon(self) -> float:
        """The ε the integer sampling thresholds actually implement (<= ``epsilon``)."""

    @property
    def objective_epsilon(self) -> float | None:
        """The ε the bins were optimized at when the objective is a trained model (``None``: the
        per-label loss at ``epsilon``); not a privacy parameter."""

    @property
    def support(self) -> Support: ...

    @property
    def support_bins(self) -> IntArray:
        """The bin of each support point; ``-1``: not reported, answered with a uniform bin; empty for
        the unbiased randomizer (no support point has an output of its own)."""

    @property
    def bin_values(self) -> FloatArray:
        """The output value of each bin index."""

    @property
    def m(self) -> int: ...

    @property
    def loss(self) -> Loss: ...

    def transition_matrix(self) -> FloatArray:
        """``M[i, j] = P(output bin j | label = support value i)`` exactly as sampled, ``k × m``."""

    def randomize(self, labels: ArrayLike, *, rng: SecureRandom | None = None) -> IntArray:
        """One privatized bin index per label (``int64``)."""

    def values_of(self, indices: ArrayLike) -> FloatArray: ...

    def expected_loss(self, values: ArrayLike, probs: ArrayLike) -> float:
        """Expected loss of the outputs when labels follow ``probs`` on ``values``."""

    def describe(
        self,
        *,
        prior: ArrayLike,
        epsilon_prior: float,
        epsilon_total: float | None = None,
        user: UserBudget | None = None,
    ) -> PublishedMechanism:
        """The mechanism as both parties see it (``PublishedMechanism``)."""


# -- the randomized response over bins both mechanisms share ---------------------------------------
def checked_objective_epsilon(objective_epsilon: float | None, epsilon: float) -> float | None:
    """``None``, or an ε at least the randomization's (the model objective only ever refines bins)."""
    if objective_epsilon is None:
        return None
    value = float(objective_epsilon)
    if not math.isfinite(value) or value < epsilon:
        raise ParameterError(
            f"objective_epsilon must be finite and at least epsilon ({epsilon!r}), got {objective_epsilon!r}",
            "objective_epsilon",
        )
    return value


def transition(support_bins: IntArray, threshold: KeepThreshold) -> FloatArray:
    """``k × m`` transition of RR over bins: a reported point's row is the keep/move row of its bin,
    an unreported point's row (bin ``-1``) is uniform."""
    rows = threshold.transition()
    inside = support_bins >= 0
    out = np.empty((support_bins.size, threshold.m))
    out[inside] = rows[support_bins[inside]]
    out[~inside] = 1.0 / threshold.m
    return out


def values_of(bin_values: FloatArray, indices: ArrayLike) -> FloatArray:
    """Bin indices → output values, refusing anything that is not a valid bin index."""
    idx = np.asarray(indices)
    m = int(bin_values.size)
    if idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0 or idx.max() >= m):
        raise ParameterError(f"indices must be integer bin indices in 0..{m - 1}", "indices")
    return bin_values[idx]


def expected_loss(mech: Mechanism, values: ArrayLike, probs: ArrayLike) -> float:
    """``Σ_i p_i Σ_j P(j | y_i) ℓ(ŷ_j, y_i)`` for labels following ``probs`` on ``values`` (e.g. the
    true prior, not the one the mechanism was optimized for); values are snapped to the support."""
    y = finite_vector(values, "values")
    p = finite_vector(probs, "probs")
    if y.size != p.size:
        raise ParameterError(f"values and probs must have the same length ({y.size} != {p.size})", "values")
    if np.any(p < 0) or p.sum() <= 0:
        raise ParameterError("probs must be non-negative with a positive sum", "probs")
    check_labels_for_loss(y, mech.loss, "values")
    p = p / p.sum()
    rows = mech.transition_matrix()[mech.support.snap(y, "values")]
    losses = mech.loss(mech.bin_values[None, :], y[:, None])
    per_label = np.einsum("ij,ij->i", rows, np.where(rows > 0, losses, 0.0))
    return float(np.dot(p, per_label))
