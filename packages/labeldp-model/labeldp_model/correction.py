"""The part of a release's noise model that predicting needs: the bins' values and the exact keep and
move probabilities of its randomized response (docs/math.md §6).

RR over ``m`` bins moves a true bin ``j`` to output ``o`` with ``T = a·I + b·11ᵀ``, ``a = keep − move``,
``b = move``; a model fit to the noisy values estimates ``a·E[Φ(y) | x] + b·Σ_j ŷ_j``, which
``affine_correct`` undoes, and a classifier of the noisy classes estimates ``a·q_j(x) + b·(1 − π) + π/m``
(``π``: the mass of the classes RR-Top-k did not report), which ``class_probabilities`` undoes. The
service derives the numbers from the mechanism (``labeldp.mechanisms.BinsNoise``, which also holds the
training-time estimators); an exported model keeps only this object.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BinsCorrection:
    """``m`` bin values, ``P(output = true bin)`` (``keep``), ``P(output = one particular other bin)``
    (``move``) and, for RR-Top-k, the noisy prior's mass of unreported classes (``outside_mass``, π)."""

    bin_values: Array
    keep: float
    move: float
    outside_mass: float = 0.0

    @property
    def m(self) -> int:
        return int(np.asarray(self.bin_values).size)

    @property
    def a(self) -> float:
        return self.keep - self.move

    @property
    def b(self) -> float:
        return self.move

    @property
    def span(self) -> tuple[float, float]:
        """The lowest and the highest bin value: where ``E[Φ(y) | x]``, a mean of bin values, lies."""
        values = np.asarray(self.bin_values, dtype=np.float64)
        return float(values.min()), float(values.max())

    @property
    def invertible(self) -> bool:
        """Whether the outputs carry information about the labels (one bin needs none)."""
        return self.m == 1 or self.a > 0

    def _check_invertible(self) -> None:
        if not self.invertible:
            raise ValueError("the release carries no information about the labels (ε too small)")

    def affine_correct(self, predictions: npt.ArrayLike) -> Array:
        """Map a model of ``E[ŷ | x]`` to an estimate of ``E[Φ(y) | x]``, clipped into the bins' values:
        the inverse stretches by ``1/a``, so a prediction near the lowest value lands below it (a
        negative price), while ``E[Φ(y) | x]``, a mean of bin values, lies between the lowest and the
        highest — clipping only brings an estimate nearer it."""
        f = np.asarray(predictions, dtype=np.float64)
        if self.m == 1:
            return f
        self._check_invertible()
        corrected = (f - self.b * float(np.sum(self.bin_values))) / self.a
        return np.clip(corrected, *self.span)

    def class_probabilities(self, noisy: npt.ArrayLike) -> Array:
        """``P(reported class j | x)`` from a model of ``P(output bin j | x)`` (rows), clipped at 0 and
        scaled to the reported mass ``1 − π``."""
        p = np.asarray(noisy, dtype=np.float64)
        if self.m == 1:
            return np.full_like(p, 1.0 - self.outside_mass)
        self._check_invertible()
        pi = self.outside_mass
        q = np.clip((p - self.b * (1 - pi) - pi / self.m) / self.a, 0.0, None)
        return q / np.maximum(q.sum(axis=1, keepdims=True), 1e-12) * (1 - pi)
