"""REST routes under /v1. Another tenant's resources answer 404, exactly like missing ones."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from labeldp.common.errors import ProblemError
from labeldp.common.identity import public_key_pem
from labeldp.common.spool import spool_body
from labels_party.api.auth import Caller, caller
from labels_party.api.schemas import (
    BudgetOut,
    DatasetIn,
    DatasetOut,
    DeliveryOut,
    IdentityOut,
    LedgerEntryOut,
    Page,
    RecipientIn,
    RecipientOut,
    ReleaseIn,
    ReleaseOut,
    UploadOut,
)
from labels_party.budget.epsilon import as_float, to_micro
from labels_party.budget.ledger import BudgetExhaustedError, spend_summary
from labels_party.datasets.service import (
    DatasetNotFoundError,
    create_dataset,
    get_dataset,
    store_labels,
    store_universe,
)
from labels_party.datasets.spec import DatasetSpec
from labels_party.datasets.store import DatasetFiles
from labels_party.datasets.uploads import UploadError, upload_format
from labels_party.delivery.service import DeliveryError, deliver_release
from labels_party.releases.service import (
    ReleaseError,
    ReleaseRequest,
    create_release,
    preview,
    release_path,
)
from labels_party.storage.orm import Dataset, Delivery, LedgerEntry, Recipient, Release, Tenant

router = APIRouter(prefix="/v1")
Auth = Annotated[Caller, Depends(caller)]
MAX_PAGE = 1000


def _dataset_out(ds: Dataset) -> DatasetOut:
    return DatasetOut(
        id=ds.id,
        name=ds.name,
        spec=ds.spec,
        support_size=DatasetSpec.model_validate(ds.spec).build_support().k,
        label_count=ds.label_count,
        universe_count=ds.universe_count,
        created_at=ds.created_at,
    )


def _release_out(r: Release) -> ReleaseOut:
    mech = r.mechanism or {}
    expected = mech.get("expected_loss_under_noisy_prior")
    bins = mech.get("bin_values")
    return ReleaseOut(
        id=r.id,
        dataset_id=r.dataset_id,
        status=r.status,
        recipient_id=r.recipient_id,
        epsilon=as_float(r.epsilon_micro),
        epsilon_charged_micro=r.epsilon_micro,
        epsilon_prior=r.epsilon_prior,
        loss=r.loss,
        examples=r.examples,
        bins=[float(b) for b in bins] if isinstance(bins, list) else None,
        expected_loss_under_noisy_prior=float(expected) if isinstance(expected, int | float) else None,
        mechanism=r.mechanism,
        error=r.error,
        created_at=r.created_at,
        completed_at=r.completed_at,
    )


def _not_found(what: str, ident: str) -> ProblemError:
    return ProblemError(404, "not-found", f"no {what} {ident}")


# -- identity and recipients -------------------------------------------------------------------
@router.get("/identity", response_model=IdentityOut, tags=["identity"])
def get_identity(who: Auth, request: Request) -> IdentityOut:
    """This party's signing key: recipients pin it (``POST /v1/senders`` on the features party)."""
    signer = request.app.state.signer
    return IdentityOut(
        party_id=signer.party_id,
        key_id=signer.identity.key_id,
        public_key_pem=public_key_pem(signer.identity.public_key),
    )


def _recipient_out(r: Recipient) -> RecipientOut:
    return RecipientOut(
        id=r.id,
        name=r.name,
        grpc_address=r.grpc_address,
        fingerprint=r.fingerprint,
        tls=bool(r.tls_ca_pem),
        created_at=r.created_at,
    )


@router.post("/recipients", status_code=201, response_model=RecipientOut, tags=["recipients"])
def register_recipient(body: RecipientIn, who: Auth, request: Request) -> RecipientOut:
    """Register a features party that releases may be addressed to (and delivered to)."""
    if body.tls_ca_pem is not None and "BEGIN CERTIFICATE" not in body.tls_ca_pem:
        raise ProblemError(422, "invalid-certificate", "tls_ca_pem must be a PEM certificate")
    try:
        with request.app.state.sessions.begin() as s:
            rec = Recipient(
                id=str(uuid.uuid4()),
                tenant_id=who.tenant_id,
                name=body.name,
                grpc_address=body.grpc_address,
                tls_ca_pem=body.tls_ca_pem,
                fingerprint=body.fingerprint,
            )
            s.add(rec)
            s.flush()
            return _recipient_out(rec)
    except IntegrityError as exc:
        raise ProblemError(
            409, "recipient-exists", f"a recipient named {body.name!r} already exists"
        ) from exc


