"""Losses on the released values, corrected for the release's randomized response: each one's per-row
value, and its gradient and Hessian in the raw score a booster or a network outputs.

``T = a·I + b·11ᵀ`` is the transition between bins (``BinsCorrection``), ``ŷ`` a row's released value,
``ỹ = (ŷ − b·Σ_j v_j)/a`` its unbiased target (``targets``). Squared error, Poisson and cross-entropy
are affine in the label apart from a term without the prediction, so each corrected loss is the
ordinary loss on ``ỹ`` plus that term's own correction, and it is **unbiased**: its expectation given
the label equals the loss on the label's bin value ``Φ(y)`` (``ℓ̃(f, ŷ) = [ℓ(f, ŷ) − b·Σ_j ℓ(f, v_j)]/a``).

``bce`` is the **forward** correction for two classes instead (the label-noise literature's): the
network's probability ``p`` of class 1 is carried through the release, ``q = b + a·p`` (the
probability that the *released* class is 1), and the loss is the cross-entropy of ``q`` against the
released class. Its expectation is not the loss on the true class, but it is smallest exactly where
``p`` is the true class probability, and it stays bounded below; ``bce_unbiased`` is the unbiased
(backward) estimate, which can go to −∞ on a single row and needs a model that cannot fit rows one by
one.

``cross_entropy`` is the same forward correction for ``m ≥ 2`` classes (RR-Top-k): the softmax ``p``
of the ``m`` logits becomes ``q = a·p + b`` (each ``q_j ≥ b``; they sum to 1), and the loss is
``−log q`` of the released class. When every class can be released (RR-Top-k reported them all) ``p``
is learned as the true class probabilities; when some cannot (``outside_mass`` > 0), the probability
of a label outside the reported classes is learned spread evenly over the ``m`` of them.

Raw scores: ``squared`` a prediction, ``poisson`` a log rate, ``bce`` and ``bce_unbiased`` a logit,
``cross_entropy`` an ``n × m`` matrix of logits whose column ``j`` is the ``j``-th class in ascending
order. Gradients and Hessians are those of half the squared error (as LightGBM's and XGBoost's own),
of the Poisson and cross-entropy losses themselves, and for ``bce`` and ``cross_entropy`` the expected
(Fisher) Hessian, which is positive where the exact one need not be (for ``cross_entropy`` its
diagonal, as boosters take it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp_model.correction import BinsCorrection
from labeldp_model.errors import ReleasedValuesError
from labeldp_model.release import Release
from labeldp_model.targets import checked_values, correction_of, unbiased_targets

Array = npt.NDArray[np.float64]
_CLIP = 1e-6  # initial probabilities and rates stay this far inside their range


def _softplus(z: Array) -> Array:
    return np.logaddexp(0.0, z)


def _sigmoid(z: Array) -> Array:
    return np.exp(-_softplus(-z))


def _logit(p: float) -> float:
    p = min(max(p, _CLIP), 1 - _CLIP)
    return float(np.log(p / (1 - p)))


def binary(correction: BinsCorrection) -> None:
    """The forward correction needs a release of the two classes 0 and 1."""
    if sorted(np.asarray(correction.bin_values).tolist()) != [0.0, 1.0]:
        raise ReleasedValuesError(
            "bce (forward correction) needs a release of the two classes 0 and 1; this one's bin values "
            f"are {np.asarray(correction.bin_values).tolist()}"
        )
    correction._check_invertible()


def _in_unit_interval(correction: BinsCorrection) -> None:
    values = np.asarray(correction.bin_values)
    if values.min() < 0 or values.max() > 1:
        raise ReleasedValuesError("bce_unbiased needs bin values in [0, 1] (probabilities of class 1)")


# -- squared error ---------------------------------------------------------------------------------
def _squared_value(c: BinsCorrection, f: Array, y: Array) -> Array:
    t = unbiased_targets(c, y)
    if c.m == 1:
        return (f - t) ** 2
    offset = (y**2 - c.b * float(np.sum(np.square(c.bin_values)))) / c.a - t**2
    return (f - t) ** 2 + offset


def _squared_gradient(c: BinsCorrection, f: Array, y: Array) -> tuple[Array, Array]:
    return f - unbiased_targets(c, y), np.ones_like(f)


def _squared_start(c: BinsCorrection, y: Array) -> float:
    return float(np.mean(unbiased_targets(c, y)))


# -- Poisson, log link -----------------------------------------------------------------------------
def _poisson_value(c: BinsCorrection, s: Array, y: Array) -> Array:
    return np.exp(s) - unbiased_targets(c, y) * s


def _poisson_gradient(c: BinsCorrection, s: Array, y: Array) -> tuple[Array, Array]:
    rate = np.exp(s)
    return rate - unbiased_targets(c, y), rate


def _poisson_start(c: BinsCorrection, y: Array) -> float:
    mean = float(np.mean(unbiased_targets(c, y)))
    if mean <= 0:
        raise ReleasedValuesError(f"the corrected mean of the released values is {mean!r}: no Poisson rate")
    return float(np.log(mean))


# -- two classes: the forward correction -----------------------------------------------------------
def _log_q(c: BinsCorrection, z: Array) -> tuple[Array, Array]:
    """``log q`` and ``log(1 − q)`` for ``q = b + a·σ(z)``: with two bins ``1 − q = b + a·σ(−z)``."""
    log_a, log_b = np.log(c.a), (np.log(c.b) if c.b > 0 else -np.inf)
    return (
        np.logaddexp(log_b, log_a - _softplus(-z)),
        np.logaddexp(log_b, log_a - _softplus(z)),
    )


def _forward_value(c: BinsCorrection, z: Array, y: Array) -> Array:
    binary(c)
    o = checked_values(c, y)
    log_q, log_not_q = _log_q(c, z)
    return -(o * log_q + (1 - o) * log_not_q)


def _forward_gradient(c: BinsCorrection, z: Array, y: Array) -> tuple[Array, Array]:
    binary(c)
    o = checked_values(c, y)
    log_q, log_not_q = _log_q(c, z)
    log_slope = np.log(c.a) - _softplus(-z) - _softplus(z)  # log dq/dz = log(a·σ(z)·σ(−z))
    q = np.exp(log_q)
    # dL/dz = (q − o)/(q(1 − q)) · dq/dz;  Fisher: (dq/dz)²/(q(1 − q))
    gradient = (q - o) * np.exp(log_slope - log_q - log_not_q)
    return gradient, np.exp(2 * log_slope - log_q - log_not_q)


def _forward_start(c: BinsCorrection, y: Array) -> float:
    binary(c)
    return _logit((float(np.mean(checked_values(c, y))) - c.b) / c.a)


# -- two classes: the unbiased (backward) estimate -------------------------------------------------
def _bce_unbiased_value(c: BinsCorrection, z: Array, y: Array) -> Array:
    _in_unit_interval(c)
    return _softplus(z) - unbiased_targets(c, y) * z


def _bce_unbiased_gradient(c: BinsCorrection, z: Array, y: Array) -> tuple[Array, Array]:
    _in_unit_interval(c)
    p = _sigmoid(z)
    return p - unbiased_targets(c, y), p * (1 - p)


def _bce_unbiased_start(c: BinsCorrection, y: Array) -> float:
    _in_unit_interval(c)
    return _logit(float(np.mean(unbiased_targets(c, y))))


# -- many classes: the forward correction ----------------------------------------------------------
def classes(correction: BinsCorrection) -> Array:
    """The release's classes in ascending order: column ``j`` of a ``cross_entropy`` raw score is the
    ``j``-th (the order LightGBM's and XGBoost's classifiers and a bin-sorted label encoder use)."""
    values = np.unique(np.asarray(correction.bin_values, dtype=np.float64))
    if values.size < 2 or values.size != correction.m:
        raise ReleasedValuesError(
            f"cross_entropy needs a release of at least two distinct classes; this one's bin values are "
            f"{np.asarray(correction.bin_values).tolist()}"
        )
    correction._check_invertible()
    return values


def _columns(c: BinsCorrection, z: Array, y: Array) -> tuple[Array, npt.NDArray[np.intp]]:
    """The logits as an ``n × m`` matrix (one column per class) and each row's released column."""
    values = classes(c)
    if z.ndim != 2 or z.shape[1] != values.size or z.shape[0] != y.size:
        raise ReleasedValuesError(
            f"cross_entropy takes {y.size} rows of {values.size} logits (one per class, in ascending "
            f"order of the class), got an array of shape {z.shape}"
        )
    return z, np.searchsorted(values, checked_values(c, y))


