"""A custom objective for LightGBM and XGBoost — their scikit-learn and native interfaces alike —
that boosts the corrected loss of ``labeldp_model.losses`` on a release's released values.

Give the released values as the labels (the ``released_value`` column) and the objective as the
learner's objective; it answers the gradient and Hessian of the corrected loss in the raw score:

    LGBMRegressor(objective=Objective(release, "squared"))                     # (y_true, y_pred)
    lightgbm.train({"objective": Objective(release, "poisson")}, dataset)      # (preds, dataset)
    XGBRegressor(objective=Objective(release, "squared"))                      # (y_true, y_pred)
    xgboost.train(params, dmatrix, obj=Objective(release, "bce"))              # (preds, dmatrix)

A custom objective leaves the raw score raw: a Poisson model predicts a log rate and a ``bce`` one a
logit, and none starts from the labels' mean by itself (``initial_score`` gives the right start).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labeldp_model.correction import BinsCorrection
from labeldp_model.losses import Array, corrected_loss
from labeldp_model.release import Release
from labeldp_model.targets import correction_of


class Objective:
    """``(gradient, hessian)`` of the corrected ``loss`` for a release, per row."""

    def __init__(self, release: Release | BinsCorrection, loss: str) -> None:
        self.correction = correction_of(release)
        self.loss = corrected_loss(loss)

    def __call__(self, first: Any, second: Any) -> tuple[Array, Array]:
        """Native interfaces call ``(raw scores, dataset)`` (the dataset's ``get_label()`` holds the
        released values); scikit-learn interfaces ``(released values, raw scores)``."""
        if hasattr(second, "get_label"):
            raw, released = first, second.get_label()
        else:
            released, raw = first, second
        return self.loss.gradient_hessian(
            self.correction,
            np.asarray(raw, dtype=np.float64).reshape(-1),
            np.asarray(released, dtype=np.float64).reshape(-1),
        )
