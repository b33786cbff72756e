"""``/v1/releases``: releases received and verified by the gRPC receiver, and their exports — the
training set (the release joined to a feature table) and the released values alone — for trainers
outside the service (``features_party.exports``)."""

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from features_party.api.deps import Caller, ExportService, Releases, Services
from features_party.api.routes.feature_tables import TableName
from features_party.api.schemas import ReceivedReleaseOut
from features_party.exports import MEDIA_TYPES, Export
from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["releases"])

Format = Annotated[
    Literal["parquet", "arrow"],
    Query(description="`parquet` (default) or `arrow`: the Arrow IPC stream format, readable as it arrives"),
]
Offset = Annotated[
    int,
    Query(
        ge=0,
        le=1_000_000_000,
        description="the first row group to send: to resume, the number of row groups already received",
    ),
]
Count = Annotated[
    int | None,
    Query(ge=1, le=1_000_000_000, description="at most this many row groups (default: to the end)"),
]
STREAM_HEADERS = {
    "X-Row-Groups": {"description": "row groups in the whole export", "schema": {"type": "integer"}},
    "X-Row-Group-Offset": {
        "description": "the first row group in this answer",
        "schema": {"type": "integer"},
    },
    "X-Row-Group-Count": {"description": "row groups in this answer", "schema": {"type": "integer"}},
}
EXPORT_ERRORS = errors(
    s404="`not-found`: no such received release (or another tenant's), or no such feature table",
    s409="`feature-table-version-gone`: the version asked for is no longer stored; `reserved-column`: "
    "the feature table has a column named like one of the export's own (released_bin, released_value; "
    "for a feature-aware release also released_group, unbiased_target, target_weight)",
    s422="`row-group-offset-past-end`: the offset is past the export's last row group",
    s429="`too-many-exports`: this process streams LABELDP_FEATURES_MAX_CONCURRENT_EXPORTS exports "
    "already; retry after `Retry-After` seconds",
)


def _streamed(export: Export) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        """The export's bytes from the thread pool; when the client leaves, the cancellation reaches
        this frame once the chunk in progress is done, and the export is closed at once (its files
        and its slot freed), not whenever the garbage collector gets to it."""
        try:
            async for chunk in iterate_in_threadpool(export.chunks):
                yield chunk
        finally:
            export.chunks.close()

    return StreamingResponse(
        body(),
        media_type=export.media_type,
        headers={**export.headers, "Content-Disposition": f'attachment; filename="{export.filename}"'},
    )


def _binary(description: str) -> dict[int | str, dict[str, object]]:
    return {
        200: {
            "content": {media: {} for media in MEDIA_TYPES.values()},
            "description": description,
            "headers": STREAM_HEADERS,
        },
        **EXPORT_ERRORS,
    }


@router.get("/releases", response_model=Page[ReceivedReleaseOut])
async def list_received_releases(
    caller: Caller, releases: Releases, paging: Paging, request: Request, svc: Services
) -> Page[ReceivedReleaseOut]:
    """Releases received and verified by the gRPC receiver from this tenant's pinned senders, with their
    signed metadata."""
    rows = await svc.sessions.read(lambda: releases.list(caller.tenant_id, paging))
    return Page[ReceivedReleaseOut].of(rows, paging, request, ReceivedReleaseOut.of)


@router.get("/releases/{release_id}", response_model=ReceivedReleaseOut)
async def get_received_release(
    release_id: str, caller: Caller, releases: Releases, svc: Services
) -> ReceivedReleaseOut:
    """One received release: its sender, size, mechanism and signed guarantee."""
    return ReceivedReleaseOut.of(await svc.sessions.read(lambda: releases.get(caller.tenant_id, release_id)))


@router.get(
    "/releases/{release_id}/training-set",
    response_class=StreamingResponse,
    responses=_binary(
        "example_id, the feature columns, released_bin and released_value of every feature row with a "
        "released label; the release's description in the schema metadata (labeldp.training_set)"
    ),
)
def get_training_set(
    release_id: str,
    feature_table: Annotated[TableName, Query(description="the feature table to join the release to")],
    caller: Caller,
    exports: ExportService,
    format: Format = "parquet",
    row_group_offset: Offset = 0,
    row_groups: Count = None,
    feature_table_version: Annotated[
        int | None, Query(ge=1, description="the table version an export began with (to resume it)")
    ] = None,
) -> StreamingResponse:
    """The release joined to a feature table, to train in your own stack: the table's rows whose example
    has a released label, with its released bin and value, streamed a row group at a time (Parquet, or
    the Arrow IPC stream), resumable by row-group offset. Correct for the noise with ``labeldp_model``."""
    return _streamed(
        exports.training_set(
            caller.tenant_id,
            release_id,
            feature_table,
            format,
            row_group_offset,
            row_groups,
            feature_table_version,
        )
    )


@router.get(
    "/releases/{release_id}/released-values",
    response_class=StreamingResponse,
    responses=_binary(
        "example_id, released_bin and released_value (null for a capped row) of every example of the "
        "release; its description in the schema metadata"
    ),
)
def get_released_values(
    release_id: str,
    caller: Caller,
    exports: ExportService,
    format: Format = "parquet",
    row_group_offset: Offset = 0,
    row_groups: Count = None,
) -> StreamingResponse:
    """The released values alone, to join to features in your own warehouse: every example ID with its
    released bin and value, streamed a row group at a time, resumable by row-group offset."""
    return _streamed(
        exports.released_values(caller.tenant_id, release_id, format, row_group_offset, row_groups)
    )
