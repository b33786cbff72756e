"""``/v1/identity``: this party's signing key, which recipients pin."""

from fastapi import APIRouter

from labeldp.common.identity import public_key_pem
from labels_party.api.deps import Caller, Services
from labels_party.api.schemas.identity import IdentityOut

router = APIRouter(prefix="/v1", tags=["identity"])


@router.get("/identity", response_model=IdentityOut)
async def get_identity(_: Caller, svc: Services) -> IdentityOut:
    """This party's signing key: recipients pin it (``POST /v1/senders`` on the features party)."""
    return IdentityOut(
        party_id=svc.signer.party_id,
        key_id=svc.signer.identity.key_id,
        public_key_pem=public_key_pem(svc.signer.identity.public_key),
    )
