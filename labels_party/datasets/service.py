"""Datasets behind the API: create, list, upload labels (upsert), declare the universe."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.common.pages import PageRequest
from labels_party.datasets.membership import check_labels_against, check_universe_against, users_in_universe
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles, merge_labels
from labels_party.datasets.uploads import validate_upload
from labels_party.storage.data_dir import DataDir
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
    users: int | None = None  # how many users a universe declares (examples without one: their own)


def get_dataset(session: Session, tenant_id: str, dataset_id: str, *, lock: bool = False) -> Dataset:
    """A tenant's dataset; another tenant's dataset is indistinguishable from a missing one."""
    return owned(session, Dataset, dataset_id, tenant_id, "dataset", lock=lock)


class DatasetService:
    def __init__(self, sessions: sessionmaker[Session], data_dir: DataDir) -> None:
        self.sessions, self.data_dir = sessions, data_dir

    def files(self, dataset_id: str) -> DatasetFiles:
        return DatasetFiles(self.data_dir, dataset_id)

    def create(self, tenant_id: str, name: str, spec: DatasetSpec) -> Dataset:
        try:
            with self.sessions.begin() as session:
                ds = Dataset(
                    id=str(uuid.uuid4()), tenant_id=tenant_id, name=name, spec=spec.model_dump(mode="json")
                )
                session.add(ds)
                session.flush()
                return ds
        except IntegrityError as exc:
            raise DomainError(
                "dataset-exists", f"a dataset named {name!r} already exists", status=409
            ) from exc

    def list(self, tenant_id: str, paging: PageRequest) -> list[Dataset]:
        with self.sessions() as session:
            query = (
                select(Dataset).where(Dataset.tenant_id == tenant_id).order_by(Dataset.created_at, Dataset.id)
            )
            return list(session.execute(paging.window(query)).scalars())

    def get(self, tenant_id: str, dataset_id: str) -> Dataset:
        with self.sessions() as session:
            return get_dataset(session, tenant_id, dataset_id)

    def store_labels(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> LabelsStored:
        """Validate an upload completely (streamed), then upsert it as a new labels version (nothing is
        stored when validation fails)."""
        spec = DatasetSpec.model_validate(self.get(tenant_id, dataset_id).spec)
        files = self.files(dataset_id)
        staged, merged = files.staging_path(), files.staging_path()
        try:
            valid = validate_upload(path, fmt, spec, staged)
            with self.sessions.begin() as session:
                ds = get_dataset(session, tenant_id, dataset_id, lock=True)
                check_labels_against(files.read_universe(ds.universe_version), staged)
                version = ds.labels_version + 1
                if ds.labels_version:
                    existing = files.labels_path(ds.labels_version)
                    count = merge_labels(existing, staged, valid.key_pairs, merged, spec.label_schema())
                    files.publish(merged, files.labels_path(version))
                else:  # nothing to merge with: the validated file, in the dataset's schema, is the version
                    count = valid.rows
                    files.publish(staged, files.labels_path(version))
                ds.labels_version, ds.label_count = version, count
        finally:
            staged.unlink(missing_ok=True)
            merged.unlink(missing_ok=True)
        return LabelsStored(valid.rows, valid.clipped, count, version)

    def store_non_sensitive(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> UniverseStored:
        """Replace the features party's non-sensitive rows (``example_id`` and the declared
        ``non_sensitive`` columns) that the DP-SGD phase trains on; they are public to an attacker by
        definition, so storing them costs no privacy."""
        spec = DatasetSpec.model_validate(self.get(tenant_id, dataset_id).spec)
        if not spec.non_sensitive:
            raise DomainError(
                "no-non-sensitive-columns", "the dataset declares no non_sensitive columns", status=409
            )
        files = self.files(dataset_id)
        staged = files.staging_path()
        try:
            valid = validate_upload(path, fmt, spec, staged, non_sensitive=True)
            with self.sessions.begin() as session:
                ds = get_dataset(session, tenant_id, dataset_id, lock=True)
                version = ds.non_sensitive_version + 1
                files.publish(staged, files.non_sensitive_path(version))
                ds.non_sensitive_version = version
        finally:
            staged.unlink(missing_ok=True)
        return UniverseStored(valid.rows, version)

    def store_universe(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> UniverseStored:
        """Replace the dataset's universe: every example ID a release will list and, optionally, each
        one's ``user_id`` — with a universe, the only source of who an example's user is
        (``membership.py``)."""
        self.get(tenant_id, dataset_id)
        files = self.files(dataset_id)
        staged = files.staging_path()
        try:
            valid = validate_upload(path, fmt, None, staged)
            universe = pq.read_table(staged, columns=["example_id", "user_id"])
            users = users_in_universe(universe)
            with self.sessions.begin() as session:
                ds = get_dataset(session, tenant_id, dataset_id, lock=True)
                labels = files.labels_path(ds.labels_version) if ds.labels_version else None
                check_universe_against(universe, labels)
                version = ds.universe_version + 1
                files.publish(staged, files.universe_path(version))
                ds.universe_version, ds.universe_count, ds.universe_users = version, valid.rows, users
        finally:
            staged.unlink(missing_ok=True)
        return UniverseStored(valid.rows, version, users)
