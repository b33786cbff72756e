"""What a model exported by labeldp's features party needs besides scikit-learn, skops and pandas, and
what a trainer of one's own needs to learn from a release's exported training set.

A trained model is one scikit-learn ``Pipeline`` (the raw feature columns' encoding, the estimator, and
the release's debiasing as a wrapper of the estimator), saved with skops. The wrappers and the
correction they hold live here, in a package that depends on numpy and scikit-learn only, so a
notebook loads and predicts with ``pip install packages/labeldp-model`` instead of the whole service;
labeldp imports them from here (this is their only home), and its distribution includes this package.

Training elsewhere (``GET /v1/releases/{id}/training-set``): ``Release`` reads an export's description,
``unbiased_targets`` and ``sample_rows`` correct the targets or weights of any learner,
``loss_values``/``gradient_hessian``/``Objective`` the loss of a booster (LightGBM, XGBoost), and
``labeldp_model.pytorch.ReleaseLoss`` (``pip install labeldp-model[torch]``) a network's.

Everything here needs numpy only; the wrappers (``labeldp_model.estimators``) are imported when first
used, so that labeldp's mechanism library, which holds a ``BinsCorrection``, does not import
scikit-learn with it, and ``labeldp_model.pytorch`` is imported only by who uses it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import (
    ReleasedValuesError,
    ReleaseError,
    ReleaseFormatError,
    UnknownMechanismError,
)
from labeldp_model.kinds import KINDS
from labeldp_model.losses import LOSSES, gradient_hessian, initial_logits, initial_score, loss_values
from labeldp_model.objectives import Objective
from labeldp_model.release import METADATA_KEY, Release
from labeldp_model.targets import sample_rows, unbiased_targets
from labeldp_model.trusted import TRUSTED_TYPES

if TYPE_CHECKING:
    from labeldp_model.estimators import AffineDebiasedRegressor, ReleaseClassifier, UnbiasedRegressor

__version__ = "0.2.0"

__all__ = [
    "KINDS",
    "LOSSES",
    "METADATA_KEY",
    "TRUSTED_TYPES",
    "AffineDebiasedRegressor",
    "BinsCorrection",
    "Objective",
    "Release",
    "ReleaseClassifier",
    "ReleaseError",
    "ReleaseFormatError",
    "ReleasedValuesError",
    "UnbiasedRegressor",
    "UnknownMechanismError",
    "__version__",
    "gradient_hessian",
    "initial_logits",
    "initial_score",
    "loss_values",
    "sample_rows",
    "unbiased_targets",
]


def __getattr__(name: str) -> Any:
    if name in ("AffineDebiasedRegressor", "ReleaseClassifier", "UnbiasedRegressor"):
        return getattr(importlib.import_module("labeldp_model.estimators"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
