"""Priors for feature-aware releases: the features party's predictions turned into at most G groups of
examples, each with a prior on the dataset's public support (docs/concepts/feature-aware.md).

Pure numpy: what a model predicts for each example goes in, a group per example and a prior per group
come out, by a public rule that reads no label of the examples being priced. The labels party then
optimizes one mechanism per group (``labeldp.mechanisms``); whatever the priors say, each is ε-DP.
"""

from labeldp.mechanisms import MAX_GROUP_CELLS, MAX_GROUPS, NO_GROUP
from labeldp.priors.grouping import (
    TWO_POINT_FLOOR,
    Priced,
    check_group_priors,
    price_classes,
    price_values,
)

__all__ = [
    "MAX_GROUPS",
    "MAX_GROUP_CELLS",
    "NO_GROUP",
    "TWO_POINT_FLOOR",
    "Priced",
    "check_group_priors",
    "price_classes",
    "price_values",
]
