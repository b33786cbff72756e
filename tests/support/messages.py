"""Signed messages for receiver and training tests: a release of synthetic bins with a consistent
published mechanism (integer support, one bin per support point), and a feature-aware release's."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pyarrow as pa

from labeldp.common.wire.sender import ReleaseMessage
from labeldp.mechanisms import GroupedRelease, PublishedMechanism, RROnBins, integer_grid

SENDER, RECEIVER = "advertiser", "publisher"


def identity_bins(num_bins: int, epsilon: float = 0.95, epsilon_prior: float = 0.05) -> PublishedMechanism:
    """RR-on-Bins over the support 0..num_bins-1 with every point its own bin."""
    support = integer_grid(0, max(num_bins - 1, 1)) if num_bins > 1 else integer_grid(0, 1)
    bins = np.arange(support.k) if num_bins > 1 else np.zeros(support.k, dtype=np.int64)
    values = support.values if num_bins > 1 else np.array([0.5])
    mechanism = RROnBins(epsilon, support, bins, values)
    return mechanism.describe(
        prior=np.full(support.k, 1 / support.k),
        epsilon_prior=epsilon_prior,
        epsilon_total=epsilon + epsilon_prior,
    )


def release(
    ids: list[str],
    num_bins: int = 3,
    ttl_s: int = 3600,
    seed: int = 0,
    mechanism: PublishedMechanism | None = None,
    label_type: str = "count",
) -> ReleaseMessage:
    now = int(time.time() * 1000)
    mechanism = mechanism or identity_bins(num_bins)
    bins = np.random.default_rng(seed).integers(0, mechanism.m, len(ids))  # test-only synthetic bins
    return ReleaseMessage(
        release_id=str(uuid.uuid4()),
        sender_id=SENDER,
        recipient_id=RECEIVER,
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 1000 * ttl_s,
        label_type=label_type,
        mechanism=mechanism,
        example_ids=pa.array(ids, pa.string()),
        bins=bins,
    )


def grouped_message(
    ids: list[str],
    grouped: GroupedRelease,
    ttl_s: int = 3600,
    label_type: str = "count",
    priors_id: str | None = None,
) -> ReleaseMessage:
    """A feature-aware release as the labels party sends it: the release's own mechanism, each group's
    (``GroupedRelease.published_groups``), the priors' id and every example's group."""
    now = int(time.time() * 1000)
    return ReleaseMessage(
        release_id=str(uuid.uuid4()),
        sender_id=SENDER,
        recipient_id=RECEIVER,
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 1000 * ttl_s,
        label_type=label_type,
        mechanism=grouped.published(),
        groups=tuple(grouped.published_groups()),
        priors_id=priors_id or str(uuid.uuid4()),
        example_ids=pa.array(ids, pa.string()),
        bins=grouped.bin_indices,
        example_groups=grouped.groups,
    )
