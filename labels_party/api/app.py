"""The labels-party FastAPI application."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from labeldp.common import logs
from labeldp.common.identity import Identity
from labeldp.common.service import service_app
from labels_party.api.metrics import LabelsMetrics
from labels_party.api.routes import router
from labels_party.config import LabelsSettings
from labels_party.delivery.message import Signer
from labels_party.releases.service import recover_interrupted
from labels_party.storage.db import make_engine, migrate, session_factory

log = logging.getLogger("labeldp.labels")


def create_app(settings: LabelsSettings | None = None) -> FastAPI:
    settings = settings or LabelsSettings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logs.configure(settings.log_level)
    engine = make_engine(settings.resolved_database_url())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(engine)
        failed = recover_interrupted(app.state.sessions)
        if failed:
            log.warning("marked interrupted releases as failed", extra={"releases": failed})
        log.info("service started", extra={"path": str(settings.data_dir)})
        if settings.allow_plaintext:
            log.warning(
                "deliveries may use gRPC WITHOUT TLS (LABELDP_ALLOW_PLAINTEXT): local development only"
            )
        yield
        engine.dispose()

    app = service_app(
        "labeldp labels party",
        "Upload labels, spend privacy budget, create privatized releases.",
        lifespan,
        "labeldp.labels.http",
        LabelsMetrics(),
    )
    app.state.settings = settings
    app.state.sessions = session_factory(engine)
    app.state.signer = Signer(
        Identity.load_or_create(settings.identity_path()), settings.party_id, settings.release_ttl_seconds
    )
    app.include_router(router)
    return app
