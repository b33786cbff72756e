"""Learning from RR-on-Bins labels (MATH.md §6).

With ``m`` bins of values ``ŷ_1..ŷ_m`` and ε, the mechanism's transition matrix is
``T = a·I + b·11ᵀ`` with ``a = (e^ε − 1)/(e^ε + m − 1)`` and ``b = 1/(e^ε + m − 1)``. Hence, for an
observed bin ``o`` of an example whose binned true label is ``Φ(y)``:

- ``E[ŷ_o | y] = a·Φ(y) + b·Σ_j ŷ_j``: a model fit to the noisy values estimates that affine image of
  ``E[Φ(y) | x]``, and ``f ↦ (f − b·Σ_j ŷ_j)/a`` undoes it (``affine``);
- ``ỹ_o = ((e^ε + m − 1)·ŷ_o − Σ_j ŷ_j)/(e^ε − 1)`` has ``E[ỹ_o | y] = Φ(y)`` (``unbiased`` targets);
- ``ℓ̃(f, o) = [ℓ(f, ŷ_o) − b·Σ_j ℓ(f, ŷ_j)]/a`` has ``E[ℓ̃ | y] = ℓ(f, Φ(y))`` for any loss: the
  unbiased estimate of the loss against the binned true labels used in evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BinsNoise:
    """The noise model of an RR-on-Bins release: ``m`` bin values and ε (of the randomization)."""

    bin_values: Array
    epsilon: float

    @classmethod
    def of(cls, bin_values: list[float] | Array, epsilon: float) -> BinsNoise:
        values = np.asarray(bin_values, dtype=np.float64)
        if values.size < 1 or not np.all(np.isfinite(values)):
            raise ValueError("bin_values must be finite and non-empty")
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError("epsilon must be > 0")
        return cls(values, float(epsilon))

    @property
    def m(self) -> int:
        return int(self.bin_values.size)

    @property
    def a(self) -> float:
        return math.expm1(self.epsilon) / (math.exp(self.epsilon) + self.m - 1)

    @property
    def b(self) -> float:
        return 1.0 / (math.exp(self.epsilon) + self.m - 1)

    def transition(self) -> Array:
        return self.a * np.eye(self.m) + self.b

    def affine_correct(self, predictions: Array) -> Array:
        """Map a model of ``E[ŷ | x]`` to an estimate of ``E[Φ(y) | x]``."""
        if self.m == 1:
            return np.asarray(predictions, dtype=np.float64)
        return (np.asarray(predictions, dtype=np.float64) - self.b * self.bin_values.sum()) / self.a

    def unbiased_targets(self, bins: npt.NDArray[np.integer]) -> Array:
        """``ỹ_o``: regression targets whose conditional mean is the binned true label."""
        if self.m == 1:
            return self.bin_values[np.asarray(bins)]
        e = math.exp(self.epsilon)
        values = ((e + self.m - 1) * self.bin_values - self.bin_values.sum()) / math.expm1(self.epsilon)
        return values[np.asarray(bins)]

    def unbiased_loss(
        self, predictions: Array, bins: npt.NDArray[np.integer], loss: Callable[[Array, Array], Array]
    ) -> Array:
        """``ℓ̃(f, o)`` per example: unbiased for ``ℓ(f, Φ(y))``."""
        f = np.asarray(predictions, dtype=np.float64)
        observed = loss(f, self.bin_values[np.asarray(bins)])
        if self.m == 1:
            return observed
        every_bin = loss(f[:, None], self.bin_values[None, :]).sum(axis=1)
        return (observed - self.b * every_bin) / self.a
