"""Stored priors: a versioned object of the tenant — its row, and under ``priors/`` (``DataDir``, names
from the id this party drew) each requested example's group in request order, the G × k normalized
group priors, and the signed answer exactly as received.

The files are written (atomically) before the row commits, and removed if it does not; deleting removes
the row first, then the files, and is refused while a charged release that uses the priors still runs.
``load_priors`` reads everything a release needs into memory at once, so a release planned on priors
never reads their files again.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned
from labeldp.common.errors import DomainError, not_found
from labeldp.common.files import write_bytes_atomic, write_parquet_atomic
from labeldp.common.pages import PageRequest
from labeldp.common.wire.records import read_records, store_records
from labeldp.v1 import priors_pb2 as ppb
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Priors, Release

GROUPS_SCHEMA = pa.schema([("example_id", pa.string()), ("example_key", pa.int64()), ("group", pa.int16())])


@dataclass(frozen=True)
class StoredPriors:
    """What a feature-aware release reads of stored priors (``load_priors``)."""

    id: str
    dataset_id: str
    recipient_id: str
    model_id: str
    rule: str
    ids: pa.Array  # the requested example IDs, in request order
    keys: npt.NDArray[np.int64]  # their ledger keys (labels_party.budget.ledger_keys)
    groups: npt.NDArray[np.int64]  # the group of each ID; -1: no group
    priors: npt.NDArray[np.float64]  # G × k, rows sum to 1
    support: tuple[float, ...]


def write_files(
    data_dir: DataDir,
    priors_id: str,
    ids: pa.Array,
    keys: npt.NDArray[np.int64],
    groups: npt.NDArray[np.int64],
    priors: npt.NDArray[np.float64],
    frames: list[bytes],
) -> None:
    table = pa.table(
        {"example_id": ids, "example_key": pa.array(keys, pa.int64()), "group": pa.array(groups, pa.int16())},
        schema=GROUPS_SCHEMA,
    )
    data_dir.priors_groups(priors_id).parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(data_dir.priors_groups(priors_id), table)
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(priors, dtype="<f8"), allow_pickle=False)
    write_bytes_atomic(data_dir.priors_matrix(priors_id), buffer.getvalue())
    store_records(data_dir.priors_message(priors_id), frames[0], None, frames[1:])


_NPY_V1 = b"\x93NUMPY\x01\x00"
_MATRIX_HEADER = re.compile(rb"\{'descr': '<f8', 'fortran_order': False, 'shape': \((\d+), (\d+)\), \} *\n")


def remove_files(data_dir: DataDir, priors_id: str) -> None:
    for path in data_dir.priors_files(priors_id):
        path.unlink(missing_ok=True)


def stored_header(data_dir: DataDir, priors_id: str) -> ppb.PriorsHeader:
    """The signed header as received (verified before it was stored)."""
    first = ppb.PriorsFrame.FromString(next(read_records(data_dir.priors_message(priors_id))))
    return ppb.PriorsHeader.FromString(first.header.header)


def read_matrix(data_dir: DataDir, priors_id: str) -> npt.NDArray[np.float64]:
    """The G × k matrix ``write_files`` saved. Its .npy header (format 1.0, as ``np.save`` writes a 2-D
    ``<f8`` array) is matched here, not parsed by ``np.load``: numpy parses it with ``ast``, which
    CPython before 3.11.8 can fail on a thread while a garbage-collector callback runs (gh-106905) —
    and releases read priors on the server's threads."""
    data = data_dir.priors_matrix(priors_id).read_bytes()
    length = int.from_bytes(data[8:10], "little")
    header = _MATRIX_HEADER.fullmatch(data[10 : 10 + length]) if data[:8] == _NPY_V1 else None
    if header is None:
        raise ValueError(f"priors {priors_id}: the stored matrix is not one this party wrote")
    shape = (int(header[1]), int(header[2]))
    matrix = np.frombuffer(data, dtype="<f8", count=shape[0] * shape[1], offset=10 + length)
    return np.array(matrix.reshape(shape), dtype=np.float64)  # a writable copy, as np.load gave


