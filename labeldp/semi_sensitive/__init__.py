"""Training with semi-sensitive features: randomized response on the labels, then DP-SGD on all.

The paper's hybrid (docs/semi-sensitive.md): phase 1 trains a truncated model on the non-sensitive
features with randomized-response labels (ε₁, 0); phase 2 continues with DP-SGD on every feature
(ε₂, δ). ``plan_hybrid`` decides from public quantities whether phase 1 pays for its ε at all.
Needs the optional ``dpsgd`` extra (PyTorch CPU, Opacus, dp-accounting).
"""

from labeldp.semi_sensitive.accounting import (
    ACCOUNTANT,
    DpSgdSchedule,
    calibrate_noise,
    epsilon_spent,
    epsilon_spent_rdp_bound,
)
from labeldp.semi_sensitive.budget import HybridBudget, check_delta, group_privacy
from labeldp.semi_sensitive.model import TwoTower
from labeldp.semi_sensitive.plan import MAX_STEP_NOISE, HybridPlan, plan_hybrid
from labeldp.semi_sensitive.training import (
    DpSgdRun,
    Hyper,
    SecureNoiseOptimizer,
    debiased_bce,
    predict,
    train_dpsgd,
    train_full,
    train_truncated,
)

__all__ = [
    "ACCOUNTANT",
    "MAX_STEP_NOISE",
    "DpSgdRun",
    "DpSgdSchedule",
    "HybridBudget",
    "HybridPlan",
    "Hyper",
    "SecureNoiseOptimizer",
    "TwoTower",
    "calibrate_noise",
    "check_delta",
    "debiased_bce",
    "epsilon_spent",
    "epsilon_spent_rdp_bound",
    "group_privacy",
    "plan_hybrid",
    "predict",
    "train_dpsgd",
    "train_full",
    "train_truncated",
]
