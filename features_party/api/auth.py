"""Bearer API keys of the features party's tenants."""

from __future__ import annotations

from fastapi import Request

from features_party.tenants import authenticate
from labeldp.problems import ProblemError


def caller(request: Request) -> str:
    """The tenant id of a valid bearer key (401 otherwise)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ProblemError(401, "unauthenticated", "send Authorization: Bearer <api key>")
    with request.app.state.sessions() as session:
        key = authenticate(session, token.strip())
    if key is None:
        raise ProblemError(401, "unauthenticated", "the API key is not valid")
    return key.tenant_id
