"""Who each example's user is, decided from data that does not depend on labels.

With a universe, having a label row *is* a label (a conversion among clicks): anything derived from
which examples have rows — who is capped, how many users there are, what each user is charged — would
leak labels. So with a universe, the user of every example comes from the universe's ``user_id``
column alone (an example without one is its own user), and a label row may repeat its example's user
but never change it: a label upload whose ``user_id`` disagrees with the universe is refused, and so
is a universe that disagrees with the stored label rows (422 ``user-id-conflict``). Without a
universe the release lists exactly the labelled IDs (public by the threat model), and their users come
from the label rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import first_rows
from labeldp.common.files import parquet_batches
from labels_party.budget.ledger_keys import Keys, user_keys
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.orm import Dataset

CONFLICT = "user-id-conflict"
_BATCH_ROWS = 262_144


def declared_users(table: pa.Table) -> pa.Array:
    """A universe's (or label file's) ``user_id`` column; all null in files that predate it."""
    if "user_id" not in table.column_names:
        return pa.nulls(table.num_rows, pa.string())
    return table.column("user_id").combine_chunks()


def conflicts(ids: pa.Array, users: pa.Array, universe: pa.Table) -> np.ndarray:
    """Which of these label rows (``ids``, ``users``) would change their example's user: a non-empty
    ``user_id`` on an example of the universe whose declared user is another one or none."""
    position = pc.index_in(ids, value_set=universe.column("example_id"))
    declared = pc.take(declared_users(universe), position)
    in_universe = pc.is_valid(position)
    differs = pc.or_kleene(pc.is_null(declared), pc.not_equal(declared, users))
    bad = pc.and_kleene(pc.and_kleene(in_universe, pc.is_valid(users)), differs)
    return np.asarray(pc.fill_null(bad, False).to_numpy(zero_copy_only=False), dtype=bool)


def _conflict_error(
    count: int, rows: list[int], universe_has_users: bool, side: str, status: int = 422
) -> DomainError:
    hint = (
        "the universe declares each example's user; label rows may repeat it or leave user_id empty"
        if universe_has_users
        else "the universe declares no users (each of its examples is its own user): upload the "
        "universe with a user_id column first"
    )
    return DomainError(
        CONFLICT,
        f"{count} {side} rows give an example another user than the universe does: {hint}",
        status=status,
        rows=rows,
        columns=["user_id"],
    )


def _label_rows(path: Path) -> Iterable[tuple[pa.Array, pa.Array]]:
    file = pq.ParquetFile(path)
    for batch in parquet_batches(file, _BATCH_ROWS, ["example_id", "user_id"]):
        yield batch.column(0), batch.column(1)


def check_labels_against(universe: pa.Table | None, labels: Path) -> None:
    """Refuse label rows (a validated upload) that would change a universe example's user."""
    if universe is None:
        return
    offset = count = 0
    rows: list[int] = []
    for ids, users in _label_rows(labels):
        bad = conflicts(ids, users, universe)
        count += int(bad.sum())
        rows += first_rows(bad, offset)
        offset += len(ids)
    if count:
        has_users = declared_users(universe).null_count < universe.num_rows
        raise _conflict_error(count, rows[:10], has_users, "label")


def check_universe_against(universe: pa.Table, labels: Path | None) -> None:
    """Refuse a universe (validated upload) that the stored label rows would contradict."""
    if labels is None:
        return
    bad_rows = np.zeros(universe.num_rows, dtype=bool)
    for ids, users in _label_rows(labels):
        bad = conflicts(ids, users, universe)
        if bad.any():
            at = pc.index_in(ids.filter(pa.array(bad)), value_set=universe.column("example_id"))
            bad_rows[np.asarray(at.to_numpy(zero_copy_only=False), dtype=np.int64)] = True
    if bad_rows.any():
        has_users = declared_users(universe).null_count < universe.num_rows
        raise _conflict_error(int(bad_rows.sum()), first_rows(bad_rows), has_users, "universe")


def user_keys_of(ids: pa.Array, example_keys: Keys, labels: pa.Table, universe: pa.Table | None) -> Keys:
    """The user key of each example ``ids`` (aligned with ``example_keys``) of a dataset with these
    label rows and universe: from the universe when there is one (refusing, 409, label rows stored
    before this rule that disagree with it), else from the label rows."""
    if universe is None:
        position = pc.index_in(ids, value_set=labels.column("example_id"))
        return user_keys(pc.take(declared_users(labels), position), example_keys)
    bad = conflicts(labels.column("example_id").combine_chunks(), declared_users(labels), universe)
    if bad.any():
        has_users = declared_users(universe).null_count < universe.num_rows
        raise _conflict_error(int(bad.sum()), [], has_users, "stored label", status=409)
    position = pc.index_in(ids, value_set=universe.column("example_id"))
    return user_keys(pc.take(declared_users(universe), position), example_keys)


def users_in_universe(universe: pa.Table) -> int:
    """How many users a universe declares (an example without a user_id counts as its own user)."""
    users = declared_users(universe)
    return int(pc.count_distinct(users).as_py()) + users.null_count


def covered_examples(files: DatasetFiles, ds: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(ledger keys, user keys) of the examples a full release of the dataset would cover; reads
    no label."""
    universe = files.read_universe(ds.universe_version)
    if universe is None:  # every label row, each its own position: no lookup of IDs by text
        labels = files.read_labels(ds.labels_version, ["example_key", "user_id"])
        keys = np.asarray(labels.column("example_key").to_numpy(), dtype=np.int64)
        return keys, user_keys(declared_users(labels), keys)
    labels = files.read_labels(ds.labels_version, ["example_id", "example_key", "user_id"])
    keys = np.asarray(universe.column("example_key").to_numpy(), dtype=np.int64)
    return keys, user_keys_of(universe.column("example_id").combine_chunks(), keys, labels, universe)
