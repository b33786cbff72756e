"""Bearer API keys: every route needs one; it resolves to exactly one tenant."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from labeldp.problems import ProblemError
from labels_party.tenants import authenticate


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    api_key_id: str


def caller(request: Request) -> Caller:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ProblemError(401, "unauthenticated", "send Authorization: Bearer <api key>")
    with request.app.state.sessions() as session:
        key = authenticate(session, token.strip())
    if key is None:
        raise ProblemError(401, "unauthenticated", "the API key is not valid")
    return Caller(key.tenant_id, key.id)
