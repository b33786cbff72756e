"""Bearer API keys of the features party's tenants."""

from __future__ import annotations

from fastapi import Request

from features_party.tenants import authenticate
from labeldp.common.apikeys import bearer_token, invalid_key


def caller(request: Request) -> str:
    """The tenant id of a valid bearer key (401 otherwise)."""
    token = bearer_token(request)
    with request.app.state.sessions() as session:
        key = authenticate(session, token)
    if key is None:
        raise invalid_key()
    return key.tenant_id
