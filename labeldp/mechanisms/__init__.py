"""Label-DP mechanisms: pure numpy/scipy math with no web, database or network code.

The public names below are a stable API; tests outside this repository call them.
"""

from labeldp.mechanisms.baselines import (
    discrete_laplace,
    discrete_staircase,
    exponential_mechanism,
    laplace,
    rr_over_support,
    staircase,
)
from labeldp.mechanisms.classification import RRTopK, optimize_rr_top_k
from labeldp.mechanisms.losses import Loss, resolve_loss
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.prior import default_prior_epsilon, noisy_counts, private_prior
from labeldp.mechanisms.randomized_response import randomized_response
from labeldp.mechanisms.release import ClassRelease, LabelRelease, release_classes, release_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import (
    Support,
    explicit_support,
    integer_grid,
    log_grid,
    uniform_grid,
)

__all__ = [
    "ClassRelease",
    "LabelRelease",
    "Loss",
    "RROnBins",
    "RRTopK",
    "SecureRandom",
    "Support",
    "default_prior_epsilon",
    "discrete_laplace",
    "discrete_staircase",
    "explicit_support",
    "exponential_mechanism",
    "integer_grid",
    "laplace",
    "log_grid",
    "noisy_counts",
    "optimize_rr_on_bins",
    "optimize_rr_top_k",
    "private_prior",
    "randomized_response",
    "release_classes",
    "release_labels",
    "resolve_loss",
    "rr_over_support",
    "staircase",
    "uniform_grid",
]
