"""Feature tables (validated uploads stored as versioned Parquet) and the join report — the only place
releases and features meet (the counting itself: ``joins``).

Each upload is a new version file; the versions it supersedes are deleted once superseded for a grace
period (``collect_versions``, run periodically), so that a reader that looked the table up just before
an upload still finds the file it was told of — and never while a queued or running training job
reads it (the job records its version)."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party.storage.data_dir import DataDir
from features_party.storage.orm import FeatureTable, ReceivedRelease
from features_party.tables import joins
from features_party.tables.joins import JoinReport
from features_party.tables.validation import Limits, ValidTable, read, validate
from labeldp.common.db import utcnow
from labeldp.common.errors import DomainError, not_found
from labeldp.common.files import release_arrow_memory, write_parquet_atomic
from labeldp.common.inputs import is_clean_text
from labeldp.common.pages import PageRequest


def find_table(session: Session, tenant_id: str, name: str) -> FeatureTable | None:
    return session.execute(
        select(FeatureTable).where(FeatureTable.tenant_id == tenant_id, FeatureTable.name == name)
    ).scalar_one_or_none()


log = logging.getLogger("labeldp.features")
# a version file (or a new table's folder) no committed row names is left this long at least, whatever the
# grace: an upload writes its file inside the transaction that then commits the row naming it
UNCOMMITTED_S = 300.0


class FeatureTables:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: DataDir,
        *,
        scheduler: str | None = None,
        max_upload_bytes: int = 4 * 2**30,
    ) -> None:
        self.sessions, self.data_dir, self.scheduler = sessions, data_dir, scheduler
        self.limits = Limits.for_uploads_of(max_upload_bytes)

    def get(self, tenant_id: str, name: str) -> FeatureTable:
        """A tenant's table by name; another tenant's answers 404 like a missing one."""
        if not is_clean_text(name):
            raise not_found("feature table", repr(name))
        with self.sessions() as session:
            table = find_table(session, tenant_id, name)
        if table is None:
            raise not_found("feature table", repr(name))
        return table

    def list(self, tenant_id: str, paging: PageRequest) -> list[FeatureTable]:
        """By name (a table is replaced in place, so its creation time would move it)."""
        with self.sessions() as session:
            query = (
                select(FeatureTable).where(FeatureTable.tenant_id == tenant_id).order_by(FeatureTable.name)
            )
            return list(session.execute(paging.window(query)).scalars())

    def path(self, table: FeatureTable, version: int | None = None) -> Path:
        return self.data_dir.table(table.id, table.version if version is None else version)

    def read(self, table: FeatureTable, version: int | None = None) -> pa.Table:
        return pq.read_table(self.path(table, version))

    def store(
        self,
        tenant_id: str,
        name: str,
        path: Path,
        fmt: str,
        overrides: dict[str, str],
        non_sensitive: Sequence[str] = (),
    ) -> tuple[FeatureTable, bool]:
        """Validate completely, then store as a new version (replacing the table). Returns (row, created).
        ``non_sensitive`` names the columns this party may export for training with semi-sensitive
        features (public to an attacker by definition)."""
        try:
            valid: ValidTable = validate(read(path, fmt, self.limits), overrides)
        finally:  # what reading took (refused or not): Arrow's allocator would keep it
            release_arrow_memory()
        declared = [*dict.fromkeys(non_sensitive)]
        unknown = sorted(set(declared) - set(valid.schema))
        if unknown:
            raise DomainError(
                "unknown-column", f"non_sensitive names columns the table lacks: {unknown}", columns=unknown
            )
        with self.sessions.begin() as session:
            row = find_table(session, tenant_id, name)
            created = row is None
            if row is None:
                row = FeatureTable(
                    id=str(uuid.uuid4()), tenant_id=tenant_id, name=name, version=0, rows=0, schema={}
                )
                session.add(row)
                session.flush()
            version = row.version + 1
            write_parquet_atomic(self.data_dir.table(row.id, version), valid.table)
            row.version, row.rows, row.schema, row.updated_at = (
                version,
                valid.table.num_rows,
                valid.schema,
                utcnow(),
            )
            row.non_sensitive = declared
        return row, created

    def non_sensitive_rows(self, table: FeatureTable, release: ReceivedRelease) -> pa.Table:
        """The declared non-sensitive columns of the release's examples that the table has, in the
        release's order: what the labels party needs for the DP-SGD phase, and nothing else."""
        if not table.non_sensitive:
            raise DomainError(
                "no-non-sensitive-columns",
                f"feature table {table.name!r} declares no non_sensitive columns",
                status=409,
            )
        ids = pq.read_table(Path(release.path), columns=["example_id"]).column("example_id").combine_chunks()
        rows = pq.read_table(self.path(table), columns=["example_id", *table.non_sensitive])
        position = pc.index_in(ids, value_set=rows.column("example_id"))
        return rows.take(pc.drop_null(position))

    def join_report(self, release: ReceivedRelease, table: FeatureTable) -> JoinReport:
        """On the configured Dask cluster for large inputs, in this process otherwise (``joins``)."""
        return joins.report(Path(release.path), self.path(table), self.scheduler)

    def collect_versions(self, in_use: Callable[[], Collection[tuple[str, int]]], grace_s: float) -> int:
        """Delete the version files no reader can still need: not a table's current version, not one a
        queued or running job reads (``in_use()``: (table id, version)), and superseded — by the next
        version written — more than ``grace_s`` ago; a file no committed row names (an upload that
        crashed between its file and its row) once it is older than ``grace_s`` and ``UNCOMMITTED_S``
        (an upload writes its file inside the transaction that commits its row: younger, it may be
        about to commit). Returns how many files were deleted.

        ``in_use`` is asked after the current versions and the files are read: a job committed before
        its version was superseded is then always seen (asked first, a job and an upload committed in
        between lost their version at a grace of 0; the grace covers a job still committing). Files
        and folders another worker's collection removes meanwhile are skipped."""
        root = self.data_dir.tables
        if not root.is_dir():
            return 0
        with self.sessions() as session:
            found = session.execute(select(FeatureTable.id, FeatureTable.version)).all()
        current = {table_id: version for table_id, version in found}
        folders = []
        for folder in root.iterdir():
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                folders.append((folder, self.data_dir.table_versions(folder)))
        needed = in_use()
        now, removed = time.time(), 0
        for folder, versions in folders:
            written: dict[int, float] = {}
            for v, p in versions.items():
                with contextlib.suppress(FileNotFoundError):
                    written[v] = p.stat().st_mtime
            latest = current.get(folder.name)
            for version, path in sorted(versions.items()):
                if version == latest or (folder.name, version) in needed or version not in written:
                    continue
                newer = [t for v, t in written.items() if v > version]
                if latest is not None and version < latest and newer:  # superseded
                    old_enough = now - min(newer) > grace_s
                else:  # no committed row names it
                    old_enough = now - written[version] > max(grace_s, UNCOMMITTED_S)
                if old_enough:
                    path.unlink(missing_ok=True)
                    removed += 1
            if latest is None:
                with contextlib.suppress(OSError):  # gone already, or a new upload is writing into it
                    if not any(folder.iterdir()) and now - folder.stat().st_mtime > max(
                        grace_s, UNCOMMITTED_S
                    ):
                        folder.rmdir()  # a first upload that never committed
        if removed:
            log.info("removed superseded feature-table versions", extra={"examples": removed})
        return removed
