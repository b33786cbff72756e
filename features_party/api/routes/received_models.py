"""``/v1/semi-sensitive-models``: models trained with semi-sensitive features, received over gRPC and
verified like releases (docs/semi-sensitive.md)."""

from fastapi import APIRouter, Request, Response

from features_party.api.deps import Caller, ReceivedModelStore
from features_party.api.schemas import ReceivedModelOut
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["semi-sensitive models"])


@router.get("/semi-sensitive-models", response_model=Page[ReceivedModelOut])
def list_received_models(
    _: Caller, models: ReceivedModelStore, paging: Paging, request: Request
) -> Page[ReceivedModelOut]:
    """Models received and verified, with their signed guarantee."""
    return Page[ReceivedModelOut].of(models.list(paging), paging, request, ReceivedModelOut.of)


@router.get("/semi-sensitive-models/{model_id}", response_model=ReceivedModelOut)
def get_received_model(model_id: str, _: Caller, models: ReceivedModelStore) -> ReceivedModelOut:
    return ReceivedModelOut.of(models.get(model_id))


@router.get(
    "/semi-sensitive-models/{model_id}/artifact",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}, "description": "the signed model message"}},
)
def get_received_model_artifact(model_id: str, _: Caller, models: ReceivedModelStore) -> Response:
    """The model as one artifact: the signed message exactly as received. Serving it needs the
    semi-sensitive columns, which only the labels party holds (docs/semi-sensitive.md)."""
    return Response(models.artifact(model_id), media_type="application/json")