@router.get("/recipients", response_model=list[RecipientOut], tags=["recipients"])
def list_recipients(who: Auth, request: Request) -> list[RecipientOut]:
    with request.app.state.sessions() as s:
        rows = s.execute(select(Recipient).where(Recipient.tenant_id == who.tenant_id)).scalars()
        return [_recipient_out(r) for r in rows]


# -- datasets ----------------------------------------------------------------------------------
@router.post("/datasets", status_code=201, response_model=DatasetOut, tags=["datasets"])
def post_dataset(body: DatasetIn, who: Auth, request: Request) -> DatasetOut:
    """Declare a dataset's public parameters: label type, bounds, support grid, policies."""
    spec = DatasetSpec.model_validate(body.model_dump(exclude={"name"}))
    with request.app.state.sessions.begin() as s:
        return _dataset_out(create_dataset(s, who.tenant_id, body.name, spec))


@router.get("/datasets", response_model=list[DatasetOut], tags=["datasets"])
def list_datasets(who: Auth, request: Request) -> list[DatasetOut]:
    with request.app.state.sessions() as s:
        rows = s.execute(
            select(Dataset).where(Dataset.tenant_id == who.tenant_id).order_by(Dataset.created_at)
        )
        return [_dataset_out(d) for d in rows.scalars()]


@router.get("/datasets/{dataset_id}", response_model=DatasetOut, tags=["datasets"])
def get_dataset_route(dataset_id: str, who: Auth, request: Request) -> DatasetOut:
    with request.app.state.sessions() as s:
        try:
            return _dataset_out(get_dataset(s, who.tenant_id, dataset_id))
        except DatasetNotFoundError as exc:
            raise _not_found("dataset", dataset_id) from exc


async def _spool(request: Request) -> tuple[Path, str]:
    """Stream the body to a temporary file (bounded memory), enforcing the size limit."""
    fmt = upload_format(request.headers.get("content-type"))
    settings = request.app.state.settings
    return await spool_body(request, settings.data_dir / "tmp", settings.max_upload_bytes, f".{fmt}"), fmt


def _upload_problem(exc: UploadError) -> ProblemError:
    return ProblemError(exc.status, exc.code, exc.message, rows=exc.rows)


@router.put("/datasets/{dataset_id}/labels", response_model=UploadOut, tags=["datasets"])
async def put_labels(dataset_id: str, who: Auth, request: Request) -> UploadOut:
    """Upload labels (CSV, NDJSON or Parquet by Content-Type) with ``example_id,label[,user_id]``;
    upserts by example ID. Validated completely first: a failed upload changes nothing."""
    state = request.app.state
    try:
        path, fmt = await _spool(request)
        try:
            rows, clipped, count, version = await run_in_threadpool(
                store_labels, state.sessions, state.settings.data_dir, who.tenant_id, dataset_id, path, fmt
            )
        finally:
            path.unlink(missing_ok=True)
    except UploadError as exc:
        raise _upload_problem(exc) from exc
    except DatasetNotFoundError as exc:
        raise _not_found("dataset", dataset_id) from exc
    return UploadOut(rows=rows, clipped=clipped, label_count=count, version=version)


@router.put("/datasets/{dataset_id}/universe", response_model=UploadOut, tags=["datasets"])
async def put_universe(dataset_id: str, who: Auth, request: Request) -> UploadOut:
    """Declare every example ID a release lists (e.g. all clicks), labelled or not, so that the
    message does not reveal which examples have labels. Replaces the previous universe."""
    state = request.app.state
    try:
        path, fmt = await _spool(request)
        try:
            rows, version = await run_in_threadpool(
                store_universe, state.sessions, state.settings.data_dir, who.tenant_id, dataset_id, path, fmt
            )
        finally:
            path.unlink(missing_ok=True)
    except UploadError as exc:
        raise _upload_problem(exc) from exc
    except DatasetNotFoundError as exc:
        raise _not_found("dataset", dataset_id) from exc
    return UploadOut(rows=rows, universe_count=rows, version=version)


