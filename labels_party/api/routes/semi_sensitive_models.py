"""``/v1/datasets/{id}/semi-sensitive-models`` and ``/v1/semi-sensitive-models``: training with
semi-sensitive features (docs/semi-sensitive.md) — charge (ε₂, δ), train, sign the model."""

from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.concurrency import run_in_threadpool

from labeldp.common.errors import DomainError
from labeldp.common.openapi import errors
from labels_party.api.deps import Caller, Deliveries, SemiSensitive
from labels_party.api.schemas.budget import BudgetRefusal
from labels_party.api.schemas.deliveries import ModelDeliveryOut
from labels_party.api.schemas.semi_sensitive_models import SemiSensitiveModelIn, SemiSensitiveModelOut

router = APIRouter(prefix="/v1", tags=["semi-sensitive models"])


@router.post(
    "/datasets/{dataset_id}/semi-sensitive-models",
    status_code=201,
    response_model=SemiSensitiveModelOut,
    responses={
        200: {
            "model": SemiSensitiveModelOut,
            "description": "a replay: the model this key created; nothing charged",
        },
        **errors(
            s400="`idempotency-key-required`: send an Idempotency-Key header",
            s422="`not-semi-sensitive`: the dataset needs binary labels and declared semi_sensitive and "
            "non_sensitive columns; `unusable-label-release`: the label release is not a complete binary "
            "release of this dataset; `too-many-examples`; `invalid-parameter`; `user-delta-too-large`; "
            "`idempotency-key-reused`: the key was used with another body",
            s503="`ledger-contention`: concurrent charges kept this one from committing — retry",
            s501="`dpsgd-unavailable`: this installation lacks the dpsgd extra",
        ),
        409: {
            "model": BudgetRefusal,
            "description": "`budget-exhausted`, `user-budget-exhausted`, `delta-budget-exhausted`: the "
            "(ε₂, δ) charge would overspend (nothing charged, no noise drawn; ε spent and left in "
            "`spent` and `left`, δ in `delta_spent` and `delta_budget`); `no-non-sensitive-rows`: "
            "upload them first",
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
    labels; answers when the signed model message is stored."""
    if not idempotency_key:
        raise DomainError("idempotency-key-required", "send an Idempotency-Key header", status=400)
    model, created = await run_in_threadpool(
        service.create, caller.tenant_id, caller.api_key_id, dataset_id, body.request(), idempotency_key
    )
    if not created:
        response.status_code = 200
    return SemiSensitiveModelOut.of(model)


@router.get("/semi-sensitive-models/{model_id}", response_model=SemiSensitiveModelOut)
def get_semi_sensitive_model(model_id: str, caller: Caller, service: SemiSensitive) -> SemiSensitiveModelOut:
    """A model's status, its DP-SGD parameters and the SHA-256 of its signed message."""
    return SemiSensitiveModelOut.of(service.get(caller.tenant_id, model_id))


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
