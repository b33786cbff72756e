"""``/v1/releases/{id}/deliveries``: stream the stored signed message to the recipient."""

from fastapi import APIRouter, Request

from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging
from labels_party.api.deps import Caller, Deliveries, Services
from labels_party.api.schemas.deliveries import DeliveryOut

router = APIRouter(prefix="/v1", tags=["delivery"])


@router.post(
    "/releases/{release_id}/deliveries",
    status_code=201,
    response_model=DeliveryOut,
    responses=errors(
        s409="`release-not-complete`, `recipient-has-no-address`, `message-missing`, `tls-not-configured`",
        s502="`delivery-failed` (or the recipient's refusal): its gRPC status and details",
    ),
)
def deliver_release(release_id: str, caller: Caller, deliveries: Deliveries) -> DeliveryOut:
    """Stream the release's stored signed message to its recipient over gRPC. Re-delivery sends the
    same bytes and spends nothing. A recipient that refuses it answers 502 with its gRPC status."""
    return DeliveryOut.of(deliveries.deliver(caller.tenant_id, release_id))


@router.get("/releases/{release_id}/deliveries", response_model=Page[DeliveryOut])
async def list_deliveries(
    release_id: str, caller: Caller, deliveries: Deliveries, paging: Paging, request: Request, svc: Services
) -> Page[DeliveryOut]:
    """Every attempt to deliver the release, oldest first (a page), with its outcome."""
    rows = await svc.sessions.read(lambda: deliveries.of_release(caller.tenant_id, release_id, paging))
    return Page[DeliveryOut].of(rows, paging, request, DeliveryOut.of)
