"""Bearer API keys: every route needs one; it resolves to exactly one tenant."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from labeldp.common.apikeys import bearer_token, invalid_key
from labels_party.tenants import authenticate


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    api_key_id: str


def caller(request: Request) -> Caller:
    token = bearer_token(request)
    with request.app.state.sessions() as session:
        key = authenticate(session, token)
    if key is None:
        raise invalid_key()
    return Caller(key.tenant_id, key.id)
