"""Which mechanism a release uses: one rule, used by the labels party's releases and previews, the
benchmarks and the tests.

The loss decides the kind: the 0-1 loss (classes) is served by RR-Top-k, every regression loss by
RR-on-Bins. The label type decides which losses make sense: real values and counts are regressed,
binary labels can be regressed (a probability under squared loss) or classified, categorical labels
are only classified.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from labeldp.mechanisms._types import ArrayLike
from labeldp.mechanisms.classification import RRTopK, optimize_rr_top_k
from labeldp.mechanisms.losses import REGRESSION_LOSSES, LossName, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import Support, explicit_support
from labeldp.mechanisms.validation import ParameterError

LabelType = Literal["real", "count", "binary", "categorical"]
LABEL_TYPES: tuple[LabelType, ...] = get_args(LabelType)
LOSSES_BY_LABEL_TYPE: dict[LabelType, tuple[LossName, ...]] = {
    "real": REGRESSION_LOSSES,
    "count": REGRESSION_LOSSES,
    "binary": ("squared", "zero_one"),
    "categorical": ("zero_one",),
}


def check_loss(label_type: LabelType, loss: str) -> LossName:
    """``loss`` if it suits ``label_type``, else a ``ParameterError`` naming the ones that do."""
    allowed = LOSSES_BY_LABEL_TYPE.get(label_type)
    if allowed is None:
        raise ParameterError(
            f"label_type must be one of {', '.join(LABEL_TYPES)}, got {label_type!r}", "label_type"
        )
    if loss not in allowed:
        raise ParameterError(f"{label_type} labels take loss {', '.join(allowed)}; got {loss!r}", "loss")
    return loss


def mechanism_kind(loss: str) -> MechanismKind:
    return "rr_top_k" if loss == "zero_one" else "rr_on_bins"


def is_classes(support: Support) -> bool:
    """Whether the support is the classes ``0..C-1`` (what the 0-1 loss needs)."""
    return bool(np.array_equal(support.values, np.arange(support.k, dtype=np.float64)))


def optimal_mechanism(
    support: Support, prior: ArrayLike, epsilon: float, loss: str, *, optimize_at: float | None = None
) -> Mechanism:
    """The loss-optimal ε-DP mechanism of the right kind for a prior on a public support; with
    ``optimize_at`` (the model objective's ε, ``labeldp.mechanisms.objective``) the one optimal at
    that ε, randomizing at ``epsilon``."""
    if mechanism_kind(loss) == "rr_top_k":
        if not is_classes(support):
            raise ParameterError("the zero_one loss needs the classes 0..C-1 as its support", "support")
        return optimize_rr_top_k(prior, epsilon, optimize_at=optimize_at)
    return optimize_rr_on_bins(support, prior, epsilon, loss, optimize_at=optimize_at)


def sampler_of(published: PublishedMechanism) -> Mechanism:
    """The sampler a published mechanism describes (to randomize with it, or to compare with one):
    the inverse of ``Mechanism.describe`` up to the prior and the ε split, which only the description
    carries."""
    if published.kind == "rr_top_k":
        bins = np.asarray(published.support_bins, dtype=np.int64)
        top = np.empty(published.m, dtype=np.int64)
        top[bins[bins >= 0]] = np.flatnonzero(bins >= 0)  # bin j reports class top[j]
        return RRTopK(published.epsilon_randomize, len(published.support), top, published.objective_epsilon)
    return RROnBins(
        published.epsilon_randomize,
        explicit_support(published.support),
        np.asarray(published.support_bins, dtype=np.int64),
        np.asarray(published.bin_values),
        resolve_loss(published.loss),
        published.objective_epsilon,
    )
