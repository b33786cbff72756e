"""``/v1/feature-tables``: uploads with an inferred (overridable) schema, stored as versions."""

import io
from typing import Annotated

import pyarrow.parquet as pq
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from features_party.api.deps import Caller, Releases, Services, Tables
from features_party.api.schemas import FeatureTableOut
from features_party.tables.validation import table_format
from labeldp.common.errors import DomainError
from labeldp.common.inputs import MAX_NAME_CHARS
from labeldp.common.openapi import errors, upload_body
from labeldp.common.pages import Page, Paging
from labeldp.common.spool import spool_body

router = APIRouter(prefix="/v1", tags=["features"])


def _columns(value: str | None) -> list[str]:
    return [c.strip() for c in (value or "").split(",") if c.strip()]


TableName = Annotated[str, Path(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")]


@router.put(
    "/feature-tables/{name}",
    response_model=FeatureTableOut,
    responses={
        201: {"model": FeatureTableOut, "description": "a new table (200: a new version of one)"},
        **errors(
            s413="`payload-too-large`: over the upload limit; `table-too-large`: more columns, rows, "
            "pages or footer than allowed, or it would decode to more than 4 × its body + 64 MiB",
            s415="`unsupported-media-type`: send CSV or Parquet",
            s422="the table, refused whole (nothing stored): `unparseable-upload` (not CSV or Parquet as "
            "declared), `duplicate-column` (a column name twice), `wrong-column-type` (example_id not text "
            "or integers), `unsupported-encoding` (DELTA_BYTE_ARRAY text), `missing-column`, "
            "`missing-example-id`, `invalid-example-id`, `example-id-too-long`, `duplicate-example-id`, "
            "`unparseable-column` (a column's values), `no-features` (no column but example_id), "
            "`unknown-column` (a declared non-sensitive or overridden column the table lacks), "
            "`conflicting-overrides` (one column both categorical and numeric)",
        ),
    },
    openapi_extra=upload_body(
        "text/csv", "application/vnd.apache.parquet", description="`example_id` and feature columns"
    ),
)
async def put_feature_table(
    name: TableName,
    caller: Caller,
    request: Request,
    response: Response,
    svc: Services,
    categorical: Annotated[
        str | None, Query(description="columns to treat as categorical (comma-separated)")
    ] = None,
    numeric: Annotated[str | None, Query(description="columns to treat as numeric (comma-separated)")] = None,
    non_sensitive: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="columns public to an attacker that may be exported for training with semi-sensitive "
            "features (comma-separated)",
        ),
    ] = None,
) -> FeatureTableOut:
    """Upload a feature table (CSV or Parquet) with an ``example_id`` column; replaces the table.
    The schema is inferred and returned; override it with ``categorical=`` / ``numeric=``."""
    if set(_columns(categorical)) & set(_columns(numeric)):
        raise DomainError("conflicting-overrides", "a column cannot be both categorical and numeric")
    overrides = {c: "categorical" for c in _columns(categorical)} | {c: "numeric" for c in _columns(numeric)}
    fmt = table_format(request.headers.get("content-type"))
    settings = svc.settings
    spool = settings.paths().spool(svc.instance.token)  # this process's own folder: cleaned if it dies
    path = await spool_body(request, spool, settings.max_upload_bytes, f".{fmt}")
    try:
        row, created = await run_in_threadpool(
            svc.tables.store, caller.tenant_id, name, path, fmt, overrides, _columns(non_sensitive)
        )
    finally:
        path.unlink(missing_ok=True)
    response.status_code = 201 if created else 200
    return FeatureTableOut.of(row)


@router.get("/feature-tables", response_model=Page[FeatureTableOut])
async def list_feature_tables(
    caller: Caller, tables: Tables, paging: Paging, request: Request, svc: Services
) -> Page[FeatureTableOut]:
    """This tenant's feature tables (a page): rows, columns, version."""
    rows = await svc.sessions.read(lambda: tables.list(caller.tenant_id, paging))
    return Page[FeatureTableOut].of(rows, paging, request, FeatureTableOut.of)


@router.get("/feature-tables/{name}", response_model=FeatureTableOut)
async def get_feature_table(
    name: TableName, caller: Caller, tables: Tables, svc: Services
) -> FeatureTableOut:
    """One feature table: rows, columns and their kinds, version."""
    return FeatureTableOut.of(await svc.sessions.read(lambda: tables.get(caller.tenant_id, name)))


@router.get(
    "/feature-tables/{name}/non-sensitive-rows",
    response_class=Response,
    responses={
        200: {"content": {"application/vnd.apache.parquet": {}}, "description": "example_id + those columns"},
        **errors(s409="`no-non-sensitive-columns`: the table declares none"),
    },
)
def get_non_sensitive_rows(
    name: TableName,
    caller: Caller,
    tables: Tables,
    releases: Releases,
    release_id: Annotated[str, Query(max_length=64, description="a received release")],
) -> Response:
    """The table's declared non-sensitive columns for the release's examples (Parquet), to hand to the
    labels party for training with semi-sensitive features; no other column ever leaves."""
    table = tables.get(caller.tenant_id, name)
    rows = tables.non_sensitive_rows(table, releases.get(caller.tenant_id, release_id))
    sink = io.BytesIO()
    pq.write_table(rows, sink)
    return Response(sink.getvalue(), media_type="application/vnd.apache.parquet")
