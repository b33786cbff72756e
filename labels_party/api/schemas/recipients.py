"""Bodies of ``/v1/recipients``: the features parties a tenant may release to."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from labeldp.common.inputs import Name, Pem
from labels_party.storage.orm import Recipient


class RecipientIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [
                {
                    "name": "publisher",
                    "grpc_address": "publisher.example:8501",
                    "fingerprint": "ed25519:4b47bdb2497d2b734bb4f0663cb6c42a",
                    "recipient_tenant": "5e0c1f2a-8b1d-4c3e-9f00-7a6b5c4d3e2f",
                }
            ]
        },
    )

    name: Name = Field(description="the features party's id (its party_id)")
    grpc_address: str | None = Field(
        None,
        max_length=300,
        pattern=r"^[^\x00-\x20\x7f]+:[0-9]{1,5}$",
        description="host:port of its gRPC receiver: a DNS name, an IPv4 address or [an IPv6 address], "
        "port 1–65535; never link-local; the operator may restrict hosts (LABELDP_RECIPIENT_HOSTS)",
    )
    tls_ca_pem: Pem | None = Field(
        None, description="CA certificate (PEM) that signed its server certificate"
    )
    fingerprint: str | None = Field(
        None, max_length=80, pattern=r"^[!-~]+$", description="its Ed25519 key fingerprint (GET /v1/identity)"
    )
    recipient_tenant: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        description="its tenant at the features party (`tenant_id` of its GET /v1/identity): every "
        "message to it names that tenant, signed, and the features party files it for that tenant "
        "alone — no other tenant's pin of this party's key can take or block it",
    )


class RecipientOut(BaseModel):
    id: str
    name: str
    grpc_address: str | None
    fingerprint: str | None
    recipient_tenant: str | None
    tls: bool
    created_at: AwareDatetime

    @classmethod
    def of(cls, r: Recipient) -> RecipientOut:
        return cls(
            id=r.id,
            name=r.name,
            grpc_address=r.grpc_address,
            fingerprint=r.fingerprint,
            recipient_tenant=r.recipient_tenant,
            tls=bool(r.tls_ca_pem),
            created_at=r.created_at,
        )
