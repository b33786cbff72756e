"""``/v1/identity``: this party's id, key and the port of its gRPC receiver, and the caller's tenant."""

from fastapi import APIRouter

from features_party.api.deps import Caller, Services
from features_party.api.schemas import IdentityOut
from labeldp.common.identity import public_key_pem

router = APIRouter(prefix="/v1", tags=["identity"])


@router.get("/identity", response_model=IdentityOut)
def get_identity(caller: Caller, svc: Services) -> IdentityOut:
    """This features party's id, gRPC receiver port and signing-key fingerprint, and the caller's
    tenant id: what a labels party registers as a recipient."""
    return IdentityOut(
        party_id=svc.settings.party_id,
        key_id=svc.identity.key_id,
        public_key_pem=public_key_pem(svc.identity.public_key),
        grpc_port=svc.grpc_port,
        tenant_id=caller.tenant_id,
    )
