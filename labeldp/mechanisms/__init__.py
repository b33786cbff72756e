"""Label-DP mechanisms: pure numpy/scipy math with no web, database or network code.

The public names below are a stable API (the services, the notebooks and the tests use them):
``Mechanism`` is the one interface (RR-on-Bins and RR-Top-k implement it), ``optimal_mechanism`` the
one factory, ``LabelRelease`` the one result of a release and ``PublishedMechanism`` the one
description of a mechanism that both parties read.
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
from labeldp.mechanisms.debias import BinsNoise, GroupedNoise, target_error
from labeldp.mechanisms.epsilon import UserBudget, float_at_most, split_epsilon
from labeldp.mechanisms.factory import (
    LOSSES_BY_LABEL_TYPE,
    LabelType,
    check_loss,
    mechanism_kind,
    optimal_mechanism,
    sampler_of,
)
from labeldp.mechanisms.grouped import (
    MAX_GROUP_CELLS,
    MAX_GROUPS,
    NO_GROUP,
    GroupedRelease,
    PriorsVerdict,
    priors_verdict,
    release_grouped_labels,
    release_grouped_user_labels,
)
from labeldp.mechanisms.losses import LOSS_NAMES, Loss, LossName, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.objective import (
    DEFAULT_MODEL_CAPACITY,
    DEFAULT_OBJECTIVES,
    OBJECTIVES,
    Objective,
    ObjectiveName,
    default_objective,
)
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.prior import (
    default_prior_epsilon,
    noisy_counts,
    noisy_histogram,
    normalize_counts,
    prior_split,
    private_prior,
)
from labeldp.mechanisms.published import PrivacyUnit, PublishedMechanism
from labeldp.mechanisms.randomized_response import randomized_response
from labeldp.mechanisms.release import LabelRelease, release_classes, release_labels, release_user_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import (
    Support,
    explicit_support,
    integer_grid,
    log_grid,
    uniform_grid,
)
from labeldp.mechanisms.user_level import (
    BoundRule,
    UserSplit,
    choose_contribution_bound,
    contribution_ranks,
    examples_per_user,
    plan_user_split,
    private_contribution_bound,
)
from labeldp.mechanisms.validation import ParameterError

__all__ = [
    "DEFAULT_MODEL_CAPACITY",
    "DEFAULT_OBJECTIVES",
    "LOSSES_BY_LABEL_TYPE",
    "LOSS_NAMES",
    "MAX_GROUPS",
    "MAX_GROUP_CELLS",
    "NO_GROUP",
    "OBJECTIVES",
    "BinsNoise",
    "BoundRule",
    "GroupedNoise",
    "GroupedRelease",
    "LabelRelease",
    "LabelType",
    "Loss",
    "LossName",
    "Mechanism",
    "MechanismKind",
    "Objective",
    "ObjectiveName",
    "ParameterError",
    "PriorsVerdict",
    "PrivacyUnit",
    "PublishedMechanism",
    "RROnBins",
    "RRTopK",
    "SecureRandom",
    "Support",
    "UserBudget",
    "UserSplit",
    "check_loss",
    "choose_contribution_bound",
    "contribution_ranks",
    "default_objective",
    "default_prior_epsilon",
    "discrete_laplace",
    "discrete_staircase",
    "examples_per_user",
    "explicit_support",
    "exponential_mechanism",
    "float_at_most",
    "integer_grid",
    "laplace",
    "log_grid",
    "mechanism_kind",
    "noisy_counts",
    "noisy_histogram",
    "normalize_counts",
    "optimal_mechanism",
    "optimize_rr_on_bins",
    "optimize_rr_top_k",
    "plan_user_split",
    "prior_split",
    "priors_verdict",
    "private_contribution_bound",
    "private_prior",
    "randomized_response",
    "release_classes",
    "release_grouped_labels",
    "release_grouped_user_labels",
    "release_labels",
    "release_user_labels",
    "resolve_loss",
    "rr_over_support",
    "sampler_of",
    "split_epsilon",
    "staircase",
    "target_error",
    "uniform_grid",
]
