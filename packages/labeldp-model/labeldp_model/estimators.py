"""The release's debiasing as the last step of a scikit-learn model, so an exported model is one object.

A model trained on noisy labels learns the noisy conditional mean (or the noisy class probabilities);
the release's correction (``BinsCorrection``) maps that back to an estimate for the true labels.
Keeping the correction in a wrapper around the fitted estimator, inside the ``Pipeline`` that also
encodes the raw feature columns, means ``pipeline.predict(rows)`` in a notebook gives what the service
gives. A model fit to unbiased targets (an unbiased release's, or debiased row by row) needs no
correction, only its predictions clipped into where the mean lies (``UnbiasedRegressor``). The
wrappers take an already fitted estimator (the service grows it in steps to report progress); ``fit``
is there for scikit-learn's API and refits a clone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils.validation import check_is_fitted

from labeldp_model.correction import BinsCorrection


class AffineDebiasedRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """``predict(X)``: the estimator's prediction of the noisy label mapped through the release's
    affine correction (``BinsCorrection.affine_correct``), an estimate of the binned true label's mean."""

    def __init__(self, estimator: Any, correction: BinsCorrection) -> None:
        self.estimator = estimator
        self.correction = correction

    def fit(self, X: Any, y: Any) -> AffineDebiasedRegressor:
        self.estimator = clone(self.estimator).fit(X, y)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        check_is_fitted(self.estimator)
        return True

    def predict(self, X: Any) -> npt.NDArray[np.float64]:
        return self.correction.affine_correct(self.estimator.predict(X))


class UnbiasedRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """``predict(X)``: the estimator's prediction clipped into ``[lower, upper]``, where the mean it
    estimates must lie. Fit by least squares to unbiased targets — an unbiased release's outputs, an
    RR release's ``debias="unbiased"`` targets, the row-by-row targets of a model of several releases
    or of a feature-aware one — which have the (binned) label as their mean but reach beyond its range,
    the estimator already estimates that mean, so nothing is undone; clipping only brings an estimate
    nearer the truth, which lies in the range (the labels' public range, or the bins' values)."""

    def __init__(self, estimator: Any, lower: float, upper: float) -> None:
        self.estimator = estimator
        self.lower = lower
        self.upper = upper

    def fit(self, X: Any, y: Any) -> UnbiasedRegressor:
        self.estimator = clone(self.estimator).fit(X, y)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        check_is_fitted(self.estimator)
        return True

    def predict(self, X: Any) -> npt.NDArray[np.float64]:
        f = np.asarray(self.estimator.predict(X), dtype=np.float64)
        return np.clip(f, self.lower, self.upper)


class ReleaseClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """A classifier of a release's reported classes: ``classes_`` are their values (not bin codes),
    ``predict_proba`` has one column per reported class (every class, even one the training split
    never saw) and, with ``debias``, undoes the randomization (``BinsCorrection.class_probabilities``).
    The columns sum to ``1 − π``; ``unreported_probability`` (π) is the mass of the classes RR-Top-k
    did not report."""

    def __init__(self, estimator: Any, correction: BinsCorrection, debias: bool = True) -> None:
        self.estimator = estimator
        self.correction = correction
        self.debias = debias

    def fit(self, X: Any, y: Any) -> ReleaseClassifier:
        """``y`` holds bin codes (0 … m−1), as the release delivers them."""
        self.estimator = clone(self.estimator).fit(X, y)
        return self

    def __sklearn_is_fitted__(self) -> bool:
        check_is_fitted(self.estimator)
        return True

    @property
    def classes_(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.correction.bin_values, dtype=np.float64)

    @property
    def unreported_probability(self) -> float:
        return float(self.correction.outside_mass)

    def predict_proba(self, X: Any) -> npt.NDArray[np.float64]:
        proba = np.asarray(self.estimator.predict_proba(X), dtype=np.float64)
        full = np.zeros((proba.shape[0], self.correction.m))
        full[:, np.asarray(self.estimator.classes_, dtype=np.int64)] = proba
        if self.debias and self.correction.m > 1:
            return self.correction.class_probabilities(full)
        return full

    def predict(self, X: Any) -> npt.NDArray[np.float64]:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