def _log_softmax(z: Array) -> Array:
    return z - np.logaddexp.reduce(z, axis=1, keepdims=True)


def _softmax_forward_value(c: BinsCorrection, z: Array, y: Array) -> Array:
    z, o = _columns(c, z, y)
    log_p = _log_softmax(z)[np.arange(o.size), o]
    return -np.logaddexp(np.log(c.a) + log_p, np.log(c.b) if c.b > 0 else -np.inf)


def _softmax_forward_gradient(c: BinsCorrection, z: Array, y: Array) -> tuple[Array, Array]:
    z, o = _columns(c, z, y)
    p = np.exp(_log_softmax(z))
    q = c.a * p + c.b  # P(released class j) under the model
    rows = np.arange(o.size)
    # dL/dz_k = −(a·p_o/q_o)·(1[k = o] − p_k);  Fisher (diagonal): Σ_j a²·p_j²·(1[k = j] − p_k)²/q_j
    gradient = -(c.a * p[rows, o] / q[rows, o])[:, None] * ((np.arange(z.shape[1]) == o[:, None]) - p)
    weight = (c.a * p) ** 2 / q
    hessian = weight.sum(axis=1, keepdims=True) * p**2 + weight * (1 - 2 * p)
    return gradient, hessian


def _softmax_forward_start(c: BinsCorrection, y: Array) -> float:
    raise ReleasedValuesError("cross_entropy starts from one score per class: use initial_logits")


