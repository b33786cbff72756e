"""Losses ``ℓ(ŷ, y)``: the one definition of every loss name labeldp knows.

``squared``, ``absolute`` and ``poisson`` are regression losses with closed-form interval costs in
``interval_costs`` (RR-on-Bins is optimized for them); ``zero_one`` is the classification loss that
RR-Top-k is optimal for. Any other regression loss is a callable ``loss(y_hat, y)`` that broadcasts
over numpy arrays and is convex in ``y_hat`` (Assumption 4 of the paper: for each y it decreases up
to ``y_hat = y`` and increases after). The services, the wire and the trainer all use these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from labeldp.mechanisms._types import FloatArray
from labeldp.mechanisms.validation import ParameterError

LossFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
LossName = Literal["squared", "absolute", "poisson", "zero_one"]
LOSS_NAMES: tuple[LossName, ...] = get_args(LossName)
REGRESSION_LOSSES: tuple[LossName, ...] = ("squared", "absolute", "poisson")
NAMED_LOSSES = REGRESSION_LOSSES  # the losses RR-on-Bins has closed-form interval costs for


def squared(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.square(np.subtract(y_hat, y))


def absolute(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.abs(np.subtract(y_hat, y))


def poisson(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Poisson log loss ``ŷ − y·log ŷ`` (with ``0·log 0 = 0``; infinite for ``ŷ = 0 < y``)."""
    y_hat, y = np.broadcast_arrays(np.asarray(y_hat, dtype=float), np.asarray(y, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = y_hat - y * np.log(y_hat)
    return np.where(y == 0, y_hat, out)


def zero_one(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
    """1 for a wrong class, 0 for the right one."""
    return np.not_equal(y_hat, y).astype(np.float64)


@dataclass(frozen=True)
class Loss:
    name: str
    fn: LossFn

    def __call__(self, y_hat: np.ndarray, y: np.ndarray) -> FloatArray:
        return np.asarray(self.fn(y_hat, y), dtype=np.float64)


_BY_NAME: dict[str, LossFn] = {
    "squared": squared,
    "absolute": absolute,
    "poisson": poisson,
    "zero_one": zero_one,
}


def resolve_loss(loss: str | LossFn | Loss) -> Loss:
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        if loss not in _BY_NAME:
            raise ParameterError(
                f"loss must be one of {', '.join(LOSS_NAMES)} or a callable, got {loss!r}", "loss"
            )
        return Loss(loss, _BY_NAME[loss])
    if callable(loss):
        return Loss(getattr(loss, "__name__", "custom"), loss)
    raise ParameterError(f"loss must be one of {', '.join(LOSS_NAMES)} or a callable, got {loss!r}", "loss")


def check_labels_for_loss(values: FloatArray, loss: Loss, name: str) -> None:
    if loss.name == "poisson" and values.size and float(values.min()) < 0:
        raise ParameterError(f"{name} must be >= 0 under Poisson loss; found {float(values.min())!r}", name)
