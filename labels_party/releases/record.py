"""What a release froze, kept beside its output: every listed example's ledger key, its user's key and
the label it was randomized from, row for row in the output's order.

A job that builds on a release — a semi-sensitive model's label phase and DP-SGD phase, an audit,
whatever comes next — reads this record and the output, never the dataset's current state (privacy
invariant 12): the dataset may have been re-uploaded since (another user map, other label rows), and
a job that mixed the release's examples with today's users would state and charge a guarantee for a
grouping the release never used. The examples, the kept set (codes below a user-level release's
``capped_bin``) and τ are the output's and the published mechanism's; the users and the labels are
here. It lives in a file under the data directory (``DataDir.release_record``), never in the
database, and is never sent anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.files import write_bytes_atomic, write_tables_atomic
from labeldp.mechanisms import PublishedMechanism
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Release

RECORD_SCHEMA = pa.schema([("example_key", pa.int64()), ("user_key", pa.int64()), ("label", pa.float64())])


def record_table(keys: np.ndarray, users: np.ndarray, labels: np.ndarray) -> pa.Table:
    """One piece of a record: aligned with the output rows it describes."""
    return pa.table(
        {
            "example_key": pa.array(keys, pa.int64()),
            "user_key": pa.array(users, pa.int64()),
            "label": pa.array(labels, pa.float64()),
        },
        schema=RECORD_SCHEMA,
    )


def write_groups(data_dir: DataDir, release_id: str, groups: list[PublishedMechanism]) -> None:
    """A feature-aware release's group mechanisms, each with its prior, in group order."""
    body = json.dumps([g.model_dump(mode="json") for g in groups]).encode()
    write_bytes_atomic(data_dir.release_groups(release_id), body)


def read_groups(data_dir: DataDir, release_id: str) -> list[PublishedMechanism]:
    """The group mechanisms of a feature-aware release ([] for any other)."""
    path = data_dir.release_groups(release_id)
    if not path.exists():
        return []
    return [PublishedMechanism.model_validate(g) for g in json.loads(path.read_bytes())]


def write_record(data_dir: DataDir, release_id: str, pieces: Iterable[pa.Table]) -> None:
    """Write a release's record (atomically, a piece at a time: a cluster release streams it)."""
    write_tables_atomic(data_dir.release_record(release_id), RECORD_SCHEMA, pieces)


@dataclass(frozen=True)
class FrozenRelease:
    """A complete release as it was made: its output, its record and its mechanism."""

    mechanism: PublishedMechanism
    ids: pa.Array
    bins: np.ndarray  # the output codes (``m``, or ``capped_bin`` for user-level: no information)
    keys: np.ndarray  # ledger keys
    users: np.ndarray  # user keys as the release grouped its examples
    labels: np.ndarray  # the labels it randomized (the default label where a universe ID had none)
    groups: np.ndarray | None = None  # a feature-aware release: each example's group (-1: none)
    group_mechanisms: tuple[PublishedMechanism, ...] = ()

    def mechanism_of(self, group: int) -> PublishedMechanism:
        """The mechanism that released the examples of ``group`` (-1: the release's own)."""
        return self.mechanism if group < 0 else self.group_mechanisms[group]

    @property
    def kept(self) -> np.ndarray:
        """Which examples carry label information: all, or a user-level release's ≤ τ per user (in a
        feature-aware release, those over τ have no group)."""
        capped = self.mechanism.capped_bin
        if capped is None:
            return np.ones(self.bins.size, dtype=bool)
        return (self.bins < capped) if self.groups is None else (self.groups >= 0) | (self.bins < capped)

    @property
    def contribution_bound(self) -> int | None:
        """τ of a user-level release, else None."""
        return self.mechanism.contribution_bound if self.mechanism.privacy_unit == "user" else None


def has_record(data_dir: DataDir, release_id: str) -> bool:
    return data_dir.release_record(release_id).exists()


def frozen_release(data_dir: DataDir, release: Release) -> FrozenRelease:
    """What ``release`` froze; 409 when it is not complete, or was made before releases kept a record
    (a job cannot then know the users it used: make a new release)."""
    if release.status != "complete" or release.mechanism is None:
        raise DomainError("release-not-complete", f"release {release.id} is {release.status}", status=409)
    if not has_record(data_dir, release.id):
        raise DomainError(
            "release-without-record",
            f"release {release.id} was made before releases recorded their examples' users and labels; "
            "make a new release to build on",
            status=409,
        )
    output = pq.read_table(data_dir.release(release.id))
    record = pq.read_table(data_dir.release_record(release.id))
    if record.num_rows != output.num_rows:
        raise RuntimeError(f"release {release.id}: its record does not match its output")  # a bug
    return FrozenRelease(
        PublishedMechanism.model_validate(release.mechanism),
        output.column("example_id").combine_chunks(),
        np.asarray(output.column("bin").to_numpy(), dtype=np.int64),
        np.asarray(record.column("example_key").to_numpy(), dtype=np.int64),
        np.asarray(record.column("user_key").to_numpy(), dtype=np.int64),
        np.asarray(record.column("label").to_numpy(), dtype=np.float64),
        np.asarray(output.column("group").to_numpy(), dtype=np.int64)
        if "group" in output.column_names
        else None,
        tuple(read_groups(data_dir, release.id)),
    )
