"""``/v1/senders``: labels parties whose signed releases this party accepts."""

from fastapi import APIRouter, Request

from features_party.api.deps import Caller, Senders, Services
from features_party.api.schemas import SenderIn, SenderOut
from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["senders"])


@router.post(
    "/senders",
    status_code=201,
    response_model=SenderOut,
    responses=errors(
        s409="`sender-exists`: this tenant pinned that sender id already; `too-many-senders`: it pinned "
        "1,000",
        s422="`invalid-public-key`: public_key_pem is not an Ed25519 public key in PEM",
    ),
)
def pin_sender(body: SenderIn, caller: Caller, senders: Senders) -> SenderOut:
    """Pin a labels party's public key for this tenant: messages it signed with this key and addressed
    to this tenant (`recipient_tenant`: give the labels party this tenant's id from GET /v1/identity)
    are accepted, and what they deliver is this tenant's alone. Other tenants may pin the same sender
    id, with any key, without affecting this tenant; only a message that names no tenant (a labels
    party from before `recipient_tenant`) is refused when several tenants pinned its key."""
    return SenderOut.of(senders.pin(caller.tenant_id, body.id, body.public_key_pem))


@router.get("/senders", response_model=Page[SenderOut])
async def list_senders(
    caller: Caller, senders: Senders, paging: Paging, request: Request, svc: Services
) -> Page[SenderOut]:
    """This tenant's pins (and any pin from before pins had owners)."""
    rows = await svc.sessions.read(lambda: senders.list(caller.tenant_id, paging))
    return Page[SenderOut].of(rows, paging, request, SenderOut.of)
