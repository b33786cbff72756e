"""``/v1/recipients``: the features parties a tenant's releases may be addressed to."""

from fastapi import APIRouter, Request

from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging
from labels_party.api.deps import Caller, Recipients, Services
from labels_party.api.schemas.recipients import RecipientIn, RecipientOut

router = APIRouter(prefix="/v1", tags=["recipients"])


@router.post(
    "/recipients",
    status_code=201,
    response_model=RecipientOut,
    responses=errors(
        s409="`recipient-exists`: the tenant has a recipient of that name",
        s422="`invalid-certificate`: tls_ca_pem is not a PEM certificate; `invalid-recipient-address`: "
        "grpc_address is not host:port (port 1-65535), or names a link-local address; "
        "`recipient-address-not-allowed`: the host is outside the operator's LABELDP_RECIPIENT_HOSTS",
    ),
)
def register_recipient(body: RecipientIn, caller: Caller, recipients: Recipients) -> RecipientOut:
    """Register a features party that releases may be addressed to (and delivered to)."""
    return RecipientOut.of(
        recipients.register(
            caller.tenant_id,
            body.name,
            body.grpc_address,
            body.tls_ca_pem,
            body.fingerprint,
            body.recipient_tenant,
        )
    )


@router.get("/recipients", response_model=Page[RecipientOut])
async def list_recipients(
    caller: Caller, recipients: Recipients, paging: Paging, request: Request, svc: Services
) -> Page[RecipientOut]:
    """The features parties this tenant registered, newest first (a page)."""
    rows = await svc.sessions.read(lambda: recipients.list(caller.tenant_id, paging))
    return Page[RecipientOut].of(rows, paging, request, RecipientOut.of)
