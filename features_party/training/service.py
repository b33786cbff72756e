"""Training jobs behind the API: the rules a request must satisfy (which follow from the release's
published mechanism), a background worker that serves tenants in turn (``queue``), the models and
their predictions."""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from features_party.metrics import FeaturesMetrics
from features_party.receiver.store import ReceivedReleases, group_mechanisms, published_mechanism
from features_party.storage.data_dir import DataDir
from features_party.storage.orm import TrainingJob
from features_party.tables.service import FeatureTables
from features_party.training.fit import (
    SKLEARN_LOSS,
    Trained,
    TrainedClassifier,
    check_grouped,
    poisson_refusal,
)
from features_party.training.jobs import ARTIFACT, is_classification, load, provenance, run
from features_party.training.queue import FairQueue
from labeldp.common.db import owned, utcnow
from labeldp.common.errors import DomainError, not_found
from labeldp.common.example_ids import unknown_ids
from labeldp.common.instance import Instance
from labeldp.common.leases import abandoned, heartbeat
from labeldp.common.pages import PageRequest
from labeldp.mechanisms import PublishedMechanism

UNFINISHED = ("queued", "running")
MAX_ALSO_RELEASES = 30  # releases one model trains on besides its first (a year of monthly stages, twice)
INTERRUPTED = "interrupted: the process running it stopped; start a new job"


@dataclass(frozen=True)
class TrainingRequest:
    release_id: str
    feature_table: str
    model: Literal["hgb", "linear", "lightgbm"] = "hgb"
    debias: Literal["none", "affine", "unbiased"] = "affine"
    validation_fraction: float = 0.2
    also_release_ids: tuple[str, ...] = ()  # trained on too, each row debiased by its own mechanism


def check_also(first: PublishedMechanism, others: list[PublishedMechanism], ids: tuple[str, ...]) -> None:
    """Releases one model trains on together: distinct, for regression (RR-on-Bins or the unbiased
    randomizer: every row has an unbiased target under its own mechanism), of one label type's loss and
    support (their rows are then comparable; each keeps its own mechanism) — 422 otherwise."""
    if len(set(ids)) != len(ids):
        raise DomainError("invalid-request", "also_release_ids lists a release twice (or the first again)")
    for release_id, m in zip(ids, (first, *others), strict=True):
        if m.kind not in ("rr_on_bins", "unbiased"):
            raise DomainError(
                "unsupported-release",
                f"release {release_id} is a classification release ({m.kind}): a model trains on several "
                "releases for regression only (RR-on-Bins or the unbiased randomizer)",
            )
    for release_id, m in zip(ids[1:], others, strict=True):
        if m.loss != first.loss or tuple(m.support) != tuple(first.support):
            raise DomainError(
                "incompatible-releases",
                f"release {release_id} has another loss or support than release {ids[0]}: its rows and "
                "the first's are not labels of one kind",
            )


