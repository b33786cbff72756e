"""``/v1/releases``: releases received and verified by the gRPC receiver."""

from fastapi import APIRouter, Request

from features_party.api.deps import Caller, Releases
from features_party.api.schemas import ReceivedReleaseOut
from labeldp.common.pages import Page, Paging

router = APIRouter(prefix="/v1", tags=["releases"])


@router.get("/releases", response_model=Page[ReceivedReleaseOut])
def list_releases(
    _: Caller, releases: Releases, paging: Paging, request: Request
) -> Page[ReceivedReleaseOut]:
    """Releases received and verified by the gRPC receiver, with their signed metadata."""
    return Page[ReceivedReleaseOut].of(releases.list(paging), paging, request, ReceivedReleaseOut.of)


@router.get("/releases/{release_id}", response_model=ReceivedReleaseOut)
def get_release(release_id: str, _: Caller, releases: Releases) -> ReceivedReleaseOut:
    return ReceivedReleaseOut.of(releases.get(release_id))
