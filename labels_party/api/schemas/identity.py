"""Body of ``/v1/identity``: this party's id and public signing key."""

from __future__ import annotations

from pydantic import BaseModel


class IdentityOut(BaseModel):
    party_id: str
    key_id: str
    public_key_pem: str