class TrainingService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data_dir: DataDir,
        releases: ReceivedReleases,
        tables: FeatureTables,
        metrics: FeaturesMetrics,
        instance: Instance,
        *,
        lease_seconds: float = 60.0,
        scheduler: str | None = None,
        max_queued_per_tenant: int = 8,
    ) -> None:
        self.scheduler, self.instance = scheduler, instance
        self.lease = timedelta(seconds=lease_seconds)
        self.sessions, self.data_dir, self.releases, self.tables, self.metrics = (
            sessions,
            data_dir,
            releases,
            tables,
            metrics,
        )
        self.queue = FairQueue(max_queued_per_tenant, self._run)
        self._models: dict[str, Trained] = {}

    def recover(self) -> int:
        """Fail the queued or running jobs whose owner is gone or whose lease expired (they will not
        resume); never a job a live process owns. Returns how many."""
        now = utcnow()
        with self.sessions() as s:
            candidates = s.execute(
                select(TrainingJob.id, TrainingJob.owner, TrainingJob.lease_expires_at).where(
                    TrainingJob.status.in_(UNFINISHED)
                )
            ).all()
        stale = [job_id for job_id, owner, lease in candidates if abandoned(owner, lease, self.instance, now)]
        if stale:
            with self.sessions.begin() as s:
                s.execute(
                    update(TrainingJob)
                    .where(TrainingJob.id.in_(stale), TrainingJob.status.in_(UNFINISHED))
                    .values(status="failed", error=INTERRUPTED, finished_at=utcnow())
                )
        return len(stale)

    def keep_leases(self) -> AbstractContextManager[None]:
        """While the service runs: extend the lease of every job this process owns (queued ones too,
        however long the queue) every third of the lease."""

        def beat() -> None:
            with self.sessions.begin() as s:
                s.execute(
                    update(TrainingJob)
                    .where(TrainingJob.owner == self.instance.token, TrainingJob.status.in_(UNFINISHED))
                    .values(lease_expires_at=utcnow() + self.lease)
                )

        return heartbeat(self.lease.total_seconds() / 3, beat, "training-leases")

    def shutdown(self) -> None:
        self.queue.shutdown()

    def versions_in_use(self) -> set[tuple[str, int]]:
        """(feature table id, version) of every queued or running job, in any process: what the
        collection of superseded versions must keep."""
        with self.sessions() as s:
            rows = s.execute(
                select(TrainingJob.provenance, TrainingJob.feature_table_version).where(
                    TrainingJob.status.in_(UNFINISHED)
                )
            ).all()
        return {(str(p.get("feature_table_id")), int(v)) for p, v in rows if isinstance(p, dict)}

    def start(self, tenant_id: str, request: TrainingRequest) -> TrainingJob:
        """Check the request against the release's mechanism and the tenant's place in the queue, then
        queue the job (202); a tenant with ``max_queued_per_tenant`` jobs waiting is refused (429)."""
        release = self.releases.get(tenant_id, request.release_id)
        table = self.tables.get(tenant_id, request.feature_table)
        mechanism = published_mechanism(release)
        also = [self.releases.get(tenant_id, r) for r in request.also_release_ids]  # 404 for others'
        if also:
            check_also(
                mechanism,
                [published_mechanism(r) for r in also],
                (request.release_id, *request.also_release_ids),
            )
            if request.model == "lightgbm":
                raise DomainError("unsupported-model", "lightgbm models train on one release")
        if group_mechanisms(release):
            check_grouped(is_classification(mechanism))  # 422 before anything is queued
        if request.model == "lightgbm" and self.scheduler is None:
            raise DomainError(
                "cluster-not-configured",
                "lightgbm models train on a Dask cluster, and this service has none "
                "(LABELDP_FEATURES_DASK_SCHEDULER)",
            )
        if request.model == "lightgbm" and is_classification(mechanism):
            raise DomainError("unsupported-model", "lightgbm models are trained for regression releases")
        if is_classification(mechanism):
            loss = "zero_one"
            if request.debias == "unbiased":
                raise DomainError("invalid-debias", "classifiers support debias none or affine")
        else:
            loss = mechanism.loss
            if loss not in SKLEARN_LOSS:
                raise DomainError("unsupported-release", f"no model for a release with loss {loss!r}")
            grouped = bool(group_mechanisms(release)) or bool(also)
            if loss == "poisson" and (
                request.debias == "unbiased" or (grouped and request.debias == "affine")
            ):
                raise DomainError("invalid-debias", poisson_refusal(grouped))
            kinds = {published_mechanism(r).kind for r in (release, *also)}
            if loss == "poisson" and also and "unbiased" in kinds:
                raise DomainError(
                    "invalid-debias",
                    "an unbiased release's outputs can be negative, which Poisson regression cannot fit "
                    "beside other releases; train on it alone (it needs no debiasing)",
                )
        job = TrainingJob(
            id=str(uuid.uuid4()),
            tenant_id=tenant_id,
            release_id=request.release_id,
            feature_table=table.name,
            feature_table_version=table.version,
            kind=request.model,
            debias=request.debias,
            loss=loss,
            validation_fraction=request.validation_fraction,
            status="queued",
            owner=self.instance.token,
            lease_expires_at=utcnow() + self.lease,
            progress={"stage": "queued"},
            metrics={},
            provenance={
                **provenance(release, mechanism, table),
                **({"also_release_ids": list(request.also_release_ids)} if also else {}),
            },
        )
        self.queue.reserve(tenant_id)  # 429 before anything is stored
        try:
            with self.sessions.begin() as s:
                s.add(job)
        except BaseException:
            self.queue.cancel(tenant_id)
            raise
        self.metrics.training_jobs.labels("started").inc()
        self.metrics.training_running.inc()
        self.queue.put(tenant_id, job.id)
        return job

    def _run(self, job_id: str) -> None:
        try:
            self.metrics.training_jobs.labels(run(self.sessions, self.data_dir, job_id, self.scheduler)).inc()
        finally:
            self.metrics.training_running.dec()

    def job(self, tenant_id: str, job_id: str) -> TrainingJob:
        with self.sessions() as s:
            return owned(s, TrainingJob, job_id, tenant_id, "model")

    def jobs(self, tenant_id: str, paging: PageRequest) -> list[TrainingJob]:
        with self.sessions() as s:
            query = (
                select(TrainingJob)
                .where(TrainingJob.tenant_id == tenant_id)
                .order_by(TrainingJob.created_at, TrainingJob.id)
            )
            return list(s.execute(paging.window(query)).scalars())

    def artifact(self, tenant_id: str, model_id: str) -> Path:
        """The model's exported pipeline (``model.skops``), for download."""
        job = self.job(tenant_id, model_id)
        if job.status != "succeeded":
            raise DomainError("model-not-ready", f"model {model_id} is {job.status}", status=409)
        self._trained(job)  # a model saved in an older format is refused (409) rather than exported
        return self.data_dir.model(job.id) / ARTIFACT

    def _trained(self, job: TrainingJob) -> Trained:
        if job.id not in self._models:
            self._models[job.id] = load(self.data_dir.model(job.id))
        return self._models[job.id]

    def predict(
        self,
        tenant_id: str,
        model_id: str,
        *,
        example_ids: list[str] | None,
        rows: list[dict[str, Any]] | None,
        feature_table: str | None,
    ) -> dict[str, Any]:
        """Predictions for example IDs of a feature table, or for feature rows given directly."""
        job = self.job(tenant_id, model_id)
        if job.status != "succeeded":
            raise DomainError("model-not-ready", f"model {model_id} is {job.status}", status=409)
        trained = self._trained(job)
        if (rows is None) == (example_ids is None):
            raise DomainError("invalid-request", "send either example_ids or rows")
        if rows is not None:
            return _predictions(trained, feature_rows(trained, rows))
        name = feature_table or job.feature_table
        try:
            table = self.tables.get(tenant_id, name)
        except DomainError as exc:
            raise not_found("feature table", repr(name)) from exc
        data = self.tables.read(table)
        wanted = pa.array(example_ids or [], pa.string())
        unknown_ids(wanted, data.column("example_id"), f"feature table {table.name!r}")
        position = pc.index_in(wanted, value_set=data.column("example_id"))
        return {"example_ids": example_ids, **_predictions(trained, data.take(position))}


