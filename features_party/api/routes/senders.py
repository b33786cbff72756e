"""``/v1/senders``: labels parties whose signed releases this party accepts."""

from fastapi import APIRouter, Request

from features_party.api.deps import Caller, Senders
from features_party.api.schemas import SenderIn, SenderOut
from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["senders"])


@router.post(
    "/senders",
    status_code=201,
    response_model=SenderOut,
    responses=errors(s409="`sender-exists`: pinned already with another key"),
)
def pin_sender(body: SenderIn, _: Caller, senders: Senders) -> SenderOut:
    """Pin a labels party's public key: only messages it signed with this key are accepted."""
    return SenderOut.of(senders.pin(body.id, body.public_key_pem))


@router.get("/senders", response_model=Page[SenderOut])
def list_senders(_: Caller, senders: Senders, paging: Paging, request: Request) -> Page[SenderOut]:
    return Page[SenderOut].of(senders.list(paging), paging, request, SenderOut.of)
