"""The signed model message of training with semi-sensitive features (docs/semi-sensitive.md).

One JSON envelope: the payload (a UTF-8 JSON document: the model's weights, the columns it reads, and
its guarantee — ε₁ of the label phase, ε₂ and δ of DP-SGD, adjacency, accountant, noise and schedule)
as base64, the sender's Ed25519 signature over exactly those bytes, and the sender's name and key id
to look the public key up. A verifier checks the size, the signature against a pinned key and then
the payload's schema, in that order: nothing unauthenticated is interpreted beyond finding the key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labeldp.common.errors import DomainError
from labeldp.common.identity import Identity, verify

MODEL_FORMAT = "labeldp.semi-sensitive-model/1"
MAX_MODEL_MESSAGE_BYTES = 8 * 2**20  # within the gRPC receiver's message limit

KeyLookup = Callable[[str, str], Ed25519PublicKey | None]


class ModelMessageError(DomainError):
    """A model message that is malformed, unsigned by a pinned key, tampered with, addressed to
    another party or expired (422; over gRPC the status ``grpc`` names)."""

    def __init__(self, message: str, grpc: str = "INVALID_ARGUMENT") -> None:
        super().__init__("invalid-model-message", message, status=422, grpc_code=grpc)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Guarantee(_Frozen):
    """What the model's weights promise, per example, for its labels and semi-sensitive features."""

    epsilon_labels: float = Field(
        description="ε₁: the label-only release the first phase trained on (0: no label phase)"
    )
    label_release_id: str | None = Field(description="the label release of the first phase; null: none")
    epsilon_dpsgd: float = Field(description="ε₂: the DP-SGD phase")
    delta: float
    epsilon_total: float = Field(description="ε₁ + ε₂ (basic composition), rounded up")
    adjacency: Literal["replace-one"] = "replace-one"
    unit: Literal["example", "user"] = Field(
        "example", description="user: a user-level label release; the training examples are ≤ τ per user"
    )
    contribution_bound: int | None = Field(None, description="unit user: τ, examples per user that train")
    epsilon_user: float | None = Field(
        None, description="unit user: ε per user over both phases (ε_user of the release + τ·ε₂)"
    )
    delta_user: float | None = Field(None, description="unit user: δ per user, δ·Σ_{i<τ} e^{i·ε₂}")
    accountant: str
    noise_multiplier: float
    sampling_rate: float
    steps: int
    clip_norm: float
    examples: int


class Column(_Frozen):
    name: str
    kind: Literal["number", "category"]
    lo: float | None = None
    hi: float | None = None
    categories: list[str] | None = None
    scale: Literal["linear", "log"] = "linear"


class ModelPayload(_Frozen):
    format: Literal["labeldp.semi-sensitive-model/1"] = "labeldp.semi-sensitive-model/1"
    model_id: str
    sender_id: str
    sender_key_id: str
    recipient_id: str = Field(description="the features party it is addressed to (the label release's)")
    dataset_id: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    guarantee: Guarantee
    non_sensitive: list[Column]
    semi_sensitive: list[Column]
    architecture: dict[str, int] = Field(description="two towers and a head: {'width': …}")
    weights: dict[str, list[Any]]


class _Envelope(_Frozen):
    format: Literal["labeldp.semi-sensitive-model/1"]
    sender_id: str = Field(max_length=200)
    sender_key_id: str = Field(max_length=80)
    payload: str
    signature: str = Field(max_length=200)


def sign_model(payload: ModelPayload, identity: Identity) -> bytes:
    """The envelope bytes: the payload's canonical JSON, signed."""
    body = json.dumps(payload.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()
    envelope = _Envelope(
        format=MODEL_FORMAT,
        sender_id=payload.sender_id,
        sender_key_id=payload.sender_key_id,
        payload=base64.b64encode(body).decode(),
        signature=base64.b64encode(identity.sign(body)).decode(),
    )
    return envelope.model_dump_json().encode()


def verify_model(raw: bytes, trusted: KeyLookup) -> ModelPayload:
    """The payload of an authentic message; ``ModelMessageError`` for anything else."""
    if len(raw) > MAX_MODEL_MESSAGE_BYTES:
        raise ModelMessageError(f"a model message is at most {MAX_MODEL_MESSAGE_BYTES} bytes")
    try:
        envelope = _Envelope.model_validate_json(raw)
        body = base64.b64decode(envelope.payload, validate=True)
        signature = base64.b64decode(envelope.signature, validate=True)
    except (ValidationError, ValueError, binascii.Error) as exc:
        raise ModelMessageError("not a model message envelope") from exc
    key = trusted(envelope.sender_id, envelope.sender_key_id)
    if key is None:
        raise ModelMessageError(
            f"sender {envelope.sender_id!r} with key {envelope.sender_key_id!r} is not pinned",
            "UNAUTHENTICATED",
        )
    if not verify(key, signature, body):
        raise ModelMessageError("the signature does not verify", "UNAUTHENTICATED")
    try:
        payload = ModelPayload.model_validate_json(body)
    except (ValidationError, ValueError, RecursionError) as exc:
        raise ModelMessageError("the signed payload is not a model description") from exc
    if (payload.sender_id, payload.sender_key_id) != (envelope.sender_id, envelope.sender_key_id):
        raise ModelMessageError("the envelope and the signed payload name different senders")
    return payload


def check_model(raw: bytes, trusted: KeyLookup, receiver_id: str, now_unix_ms: int) -> ModelPayload:
    """``verify_model``, then what a recipient must also check: addressed to it and not expired."""
    payload = verify_model(raw, trusted)
    if payload.recipient_id != receiver_id:
        raise ModelMessageError(f"this model is addressed to {payload.recipient_id!r}", "PERMISSION_DENIED")
    if payload.expires_at_unix_ms <= now_unix_ms:
        raise ModelMessageError("the model message has expired", "FAILED_PRECONDITION")
    return payload