def group_sizes(data_dir: DataDir, priors_id: str, count: int) -> tuple[list[int], int]:
    """How many examples each group holds, and how many have none."""
    groups = pq.read_table(data_dir.priors_groups(priors_id), columns=["group"]).column("group").to_numpy()
    groups = np.asarray(groups, dtype=np.int64)
    sizes = np.bincount(groups[groups >= 0], minlength=count)
    return [int(s) for s in sizes], int((groups < 0).sum())


class PriorsStore:
    def __init__(self, sessions: sessionmaker[Session], data_dir: DataDir) -> None:
        self.sessions, self.data_dir = sessions, data_dir

    def add(
        self,
        row: Priors,
        ids: pa.Array,
        keys: npt.NDArray[np.int64],
        groups: npt.NDArray[np.int64],
        priors: npt.NDArray[np.float64],
        frames: list[bytes],
    ) -> Priors:
        """Write the files, then commit the row; a failure leaves neither."""
        try:
            write_files(self.data_dir, row.id, ids, keys, groups, priors, frames)
            with self.sessions.begin() as session:
                session.add(row)
                session.flush()
        except BaseException:
            remove_files(self.data_dir, row.id)
            raise
        return row

    def get(self, tenant_id: str, priors_id: str) -> Priors:
        with self.sessions() as session:
            return owned(session, Priors, priors_id, tenant_id, "priors")

    def list(self, tenant_id: str, paging: PageRequest, dataset_id: str | None = None) -> list[Priors]:
        with self.sessions() as session:
            query = select(Priors).where(Priors.tenant_id == tenant_id)
            if dataset_id is not None:
                query = query.where(Priors.dataset_id == dataset_id)
            return list(
                session.execute(paging.window(query.order_by(Priors.created_at, Priors.id))).scalars()
            )

    def delete(self, tenant_id: str, priors_id: str) -> None:
        """Delete the priors (row, then files); 409 ``priors-in-use`` while a charged release that uses
        them is still running. Releases that completed keep naming them (their record)."""
        with self.sessions.begin() as session:
            row = owned(session, Priors, priors_id, tenant_id, "priors", lock=True)
            running = session.execute(
                select(Release.id).where(Release.priors_id == priors_id, Release.status == "charged").limit(1)
            ).first()
            if running is not None:
                raise DomainError(
                    "priors-in-use",
                    f"release {running[0]} uses these priors and is still running",
                    status=409,
                    release_id=running[0],
                )
            session.delete(row)
        remove_files(self.data_dir, priors_id)


def load_priors(
    sessions: sessionmaker[Session], data_dir: DataDir, tenant_id: str, priors_id: str
) -> StoredPriors:
    """A tenant's stored priors, whole and in memory (404 for another tenant's, or for priors deleted
    meanwhile): what a feature-aware release plans on before it charges anything."""
    with sessions() as session:
        row = owned(session, Priors, priors_id, tenant_id, "priors")
    try:
        table = pq.read_table(data_dir.priors_groups(priors_id))
        priors = read_matrix(data_dir, priors_id)
        support = tuple(stored_header(data_dir, priors_id).support)
    except FileNotFoundError as exc:  # deleted between the row and its files
        raise not_found("priors", priors_id) from exc
    return StoredPriors(
        id=row.id,
        dataset_id=row.dataset_id,
        recipient_id=row.recipient_id,
        model_id=row.model_id,
        rule=row.rule,
        ids=table.column("example_id").combine_chunks(),
        keys=np.asarray(table.column("example_key").to_numpy(), dtype=np.int64),
        groups=np.asarray(table.column("group").to_numpy(), dtype=np.int64),
        priors=priors,
        support=support,
    )
