"""REST routes for training jobs, models and predictions (per tenant)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from sqlalchemy import select

from features_party.api.auth import caller
from features_party.api.tables import release_and_table
from features_party.storage.orm import Model
from features_party.tables.service import find_table, table_path
from features_party.training.fit import LOSSES, Trained, TrainedClassifier
from features_party.training.jobs import is_classification, load, model_dir, noise_of, provenance, run
from labeldp.common.errors import ProblemError

router = APIRouter(prefix="/v1")
Auth = Annotated[str, Depends(caller)]


class ModelIn(BaseModel):
    release_id: str
    feature_table: str
    model: Literal["hgb", "linear"] = "hgb"
    debias: Literal["none", "affine", "unbiased"] = "affine"
    validation_fraction: float = Field(0.2, gt=0, lt=1)


class JobOut(BaseModel):
    id: str
    state: str
    progress: dict[str, Any]
    error: str | None
    created_at: datetime
    finished_at: datetime | None


class ModelOut(BaseModel):
    id: str
    status: str
    model: str
    debias: str
    loss: str
    metrics: dict[str, Any]
    provenance: dict[str, Any]
    error: str | None
    created_at: datetime


class PredictIn(BaseModel):
    example_ids: list[str] | None = Field(None, description="rows of a feature table (default: the model's)")
    feature_table: str | None = None
    rows: list[dict[str, Any]] | None = Field(None, description="feature rows given directly")


def _model(request: Request, tenant: str, model_id: str) -> Model:
    with request.app.state.sessions() as s:
        m = s.get(Model, model_id)
    if m is None or m.tenant_id != tenant:
        raise ProblemError(404, "not-found", f"no model {model_id}")
    return m


def _job_out(m: Model) -> JobOut:
    return JobOut(
        id=m.id,
        state=m.status,
        progress=m.progress,
        error=m.error,
        created_at=m.created_at,
        finished_at=m.finished_at,
    )


def _model_out(m: Model) -> ModelOut:
    prov = {k: v for k, v in m.provenance.items() if k != "feature_table_id"}
    return ModelOut(
        id=m.id,
        status=m.status,
        model=m.kind,
        debias=m.debias,
        loss=m.loss,
        metrics=m.metrics,
        provenance=prov,
        error=m.error,
        created_at=m.created_at,
    )


@router.post("/models", status_code=202, response_model=JobOut, tags=["models"])
def post_model(body: ModelIn, tenant: Auth, request: Request) -> JobOut:
    """Start a training job on a received release joined to a feature table; poll ``GET /v1/jobs/{id}``."""
    state = request.app.state
    release, table = release_and_table(state.sessions, tenant, body.release_id, body.feature_table)
    _, loss = noise_of(release)
    if is_classification(release):
        loss = "zero_one"
        if body.debias == "unbiased":
            raise ProblemError(422, "invalid-debias", "classifiers support debias none or affine")
    elif loss not in LOSSES:
        raise ProblemError(422, "unsupported-release", f"no model for a release with loss {loss!r}")
    if body.debias == "unbiased" and loss == "poisson":
        raise ProblemError(
            422, "invalid-debias", "unbiased targets can be negative; use affine with Poisson loss"
        )
    job = Model(
        id=str(uuid.uuid4()),
        tenant_id=tenant,
        release_id=body.release_id,
        feature_table=table.name,
        feature_table_version=table.version,
        kind=body.model,
        debias=body.debias,
        loss=loss,
        validation_fraction=body.validation_fraction,
        status="queued",
        progress={"stage": "queued"},
        metrics={},
        provenance=provenance(release, table),
    )
    with state.sessions.begin() as s:
        s.add(job)
    metrics = state.metrics
    metrics.training_jobs.labels("started").inc()
    metrics.training_running.inc()

    def counted() -> None:
        try:
            metrics.training_jobs.labels(run(state.sessions, state.settings.data_dir, job.id)).inc()
        finally:
            metrics.training_running.dec()

    state.jobs.submit(counted)
    return _job_out(job)


@router.get("/jobs/{job_id}", response_model=JobOut, tags=["models"])
def get_job(job_id: str, tenant: Auth, request: Request) -> JobOut:
    return _job_out(_model(request, tenant, job_id))


@router.get("/models", response_model=list[ModelOut], tags=["models"])
def list_models(tenant: Auth, request: Request) -> list[ModelOut]:
    with request.app.state.sessions() as s:
        rows = s.execute(select(Model).where(Model.tenant_id == tenant).order_by(Model.created_at)).scalars()
        return [_model_out(m) for m in rows]


@router.get("/models/{model_id}", response_model=ModelOut, tags=["models"])
def get_model(model_id: str, tenant: Auth, request: Request) -> ModelOut:
    return _model_out(_model(request, tenant, model_id))


def _trained(request: Request, m: Model) -> Trained:
    cache: dict[str, Trained] = request.app.state.model_cache
    if m.id not in cache:
        cache[m.id] = load(model_dir(request.app.state.settings.data_dir, m.id))
    return cache[m.id]


@router.post("/models/{model_id}/predictions", tags=["models"])
def predict(model_id: str, body: PredictIn, tenant: Auth, request: Request) -> dict[str, Any]:
    """Predictions for example IDs of a feature table, or for feature rows given in the body."""
    m = _model(request, tenant, model_id)
    if m.status != "succeeded":
        raise ProblemError(409, "model-not-ready", f"model {model_id} is {m.status}")
    trained = _trained(request, m)
    if (body.rows is None) == (body.example_ids is None):
        raise ProblemError(422, "invalid-request", "send either example_ids or rows")
    if body.rows is not None:
        missing = sorted({c for c in trained.encoder.columns for r in body.rows if c not in r})
        if missing:
            raise ProblemError(
                422, "missing-features", f"rows lack feature columns: {missing}", columns=missing
            )
        features = pa.table({c: [r.get(c) for r in body.rows] for c in trained.encoder.columns})
        return _predictions(trained, features)
    with request.app.state.sessions() as s:
        table = find_table(s, tenant, body.feature_table or m.feature_table)
    if table is None:
        raise ProblemError(404, "not-found", f"no feature table {body.feature_table or m.feature_table!r}")
    data = pq.read_table(table_path(request.app.state.settings.data_dir, table.id, table.version))
    wanted = pa.array(body.example_ids or [], pa.string())
    position = pc.index_in(wanted, value_set=data.column("example_id"))
    unknown = int(pc.sum(pc.is_null(position)).as_py() or 0)
    if unknown:
        raise ProblemError(
            422, "unknown-example-ids", f"{unknown} example_ids are not in feature table {table.name!r}"
        )
    return {"example_ids": body.example_ids, **_predictions(trained, data.take(position))}


def _predictions(trained: Trained, features: pa.Table) -> dict[str, Any]:
    """Regression: debiased predictions. Classification: the most likely class (its reported
    value) and the probability of every class."""
    if isinstance(trained, TrainedClassifier):
        proba = trained.predict(features)
        classes = trained.noise.bin_values
        return {
            "predictions": classes[proba.argmax(axis=1)].tolist(),
            "classes": classes.tolist(),
            "probabilities": proba.tolist(),
        }
    return {"predictions": trained.predict(features).tolist()}
