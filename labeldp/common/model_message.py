"""The signed model message of training with semi-sensitive features (docs/semi-sensitive.md).

One JSON envelope: the payload (a UTF-8 JSON document: the model's weights, the columns it reads, and
its guarantee — ε₁ of the label phase, ε₂ and δ of DP-SGD, adjacency, accountant, noise and schedule)
as base64, the sender's Ed25519 signature over exactly those bytes, and the sender's name and key id
to look the public key up. A verifier checks the size, the signature against a pinned key and then
the payload's schema, in that order: nothing unauthenticated is interpreted beyond finding the key.
A recipient then checks every signed field against public bounds before storing anything
(``check_bounds``): a pinned sender may still be wrong or hostile, and the stored message is what
the features party serves.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labeldp.common.errors import DomainError
from labeldp.common.identity import Identity, verify
from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.mechanisms.validation import MAX_EPSILON

MODEL_FORMAT = "labeldp.semi-sensitive-model/1"
MAX_MODEL_MESSAGE_BYTES = 8 * 2**20  # within the gRPC receiver's message limit

# Public bounds of a model message (``check_bounds``): those of the two-tower model
# (labeldp/semi_sensitive/model.py) and of the columns a dataset may declare
# (labels_party/datasets/spec.py); the rest bound the guarantee's numbers to what an accountant states.
MAX_WIDTH = 4096
MAX_INPUTS = 1 << 16
MAX_COLUMNS = 64  # per tower
MAX_CATEGORIES = 1000
MAX_CATEGORY_CHARS = 100
MAX_STEPS = 1_000_000
MAX_EXAMPLES = 1 << 40
MAX_NOISE_MULTIPLIER = 1e4
MAX_CONTRIBUTION_BOUND = 1_000_000
MAX_WEIGHT = float(np.finfo(np.float32).max)  # the model reads its weights as float32
_COLUMN_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_RESERVED = frozenset({"example_id", "label", "user_id", "example_key", "example_check"})


@dataclass(frozen=True)
class Pin:
    """A sender's pinned public key, and whom the receiver files what it verifies for (the features
    party: the tenant that pinned it; ``None``: every tenant). Used by both kinds of message."""

    key: Ed25519PublicKey
    owner: str | None = None


# (sender id, key id) -> the pinned key, or every pin of that key (the signature picks among them)
KeyLookup = Callable[[str, str], Ed25519PublicKey | Sequence[Pin] | None]


def as_pins(found: Ed25519PublicKey | Sequence[Pin] | None) -> list[Pin]:
    if found is None:
        return []
    if isinstance(found, Ed25519PublicKey):
        return [Pin(found)]
    return list(found)


def verified_owners(
    found: Ed25519PublicKey | Sequence[Pin] | None, signature: bytes, message: bytes
) -> list[str | None]:
    """The owners of the pins whose key verifies ``signature`` over ``message`` (empty: none does)."""
    return [pin.owner for pin in as_pins(found) if verify(pin.key, signature, message)]


def for_tenant(found: Ed25519PublicKey | Sequence[Pin] | None, tenant: str | None) -> list[Pin]:
    """The pins a message naming ``tenant`` may verify under: that tenant's own (a message naming none:
    every pin). Another tenant's pin of the same key is never consulted, so it can neither take the
    message nor make it ambiguous; a legacy pin no tenant was credited with counts for messages that
    name no tenant only (an operator assigns it to a tenant: ``UPDATE senders SET tenant_id``)."""
    pins = as_pins(found)
    if not tenant:
        return pins
    return [pin for pin in pins if pin.owner == tenant]


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
    recipient_tenant: str | None = Field(
        None,
        description="the recipient's tenant it is for (as a release header's recipient_tenant); "
        "left out of the signed JSON when none is named, so older receivers read it as before",
    )
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
    fields = payload.model_dump(
        mode="json", exclude={"recipient_tenant"} if payload.recipient_tenant is None else None
    )
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    envelope = _Envelope(
        format=MODEL_FORMAT,
        sender_id=payload.sender_id,
        sender_key_id=payload.sender_key_id,
        payload=base64.b64encode(body).decode(),
        signature=base64.b64encode(identity.sign(body)).decode(),
    )
    return envelope.model_dump_json().encode()


@dataclass(frozen=True)
class VerifiedModel:
    payload: ModelPayload
    owners: tuple[str | None, ...]  # of the pins the signature verified under


def verify_model(raw: bytes, trusted: KeyLookup) -> ModelPayload:
    """The payload of an authentic message; ``ModelMessageError`` for anything else."""
    return _verify(raw, trusted).payload


def _verify(raw: bytes, trusted: KeyLookup) -> VerifiedModel:
    if len(raw) > MAX_MODEL_MESSAGE_BYTES:
        raise ModelMessageError(f"a model message is at most {MAX_MODEL_MESSAGE_BYTES} bytes")
    try:
        envelope = _Envelope.model_validate_json(raw)
        body = base64.b64decode(envelope.payload, validate=True)
        signature = base64.b64decode(envelope.signature, validate=True)
    except (ValidationError, ValueError, binascii.Error) as exc:
        raise ModelMessageError("not a model message envelope") from exc
    found = trusted(envelope.sender_id, envelope.sender_key_id)
    if not as_pins(found):
        raise ModelMessageError(
            f"sender {envelope.sender_id!r} with key {envelope.sender_key_id!r} is not pinned",
            "UNAUTHENTICATED",
        )
    owners = verified_owners(found, signature, body)
    if not owners:
        raise ModelMessageError("the signature does not verify", "UNAUTHENTICATED")
    try:
        payload = ModelPayload.model_validate_json(body)
    except (ValidationError, ValueError, RecursionError) as exc:
        raise ModelMessageError("the signed payload is not a model description") from exc
    if (payload.sender_id, payload.sender_key_id) != (envelope.sender_id, envelope.sender_key_id):
        raise ModelMessageError("the envelope and the signed payload name different senders")
    return VerifiedModel(payload, tuple(owners))


def check_model(raw: bytes, trusted: KeyLookup, receiver_id: str, now_unix_ms: int) -> VerifiedModel:
    """``verify_model``, then what a recipient must also check: signed by a key the tenant it names
    pinned (``recipient_tenant``; anyone else may verify it with the sender's key alone), addressed to
    it, not expired, and every field within its public bounds (``check_bounds``)."""
    verified = _verify(raw, trusted)
    payload = verified.payload
    if payload.recipient_tenant:  # authentic now: only that tenant's pins count (``for_tenant``)
        owners = tuple(o for o in verified.owners if o == payload.recipient_tenant)
        if not owners:
            raise ModelMessageError(
                "the tenant this model is for has not pinned the key that signed it", "UNAUTHENTICATED"
            )
        verified = VerifiedModel(payload, owners)
    if payload.recipient_id != receiver_id:
        raise ModelMessageError(f"this model is addressed to {payload.recipient_id!r}", "PERMISSION_DENIED")
    if payload.expires_at_unix_ms <= now_unix_ms:
        raise ModelMessageError("the model message has expired", "FAILED_PRECONDITION")
    check_bounds(payload)
    return verified


# -- public bounds of every field ---------------------------------------------------------------------
def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ModelMessageError(message)


def _positive(value: float, name: str, top: float = math.inf) -> None:
    _require(math.isfinite(value) and 0 < value <= top, f"{name} must be finite, > 0 and <= {top}")


def _column_width(column: Column) -> int:
    """How many inputs the column is encoded into (labeldp/semi_sensitive/encoding.py)."""
    name = column.name
    _require(
        _COLUMN_NAME.fullmatch(name) is not None and name not in _RESERVED,
        f"column name {name[:80]!r} is not a plain lowercase identifier (or is reserved)",
    )
    if column.kind == "number":
        lo, hi = column.lo, column.hi
        _require(
            lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and lo < hi,
            f"number column {name!r} needs finite bounds with lo < hi",
        )
        _require(column.categories is None, f"number column {name!r} has categories")
        return 1
    categories = column.categories or []
    _require(column.lo is None and column.hi is None, f"category column {name!r} has bounds")
    _require(
        0 < len(categories) <= MAX_CATEGORIES,
        f"category column {name!r} needs 1 to {MAX_CATEGORIES} categories",
    )
    _require(
        all(0 < len(c) <= MAX_CATEGORY_CHARS for c in categories) and len(set(categories)) == len(categories),
        f"category column {name!r} needs distinct categories of 1 to {MAX_CATEGORY_CHARS} characters",
    )
    return len(categories)


def _tower_inputs(columns: list[Column], tower: str) -> int:
    _require(0 < len(columns) <= MAX_COLUMNS, f"the {tower} tower reads 1 to {MAX_COLUMNS} columns")
    inputs = sum(_column_width(c) for c in columns)
    _require(inputs <= MAX_INPUTS, f"the {tower} tower has {inputs} inputs; at most {MAX_INPUTS}")
    return inputs


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _weight(name: str, value: list[Any], shape: tuple[int, ...]) -> None:
    """Exactly ``shape``, numbers only, every one finite and within float32."""
    if len(shape) == 1:
        ok = len(value) == shape[0] and all(_is_number(v) for v in value)
    else:
        ok = len(value) == shape[0] and all(
            isinstance(row, list) and len(row) == shape[1] and all(_is_number(v) for v in row)
            for row in value
        )
    _require(ok, f"weight {name!r} must be a {' x '.join(map(str, shape))} array of numbers")
    array = np.asarray(value, dtype=np.float64)
    _require(
        bool(np.isfinite(array).all()) and float(np.abs(array).max(initial=0.0)) <= MAX_WEIGHT,
        f"weight {name!r} has a value that is not finite (or beyond float32)",
    )


def _check_guarantee(g: Guarantee) -> None:
    """A label phase (a release id and its ε₁ > 0) or none (DP-SGD alone: no release and ε₁ = 0
    exactly — a model the labels party trains where the public plan finds that the label phase does
    not pay for its ε); either way every number finite and in range."""
    for name in ("epsilon_dpsgd", "epsilon_total"):
        _positive(getattr(g, name), f"guarantee.{name}", MAX_EPSILON)
    if g.label_release_id is None:
        _require(g.epsilon_labels == 0, "guarantee.epsilon_labels must be 0 without a label release")
    else:
        _positive(g.epsilon_labels, "guarantee.epsilon_labels", MAX_EPSILON)
        _require(is_uuid(g.label_release_id), "guarantee.label_release_id must be a UUID")
    _require(
        g.epsilon_total >= (g.epsilon_labels + g.epsilon_dpsgd) * (1 - 1e-12),
        "guarantee.epsilon_total is less than epsilon_labels + epsilon_dpsgd",
    )
    _require(math.isfinite(g.delta) and 0 < g.delta < 1, "guarantee.delta must be in (0, 1)")
    _require(
        is_clean_text(g.accountant, 80), "guarantee.accountant must be plain text of at most 80 characters"
    )
    _positive(g.noise_multiplier, "guarantee.noise_multiplier", MAX_NOISE_MULTIPLIER)
    _positive(g.sampling_rate, "guarantee.sampling_rate", 1.0)
    _positive(g.clip_norm, "guarantee.clip_norm", 1e6)
    _require(0 < g.steps <= MAX_STEPS, f"guarantee.steps must be in [1, {MAX_STEPS}]")
    _require(0 < g.examples <= MAX_EXAMPLES, f"guarantee.examples must be in [1, {MAX_EXAMPLES}]")
    user = (g.contribution_bound, g.epsilon_user, g.delta_user)
    if g.unit == "example":
        _require(user == (None, None, None), "an example-level guarantee states no per-user terms")
        return
    _require(
        g.contribution_bound is not None and 0 < g.contribution_bound <= MAX_CONTRIBUTION_BOUND,
        f"a user-level guarantee needs contribution_bound in [1, {MAX_CONTRIBUTION_BOUND}]",
    )
    _require(
        g.epsilon_user is not None and g.delta_user is not None,
        "a user-level guarantee needs ε and δ per user",
    )
    assert g.epsilon_user is not None and g.delta_user is not None
    _positive(g.epsilon_user, "guarantee.epsilon_user", MAX_EPSILON * MAX_CONTRIBUTION_BOUND)
    _positive(g.delta_user, "guarantee.delta_user", math.inf)


def check_bounds(payload: ModelPayload) -> None:
    """Every signed field within its public bounds: plain identifiers, times in order, the guarantee's
    numbers finite and in range, columns a dataset could declare, an architecture of at most
    ``MAX_WIDTH``, and weights of exactly the shapes the columns and the architecture imply, every one
    finite. ``ModelMessageError`` (INVALID_ARGUMENT) names the first field that is not."""
    _require(is_uuid(payload.model_id), "model_id must be a UUID (lowercase, 8-4-4-4-12)")
    _require(is_clean_text(payload.dataset_id), "dataset_id must be plain text of at most 200 characters")
    for name in ("sender_id", "recipient_id"):
        _require(
            is_clean_text(getattr(payload, name)), f"{name} must be plain text of at most 200 characters"
        )
    _require(
        payload.recipient_tenant is None or is_uuid(payload.recipient_tenant),
        "recipient_tenant must be a tenant id (a UUID)",
    )
    _require(
        is_clean_text(payload.sender_key_id, 80), "sender_key_id must be plain text of at most 80 characters"
    )
    _require(
        0 <= payload.created_at_unix_ms <= payload.expires_at_unix_ms < 2**53,
        "created_at_unix_ms and expires_at_unix_ms must be times in order",
    )
    _check_guarantee(payload.guarantee)
    non_sensitive = _tower_inputs(payload.non_sensitive, "non-sensitive")
    semi_sensitive = _tower_inputs(payload.semi_sensitive, "semi-sensitive")
    names = [c.name for c in (*payload.non_sensitive, *payload.semi_sensitive)]
    _require(len(set(names)) == len(names), "a column is declared twice")
    width = payload.architecture.get("width")
    _require(set(payload.architecture) == {"width"}, "the architecture states exactly its width")
    _require(
        isinstance(width, int) and not isinstance(width, bool) and 0 < width <= MAX_WIDTH,
        f"the architecture's width must be in [1, {MAX_WIDTH}]",
    )
    assert isinstance(width, int)
    shapes = weight_shapes(non_sensitive, semi_sensitive, width)
    _require(set(payload.weights) == set(shapes), "the weights do not name the model's parameters")
    for name, shape in shapes.items():
        _weight(name, payload.weights[name], shape)


def weight_shapes(non_sensitive: int, semi_sensitive: int, width: int) -> dict[str, tuple[int, ...]]:
    """The two-tower model's parameters and their shapes (``TwoTower.state_dict()``)."""
    return {
        "non_sensitive.0.weight": (width, non_sensitive),
        "non_sensitive.0.bias": (width,),
        "semi_sensitive.0.weight": (width, semi_sensitive),
        "semi_sensitive.0.bias": (width,),
        "head.0.weight": (width, 2 * width),
        "head.0.bias": (width,),
        "head.2.weight": (1, width),
        "head.2.bias": (1,),
    }
