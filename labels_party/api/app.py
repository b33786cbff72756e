"""The labels-party FastAPI application: settings → database → services → routes."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from labeldp.common import logs
from labeldp.common.db import service_sessions
from labeldp.common.identity import Identity
from labeldp.common.instance import Instance, clean_atomic_leftovers, clean_spools
from labeldp.common.offload import Offload
from labeldp.common.service import service_app
from labeldp.console import serve as console
from labels_party.api.deps import LabelsServices
from labels_party.api.routes import ROUTERS
from labels_party.budget.ledger import Ledger
from labels_party.budget.partitioned import referenced_segments
from labels_party.budget.segments import SegmentStore
from labels_party.config import LabelsSettings
from labels_party.datasets.budget import BudgetService
from labels_party.datasets.service import DatasetService
from labels_party.datasets.versions import collect_superseded
from labels_party.delivery.message import Signer
from labels_party.delivery.service import DeliveryService, RecipientService
from labels_party.metrics import LabelsMetrics
from labels_party.priors import PriorsService
from labels_party.releases.cluster import ReleaseCluster
from labels_party.releases.service import ReleaseService
from labels_party.releases.work import ReleaseWork
from labels_party.semi_sensitive.service import SemiSensitiveService
from labels_party.storage.db import migrate

log = logging.getLogger("labeldp.labels")


def create_app(settings: LabelsSettings | None = None) -> FastAPI:
    settings = settings or LabelsSettings()
    if settings.dask_scheduler and importlib.util.find_spec("distributed") is None:
        raise RuntimeError(
            "LABELDP_DASK_SCHEDULER is set but Dask is not installed: pip install 'labeldp[scale]'"
        )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logs.configure(settings.log_level)
    sessions = service_sessions(settings.resolved_database_url())  # reads never wait for writers
    metrics = LabelsMetrics()
    signer = Signer(
        Identity.load_or_create(settings.identity_path()), settings.party_id, settings.release_ttl_seconds
    )
    instance = Instance.current(settings.instance_name)
    data_dir = settings.paths()
    ledger = Ledger(sessions, SegmentStore(data_dir.ledger))
    work = ReleaseWork(data_dir, signer, ReleaseCluster(data_dir, settings.dask_scheduler))
    lease = settings.release_lease_seconds
    budget = BudgetService(sessions, data_dir)
    # the fork server imports what the file work needs once (pyarrow.dataset: what read_table imports
    # on first use; warm: the ID hash kernel); its children start with it
    offload = Offload(
        settings.file_workers,
        preload=("labels_party.datasets.file_work", "pyarrow.dataset", "labels_party.datasets.warm"),
    )
    releases = ReleaseService(
        sessions, data_dir, work, ledger, instance, lease, metrics, on_charged=budget.refresh
    )
    semi_sensitive = SemiSensitiveService(
        sessions, data_dir, signer, ledger, instance, lease, on_charged=budget.refresh
    )
    deliveries = DeliveryService(sessions, settings, metrics, instance)

    def recover() -> None:
        """Fail every charged job whose owner is gone (keeping its charge); then remove what is left
        of dead writers (temporary files), superseded dataset versions past their grace period, and
        ledger segment files no shard row names."""
        failed = releases.jobs.recover() + semi_sensitive.jobs.recover()
        if failed:
            log.warning("marked interrupted charged jobs as failed", extra={"releases": failed})
        interrupted = deliveries.recover()
        if interrupted:
            log.warning(
                "recorded deliveries a stopped process left unanswered", extra={"releases": interrupted}
            )
        removed = clean_atomic_leftovers(data_dir.root, instance) + collect_superseded(
            sessions, data_dir, settings.superseded_grace_seconds
        )
        if removed:
            log.info("removed leftovers and superseded versions", extra={"examples": removed})
        with sessions() as session:
            named = referenced_segments(session)
        ledger.segments.collect_garbage(named)

    async def keep_recovering() -> None:
        """Releases of a process that died are failed once its lease expires (other hosts)."""
        while True:
            await asyncio.sleep(settings.release_lease_seconds / 2)
            try:
                await run_in_threadpool(recover)
            except Exception:
                log.exception("release recovery failed")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrate(sessions.writer)
        recover()
        removed = clean_spools(data_dir.spools, instance)
        if removed:
            log.info("removed files a crash left behind", extra={"examples": removed})
        log.info("service started", extra={"path": str(settings.data_dir)})
        if settings.allow_plaintext:
            log.warning(
                "deliveries may use gRPC WITHOUT TLS (LABELDP_ALLOW_PLAINTEXT): local development only"
            )
        offload.warm()
        recovery = asyncio.create_task(keep_recovering())
        try:
            yield
        finally:
            recovery.cancel()
            releases.shutdown()
            budget.shutdown()
            offload.shutdown()
            sessions.dispose()

    app = service_app(
        "labeldp labels party",
        "Upload labels, spend privacy budget, create privatized releases.",
        lifespan,
        "labeldp.labels.http",
        metrics,
    )
    app.state.services = LabelsServices(
        settings=settings,
        sessions=sessions,
        signer=signer,
        instance=instance,
        datasets=DatasetService(sessions, data_dir, offload),
        releases=releases,
        budget=budget,
        recipients=RecipientService(sessions, settings.recipient_hosts),
        deliveries=deliveries,
        semi_sensitive=semi_sensitive,
        priors=PriorsService(sessions, data_dir, signer, settings, instance, metrics),
    )
    for router in ROUTERS:
        app.include_router(router)
    console.install(app, "labels")
    return app
