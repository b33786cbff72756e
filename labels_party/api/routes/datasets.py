"""``/v1/datasets``: public specs, label uploads and the release universe."""

from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from labeldp.common.openapi import errors, upload_body
from labeldp.common.pages import Page, Paging
from labeldp.common.spool import spool_body
from labels_party.api.deps import Caller, Datasets, Services
from labels_party.api.schemas.datasets import DatasetIn, DatasetOut, UploadOut
from labels_party.datasets.readers import upload_format
from labels_party.datasets.spec import DatasetSpec

UPLOAD_TYPES = ("text/csv", "application/x-ndjson", "application/vnd.apache.parquet")
UPLOAD_ERRORS = errors(
    s413="`payload-too-large`: over the upload limit",
    s415="`unsupported-media-type`: send CSV, NDJSON or Parquet",
    s422="the file, refused whole (nothing stored): `unparseable-upload` (not CSV, NDJSON or Parquet as "
    "declared), `row-too-long`, `missing-column`, `duplicate-column`, `wrong-column-type`, "
    "`missing-example-id`, `invalid-example-id`, `example-id-too-long`, `duplicate-example-id`, "
    "`invalid-label`, `wrong-label-type`, `out-of-bounds` (a label outside the declared bounds), "
    "`invalid-user-id`, `user-id-conflict` (an example's user differs from the universe's), "
    "`invalid-non-sensitive`, `invalid-semi-sensitive` (a declared column's value)",
)
router = APIRouter(prefix="/v1", tags=["datasets"])


@router.post(
    "/datasets",
    status_code=201,
    response_model=DatasetOut,
    responses=errors(
        s409="`dataset-exists`: the tenant has a dataset of that name",
        s422="`invalid-loss`: a loss the label type does not take; `invalid-parameter`: a grid or bound "
        "the mechanisms refuse (e.g. more than 10,000 support points)",
    ),
)
def create_dataset(body: DatasetIn, caller: Caller, datasets: Datasets) -> DatasetOut:
    """Declare a dataset's public parameters: label type, bounds, support grid, policies."""
    spec = DatasetSpec.model_validate(body.model_dump(exclude={"name"}))
    return DatasetOut.of(datasets.create(caller.tenant_id, body.name, spec))


@router.get("/datasets", response_model=Page[DatasetOut])
async def list_datasets(
    caller: Caller, datasets: Datasets, paging: Paging, request: Request, svc: Services
) -> Page[DatasetOut]:
    """This tenant's datasets with their public parameters and counts (a page)."""
    rows = await svc.sessions.read(lambda: datasets.list(caller.tenant_id, paging))
    return Page[DatasetOut].of(rows, paging, request, DatasetOut.of)


@router.get("/datasets/{dataset_id}", response_model=DatasetOut)
async def get_dataset(dataset_id: str, caller: Caller, datasets: Datasets, svc: Services) -> DatasetOut:
    """A dataset's public parameters and counts."""
    return DatasetOut.of(await svc.sessions.read(lambda: datasets.get(caller.tenant_id, dataset_id)))


@router.delete(
    "/datasets/{dataset_id}",
    status_code=204,
    response_class=Response,
    responses=errors(s409="`dataset-in-use`: a release or a model names it (nothing is deleted)"),
)
def delete_dataset(dataset_id: str, caller: Caller, datasets: Datasets) -> Response:
    """Delete a dataset nothing was released from, with its labels, universe and non-sensitive rows
    (e.g. canaries whose check failed before their release). The ledger keeps every charge."""
    datasets.delete(caller.tenant_id, dataset_id)
    return Response(status_code=204)


async def _spool(request: Request, svc: Services) -> tuple[Path, str]:
    """Stream the body to a temporary file (bounded memory), enforcing the size limit."""
    fmt = upload_format(request.headers.get("content-type"))
    settings = svc.settings
    spool = settings.paths().spool(svc.instance.token)  # this process's own folder: cleaned if it dies
    return await spool_body(request, spool, settings.max_upload_bytes, f".{fmt}"), fmt


@router.put(
    "/datasets/{dataset_id}/labels",
    response_model=UploadOut,
    responses=UPLOAD_ERRORS,
    openapi_extra=upload_body(
        "text/csv",
        "application/x-ndjson",
        "application/vnd.apache.parquet",
        description="`example_id,label[,user_id]`",
    ),
)
async def put_labels(dataset_id: str, caller: Caller, request: Request, svc: Services) -> UploadOut:
    """Upload labels (CSV, NDJSON or Parquet by Content-Type) with ``example_id,label[,user_id]``;
    upserts by example ID. Validated completely first: a failed upload changes nothing. With a
    universe, a row's ``user_id`` may only repeat the user the universe declares for its example (or be
    empty): ``422 user-id-conflict`` otherwise."""
    svc.datasets.get(caller.tenant_id, dataset_id)
    path, fmt = await _spool(request, svc)
    try:
        stored = await run_in_threadpool(svc.datasets.store_labels, caller.tenant_id, dataset_id, path, fmt)
    finally:
        path.unlink(missing_ok=True)
    return UploadOut(
        rows=stored.rows, clipped=stored.clipped, label_count=stored.label_count, version=stored.version
    )


@router.put(
    "/datasets/{dataset_id}/non-sensitive-features",
    response_model=UploadOut,
    responses={
        **UPLOAD_ERRORS,
        **errors(s409="`no-non-sensitive-columns`: the dataset declares no non_sensitive columns"),
    },
    openapi_extra=upload_body(
        *UPLOAD_TYPES, description="`example_id` and the declared non_sensitive columns"
    ),
)
async def put_non_sensitive(dataset_id: str, caller: Caller, request: Request, svc: Services) -> UploadOut:
    """The features party's non-sensitive rows for training with semi-sensitive features (public to
    an attacker by definition: storing them costs no privacy). Replaces the previous rows."""
    svc.datasets.get(caller.tenant_id, dataset_id)
    path, fmt = await _spool(request, svc)
    try:
        stored = await run_in_threadpool(
            svc.datasets.store_non_sensitive, caller.tenant_id, dataset_id, path, fmt
        )
    finally:
        path.unlink(missing_ok=True)
    return UploadOut(rows=stored.rows, version=stored.version)


@router.put(
    "/datasets/{dataset_id}/universe",
    response_model=UploadOut,
    responses={
        **UPLOAD_ERRORS,
        **errors(s409="`user-id-conflict`: the universe gives a stored label row's example another user"),
    },
    openapi_extra=upload_body(
        "text/csv",
        "application/x-ndjson",
        "application/vnd.apache.parquet",
        description="`example_id[,user_id]`",
    ),
)
async def put_universe(dataset_id: str, caller: Caller, request: Request, svc: Services) -> UploadOut:
    """Declare every example ID a release lists (e.g. all clicks), labelled or not, so that the
    message does not reveal which examples have labels, and optionally each one's ``user_id``. With a
    universe, users come from it alone (whether an example has a label row must change nothing else):
    label rows may repeat an example's user or leave it empty, and a universe that the stored label
    rows contradict is refused (422 ``user-id-conflict``). Replaces the previous universe."""
    svc.datasets.get(caller.tenant_id, dataset_id)
    path, fmt = await _spool(request, svc)
    try:
        stored = await run_in_threadpool(svc.datasets.store_universe, caller.tenant_id, dataset_id, path, fmt)
    finally:
        path.unlink(missing_ok=True)
    return UploadOut(
        rows=stored.rows, universe_count=stored.rows, universe_users=stored.users, version=stored.version
    )
