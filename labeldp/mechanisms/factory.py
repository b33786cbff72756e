"""Which mechanism a release uses: one rule, used by the labels party's releases and previews, the
benchmarks and the tests.

The loss decides the family: the 0-1 loss (classes) is served by RR-Top-k, every regression loss by
RR-on-Bins or — for the squared and Poisson losses, whose best prediction is the mean — the unbiased
randomizer (``default_mechanism`` chooses between them by a public rule unless a request names one).
The label type decides which losses make sense: real values and counts are regressed, binary labels
can be regressed (a probability under squared loss) or classified, categorical labels are only
classified.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from labeldp.mechanisms._types import ArrayLike
from labeldp.mechanisms.classification import RRTopK, optimize_rr_top_k
from labeldp.mechanisms.losses import REGRESSION_LOSSES, LossName, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.objective import LEARNING_AWARE_FROM_EPSILON
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import Support, explicit_support
from labeldp.mechanisms.unbiased import UNBIASED_LOSSES, UnbiasedRandomizer, check_unbiased_loss
from labeldp.mechanisms.unbiased_program import optimize_unbiased
from labeldp.mechanisms.unbiased_weights import MAX_UNBIASED_EPSILON, check_unbiased_epsilon
from labeldp.mechanisms.validation import ParameterError

MECHANISM_KINDS: tuple[MechanismKind, ...] = get_args(MechanismKind)
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


def mechanism_kind(loss: str, mechanism: MechanismKind | None = None) -> MechanismKind:
    """The kind a release of ``loss`` uses: the one it names (checked against the loss), else RR-Top-k
    for the 0-1 loss and RR-on-Bins for the others."""
    if mechanism is None:
        return "rr_top_k" if loss == "zero_one" else "rr_on_bins"
    return check_mechanism(loss, mechanism)


# The measured default (docs/concepts/mechanism.md; BENCHMARKS.md, "The unbiased randomizer against
# RR-on-Bins"): the unbiased randomizer for the mean-seeking losses from LEARNING_AWARE_FROM_EPSILON up,
# on supports small enough for its program to be quick; RR-on-Bins otherwise (below that ε: under the
# label objective, ``objective.default_objective``).
UNBIASED_DEFAULT_MAX_SUPPORT = 201  # the prices grid: 3-7 s per program (BENCHMARKS.md); 401: over 60 s
# On two points RR with the trainer's affine correction already is the least-variance unbiased
# randomizer (q(1 − q)/(2q − 1)², tests/mechanisms/test_unbiased.py), and binary releases keep the
# keep/move form the semi-sensitive hybrid's label phase and the audits read.
UNBIASED_DEFAULT_MIN_SUPPORT = 3


def default_mechanism(loss: str, epsilon: float, examples: int, support_size: int) -> MechanismKind:
    """The kind a release uses unless its request names one: a public rule of the loss, the ε its
    labels are randomized with, the number of released examples and the support's size (nothing read
    from the labels). docs/concepts/mechanism.md states the rule and the measurement behind it.

    Below the threshold RR-on-Bins's few bins beat the unbiased randomizer's variance (a model cannot
    average it away); a large support makes the unbiased program slow (its time grows about as k^2.5)."""
    del examples  # measured on 43k-163k examples; the rule does not vary with n
    if (
        loss in UNBIASED_LOSSES
        and UNBIASED_DEFAULT_MIN_SUPPORT <= support_size <= UNBIASED_DEFAULT_MAX_SUPPORT
        and LEARNING_AWARE_FROM_EPSILON <= epsilon <= MAX_UNBIASED_EPSILON
    ):
        return "unbiased"
    return mechanism_kind(loss)


def check_mechanism(loss: str, mechanism: str) -> MechanismKind:
    """``mechanism`` if it can serve ``loss``, else a ``ParameterError`` saying which can."""
    if mechanism not in MECHANISM_KINDS:
        raise ParameterError(
            f"mechanism must be one of {', '.join(MECHANISM_KINDS)}, got {mechanism!r}", "mechanism"
        )
    if loss == "zero_one" and mechanism != "rr_top_k":
        raise ParameterError("the zero_one loss (classes) is served by rr_top_k", "mechanism")
    if loss != "zero_one" and mechanism == "rr_top_k":
        raise ParameterError("rr_top_k serves the zero_one loss (classes) only", "mechanism")
    if mechanism == "unbiased":
        check_unbiased_loss(loss)
    return mechanism


def check_mechanism_epsilon(mechanism: MechanismKind, epsilon: float) -> None:
    """The ε the randomization may have for this kind (the unbiased randomizer's program has a
    numerically safe range; RR-based kinds take any valid ε)."""
    if mechanism == "unbiased":
        check_unbiased_epsilon(epsilon, "epsilon_randomize")


def is_classes(support: Support) -> bool:
    """Whether the support is the classes ``0..C-1`` (what the 0-1 loss needs)."""
    return bool(np.array_equal(support.values, np.arange(support.k, dtype=np.float64)))


def optimal_mechanism(
    support: Support,
    prior: ArrayLike,
    epsilon: float,
    loss: str,
    *,
    optimize_at: float | None = None,
    kind: MechanismKind | None = None,
) -> Mechanism:
    """The loss-optimal ε-DP mechanism of the right kind for a prior on a public support; with
    ``optimize_at`` (the model objective's ε, ``labeldp.mechanisms.objective``) the one optimal at
    that ε, randomizing at ``epsilon``. ``kind="unbiased"``: the least-variance unbiased randomizer
    (``optimize_at`` does not apply: it has no bins to refine)."""
    chosen = mechanism_kind(loss, kind)
    if chosen == "unbiased":
        return optimize_unbiased(support, prior, epsilon, loss)
    if chosen == "rr_top_k":
        if not is_classes(support):
            raise ParameterError("the zero_one loss needs the classes 0..C-1 as its support", "support")
        return optimize_rr_top_k(prior, epsilon, optimize_at=optimize_at)
    return optimize_rr_on_bins(support, prior, epsilon, loss, optimize_at=optimize_at)


def sampler_of(published: PublishedMechanism) -> Mechanism:
    """The sampler a published mechanism describes (to randomize with it, or to compare with one):
    the inverse of ``Mechanism.describe`` up to the prior and the ε split, which only the description
    carries."""
    if published.kind == "unbiased":
        return UnbiasedRandomizer(
            explicit_support(published.support), published.unbiased_weights(), resolve_loss(published.loss)
        )
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
