"""``/v1/releases``: releases received and verified by the gRPC receiver."""

from fastapi import APIRouter

from features_party.api.deps import Caller, Releases
from features_party.api.schemas import ReceivedReleaseOut

router = APIRouter(prefix="/v1", tags=["releases"])


@router.get("/releases", response_model=list[ReceivedReleaseOut])
def list_releases(_: Caller, releases: Releases) -> list[ReceivedReleaseOut]:
    """Releases received and verified by the gRPC receiver, with their signed metadata."""
    return [ReceivedReleaseOut.of(r) for r in releases.list()]


@router.get("/releases/{release_id}", response_model=ReceivedReleaseOut)
def get_release(release_id: str, _: Caller, releases: Releases) -> ReceivedReleaseOut:
    return ReceivedReleaseOut.of(releases.get(release_id))
