"""A feature-aware release's groups: which stored priors' group each listed example takes, checked
before anything is charged (docs/concepts/feature-aware.md).

The priors came from the features party (``labels_party/priors``): functions of its features and of
earlier DP outputs, never of a label here. An example's group is looked up by its ledger key, so
nothing about its label decides it; examples the priors do not price (or priced without a group)
fall back to the release's own private prior, as every release does today.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp.common.errors import DomainError
from labeldp.mechanisms import Support
from labeldp.mechanisms.grouped import NO_GROUP
from labels_party.priors import StoredPriors


@dataclass(frozen=True)
class GroupPlan:
    """Per listed example its group (``NO_GROUP``: the release's own mechanism), and the G × k priors."""

    priors_id: str
    groups: npt.NDArray[np.int64]
    priors: npt.NDArray[np.float64]

    @property
    def fallback(self) -> int:
        """How many examples take the release's own private prior (its ε₁ split is over these)."""
        return int((self.groups == NO_GROUP).sum())

    @property
    def count(self) -> int:
        return int(self.priors.shape[0])


def mismatch(detail: str) -> DomainError:
    return DomainError("priors-mismatch", detail, parameter="prior")


def group_plan(
    stored: StoredPriors, dataset_id: str, support: Support, keys: npt.NDArray[np.int64]
) -> GroupPlan:
    """The group of every example (ledger ``keys``, in release order) — or 422 ``priors-mismatch``
    when the priors belong to another dataset, are on another support than the release's, or name an
    example the release does not list (a priors object prices what a release will list: a stray
    example means the two were not made for each other)."""
    if stored.dataset_id != dataset_id:
        raise mismatch(f"priors {stored.id} were made for another dataset")
    if stored.priors.ndim != 2 or stored.priors.shape[1] != support.k:
        raise mismatch(
            f"priors {stored.id} are on {stored.priors.shape[-1]} support points, the release on {support.k}"
        )
    if not np.array_equal(np.asarray(stored.support, dtype=np.float64), support.values):
        raise mismatch(f"priors {stored.id} are on another support than this release's loss uses")
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.searchsorted(sorted_keys, stored.keys)
    at_clipped = np.minimum(at, max(keys.size - 1, 0))
    listed = (at < keys.size) & (sorted_keys[at_clipped] == stored.keys) if keys.size else np.zeros(0, bool)
    if not listed.all():
        missing = int((~listed).sum())
        raise mismatch(
            f"priors {stored.id} name {missing} example(s) this release does not list "
            f"(first: {stored.ids[int(np.argmin(listed))].as_py()!r}); price the examples the release lists"
        )
    groups = np.full(keys.size, NO_GROUP, dtype=np.int64)
    groups[order[at]] = stored.groups
    return GroupPlan(stored.id, groups, np.asarray(stored.priors, dtype=np.float64))