@dataclass(frozen=True)
class CorrectedLoss:
    """One corrected loss: its per-row value, gradient and Hessian in the raw score, and the constant
    raw score that minimizes its mean (a booster's initial score, a network's last bias)."""

    name: str
    raw: str  # what the raw score is
    value: Callable[[BinsCorrection, Array, Array], Array]
    gradient_hessian: Callable[[BinsCorrection, Array, Array], tuple[Array, Array]]
    start: Callable[[BinsCorrection, Array], float]
    columns: bool = False  # the raw score is a matrix, one column per class

    def shaped(self, scores: npt.ArrayLike) -> Array:
        """The raw scores as this loss takes them: a vector, or rows of one score per class."""
        raw = np.asarray(scores, dtype=np.float64)
        return raw if self.columns else raw.reshape(-1)


LOSSES: dict[str, CorrectedLoss] = {
    "squared": CorrectedLoss("squared", "prediction", _squared_value, _squared_gradient, _squared_start),
    "poisson": CorrectedLoss("poisson", "log rate", _poisson_value, _poisson_gradient, _poisson_start),
    "bce": CorrectedLoss("bce", "logit", _forward_value, _forward_gradient, _forward_start),
    "bce_unbiased": CorrectedLoss(
        "bce_unbiased", "logit", _bce_unbiased_value, _bce_unbiased_gradient, _bce_unbiased_start
    ),
    "cross_entropy": CorrectedLoss(
        "cross_entropy",
        "logits, one column per class in ascending order",
        _softmax_forward_value,
        _softmax_forward_gradient,
        _softmax_forward_start,
        columns=True,
    ),
}


def corrected_loss(loss: str) -> CorrectedLoss:
    if loss not in LOSSES:
        raise ReleasedValuesError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    return LOSSES[loss]


def _raw(scores: npt.ArrayLike) -> Array:
    return np.asarray(scores, dtype=np.float64).reshape(-1)


def loss_values(
    release: Release | BinsCorrection, loss: str, raw: npt.ArrayLike, released_values: npt.ArrayLike
) -> Array:
    """The corrected loss of each row (see the module docstring for what the raw score is)."""
    spec = corrected_loss(loss)
    return spec.value(correction_of(release), spec.shaped(raw), _raw(released_values))


def gradient_hessian(
    release: Release | BinsCorrection, loss: str, raw: npt.ArrayLike, released_values: npt.ArrayLike
) -> tuple[Array, Array]:
    """The corrected loss's gradient and Hessian in the raw score, per row (and per class for
    ``cross_entropy``: the Hessian's diagonal)."""
    spec = corrected_loss(loss)
    return spec.gradient_hessian(correction_of(release), spec.shaped(raw), _raw(released_values))


def initial_score(release: Release | BinsCorrection, loss: str, released_values: npt.ArrayLike) -> float:
    """The constant raw score that minimizes the mean corrected loss over these rows (a booster's
    ``init_score``/``base_margin``; custom objectives start from 0 otherwise)."""
    return corrected_loss(loss).start(correction_of(release), _raw(released_values))


def initial_logits(release: Release | BinsCorrection, released_values: npt.ArrayLike) -> Array:
    """``cross_entropy``'s constant start, one logit per class (ascending): the log of each class's
    corrected share ``(share released − b)/a`` (clipped at a small positive share, then normalized),
    which minimizes the mean corrected loss whenever every corrected share is positive."""
    c = correction_of(release)
    values = classes(c)
    released = np.searchsorted(values, checked_values(c, _raw(released_values)))
    if released.size == 0:
        raise ReleasedValuesError("no released values to start from")
    shares = np.bincount(released, minlength=values.size) / released.size
    p = np.clip((shares - c.b) / c.a, _CLIP, None)
    log_p = np.log(p / p.sum())
    return log_p - log_p.mean()
