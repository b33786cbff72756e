"""``/v1/datasets/{id}/priors`` and ``/v1/priors``: obtain priors for a dataset's examples from a pinned
features party, and list, inspect and delete them."""

from fastapi import APIRouter, Request, Response

from labeldp.common.openapi import errors
from labeldp.common.pages import Page, Paging
from labels_party.api.deps import Caller, PriorsApi, Services
from labels_party.api.schemas.priors import PriorsDetailOut, PriorsIn, PriorsOut

router = APIRouter(prefix="/v1", tags=["priors"])


@router.post(
    "/datasets/{dataset_id}/priors",
    status_code=201,
    response_model=PriorsOut,
    responses=errors(
        s409="`recipient-not-pinned`: the recipient has no key fingerprint to check the answer with; "
        "`recipient-has-no-address`, `tls-not-configured`",
        s422="`unknown-recipient`: no recipient of that name; `invalid-max-groups`: max_groups × support "
        "points over 262,144; `invalid-loss`: a loss the label type does not take; `empty-release`: no "
        "example to price; `duplicate-example-id`, `unknown-example-ids`: example_ids repeats one, or names "
        "one the dataset lacks; `invalid-recipient-address`, `recipient-address-not-allowed`: the "
        "recipient's address may not be dialled",
        s502="`priors-refused`: the recipient refused (its gRPC status in `grpc_status`) or could not be "
        "reached, or its answer failed a check (`reason`); nothing stored",
    ),
)
def fetch_priors(dataset_id: str, body: PriorsIn, caller: Caller, priors: PriorsApi) -> PriorsOut:
    """Ask a pinned features party to price the dataset's examples with its model: each example's group and
    each group's prior on the support, signed, checked in full and stored. Charges nothing (IDs and
    public parameters travel, never a label); the priors are for a feature-aware release."""
    return PriorsOut.of(priors.fetch(caller.tenant_id, dataset_id, body.request()))


@router.get("/datasets/{dataset_id}/priors", response_model=Page[PriorsOut])
async def list_dataset_priors(
    dataset_id: str, caller: Caller, priors: PriorsApi, paging: Paging, request: Request, svc: Services
) -> Page[PriorsOut]:
    """The dataset's stored priors, oldest first (a page)."""
    rows = await svc.sessions.read(lambda: priors.list(caller.tenant_id, paging, dataset_id))
    return Page[PriorsOut].of(rows, paging, request, PriorsOut.of)


@router.get("/priors", response_model=Page[PriorsOut])
async def list_priors(
    caller: Caller, priors: PriorsApi, paging: Paging, request: Request, svc: Services
) -> Page[PriorsOut]:
    """Every stored priors object of the tenant, oldest first (a page)."""
    rows = await svc.sessions.read(lambda: priors.list(caller.tenant_id, paging))
    return Page[PriorsOut].of(rows, paging, request, PriorsOut.of)


@router.get("/priors/{priors_id}", response_model=PriorsDetailOut)
def get_priors(priors_id: str, caller: Caller, priors: PriorsApi) -> PriorsDetailOut:
    """Stored priors in full: the model and rule that made them, each group's size and prior."""
    return PriorsDetailOut.of_detail(priors.detail(caller.tenant_id, priors_id))


@router.delete(
    "/priors/{priors_id}",
    status_code=204,
    responses=errors(s409="`priors-in-use`: a charged release that uses them is still running"),
)
def delete_priors(priors_id: str, caller: Caller, priors: PriorsApi) -> Response:
    """Delete stored priors and their files. Releases that used them keep naming them."""
    priors.delete(caller.tenant_id, priors_id)
    return Response(status_code=204)
