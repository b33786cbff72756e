"""``/v1/datasets/{id}/semi-sensitive-models`` and ``/v1/semi-sensitive-models``: training with
semi-sensitive features (docs/semi-sensitive.md) — charge (ε₂, δ), train, sign the model."""

from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.concurrency import run_in_threadpool

from labeldp.common.errors import DomainError
from labeldp.common.openapi import REPLAYED, errors
from labels_party.api.deps import Caller, Deliveries, SemiSensitive, Services
from labels_party.api.schemas.budget import BudgetRefusal
from labels_party.api.schemas.deliveries import ModelDeliveryOut
from labels_party.api.schemas.semi_sensitive_models import (
    HybridPlanIn,
    HybridPlanOut,
    SemiSensitiveModelIn,
    SemiSensitiveModelOut,
)

router = APIRouter(prefix="/v1", tags=["semi-sensitive models"])


@router.post(
    "/datasets/{dataset_id}/semi-sensitive-models",
    status_code=201,
    response_model=SemiSensitiveModelOut,
    responses={
        200: {
            "model": SemiSensitiveModelOut,
            "description": "a replay: the model this key created, in its current state; nothing charged "
            "(`Idempotent-Replayed: true`)",
        },
        **errors(
            s400="`idempotency-key-required`: send an Idempotency-Key header",
            s422="`not-semi-sensitive`: the dataset needs binary labels and declared semi_sensitive and "
            "non_sensitive columns; `unusable-label-release`: the label release is not a complete binary "
            "release of this dataset; `unknown-recipient`: without a release, the recipient is not "
            "registered; `unusable-dataset`: without a release, a universe example has no label; "
            "`empty-release`: no labelled examples; `too-many-examples`; `invalid-parameter`; "
            "`user-delta-too-large`; "
            "`idempotency-key-reused`: the key was used for a request that differs once defaults are "
            "applied (the differing fields named in `fields`; nothing charged)",
            s503="`ledger-contention`: concurrent charges kept this one from committing — retry",
            s501="`dpsgd-unavailable`: this installation lacks the dpsgd extra",
        ),
        409: {
            "model": BudgetRefusal,
            "description": "`budget-exhausted`, `user-budget-exhausted`, `delta-budget-exhausted`: the "
            "(ε₂, δ) charge would overspend (nothing charged, no noise drawn; ε spent and left in "
            "`spent` and `left`, δ in `delta_spent` and `delta_budget`); `no-non-sensitive-rows`: "
            "upload them first; `user-map-changed`: the dataset now gives some of the label release's "
            "training examples other users than the release froze (make a new label release); "
            "`release-without-record`: the label release predates releases recording their users; "
            "`release-has-groups`: the label release used priors (a mechanism per group; the label "
            "phase reads one); `release-is-unbiased`: the label release used the unbiased randomizer "
            "(the label phase reads RR's keep and move probabilities)",
        },
    },
)
async def create_semi_sensitive_model(
    dataset_id: str,
    body: SemiSensitiveModelIn,
    caller: Caller,
    service: SemiSensitive,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", max_length=200, pattern=r"^[!-~]+$", description="required"),
    ] = None,
) -> SemiSensitiveModelOut:
    """Charge (ε₂, δ) to every example of the label release, then train: the truncated model on the
    release's noisy labels and the non-sensitive columns, then DP-SGD on every column and the true
    labels; answers when the signed model message is stored. Without a release (where the plan skips
    the label phase), DP-SGD alone on every labelled example, addressed to the named recipient."""
    if not idempotency_key:
        raise DomainError("idempotency-key-required", "send an Idempotency-Key header", status=400)
    model, created = await run_in_threadpool(
        service.create, caller.tenant_id, caller.api_key_id, dataset_id, body.request(), idempotency_key
    )
    response.headers[REPLAYED] = "false" if created else "true"  # the body stays the first answer's
    if not created:
        response.status_code = 200
    return SemiSensitiveModelOut.of(model)


@router.post(
    "/datasets/{dataset_id}/semi-sensitive-models:plan",
    response_model=HybridPlanOut,
    responses=errors(
        s422="`not-semi-sensitive`: the dataset needs binary labels and declared semi_sensitive and "
        "non_sensitive columns; `unusable-dataset`: a universe example has no label; `empty-release`: no "
        "labelled examples; `too-many-examples`; `invalid-parameter`: the schedule is over the limits "
        "a model request has, or cannot be calibrated",
        s501="`dpsgd-unavailable`: this installation lacks the dpsgd extra",
    ),
)
async def plan_semi_sensitive_model(
    dataset_id: str, body: HybridPlanIn, caller: Caller, service: SemiSensitive
) -> HybridPlanOut:
    """The public plan of a semi-sensitive model: how a total (ε, δ) splits between the label phase
    and DP-SGD, or whether the label phase is skipped. A public rule of ε, δ, the number of labelled
    examples and the schedule (docs/semi-sensitive.md), so it is free: nothing is charged or drawn."""
    plan, n = await run_in_threadpool(
        service.plan, caller.tenant_id, dataset_id, body.epsilon, body.delta, body.epochs, body.batch_size
    )
    from labeldp.semi_sensitive import MAX_STEP_NOISE

    b = plan.budget
    return HybridPlanOut(
        examples=n,
        label_phase=plan.label_phase,
        epsilon_labels=b.epsilon_labels,
        epsilon_dpsgd=b.epsilon_dpsgd,
        delta=b.delta,
        split_step_noise=plan.step_noise,
        max_step_noise=MAX_STEP_NOISE,
    )


@router.get("/semi-sensitive-models/{model_id}", response_model=SemiSensitiveModelOut)
async def get_semi_sensitive_model(
    model_id: str, caller: Caller, service: SemiSensitive, svc: Services
) -> SemiSensitiveModelOut:
    """A model's status, its DP-SGD parameters and the SHA-256 of its signed message."""
    return SemiSensitiveModelOut.of(await svc.sessions.read(lambda: service.get(caller.tenant_id, model_id)))


@router.get(
    "/semi-sensitive-models/{model_id}/message",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}, "description": "the signed model message"}},
)
def get_semi_sensitive_model_message(model_id: str, caller: Caller, service: SemiSensitive) -> Response:
    """The signed model message (weights, columns and guarantee), exactly as stored."""
    return Response(service.message(caller.tenant_id, model_id), media_type="application/json")


@router.post(
    "/semi-sensitive-models/{model_id}/deliveries",
    response_model=ModelDeliveryOut,
    responses=errors(
        s409="`model-not-complete`, `recipient-has-no-address`, `tls-not-configured`",
        s502="`delivery-failed`: the recipient refused (its gRPC status is in the answer)",
    ),
)
def deliver_semi_sensitive_model(
    model_id: str, caller: Caller, service: SemiSensitive, deliveries: Deliveries
) -> ModelDeliveryOut:
    """Send the stored signed model message to the label release's recipient over gRPC (again: the
    same bytes, nothing spent)."""
    message = service.message(caller.tenant_id, model_id)
    outcome = deliveries.deliver_model(caller.tenant_id, model_id, message)
    return ModelDeliveryOut(
        model_id=model_id, outcome="delivered", attempts=outcome.attempts, wire_bytes=outcome.wire_bytes
    )