def feature_rows(trained: Trained, rows: list[dict[str, Any]]) -> pa.Table:
    """Feature rows sent in a request, typed as the model was trained: numbers (or null) for numeric
    columns, scalars (read as text) for categorical ones; anything else is a 422 naming the column."""
    if not rows:
        raise DomainError("invalid-request", "rows must not be empty")
    missing = sorted({c for c in trained.columns for r in rows if c not in r})
    if missing:
        raise DomainError("missing-features", f"rows lack feature columns: {missing}", columns=missing)
    categorical = set(trained.categorical)
    columns: dict[str, pa.Array] = {}
    for name in trained.columns:
        values = [r.get(name) for r in rows]
        bad = next(
            (
                i
                for i, v in enumerate(values)
                if v is not None
                and not (
                    isinstance(v, str | int | float | bool)
                    if name in categorical
                    else isinstance(v, int | float)
                )
            ),
            None,
        )
        if bad is not None:
            kind = "a scalar" if name in categorical else "a number"
            raise DomainError(
                "invalid-feature-value", f"column {name!r} needs {kind}", rows=[bad + 1], columns=[name]
            )
        if name in categorical:
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
        else:
            columns[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
    return pa.table(columns)


def _predictions(trained: Trained, features: pa.Table) -> dict[str, Any]:
    """Regression: debiased predictions. Classification: the most likely class (its reported
    value) and the probability of every class."""
    if isinstance(trained, TrainedClassifier):
        proba = trained.predict(features)
        classes = trained.noise.bin_values
        return {
            "predictions": classes[np.argmax(proba, axis=1)].tolist(),
            "classes": classes.tolist(),
            "probabilities": proba.tolist(),
            # RR-Top-k reports k of the classes: the rest share this mass (the release's noisy prior)
            "unreported_probability": trained.noise.outside_mass,
        }
    return {"predictions": trained.predict(features).tolist()}
