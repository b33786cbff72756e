"""The examples a release covers, with their labels, read from a dataset's stored versions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import unknown_ids
from labels_party.budget.ledger_keys import user_keys
from labels_party.datasets.membership import declared_users, user_keys_of
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.orm import Dataset


@dataclass(frozen=True)
class ExampleSet:
    ids: pa.Array
    keys: np.ndarray  # ledger keys, aligned with ids
    labels: np.ndarray
    user_keys: np.ndarray  # the user of each example (its own key when it has no user_id)
    defaulted: int  # universe IDs without a label, which took the default label
    universe_declared: bool

    @property
    def n(self) -> int:
        return int(self.keys.size)


@dataclass(frozen=True)
class StoredExamples:
    """A release's examples left where the dataset stores them, for a cluster's workers to read: every
    labelled example of the current labels file, in file order (a dataset without a universe, and no
    subset asked). Only the count is known here; ``groups`` are the row groups each partition reads."""

    path: Path
    n: int
    groups: list[list[int]]
    defaulted: int = 0
    universe_declared: bool = False


def stored_examples(files: DatasetFiles, ds: Dataset, rows: int) -> StoredExamples | None:
    """The dataset's labelled examples as partitions of about ``rows`` whole row groups each, read from
    the file's metadata (no label is read); None when a universe decides the examples."""
    if ds.universe_version != 0:
        return None
    if ds.labels_version == 0:
        raise DomainError("empty-release", "the release would contain no examples")
    path = files.labels_path(ds.labels_version)
    meta = pq.ParquetFile(path).metadata
    groups: list[list[int]] = [[]]
    in_last = 0
    for g in range(meta.num_row_groups):
        if in_last >= rows:
            groups.append([])
            in_last = 0
        groups[-1].append(g)
        in_last += meta.row_group(g).num_rows
    if meta.num_rows == 0:
        raise DomainError("empty-release", "the release would contain no examples")
    return StoredExamples(path, int(meta.num_rows), groups)


def example_set(files: DatasetFiles, ds: Dataset, spec: DatasetSpec, subset: list[str] | None) -> ExampleSet:
    """The IDs a release covers (the declared universe, else the labelled IDs) with their labels.

    With a universe, the message lists every ID in it, labelled or not, so it does not reveal which
    examples have labels (privacy invariant 4); missing labels take the dataset's default label, and
    every example's user is the one the universe declares (``datasets/membership.py``): whether an
    example has a label row changes nothing but its label.
    """
    labels = files.read_labels(ds.labels_version)
    universe = files.read_universe(ds.universe_version)
    base = universe if universe is not None else labels.select(["example_id", "example_key"])
    if subset is not None:
        wanted = pa.array(subset, pa.string())
        if len(set(subset)) != len(subset):
            raise DomainError("duplicate-example-id", "example_ids contains duplicates")
        unknown_ids(wanted, base.column("example_id"), "the dataset")
        base = base.filter(pc.is_in(base.column("example_id"), value_set=wanted))
    if base.num_rows == 0:
        raise DomainError("empty-release", "the release would contain no examples")
    ids = base.column("example_id").combine_chunks()
    if universe is None and subset is None:  # the label rows themselves, in order: nothing to look up
        keys = np.asarray(labels.column("example_key").to_numpy(), dtype=np.int64)
        values = np.array(labels.column("label").to_numpy(), dtype=np.float64)
        return ExampleSet(ids, keys, values, user_keys(declared_users(labels), keys), 0, False)
    values, _ = _labels_at(ids, labels)
    has_label = ~np.isnan(values)  # stored labels are finite (validated on upload)
    missing = int((~has_label).sum())
    if missing:
        if spec.default_label is None:
            raise DomainError(
                "missing-labels",
                f"{missing} example IDs in the universe have no label and the dataset has no default_label",
            )
        values[~has_label] = spec.default_label
    keys = np.asarray(base.column("example_key").to_numpy(), dtype=np.int64)
    users = user_keys_of(ids, keys, labels, universe)
    return ExampleSet(ids, keys, values, users, missing, universe is not None)


def current_labels(files: DatasetFiles, ds: Dataset, spec: DatasetSpec, ids: pa.Array) -> np.ndarray:
    """The labels the dataset holds now for ``ids`` (its default label where it has none, else NaN)."""
    values, _ = _labels_at(ids, files.read_labels(ds.labels_version, ["example_id", "label"]))
    if spec.default_label is not None:
        values[np.isnan(values)] = spec.default_label
    return values


def _labels_at(ids: pa.Array, labels: pa.Table) -> tuple[np.ndarray, pa.Array]:
    """Each ID's label (NaN where it has none) and its row in ``labels`` (null where none)."""
    position = pc.index_in(ids, value_set=labels.column("example_id"))
    has_label = np.asarray(pc.is_valid(position).to_numpy(zero_copy_only=False), dtype=bool)
    values = np.full(len(ids), np.nan)
    if has_label.any():
        idx = np.asarray(pc.drop_null(position).to_numpy(zero_copy_only=False), dtype=np.int64)
        values[has_label] = np.asarray(labels.column("label").to_numpy(), dtype=np.float64)[idx]
    return values, position
