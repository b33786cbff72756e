"""The features-party FastAPI application, with the gRPC receiver running in the same process."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel, Field
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from features_party.api import models, tables
from features_party.api.auth import caller
from features_party.api.metrics import FeaturesMetrics
from features_party.config import FeaturesSettings
from features_party.receiver.server import build_server
from features_party.receiver.service import Receiver
from features_party.storage.db import make_engine, migrate, session_factory
from features_party.storage.orm import Model, ReceivedRelease, Sender, utcnow
from labeldp.common import logs
from labeldp.common.errors import ProblemError
from labeldp.common.identity import Identity, fingerprint, load_public_key, public_key_pem
from labeldp.common.service import service_app

log = logging.getLogger("labeldp.features")
router = APIRouter(prefix="/v1")


Auth = Annotated[str, Depends(caller)]


class IdentityOut(BaseModel):
    party_id: str
    key_id: str
    public_key_pem: str
    grpc_port: int


class SenderIn(BaseModel):
    id: str = Field(min_length=1, max_length=200, description="the labels party's party_id")
    public_key_pem: str = Field(description="its Ed25519 public key (its GET /v1/identity)")


class SenderOut(BaseModel):
    id: str
    key_id: str
    created_at: datetime


class ReleaseOut(BaseModel):
    release_id: str
    sender_id: str
    sender_key_id: str
    example_count: int
    chunk_count: int
    payload_sha256: str
    received_at: datetime
    header: dict[str, Any]


@router.get("/identity", response_model=IdentityOut, tags=["identity"])
def get_identity(_: Auth, request: Request) -> IdentityOut:
    identity: Identity = request.app.state.identity
    return IdentityOut(
        party_id=request.app.state.settings.party_id,
        key_id=identity.key_id,
        public_key_pem=public_key_pem(identity.public_key),
        grpc_port=request.app.state.grpc_port,
    )


@router.post("/senders", status_code=201, response_model=SenderOut, tags=["senders"])
def pin_sender(body: SenderIn, _: Auth, request: Request) -> SenderOut:
    """Pin a labels party's public key: only messages it signed with this key are accepted."""
    try:
        key = load_public_key(body.public_key_pem)
    except ValueError as exc:
        raise ProblemError(422, "invalid-public-key", str(exc)) from exc
    try:
        with request.app.state.sessions.begin() as s:
            sender = Sender(id=body.id, key_id=fingerprint(key), public_key_pem=public_key_pem(key))
            s.add(sender)
            s.flush()
            return SenderOut(id=sender.id, key_id=sender.key_id, created_at=sender.created_at)
    except IntegrityError as exc:
        raise ProblemError(409, "sender-exists", f"sender {body.id!r} is already pinned") from exc


@router.get("/senders", response_model=list[SenderOut], tags=["senders"])
def list_senders(_: Auth, request: Request) -> list[SenderOut]:
    with request.app.state.sessions() as s:
        return [
            SenderOut(id=x.id, key_id=x.key_id, created_at=x.created_at)
            for x in s.execute(select(Sender)).scalars()
        ]


def _release_out(r: ReceivedRelease) -> ReleaseOut:
    return ReleaseOut(
        release_id=r.release_id,
        sender_id=r.sender_id,
        sender_key_id=r.sender_key_id,
        example_count=r.example_count,
        chunk_count=r.chunk_count,
        payload_sha256=r.payload_sha256,
        received_at=r.received_at,
        header=r.summary,
    )


@router.get("/releases", response_model=list[ReleaseOut], tags=["releases"])
def list_releases(_: Auth, request: Request) -> list[ReleaseOut]:
    """Releases received and verified by the gRPC receiver, with their signed metadata."""
    with request.app.state.sessions() as s:
        rows = s.execute(select(ReceivedRelease).order_by(ReceivedRelease.received_at)).scalars()
        return [_release_out(r) for r in rows]


@router.get("/releases/{release_id}", response_model=ReleaseOut, tags=["releases"])
def get_release(release_id: str, _: Auth, request: Request) -> ReleaseOut:
    with request.app.state.sessions() as s:
        r = s.get(ReceivedRelease, release_id)
        if r is None:
            raise ProblemError(404, "not-found", f"no release {release_id}")
        return _release_out(r)


def create_app(settings: FeaturesSettings | None = None) -> FastAPI:
    settings = settings or FeaturesSettings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logs.configure(settings.log_level)
    engine = make_engine(settings.resolved_database_url())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(engine)
        with app.state.sessions.begin() as s:  # jobs a restart interrupted will not resume
            s.execute(
                update(Model)
                .where(Model.status.in_(("queued", "running")))
                .values(
                    status="failed", error="interrupted by a restart; start a new job", finished_at=utcnow()
                )
            )
        receiver = Receiver(
            app.state.sessions,
            settings.data_dir,
            settings.party_id,
            settings.max_release_bytes,
            on_outcome=app.state.metrics.record_delivery,
        )
        server, port = build_server(receiver, settings)
        app.state.grpc_port = port
        log.info("features party started", extra={"path": str(settings.data_dir)})
        try:
            yield
        finally:
            server.stop(grace=5).wait()
            app.state.jobs.shutdown(wait=True)
            engine.dispose()

    app = service_app(
        "labeldp features party",
        "Pin senders, receive releases over gRPC, upload features, train and serve models.",
        lifespan,
        "labeldp.features.http",
        FeaturesMetrics(),
    )
    app.state.settings = settings
    app.state.sessions = session_factory(engine)
    app.state.identity = Identity.load_or_create(settings.identity_path())
    app.state.jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="training")
    app.state.model_cache = {}
    app.include_router(router)
    app.include_router(tables.router)
    app.include_router(models.router)

    return app
