"""The features-party FastAPI application, with the gRPC receiver running in the same process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from features_party.api.deps import FeaturesServices
from features_party.api.routes import ROUTERS
from features_party.config import FeaturesSettings
from features_party.exports import Exports, TooManyExportsError
from features_party.metrics import FeaturesMetrics
from features_party.pricing import Pricer, PricingGrants, Pricings
from features_party.receiver.server import build_server
from features_party.receiver.service import Receiver
from features_party.receiver.store import ReceivedModels, ReceivedReleases, SenderRegistry
from features_party.storage.db import migrate
from features_party.tables.service import FeatureTables
from features_party.training.queue import TooManyJobsError
from features_party.training.service import TrainingService
from labeldp.common import logs
from labeldp.common.db import service_sessions
from labeldp.common.errors import as_problem
from labeldp.common.identity import Identity
from labeldp.common.instance import Instance, clean_atomic_leftovers, clean_spools
from labeldp.common.service import service_app
from labeldp.console import serve as console

log = logging.getLogger("labeldp.features")


def create_app(settings: FeaturesSettings | None = None) -> FastAPI:
    settings = settings or FeaturesSettings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logs.configure(settings.log_level)
    sessions = service_sessions(settings.resolved_database_url())  # reads never wait for writers
    metrics = FeaturesMetrics()
    instance = Instance.current(settings.instance_name)
    data_dir = settings.paths()
    releases = ReceivedReleases(sessions)
    tables = FeatureTables(
        sessions, data_dir, scheduler=settings.dask_scheduler, max_upload_bytes=settings.max_upload_bytes
    )
    identity = Identity.load_or_create(settings.identity_path())
    svc = FeaturesServices(
        settings=settings,
        sessions=sessions,
        instance=instance,
        identity=identity,
        senders=SenderRegistry(sessions),
        releases=releases,
        models=ReceivedModels(sessions),
        tables=tables,
        training=TrainingService(
            sessions,
            data_dir,
            releases,
            tables,
            metrics,
            instance,
            lease_seconds=settings.training_lease_seconds,
            scheduler=settings.dask_scheduler,
            max_queued_per_tenant=settings.max_queued_jobs_per_tenant,
        ),
        grants=PricingGrants(sessions),
        pricings=Pricings(sessions),
        exports=Exports(
            releases, tables, data_dir.spool(instance.token), max_concurrent=settings.max_concurrent_exports
        ),
    )

    def collect_versions() -> None:
        svc.tables.collect_versions(svc.training.versions_in_use, settings.superseded_grace_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(sessions.writer)
        interrupted = svc.training.recover()
        if interrupted:
            log.warning("marked interrupted training jobs as failed", extra={"examples": interrupted})
        removed = clean_spools(data_dir.spools, instance) + clean_atomic_leftovers(data_dir.root, instance)
        if removed:
            log.info("removed files a crash left behind", extra={"examples": removed})
        collect_versions()
        receiver = Receiver(
            sessions,
            data_dir,
            settings.party_id,
            settings.max_release_bytes,
            on_outcome=metrics.record_delivery,
            instance=instance,
        )
        pricer = Pricer(
            sessions,
            data_dir,
            settings.party_id,
            identity,
            tables,
            settings.max_release_bytes,
            instance,
            on_outcome=metrics.record_pricing,
        )
        server, port = build_server(receiver, settings, pricer)
        svc.grpc_port = port
        log.info("features party started", extra={"path": str(settings.data_dir)})

        async def keep_recovering() -> None:
            """Jobs of a process that died are failed once its lease expires (other hosts); superseded
            feature-table versions are deleted once their grace period is over, and the temporary
            files of writers that are gone (another worker killed mid-upload) at once."""
            while True:
                await asyncio.sleep(settings.training_lease_seconds / 2)
                try:
                    await run_in_threadpool(svc.training.recover)
                    await run_in_threadpool(collect_versions)
                    await run_in_threadpool(clean_atomic_leftovers, data_dir.root, instance)
                except Exception:
                    log.exception("training recovery failed")

        recovery = asyncio.create_task(keep_recovering())
        try:
            with svc.training.keep_leases():
                yield
        finally:
            recovery.cancel()
            server.stop(grace=5).wait()
            svc.training.shutdown()
            sessions.dispose()

    app = service_app(
        "labeldp features party",
        "Pin senders, receive releases over gRPC, upload features, train and serve models.",
        lifespan,
        "labeldp.features.http",
        metrics,
    )
    app.state.services = svc

    @app.exception_handler(TooManyJobsError)
    @app.exception_handler(TooManyExportsError)
    async def _too_many(_: Request, exc: TooManyJobsError | TooManyExportsError) -> JSONResponse:
        response = as_problem(exc)
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    for router in ROUTERS:
        app.include_router(router)
    console.install(app, "features")
    return app
