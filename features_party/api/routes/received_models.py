"""``/v1/semi-sensitive-models``: models trained with semi-sensitive features, received over gRPC and
verified like releases (docs/semi-sensitive.md)."""

from fastapi import APIRouter, Request, Response

from features_party.api.deps import Caller, ReceivedModelStore, Services
from features_party.api.schemas import ReceivedModelOut
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["semi-sensitive models"])


@router.get("/semi-sensitive-models", response_model=Page[ReceivedModelOut])
async def list_received_models(
    caller: Caller, models: ReceivedModelStore, paging: Paging, request: Request, svc: Services
) -> Page[ReceivedModelOut]:
    """Models received and verified from this tenant's pinned senders, with their signed guarantee."""
    rows = await svc.sessions.read(lambda: models.list(caller.tenant_id, paging))
    return Page[ReceivedModelOut].of(rows, paging, request, ReceivedModelOut.of)


@router.get("/semi-sensitive-models/{model_id}", response_model=ReceivedModelOut)
async def get_received_model(
    model_id: str, caller: Caller, models: ReceivedModelStore, svc: Services
) -> ReceivedModelOut:
    """One received semi-sensitive model: its sender, columns and signed guarantee."""
    return ReceivedModelOut.of(await svc.sessions.read(lambda: models.get(caller.tenant_id, model_id)))


@router.get(
    "/semi-sensitive-models/{model_id}/artifact",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}, "description": "the signed model message"}},
)
def get_received_model_artifact(model_id: str, caller: Caller, models: ReceivedModelStore) -> Response:
    """The model as one artifact: the signed message exactly as received. Serving it needs the
    semi-sensitive columns, which only the labels party holds (docs/semi-sensitive.md)."""
    return Response(models.artifact(caller.tenant_id, model_id), media_type="application/json")
