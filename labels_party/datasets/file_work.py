"""An upload's file work, as the functions a child process runs (``labeldp.common.offload``).

Validating and merging hash every example ID and rewrite whole files: seconds of CPU that would hold
the server's interpreter lock and stall every read beside them. Each function here takes paths and
the dataset's public parameters and returns counts; the database is never touched here (the service
commits what these produce, ``service.py``). Every file they write is fsynced before they return, so
publishing it is a rename.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from labels_party.datasets.key_pairs import KeyPairSet
from labels_party.datasets.membership import check_labels_against, check_universe_against, users_in_universe
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles, merge_labels
from labels_party.datasets.uploads import key_pair_batches, validate_upload


@dataclass(frozen=True)
class LabelsVersion:
    """A labels version ready to publish: ``path`` (durable) holds ``count`` rows."""

    path: Path
    count: int
    rows: int  # the upload's rows (an attempt that reused an earlier validation: 0, see below)
    clipped: int


def labels_version(
    upload: Path | None,
    fmt: str,
    spec: DatasetSpec,
    staged: Path,
    existing: Path | None,
    universe: Path | None,
    out: Path,
) -> LabelsVersion:
    """Validate ``upload`` into ``staged`` (``None``: an earlier attempt did; its counts stand), check
    its rows against the universe, and merge them over the ``existing`` version into ``out`` — or,
    with nothing to merge with, make ``staged`` itself the version."""
    if upload is not None:
        valid = validate_upload(upload, fmt, spec, staged)
        replaced, rows, clipped = valid.key_pairs, valid.rows, valid.clipped
    else:
        replaced = KeyPairSet.collect(lambda: key_pair_batches(staged), staged.parent)
        rows = clipped = 0
    check_labels_against(pq.read_table(universe) if universe is not None else None, staged)
    if existing is None:
        DatasetFiles.make_durable(staged)
        return LabelsVersion(staged, len(replaced), rows, clipped)
    count = merge_labels(existing, staged, replaced, out, spec.label_schema())
    DatasetFiles.make_durable(out)
    return LabelsVersion(out, count, rows, clipped)


@dataclass(frozen=True)
class Validated:
    rows: int
    users: int | None = None  # a universe's declared users (an example without one: its own)


def non_sensitive_rows(upload: Path, fmt: str, spec: DatasetSpec, staged: Path) -> Validated:
    """Validate the features party's non-sensitive rows into ``staged`` (durable)."""
    valid = validate_upload(upload, fmt, spec, staged, non_sensitive=True)
    DatasetFiles.make_durable(staged)
    return Validated(valid.rows)


def universe(upload: Path, fmt: str, staged: Path) -> Validated:
    """Validate a universe into ``staged`` (durable) and count the users it declares."""
    valid = validate_upload(upload, fmt, None, staged)
    users = users_in_universe(pq.read_table(staged, columns=["example_id", "user_id"]))
    DatasetFiles.make_durable(staged)
    return Validated(valid.rows, users)


def check_universe(staged: Path, labels: Path | None) -> None:
    """Refuse a staged universe that the stored label rows (``labels``) would contradict."""
    check_universe_against(pq.read_table(staged, columns=["example_id", "user_id"]), labels)
