"""Datasets behind the API: create, list, upload labels (upsert), declare the universe."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles, upsert
from labels_party.datasets.uploads import read_table, validate_labels, validate_universe
from labels_party.storage.orm import Dataset


@dataclass(frozen=True)
class LabelsStored:
    rows: int
    clipped: int
    label_count: int
    version: int


@dataclass(frozen=True)
class UniverseStored:
    rows: int
    version: int


def get_dataset(session: Session, tenant_id: str, dataset_id: str, *, lock: bool = False) -> Dataset:
    """A tenant's dataset; another tenant's dataset is indistinguishable from a missing one."""
    return owned(session, Dataset, dataset_id, tenant_id, "dataset", lock=lock)


class DatasetService:
    def __init__(self, sessions: sessionmaker[Session], data_dir: Path) -> None:
        self.sessions, self.data_dir = sessions, data_dir

    def files(self, dataset_id: str) -> DatasetFiles:
        return DatasetFiles(self.data_dir, dataset_id)

    def create(self, tenant_id: str, name: str, spec: DatasetSpec) -> Dataset:
        with self.sessions.begin() as session:
            ds = Dataset(
                id=str(uuid.uuid4()), tenant_id=tenant_id, name=name, spec=spec.model_dump(mode="json")
            )
            session.add(ds)
            session.flush()
            return ds

    def list(self, tenant_id: str) -> list[Dataset]:
        with self.sessions() as session:
            rows = session.execute(
                select(Dataset).where(Dataset.tenant_id == tenant_id).order_by(Dataset.created_at)
            )
            return list(rows.scalars())

    def get(self, tenant_id: str, dataset_id: str) -> Dataset:
        with self.sessions() as session:
            return get_dataset(session, tenant_id, dataset_id)

    def store_labels(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> LabelsStored:
        """Validate an upload completely, then upsert it as a new labels version (nothing is stored
        when validation fails)."""
        spec = DatasetSpec.model_validate(self.get(tenant_id, dataset_id).spec)
        valid = validate_labels(read_table(path, fmt, ("example_id", "label", "user_id")), spec)
        files = self.files(dataset_id)
        with self.sessions.begin() as session:
            ds = get_dataset(session, tenant_id, dataset_id, lock=True)
            merged = upsert(files.read_labels(ds.labels_version), valid.table)
            version = ds.labels_version + 1
            files.write(files.labels_path(version), merged)
            ds.labels_version, ds.label_count = version, merged.num_rows
        return LabelsStored(valid.rows, valid.clipped, merged.num_rows, version)

    def store_universe(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> UniverseStored:
        """Replace the dataset's universe (every example ID a release will list)."""
        self.get(tenant_id, dataset_id)
        table = validate_universe(read_table(path, fmt, ("example_id",)))
        files = self.files(dataset_id)
        with self.sessions.begin() as session:
            ds = get_dataset(session, tenant_id, dataset_id, lock=True)
            version = ds.universe_version + 1
            files.write(files.universe_path(version), table)
            ds.universe_version, ds.universe_count = version, table.num_rows
        return UniverseStored(table.num_rows, version)
