"""What a model exported by labeldp's features party needs besides scikit-learn, skops and pandas.

A trained model is one scikit-learn ``Pipeline`` (the raw feature columns' encoding, the estimator, and
the release's debiasing as a wrapper of the estimator), saved with skops. The wrappers and the
correction they hold live here, in a package that depends on numpy and scikit-learn only, so a
notebook loads and predicts with ``pip install packages/labeldp-model`` instead of the whole service;
labeldp imports them from here (this is their only home), and its distribution includes this package.

``BinsCorrection`` and ``TRUSTED_TYPES`` need numpy only; the wrappers (``labeldp_model.estimators``)
are imported when first used, so that labeldp's mechanism library, which holds a ``BinsCorrection``,
does not import scikit-learn with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from labeldp_model.correction import BinsCorrection
from labeldp_model.trusted import TRUSTED_TYPES

if TYPE_CHECKING:
    from labeldp_model.estimators import AffineDebiasedRegressor, ReleaseClassifier, UnbiasedRegressor

__version__ = "0.2.0"

__all__ = [
    "TRUSTED_TYPES",
    "AffineDebiasedRegressor",
    "BinsCorrection",
    "ReleaseClassifier",
    "UnbiasedRegressor",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in ("AffineDebiasedRegressor", "ReleaseClassifier", "UnbiasedRegressor"):
        return getattr(importlib.import_module("labeldp_model.estimators"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