# -- releases ----------------------------------------------------------------------------------
def _release_request(body: ReleaseIn) -> ReleaseRequest:
    return ReleaseRequest(body.epsilon, body.loss, body.recipient, body.epsilon_prior, body.example_ids)


def _release_problem(exc: ReleaseError) -> ProblemError:
    return ProblemError(exc.status, exc.code, exc.message)


@router.post("/datasets/{dataset_id}/releases", status_code=201, response_model=ReleaseOut, tags=["releases"])
def post_release(
    dataset_id: str,
    body: ReleaseIn,
    who: Auth,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> ReleaseOut:
    """Charge the budget, then privatize every label once. Needs an ``Idempotency-Key`` header:
    the same key with the same body returns the original release and charges nothing."""
    if not idempotency_key:
        raise ProblemError(
            400, "idempotency-key-required", "send an Idempotency-Key header with every release"
        )
    state = request.app.state
    count = state.metrics.releases.labels
    try:
        release, created = create_release(
            state.sessions,
            state.settings.data_dir,
            who.tenant_id,
            who.api_key_id,
            dataset_id,
            _release_request(body),
            idempotency_key,
            state.signer,
        )
    except ReleaseError as exc:
        count("rejected").inc()
        raise _release_problem(exc) from exc
    except BudgetExhaustedError as exc:
        count("budget_exhausted").inc()
        raise ProblemError(
            409,
            "budget-exhausted",
            str(exc),
            examples_lacking_budget=exc.lacking,
            examples_requested=exc.requested,
        ) from exc
    except Exception:
        count("error").inc()
        raise
    if created:
        count("created").inc()
        epsilon = as_float(release.epsilon_micro)
        state.metrics.epsilon_charged.inc(epsilon)
        state.metrics.example_epsilon_charged.inc(epsilon * release.examples)
        state.metrics.examples_released.inc(release.examples)
    else:
        count("replayed").inc()
        response.status_code = 200
    return _release_out(release)


@router.post("/datasets/{dataset_id}/releases:preview", tags=["releases"])
def preview_release(dataset_id: str, body: ReleaseIn, who: Auth, request: Request) -> dict[str, object]:
    """Free: the bins and expected loss a release would have. Spends nothing, draws no noise."""
    state = request.app.state
    try:
        return preview(
            state.sessions, state.settings.data_dir, who.tenant_id, dataset_id, _release_request(body)
        )
    except ReleaseError as exc:
        raise _release_problem(exc) from exc


@router.get("/datasets/{dataset_id}/releases", response_model=list[ReleaseOut], tags=["releases"])
def list_releases(dataset_id: str, who: Auth, request: Request) -> list[ReleaseOut]:
    with request.app.state.sessions() as s:
        try:
            get_dataset(s, who.tenant_id, dataset_id)
        except DatasetNotFoundError as exc:
            raise _not_found("dataset", dataset_id) from exc
        rows = s.execute(
            select(Release).where(Release.dataset_id == dataset_id).order_by(Release.created_at)
        ).scalars()
        return [_release_out(r) for r in rows]


@router.get("/releases/{release_id}", response_model=ReleaseOut, tags=["releases"])
def get_release(release_id: str, who: Auth, request: Request) -> ReleaseOut:
    with request.app.state.sessions() as s:
        r = s.get(Release, release_id)
        if r is None or r.tenant_id != who.tenant_id:
            raise _not_found("release", release_id)
        return _release_out(r)


@router.get("/releases/{release_id}/noisy-labels", tags=["releases"])
def get_noisy_labels(release_id: str, who: Auth, request: Request) -> Response:
    """The stored output (Parquet: example_id, bin) exactly as it will be delivered; reading it is free."""
    with request.app.state.sessions() as s:
        r = s.get(Release, release_id)
        if r is None or r.tenant_id != who.tenant_id:
            raise _not_found("release", release_id)
        if r.status != "complete":
            raise ProblemError(409, "release-not-complete", f"release {release_id} is {r.status}")
    path = release_path(request.app.state.settings.data_dir, release_id)
    return FileResponse(path, media_type="application/vnd.apache.parquet", filename=f"{release_id}.parquet")


# -- budget and ledger -------------------------------------------------------------------------
@router.get("/datasets/{dataset_id}/budget", response_model=BudgetOut, tags=["budget"])
def get_budget(
    dataset_id: str,
    who: Auth,
    request: Request,
    epsilon: Annotated[float, Query(gt=0, description="how many examples could still take this ε")] = 1.0,
) -> BudgetOut:
    state = request.app.state
    with state.sessions() as s:
        try:
            ds = get_dataset(s, who.tenant_id, dataset_id)
        except DatasetNotFoundError as exc:
            raise _not_found("dataset", dataset_id) from exc
        tenant = s.get(Tenant, who.tenant_id)
        assert tenant is not None
        files = DatasetFiles(state.settings.data_dir, ds.id)
        keys = np.asarray(files.covered_keys(ds.labels_version, ds.universe_version), dtype=np.int64)
        summary = spend_summary(s, who.tenant_id, keys, to_micro(epsilon))
    return BudgetOut(
        per_example_budget=as_float(tenant.budget_micro),
        examples=summary.examples,
        max_spent=as_float(summary.max_spent_micro),
        min_spent=as_float(summary.min_spent_micro),
        epsilon_asked=epsilon,
        can_take=summary.can_take,
    )


@router.get("/ledger", response_model=Page, tags=["budget"])
def get_ledger(
    who: Auth,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Page:
    """Append-only ledger entries of this tenant, oldest first."""
    with request.app.state.sessions() as s:
        total = s.execute(
            select(func.count()).select_from(LedgerEntry).where(LedgerEntry.tenant_id == who.tenant_id)
        ).scalar_one()
        rows = s.execute(
            select(LedgerEntry)
            .where(LedgerEntry.tenant_id == who.tenant_id)
            .order_by(LedgerEntry.id)
            .limit(limit)
            .offset(offset)
        ).scalars()
        items = [
            LedgerEntryOut(
                id=e.id,
                kind=e.kind,
                release_id=e.release_id,
                epsilon=as_float(e.epsilon_micro),
                epsilon_micro=e.epsilon_micro,
                examples=e.examples,
                api_key_id=e.api_key_id,
                note=e.note,
                created_at=e.created_at,
            )
            for e in rows
        ]
    return Page(items=items, next_offset=offset + limit if offset + limit < total else None)


# -- delivery ----------------------------------------------------------------------------------
def _delivery_out(d: Delivery) -> DeliveryOut:
    return DeliveryOut(
        id=d.id,
        release_id=d.release_id,
        recipient_id=d.recipient_id,
        outcome=d.outcome,
        attempts=d.attempts,
        status=d.status,
        detail=d.detail,
        receipt_sha256=d.receipt_sha256,
        wire_bytes=d.wire_bytes,
        started_at=d.started_at,
        finished_at=d.finished_at,
    )


@router.post(
    "/releases/{release_id}/deliveries", status_code=201, response_model=DeliveryOut, tags=["delivery"]
)
def post_delivery(release_id: str, who: Auth, request: Request) -> DeliveryOut:
    """Stream the release's stored signed message to its recipient over gRPC. Re-delivery sends the
    same bytes and spends nothing. A recipient that refuses it answers 502 with its gRPC status."""
    count = request.app.state.metrics.deliveries.labels
    try:
        delivery = deliver_release(
            request.app.state.sessions, request.app.state.settings, who.tenant_id, release_id
        )
    except DeliveryError as exc:
        count("refused").inc()
        raise ProblemError(exc.status, exc.code, exc.message) from exc
    count(delivery.outcome).inc()
    if delivery.outcome != "delivered":
        raise ProblemError(
            502,
            "delivery-failed",
            f"the recipient answered {delivery.status}: {delivery.detail}",
            delivery_id=delivery.id,
            grpc_status=delivery.status,
            attempts=delivery.attempts,
        )
    return _delivery_out(delivery)


@router.get("/releases/{release_id}/deliveries", response_model=list[DeliveryOut], tags=["delivery"])
def list_deliveries(release_id: str, who: Auth, request: Request) -> list[DeliveryOut]:
    with request.app.state.sessions() as s:
        r = s.get(Release, release_id)
        if r is None or r.tenant_id != who.tenant_id:
            raise _not_found("release", release_id)
        rows = s.execute(
            select(Delivery).where(Delivery.release_id == release_id).order_by(Delivery.started_at)
        )
        return [_delivery_out(d) for d in rows.scalars()]
