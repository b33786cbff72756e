"""``/v1/joins``: how a received release and a feature table match by example ID."""

from fastapi import APIRouter

from features_party.api.deps import Caller, Releases, Tables
from features_party.api.schemas import JoinIn, JoinOut
from labeldp.common.openapi import errors

router = APIRouter(prefix="/v1", tags=["features"])


@router.post(
    "/joins",
    response_model=JoinOut,
    responses=errors(
        s404="`not-found`: no such received release or feature table",
        s503="`cluster-unavailable`: the join is large and the configured Dask cluster did not answer",
    ),
)
def report_join(body: JoinIn, caller: Caller, releases: Releases, tables: Tables) -> JoinOut:
    """How a received release and a feature table match by example ID (on the configured Dask cluster
    when both hold 20M rows together)."""
    release = releases.get(caller.tenant_id, body.release_id)
    table = tables.get(caller.tenant_id, body.feature_table)
    return JoinOut.of(body, tables.join_report(release, table))
