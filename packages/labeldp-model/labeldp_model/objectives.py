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

``cross_entropy`` boosts ``m`` scores per row (``num_class = m``; both libraries hand them over as an
``n × m`` matrix): column ``j`` is the ``j``-th class in ascending order, and the labels are the
released values. The native interfaces take any classes; LightGBM's and XGBoost's classifiers replace
the labels by their rank among the classes seen, which is the class itself only when the classes are
``0…m−1`` (a release that reports them all) — otherwise a rank is not a released value and the
objective says so. Start from ``initial_logits`` (``init_score``/``base_margin`` of ``n × m``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleasedValuesError
from labeldp_model.losses import Array, corrected_loss
from labeldp_model.release import Release
from labeldp_model.targets import checked_values, correction_of


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
        if self.loss.columns and not hasattr(second, "get_label"):
            try:
                checked_values(self.correction, np.asarray(released, dtype=np.float64))
            except ReleasedValuesError as exc:
                raise ReleasedValuesError(
                    f"{exc}. A classifier (LGBMClassifier, XGBClassifier) hands the objective each class's "
                    "rank, which is the class only for classes 0…m−1: train with lightgbm.train or "
                    "xgboost.train on the released values, num_class = m"
                ) from exc
        return self.loss.gradient_hessian(
            self.correction, self.loss.shaped(raw), np.asarray(released, dtype=np.float64).reshape(-1)
        )
