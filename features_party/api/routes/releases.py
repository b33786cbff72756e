"""``/v1/releases``: releases received and verified by the gRPC receiver."""

from fastapi import APIRouter, Request

from features_party.api.deps import Caller, Releases
from features_party.api.schemas import ReceivedReleaseOut
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["releases"])


@router.get("/releases", response_model=Page[ReceivedReleaseOut])
def list_received_releases(
    caller: Caller, releases: Releases, paging: Paging, request: Request
) -> Page[ReceivedReleaseOut]:
    """Releases received and verified by the gRPC receiver from this tenant's pinned senders, with their
    signed metadata."""
    return Page[ReceivedReleaseOut].of(
        releases.list(caller.tenant_id, paging), paging, request, ReceivedReleaseOut.of
    )


@router.get("/releases/{release_id}", response_model=ReceivedReleaseOut)
def get_received_release(release_id: str, caller: Caller, releases: Releases) -> ReceivedReleaseOut:
    """One received release: its sender, size, mechanism and signed guarantee."""
    return ReceivedReleaseOut.of(releases.get(caller.tenant_id, release_id))
