"""Regression losses ``ℓ(ŷ, y)`` that RR-on-Bins can be optimized for.

The three named losses have closed-form interval costs in ``interval_costs``; any other loss is a
callable ``loss(y_hat, y)`` that broadcasts over numpy arrays and is convex in ``y_hat`` (Assumption 4
of the paper: for each y it decreases up to ``y_hat = y`` and increases after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from labeldp.mechanisms._types import FloatArray

LossFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
NAMED_LOSSES = ("squared", "absolute", "poisson")


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


@dataclass(frozen=True)
class Loss:
    name: str
    fn: LossFn

    def __call__(self, y_hat: np.ndarray, y: np.ndarray) -> FloatArray:
        return np.asarray(self.fn(y_hat, y), dtype=np.float64)


_BY_NAME: dict[str, LossFn] = {"squared": squared, "absolute": absolute, "poisson": poisson}


def resolve_loss(loss: str | LossFn | Loss) -> Loss:
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        if loss not in _BY_NAME:
            raise ValueError(f"loss must be one of {', '.join(NAMED_LOSSES)} or a callable, got {loss!r}")
        return Loss(loss, _BY_NAME[loss])
    if callable(loss):
        return Loss(getattr(loss, "__name__", "custom"), loss)
    raise ValueError(f"loss must be one of {', '.join(NAMED_LOSSES)} or a callable, got {loss!r}")


def check_labels_for_loss(values: FloatArray, loss: Loss, name: str) -> None:
    if loss.name == "poisson" and values.size and float(values.min()) < 0:
        raise ValueError(f"{name} must be >= 0 under Poisson loss; found {float(values.min())!r}")
