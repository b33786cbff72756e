from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PricingFrame(_message.Message):
    __slots__ = ("request", "chunk")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    request: SignedPricingRequest
    chunk: PricingChunk
    def __init__(self, request: _Optional[_Union[SignedPricingRequest, _Mapping]] = ..., chunk: _Optional[_Union[PricingChunk, _Mapping]] = ...) -> None: ...

class SignedPricingRequest(_message.Message):
    __slots__ = ("request", "signature")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    request: bytes
    signature: bytes
    def __init__(self, request: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class PricingRequest(_message.Message):
    __slots__ = ("format_version", "request_id", "sender_id", "sender_key_id", "recipient_id", "recipient_tenant", "created_at_unix_ms", "expires_at_unix_ms", "label_type", "loss", "support", "max_groups", "example_count", "chunk_count", "ids_sha256")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LABEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    MAX_GROUPS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    IDS_SHA256_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    request_id: str
    sender_id: str
    sender_key_id: str
    recipient_id: str
    recipient_tenant: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    label_type: str
    loss: str
    support: _containers.RepeatedScalarFieldContainer[float]
    max_groups: int
    example_count: int
    chunk_count: int
    ids_sha256: bytes
    def __init__(self, format_version: _Optional[int] = ..., request_id: _Optional[str] = ..., sender_id: _Optional[str] = ..., sender_key_id: _Optional[str] = ..., recipient_id: _Optional[str] = ..., recipient_tenant: _Optional[str] = ..., created_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ..., label_type: _Optional[str] = ..., loss: _Optional[str] = ..., support: _Optional[_Iterable[float]] = ..., max_groups: _Optional[int] = ..., example_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., ids_sha256: _Optional[bytes] = ...) -> None: ...

class PricingChunk(_message.Message):
    __slots__ = ("index", "examples", "example_ids")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_IDS_FIELD_NUMBER: _ClassVar[int]
    index: int
    examples: int
    example_ids: bytes
    def __init__(self, index: _Optional[int] = ..., examples: _Optional[int] = ..., example_ids: _Optional[bytes] = ...) -> None: ...

class PriorsFrame(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: SignedPriors
    chunk: GroupChunk
    def __init__(self, header: _Optional[_Union[SignedPriors, _Mapping]] = ..., chunk: _Optional[_Union[GroupChunk, _Mapping]] = ...) -> None: ...

class SignedPriors(_message.Message):
    __slots__ = ("header", "signature")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    header: bytes
    signature: bytes
    def __init__(self, header: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class GroupPrior(_message.Message):
    __slots__ = ("masses",)
    MASSES_FIELD_NUMBER: _ClassVar[int]
    masses: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, masses: _Optional[_Iterable[float]] = ...) -> None: ...

class PriorsHeader(_message.Message):
    __slots__ = ("format_version", "priors_id", "request_id", "sender_id", "sender_key_id", "sender_public_key", "recipient_id", "recipient_tenant", "created_at_unix_ms", "expires_at_unix_ms", "model_id", "rule", "support", "groups", "example_count", "chunk_count", "payload_sha256")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRIORS_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    priors_id: str
    request_id: str
    sender_id: str
    sender_key_id: str
    sender_public_key: bytes
    recipient_id: str
    recipient_tenant: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    model_id: str
    rule: str
    support: _containers.RepeatedScalarFieldContainer[float]
    groups: _containers.RepeatedCompositeFieldContainer[GroupPrior]
    example_count: int
    chunk_count: int
    payload_sha256: bytes
    def __init__(self, format_version: _Optional[int] = ..., priors_id: _Optional[str] = ..., request_id: _Optional[str] = ..., sender_id: _Optional[str] = ..., sender_key_id: _Optional[str] = ..., sender_public_key: _Optional[bytes] = ..., recipient_id: _Optional[str] = ..., recipient_tenant: _Optional[str] = ..., created_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ..., model_id: _Optional[str] = ..., rule: _Optional[str] = ..., support: _Optional[_Iterable[float]] = ..., groups: _Optional[_Iterable[_Union[GroupPrior, _Mapping]]] = ..., example_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., payload_sha256: _Optional[bytes] = ...) -> None: ...

class GroupChunk(_message.Message):
    __slots__ = ("index", "examples", "groups")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    index: int
    examples: int
    groups: bytes
    def __init__(self, index: _Optional[int] = ..., examples: _Optional[int] = ..., groups: _Optional[bytes] = ...) -> None: ...
