"""A release's privacy audit for its owner: what the best attacker learns, computed with the raw labels.

Free and tenant-only, like the preview: it reads the labels the release randomized, from its record
(``record.py``: never the dataset's current labels, which may have changed since — privacy invariant
12; a release made before releases kept a record is audited against the labels the dataset holds now),
spends nothing, never goes to a recipient and is never logged. It states

* the data-independent bounds (also in every release record): the worst-case additive advantage over
  all priors and the maximum multiplicative advantage (the implemented ε);
* the exact advantage of an attacker who knows the **true** label distribution of these examples
  (stronger than the real recipient, who only has the noisy prior) — additive advantage, how often it
  simply trusts the noisy label, and for regression how much of its squared error the release removes;
* that attacker's realized accuracy on this release's actual outputs, with and without them;
* the canary check's lower bound on the ε the sampler implements (``epsilon_lower_bound``, what
  ``labeldp audit epsilon`` computes), with the release's own examples as the canaries: their labels
  are known here, so every release can be checked without a canary release of its own.

Examples over a user-level contribution bound carry no label information and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.advantage import Advantages, advantages, targets_of
from labeldp.mechanisms.empirical import EpsilonBound, decision_rule, epsilon_lower_bound
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.releases.examples import current_labels
from labels_party.releases.record import frozen_release, has_record
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, Release


@dataclass(frozen=True)
class GroupAudit:
    """One mechanism of a feature-aware release (group -1: the release's own), over its examples."""

    group: int
    examples: int
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    additive_advantage: float  # exact, for the attacker knowing the true label distribution of the group
    realized_additive_advantage: float


@dataclass(frozen=True)
class ReleaseAudit:
    release_id: str
    examples: int  # examples with label information (user-level: within the bound)
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float
    true_distribution: dict[str, float]  # exact, for an attacker knowing the true label histogram
    realized: dict[str, float]  # that attacker on this release's actual outputs
    epsilon_lower_bound: EpsilonBound | None  # None: the labels fall in fewer than two bins
    groups: list[GroupAudit] | None = None  # a feature-aware release: per mechanism that released examples


@dataclass(frozen=True)
class _Part:
    """The audit of the examples one mechanism released."""

    group: int
    published: PublishedMechanism
    exact: Advantages  # one row: the attacker's prior is the part's true label histogram
    examples: int
    right_with: npt.NDArray[np.bool_]
    right_without: npt.NDArray[np.bool_]
    bound: EpsilonBound | None


def _part(
    group: int, published: PublishedMechanism, position: np.ndarray, outputs: np.ndarray, k: int, alpha: float
) -> _Part:
    true_prior = np.bincount(position, minlength=k).astype(np.float64)
    exact = advantages(published, true_prior)
    rule = decision_rule(published, true_prior)
    truth = targets_of(published)[position]
    if published.kind == "unbiased":  # the targets are the support points themselves
        two_bins = np.unique(position).size >= 2
    else:
        own_bins = np.asarray(published.support_bins, dtype=np.int64)[position]
        two_bins = np.unique(own_bins[own_bins >= 0]).size >= 2
    bound = epsilon_lower_bound(published, truth, outputs, alpha) if two_bins else None
    return _Part(
        group, published, exact, int(position.size), rule[outputs] == truth, rule[-1] == truth, bound
    )


def _repeated(parts: list[_Part]) -> Advantages:
    """Every part's exact advantages repeated for each of its examples: one row per example."""
    counts = np.array([p.examples for p in parts])

    def field(name: str) -> np.ndarray:
        return np.repeat(np.concatenate([getattr(p.exact, name) for p in parts]), counts)

    regression = all(p.exact.mse_reduction is not None for p in parts)
    return Advantages(
        field("success_without"),
        field("success_with"),
        field("multiplicative"),
        field("multiplicative_expected"),
        field("trusts"),
        field("mse_reduction") if regression else None,
        field("prior_variance") if regression else None,
    )


def audit_release(data_dir: DataDir, ds: Dataset, release: Release, alpha: float = 1e-6) -> ReleaseAudit:
    if release.status != "complete" or release.mechanism is None:
        raise DomainError("release-not-complete", f"release {release.id} is {release.status}", status=409)
    spec = DatasetSpec.model_validate(ds.spec)
    groups: np.ndarray | None = None
    mechanisms: tuple[PublishedMechanism, ...] = ()
    if has_record(data_dir, release.id):
        frozen = frozen_release(data_dir, release)
        published, bins = frozen.mechanism, frozen.bins
        informative = frozen.kept
        labels = frozen.labels[informative]
        if frozen.groups is not None:
            groups, mechanisms = frozen.groups[informative], frozen.group_mechanisms
    else:  # made before releases kept a record
        published = PublishedMechanism.model_validate(release.mechanism)
        output = pq.read_table(data_dir.release(release.id), columns=["example_id", "bin"])
        bins = np.asarray(output.column("bin").to_numpy(), dtype=np.int64)
        informative = bins < published.m
        ids = output.column("example_id").combine_chunks().filter(informative)
        labels = current_labels(DatasetFiles(data_dir, ds.id), ds, spec, ids)
    known = ~np.isnan(labels)
    if not known.any():
        raise DomainError(
            "no-labels", f"the dataset no longer holds labels for release {release.id}", status=409
        )
    support = spec.support_for(spec.loss(release.loss))  # the grid the release snapped labels to
    position = support.snap(labels[known])
    outputs = bins[informative][known]
    if groups is None:
        parts = [_part(-1, published, position, outputs, support.k, alpha)]
    else:
        of = groups[known]
        present = [int(g) for g in np.unique(of)]
        # one canary check per mechanism: the false-alarm rate alpha is split between them
        each = alpha / len(present)
        parts = [
            _part(
                g, published if g < 0 else mechanisms[g], position[of == g], outputs[of == g], support.k, each
            )
            for g in present
        ]
    exact = _repeated(parts).summary()
    right_with = float(np.concatenate([p.right_with for p in parts]).mean())
    right_without = float(np.concatenate([p.right_without for p in parts]).mean())
    bounds = [p.bound for p in parts if p.bound is not None]
    every = [published, *mechanisms]
    return ReleaseAudit(
        release.id,
        int(known.sum()),
        max(m.worst_case_additive_advantage for m in every),
        max(m.max_multiplicative_advantage for m in every),
        {k: v for k, v in exact.items() if k != "examples"},
        {
            "accuracy_without_release": right_without,
            "accuracy_with_release": right_with,
            "additive_advantage": right_with - right_without,
        },
        max(bounds, key=lambda b: b.epsilon_low) if bounds else None,
        None
        if groups is None
        else [
            GroupAudit(
                p.group,
                p.examples,
                p.published.worst_case_additive_advantage,
                p.published.max_multiplicative_advantage,
                float(p.exact.additive.mean()),
                float(p.right_with.mean() - p.right_without.mean()),
            )
            for p in parts
        ],
    )
