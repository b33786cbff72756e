"""Datasets behind the API: create, list, upload labels (upsert), declare the universe."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError
from labeldp.common.offload import Offload
from labeldp.common.pages import PageRequest
from labels_party.datasets import file_work
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Dataset, Priors, Release, SemiSensitiveModel

Stored = TypeVar("Stored")


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
    def __init__(self, sessions: sessionmaker[Session], data_dir: DataDir, offload: Offload) -> None:
        self.sessions, self.data_dir = sessions, data_dir
        self.offload = offload  # validating and merging uploads: CPU-heavy, kept off the server's GIL

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

    def delete(self, tenant_id: str, dataset_id: str) -> None:
        """Delete a dataset that nothing was released from (its row and its stored priors, then their
        files). A dataset with a release or a semi-sensitive model stays: they name it, and the ledger's
        charges stand anyway (spend is per example, not per dataset)."""
        with self.sessions.begin() as session:
            ds = get_dataset(session, tenant_id, dataset_id, lock=True)
            used = (
                session.execute(select(Release.id).where(Release.dataset_id == ds.id).limit(1)).first()
                or session.execute(
                    select(SemiSensitiveModel.id).where(SemiSensitiveModel.dataset_id == ds.id).limit(1)
                ).first()
            )
            if used:
                raise DomainError(
                    "dataset-in-use", "a dataset with releases or models cannot be deleted", status=409
                )
            priors = list(session.execute(select(Priors).where(Priors.dataset_id == ds.id)).scalars())
            for row in priors:  # priors of a dataset nothing was released from: no release names them
                session.delete(row)
            session.flush()  # before the dataset they name (no relationship orders the two deletes)
            session.delete(ds)
        shutil.rmtree(self.data_dir.dataset(dataset_id), ignore_errors=True)
        for path in (p for row in priors for p in self.data_dir.priors_files(row.id)):
            path.unlink(missing_ok=True)

    def _commit(
        self,
        tenant_id: str,
        dataset_id: str,
        prepare: Callable[[Dataset], Callable[[Dataset], Stored]],
    ) -> Stored:
        """Run an upload's file work (``prepare``, against the dataset's current versions) outside any
        transaction, then a short write transaction that commits its result (``prepare``'s returned
        ``publish``: a rename and a few fields) if the versions are still those — a merge or a check
        never holds the write lock. If other uploads keep committing first, the last attempt does its
        file work holding the dataset's lock, so every upload lands."""
        for attempt in range(UPLOAD_ATTEMPTS):
            if attempt < UPLOAD_ATTEMPTS - 1:
                seen = self.get(tenant_id, dataset_id)
                publish = prepare(seen)
                with self.sessions.begin() as session:
                    ds = get_dataset(session, tenant_id, dataset_id, lock=True)
                    if _versions(ds) == _versions(seen):
                        return publish(ds)
                continue
            with self.sessions.begin() as session:  # contended: serialize this one
                ds = get_dataset(session, tenant_id, dataset_id, lock=True)
                return prepare(ds)(ds)
        raise AssertionError("unreachable")

    def store_labels(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> LabelsStored:
        """Validate an upload completely (streamed), then upsert it as a new labels version (nothing is
        stored when validation fails). Validation and the merge with the current version run in a
        file-work process, outside any transaction; an upload that committed first makes this one
        merge again."""
        spec = DatasetSpec.model_validate(self.get(tenant_id, dataset_id).spec)
        files = self.files(dataset_id)
        staged, merged = files.staging_path(), files.staging_path()
        first: file_work.LabelsVersion | None = None  # the attempt that validated the upload
        try:

            def prepare(seen: Dataset) -> Callable[[Dataset], LabelsStored]:
                nonlocal first
                made = self.offload.run(
                    file_work.labels_version,
                    path if first is None else None,
                    fmt,
                    spec,
                    staged,
                    files.labels_path(seen.labels_version) if seen.labels_version else None,
                    files.universe_path(seen.universe_version) if seen.universe_version else None,
                    merged,
                )
                validated = first = first or made
                version = seen.labels_version + 1

                def publish(ds: Dataset) -> LabelsStored:
                    files.rename_into_place(made.path, files.labels_path(version))
                    ds.labels_version, ds.label_count = version, made.count
                    return LabelsStored(validated.rows, validated.clipped, made.count, version)

                return publish

            return self._commit(tenant_id, dataset_id, prepare)
        finally:
            staged.unlink(missing_ok=True)
            merged.unlink(missing_ok=True)

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
            valid = self.offload.run(file_work.non_sensitive_rows, path, fmt, spec, staged)

            def prepare(seen: Dataset) -> Callable[[Dataset], UniverseStored]:
                version = seen.non_sensitive_version + 1

                def publish(ds: Dataset) -> UniverseStored:
                    files.rename_into_place(staged, files.non_sensitive_path(version))
                    ds.non_sensitive_version = version
                    return UniverseStored(valid.rows, version)

                return publish

            return self._commit(tenant_id, dataset_id, prepare)
        finally:
            staged.unlink(missing_ok=True)

    def store_universe(self, tenant_id: str, dataset_id: str, path: Path, fmt: str) -> UniverseStored:
        """Replace the dataset's universe: every example ID a release will list and, optionally, each
        one's ``user_id`` — with a universe, the only source of who an example's user is
        (``membership.py``). The check against the stored label rows runs in a file-work process,
        outside any transaction, against the versions the commit then confirms."""
        self.get(tenant_id, dataset_id)
        files = self.files(dataset_id)
        staged = files.staging_path()
        try:
            valid = self.offload.run(file_work.universe, path, fmt, staged)

            def prepare(seen: Dataset) -> Callable[[Dataset], UniverseStored]:
                labels = files.labels_path(seen.labels_version) if seen.labels_version else None
                self.offload.run(file_work.check_universe, staged, labels)
                version = seen.universe_version + 1

                def publish(ds: Dataset) -> UniverseStored:
                    files.rename_into_place(staged, files.universe_path(version))
                    ds.universe_version, ds.universe_count = version, valid.rows
                    ds.universe_users = valid.users
                    return UniverseStored(valid.rows, version, valid.users)

                return publish

            return self._commit(tenant_id, dataset_id, prepare)
        finally:
            staged.unlink(missing_ok=True)


UPLOAD_ATTEMPTS = 4  # optimistic tries before one under the lock


def _versions(ds: Dataset) -> tuple[int, int, int]:
    return ds.labels_version, ds.universe_version, ds.non_sensitive_version
