"""Feature-table storage and the join report (the only place releases and features meet)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party.storage.orm import FeatureTable, ReceivedRelease, utcnow
from features_party.tables.validation import ValidTable, read, validate
from labeldp.common.files import write_parquet_atomic


def table_path(data_dir: Path, table_id: str, version: int) -> Path:
    return data_dir / "feature-tables" / table_id / f"v{version}.parquet"


def find_table(session: Session, tenant_id: str, name: str) -> FeatureTable | None:
    return session.execute(
        select(FeatureTable).where(FeatureTable.tenant_id == tenant_id, FeatureTable.name == name)
    ).scalar_one_or_none()


def store_table(
    sessions: sessionmaker[Session],
    data_dir: Path,
    tenant_id: str,
    name: str,
    path: Path,
    fmt: str,
    overrides: dict[str, str],
) -> tuple[FeatureTable, bool]:
    """Validate completely, then store as a new version (replacing the table). Returns (row, created)."""
    valid: ValidTable = validate(read(path, fmt), overrides)
    with sessions.begin() as session:
        row = find_table(session, tenant_id, name)
        created = row is None
        if row is None:
            row = FeatureTable(
                id=str(uuid.uuid4()), tenant_id=tenant_id, name=name, version=0, rows=0, schema={}
            )
            session.add(row)
            session.flush()
        version = row.version + 1
        write_parquet_atomic(table_path(data_dir, row.id, version), valid.table)
        row.version, row.rows, row.schema, row.updated_at = (
            version,
            valid.table.num_rows,
            valid.schema,
            utcnow(),
        )
    return row, created


@dataclass(frozen=True)
class JoinReport:
    release_examples: int
    feature_rows: int
    in_both: int
    only_in_release: int
    only_in_features: int

    @property
    def release_match_rate(self) -> float:
        return self.in_both / self.release_examples if self.release_examples else 0.0

    @property
    def feature_match_rate(self) -> float:
        return self.in_both / self.feature_rows if self.feature_rows else 0.0


def join_report(release: ReceivedRelease, table: FeatureTable, data_dir: Path) -> JoinReport:
    """Match counts by example ID, reading only the two ID columns, each once."""
    release_ids = pq.read_table(release.path, columns=["example_id"]).column("example_id").combine_chunks()
    feature_ids = (
        pq.read_table(table_path(data_dir, table.id, table.version), columns=["example_id"])
        .column("example_id")
        .combine_chunks()
    )
    in_both = int(pc.sum(pc.is_in(release_ids, value_set=feature_ids)).as_py() or 0)
    return JoinReport(
        len(release_ids), len(feature_ids), in_both, len(release_ids) - in_both, len(feature_ids) - in_both
    )
