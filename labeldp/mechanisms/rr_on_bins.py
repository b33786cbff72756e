"""RR-on-Bins (Algorithm 1): randomized response over the bins of a monotone map Φ."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from labeldp.mechanisms import mechanism as rr
from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.losses import Loss, resolve_loss
from labeldp.mechanisms.mechanism import MechanismKind
from labeldp.mechanisms.randomized_response import KeepThreshold, rr_draw
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector

if TYPE_CHECKING:
    from labeldp.mechanisms.epsilon import UserBudget
    from labeldp.mechanisms.published import PublishedMechanism


@dataclass(frozen=True, eq=False)
class RROnBins:
    """ε-RR-on-Bins for a public support.

    ``support_bins[i]`` is the bin (output index) of support point ``i``; ``bin_values`` are the
    ``m`` sorted output values. Input labels are clipped and snapped to the support, mapped to their
    bin, and then kept with probability ``e^ε/(e^ε+m−1)`` or moved to another bin uniformly.
    ``objective_epsilon``: when set, the bins are optimal at that (larger) ε for the per-label loss,
    the stand-in for a trained model's error (``labeldp.mechanisms.objective``); it is not a privacy
    parameter: labels are randomized at ``epsilon``.
    """

    epsilon: float
    support: Support
    support_bins: IntArray
    bin_values: FloatArray
    loss: Loss = field(default_factory=lambda: resolve_loss("squared"))
    objective_epsilon: float | None = None  # the ε the bins were optimized at (objective "model")
    threshold: KeepThreshold = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        bins = np.asarray(self.support_bins, dtype=np.int64)
        values = finite_vector(self.bin_values, "bin_values")
        if bins.shape != (self.support.k,):
            raise ParameterError("support_bins must have one entry per support point", "support_bins")
        if np.any(np.diff(bins) < 0) or bins[0] != 0 or np.any(np.diff(bins) > 1):
            raise ParameterError(
                "support_bins must be a non-decreasing map onto 0..m-1 (intervals)", "support_bins"
            )
        if int(bins[-1]) + 1 != values.size:
            raise ParameterError("bin_values must have one value per bin", "bin_values")
        if np.any(np.diff(values) < 0):
            raise ParameterError("bin_values must be sorted", "bin_values")
        bins.setflags(write=False)
        values.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(
            self, "objective_epsilon", rr.checked_objective_epsilon(self.objective_epsilon, eps)
        )
        object.__setattr__(self, "support_bins", bins)
        object.__setattr__(self, "bin_values", values)
        object.__setattr__(self, "threshold", KeepThreshold.for_epsilon(eps, int(values.size)))

    @property
    def kind(self) -> MechanismKind:
        return "rr_on_bins"

    @property
    def m(self) -> int:
        return int(self.bin_values.size)

    @property
    def implemented_epsilon(self) -> float:
        """The ε the integer sampling thresholds actually implement (<= ``epsilon``), rounded up."""
        return self.threshold.implemented_epsilon

    @property
    def bin_edges(self) -> list[tuple[float, float]]:
        """Each bin's interval of support values, ``(lowest, highest)``."""
        starts = np.flatnonzero(np.diff(self.support_bins, prepend=-1))
        ends = np.append(starts[1:], self.support.k) - 1
        v = self.support.values
        return [(float(v[a]), float(v[b])) for a, b in zip(starts, ends, strict=True)]

    def bin_of(self, labels: ArrayLike) -> IntArray:
        """Φ as bin indices: labels clipped to the support's range and snapped to the support."""
        return self.support_bins[self.support.snap(labels)]

    def values_of(self, indices: ArrayLike) -> FloatArray:
        return rr.values_of(self.bin_values, indices)

    def transition_matrix(self) -> FloatArray:
        """``M[i, j] = P(output bin j | label = support value i)``, shape ``(k, m)``, exactly as the
        integer thresholds sample it."""
        return rr.transition(self.support_bins, self.threshold)

    def expected_loss(self, values: ArrayLike, probs: ArrayLike) -> float:
        """Expected loss ``Σ_i p_i Σ_j P(j | y_i) ℓ(ŷ_j, y_i)`` when labels follow ``probs`` on
        ``values`` (e.g. the true prior, not the one the mechanism was optimized for)."""
        return rr.expected_loss(self, values, probs)

    def randomize(self, labels: ArrayLike, *, rng: SecureRandom | None = None) -> IntArray:
        """Draw one privatized bin index per label (``int64``), using a fresh CSPRNG stream."""
        return rr_draw(self.bin_of(labels), self.threshold, rng or SecureRandom())

    def describe(
        self,
        *,
        prior: ArrayLike,
        epsilon_prior: float,
        epsilon_total: float | None = None,
        user: UserBudget | None = None,
    ) -> PublishedMechanism:
        from labeldp.mechanisms.published import publish

        return publish(self, prior, epsilon_prior, epsilon_total, user)

    def __repr__(self) -> str:
        return (
            f"RROnBins(epsilon={self.epsilon:g}, m={self.m}, loss={self.loss.name!r}, "
            f"bin_values={np.array2string(self.bin_values, precision=4, threshold=12)})"
        )
