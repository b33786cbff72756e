"""``/v1/models`` and ``/v1/jobs``: training jobs, their models and predictions (per tenant)."""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from features_party.api.deps import Caller, Services, Training
from features_party.api.schemas import JobOut, ModelOut, PredictIn, TrainingJobIn
from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging

MODEL_NOT_READY = errors(
    s409="`model-not-ready`: the job has not succeeded; `model-needs-retraining`: saved by an older version; "
    "`model-not-loadable`: the model file names types this service never writes (it is not loaded)"
)
router = APIRouter(prefix="/v1", tags=["models"])


@router.post(
    "/models",
    status_code=202,
    response_model=JobOut,
    responses=errors(
        s404="`not-found`: no such received release or feature table",
        s422="`cluster-not-configured`: `lightgbm` needs LABELDP_FEATURES_DASK_SCHEDULER; "
        "`unsupported-model`, `invalid-debias`, `unsupported-release`: no such model for this release; "
        "`invalid-request`, `incompatible-releases`: also_release_ids repeats a release, or names one "
        "of another loss or support",
        s429="`too-many-jobs`: this tenant has LABELDP_FEATURES_MAX_QUEUED_JOBS_PER_TENANT jobs waiting; "
        "retry after `Retry-After` seconds",
    ),
)
def start_training(body: TrainingJobIn, caller: Caller, training: Training) -> JobOut:
    """Start a training job on a received release joined to a feature table; poll ``GET /v1/jobs/{id}``.
    The model and its debiasing follow the release's published mechanism. Tenants' jobs run in turn."""
    return JobOut.of(training.start(caller.tenant_id, body.request()))


@router.get("/jobs/{job_id}", response_model=JobOut)
async def get_job(job_id: str, caller: Caller, training: Training, svc: Services) -> JobOut:
    """A training job: status, progress while it runs, metrics and error once done."""
    return JobOut.of(await svc.sessions.read(lambda: training.job(caller.tenant_id, job_id)))


@router.get("/models", response_model=Page[ModelOut])
async def list_models(
    caller: Caller, training: Training, paging: Paging, request: Request, svc: Services
) -> Page[ModelOut]:
    """This tenant's training jobs and their models, newest first (a page)."""
    rows = await svc.sessions.read(lambda: training.jobs(caller.tenant_id, paging))
    return Page[ModelOut].of(rows, paging, request, ModelOut.of)


@router.get("/models/{model_id}", response_model=ModelOut)
async def get_model(model_id: str, caller: Caller, training: Training, svc: Services) -> ModelOut:
    """A trained model (the job that trained it): validation metrics, features, release, status."""
    return ModelOut.of(await svc.sessions.read(lambda: training.job(caller.tenant_id, model_id)))


@router.get(
    "/models/{model_id}/artifact",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "the skops file"},
        **MODEL_NOT_READY,
    },
)
def download_model(model_id: str, caller: Caller, training: Training) -> FileResponse:
    """The model as one scikit-learn ``Pipeline`` saved with skops: raw feature columns in (a data frame;
    categorical columns as text), debiased predictions out. Load it with ``skops.io.load``."""
    return FileResponse(
        training.artifact(caller.tenant_id, model_id),
        media_type="application/octet-stream",
        filename=f"model-{model_id}.skops",
    )


@router.post(
    "/models/{model_id}/predictions",
    responses={
        **MODEL_NOT_READY,
        **errors(
            s404="`not-found`: no such model, or no such feature table",
            s422="`missing-features`: rows lack some of the model's columns; `invalid-feature-value`: a "
            "value of the wrong kind; `unknown-example-ids`: IDs the feature table lacks (how many in "
            "`unknown`, the first 10 in `example_ids`)",
        ),
    },
)
def predict(model_id: str, body: PredictIn, caller: Caller, training: Training) -> dict[str, Any]:
    """Predictions for example IDs of a feature table, or for feature rows given in the body."""
    return training.predict(
        caller.tenant_id,
        model_id,
        example_ids=body.example_ids,
        rows=body.rows,
        feature_table=body.feature_table,
    )
