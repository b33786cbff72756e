"""Dataset operations behind the API: create, upload labels (upsert), declare the universe."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles, upsert
from labels_party.datasets.uploads import read_table, validate_labels, validate_universe
from labels_party.storage.orm import Dataset


class DatasetNotFoundError(LookupError):
    pass


def get_dataset(session: Session, tenant_id: str, dataset_id: str, *, lock: bool = False) -> Dataset:
    """A tenant's dataset; another tenant's dataset is indistinguishable from a missing one."""
    stmt = select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id)
    if lock and session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    ds = session.execute(stmt).scalar_one_or_none()
    if ds is None:
        raise DatasetNotFoundError(dataset_id)
    return ds


def create_dataset(session: Session, tenant_id: str, name: str, spec: DatasetSpec) -> Dataset:
    ds = Dataset(id=str(uuid.uuid4()), tenant_id=tenant_id, name=name, spec=spec.model_dump(mode="json"))
    session.add(ds)
    session.flush()
    return ds


def store_labels(
    sessions: sessionmaker[Session], data_dir: Path, tenant_id: str, dataset_id: str, path: Path, fmt: str
) -> tuple[int, int, int, int]:
    """Validate an upload completely, then upsert it as a new labels version.

    Returns (rows, clipped, label_count, version). Raises ``UploadError`` having stored nothing.
    """
    with sessions() as session:
        spec = DatasetSpec.model_validate(get_dataset(session, tenant_id, dataset_id).spec)
    valid = validate_labels(read_table(path, fmt, ("example_id", "label", "user_id")), spec)
    files = DatasetFiles(data_dir, dataset_id)
    with sessions.begin() as session:
        ds = get_dataset(session, tenant_id, dataset_id, lock=True)
        merged = upsert(files.read_labels(ds.labels_version), valid.table)
        version = ds.labels_version + 1
        files.write(files.labels_path(version), merged)
        ds.labels_version, ds.label_count = version, merged.num_rows
    return valid.rows, valid.clipped, merged.num_rows, version


def store_universe(
    sessions: sessionmaker[Session], data_dir: Path, tenant_id: str, dataset_id: str, path: Path, fmt: str
) -> tuple[int, int]:
    """Replace the dataset's universe (every example ID a release will list). Returns (rows, version)."""
    with sessions() as session:
        get_dataset(session, tenant_id, dataset_id)
    table = validate_universe(read_table(path, fmt, ("example_id",)))
    files = DatasetFiles(data_dir, dataset_id)
    with sessions.begin() as session:
        ds = get_dataset(session, tenant_id, dataset_id, lock=True)
        version = ds.universe_version + 1
        files.write(files.universe_path(version), table)
        ds.universe_version, ds.universe_count = version, table.num_rows
    return table.num_rows, version
