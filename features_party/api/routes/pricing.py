"""``/v1/senders/{sender_id}/pricing`` and ``/v1/pricings``: which model prices a sender's examples for a
feature-aware release, and what was priced."""

from fastapi import APIRouter, Request, Response

from features_party.api.deps import Caller, Grants, PricingLog, Services
from features_party.api.schemas import PricingGrantIn, PricingGrantOut, PricingOut
from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["pricing"])


@router.put(
    "/senders/{sender_id}/pricing",
    response_model=PricingGrantOut,
    responses=errors(
        s404="`not-found`: this tenant pinned no such sender, or has no such model",
        s409="`model-not-complete`: the model's job has not succeeded; `model-not-priceable`: a "
        "semi-sensitive model (the labels party trained it) or one whose loss states no spread (Poisson)",
    ),
)
def grant_pricing(sender_id: str, body: PricingGrantIn, caller: Caller, grants: Grants) -> PricingGrantOut:
    """Let one of this tenant's complete models price the examples a pinned sender asks about (gRPC
    `PriceExamples`): the sender learns each example's group and G group priors — a coarse view of the
    model — and no label is read. Replaces an earlier grant; without one, its requests are refused."""
    grant = grants.set(caller.tenant_id, sender_id, body.model_id, body.max_groups)
    return PricingGrantOut.of(grant)


@router.get("/senders/{sender_id}/pricing", response_model=PricingGrantOut)
async def get_pricing(sender_id: str, caller: Caller, grants: Grants, svc: Services) -> PricingGrantOut:
    """The model that prices this sender's examples (404: none does)."""
    return PricingGrantOut.of(await svc.sessions.read(lambda: grants.get(caller.tenant_id, sender_id)))


@router.delete("/senders/{sender_id}/pricing", status_code=204)
def withdraw_pricing(sender_id: str, caller: Caller, grants: Grants) -> Response:
    """Withdraw the grant: the sender's pricing requests are refused from now on."""
    grants.withdraw(caller.tenant_id, sender_id)
    return Response(status_code=204)


@router.get("/pricings", response_model=Page[PricingOut])
async def list_pricings(
    caller: Caller, pricings: PricingLog, paging: Paging, request: Request, svc: Services
) -> Page[PricingOut]:
    """Every pricing request this tenant answered, oldest first (a page): who asked, which model priced how
    many examples into how many groups — what left this party."""
    rows = await svc.sessions.read(lambda: pricings.list(caller.tenant_id, paging))
    return Page[PricingOut].of(rows, paging, request, PricingOut.of)
