"""REST routes for feature tables and joins (per tenant; another tenant's table answers 404)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from features_party.api.auth import caller
from features_party.storage.orm import FeatureTable, ReceivedRelease
from features_party.tables.service import find_table, join_report, store_table
from features_party.tables.validation import FeatureTableError, table_format
from labeldp.common.errors import ProblemError
from labeldp.common.spool import spool_body

router = APIRouter(prefix="/v1")
Auth = Annotated[str, Depends(caller)]


class FeatureTableOut(BaseModel):
    name: str
    version: int
    rows: int
    schema_: dict[str, str] = Field(alias="schema", serialization_alias="schema")
    updated_at: datetime


class JoinIn(BaseModel):
    release_id: str
    feature_table: str


class JoinOut(BaseModel):
    release_id: str
    feature_table: str
    release_examples: int
    feature_rows: int
    in_both: int
    only_in_release: int
    only_in_features: int
    release_match_rate: float
    feature_match_rate: float


def release_and_table(
    sessions: sessionmaker[Session], tenant: str, release_id: str, table_name: str
) -> tuple[ReceivedRelease, FeatureTable]:
    """A received release and one of this tenant's feature tables, or 404 for whichever is missing."""
    with sessions() as s:
        release = s.get(ReceivedRelease, release_id)
        table = find_table(s, tenant, table_name)
    if release is None:
        raise ProblemError(404, "not-found", f"no release {release_id}")
    if table is None:
        raise ProblemError(404, "not-found", f"no feature table {table_name!r}")
    return release, table


def _out(t: FeatureTable) -> FeatureTableOut:
    return FeatureTableOut(
        name=t.name, version=t.version, rows=t.rows, schema=t.schema, updated_at=t.updated_at
    )


def _columns(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]


@router.put("/feature-tables/{name}", response_model=FeatureTableOut, tags=["features"])
async def put_feature_table(
    name: str,
    tenant: Auth,
    request: Request,
    response: Response,
    categorical: Annotated[
        str | None, Query(description="columns to treat as categorical (comma-separated)")
    ] = None,
    numeric: Annotated[str | None, Query(description="columns to treat as numeric (comma-separated)")] = None,
) -> FeatureTableOut:
    """Upload a feature table (CSV or Parquet) with an ``example_id`` column; replaces the table.
    The schema is inferred and returned; override it with ``categorical=`` / ``numeric=``."""
    overrides = {c: "categorical" for c in _columns(categorical)} | {c: "numeric" for c in _columns(numeric)}
    if set(_columns(categorical)) & set(_columns(numeric)):
        raise ProblemError(422, "conflicting-overrides", "a column cannot be both categorical and numeric")
    state = request.app.state
    try:
        fmt = table_format(request.headers.get("content-type"))
        path = await spool_body(
            request, state.settings.data_dir / "tmp", state.settings.max_release_bytes, f".{fmt}"
        )
        try:
            row, created = await run_in_threadpool(
                store_table, state.sessions, state.settings.data_dir, tenant, name, path, fmt, overrides
            )
        finally:
            path.unlink(missing_ok=True)
    except FeatureTableError as exc:
        raise ProblemError(exc.status, exc.code, exc.message, rows=exc.rows, columns=exc.columns) from exc
    response.status_code = 201 if created else 200
    return _out(row)


@router.get("/feature-tables", response_model=list[FeatureTableOut], tags=["features"])
def list_feature_tables(tenant: Auth, request: Request) -> list[FeatureTableOut]:
    with request.app.state.sessions() as s:
        rows = s.execute(
            select(FeatureTable).where(FeatureTable.tenant_id == tenant).order_by(FeatureTable.name)
        )
        return [_out(t) for t in rows.scalars()]


@router.get("/feature-tables/{name}", response_model=FeatureTableOut, tags=["features"])
def get_feature_table(name: str, tenant: Auth, request: Request) -> FeatureTableOut:
    with request.app.state.sessions() as s:
        table = find_table(s, tenant, name)
        if table is None:
            raise ProblemError(404, "not-found", f"no feature table {name!r}")
        return _out(table)


@router.post("/joins", response_model=JoinOut, tags=["features"])
def post_join(body: JoinIn, tenant: Auth, request: Request) -> JoinOut:
    """How a received release and a feature table match by example ID."""
    release, table = release_and_table(
        request.app.state.sessions, tenant, body.release_id, body.feature_table
    )
    report = join_report(release, table, request.app.state.settings.data_dir)
    return JoinOut(
        release_id=body.release_id,
        feature_table=body.feature_table,
        release_examples=report.release_examples,
        feature_rows=report.feature_rows,
        in_both=report.in_both,
        only_in_release=report.only_in_release,
        only_in_features=report.only_in_features,
        release_match_rate=report.release_match_rate,
        feature_match_rate=report.feature_match_rate,
    )
