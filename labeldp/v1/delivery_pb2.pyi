from labeldp.v1 import priors_pb2 as _priors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BinEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BIN_ENCODING_UNSPECIFIED: _ClassVar[BinEncoding]
    BIN_ENCODING_UINT8: _ClassVar[BinEncoding]
    BIN_ENCODING_UINT16_LE: _ClassVar[BinEncoding]
BIN_ENCODING_UNSPECIFIED: BinEncoding
BIN_ENCODING_UINT8: BinEncoding
BIN_ENCODING_UINT16_LE: BinEncoding

class ReleaseFrame(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: SignedHeader
    chunk: Chunk
    def __init__(self, header: _Optional[_Union[SignedHeader, _Mapping]] = ..., chunk: _Optional[_Union[Chunk, _Mapping]] = ...) -> None: ...

class SignedHeader(_message.Message):
    __slots__ = ("header", "signature")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    header: bytes
    signature: bytes
    def __init__(self, header: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class Mechanism(_message.Message):
    __slots__ = ("kind", "epsilon", "implemented_epsilon", "bin_values", "loss", "bin_lower", "bin_upper", "support_bins", "privacy_unit", "contribution_bound", "prior_contribution_bound", "epsilon_bound", "epsilon_example", "objective", "objective_epsilon", "base_weights", "window_starts", "window_offsets")
    KIND_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    IMPLEMENTED_EPSILON_FIELD_NUMBER: _ClassVar[int]
    BIN_VALUES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    BIN_LOWER_FIELD_NUMBER: _ClassVar[int]
    BIN_UPPER_FIELD_NUMBER: _ClassVar[int]
    SUPPORT_BINS_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_UNIT_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_BOUND_FIELD_NUMBER: _ClassVar[int]
    PRIOR_CONTRIBUTION_BOUND_FIELD_NUMBER: _ClassVar[int]
    EPSILON_BOUND_FIELD_NUMBER: _ClassVar[int]
    EPSILON_EXAMPLE_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_EPSILON_FIELD_NUMBER: _ClassVar[int]
    BASE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_STARTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    epsilon: float
    implemented_epsilon: float
    bin_values: _containers.RepeatedScalarFieldContainer[float]
    loss: str
    bin_lower: _containers.RepeatedScalarFieldContainer[float]
    bin_upper: _containers.RepeatedScalarFieldContainer[float]
    support_bins: _containers.RepeatedScalarFieldContainer[int]
    privacy_unit: str
    contribution_bound: int
    prior_contribution_bound: int
    epsilon_bound: float
    epsilon_example: float
    objective: str
    objective_epsilon: float
    base_weights: _containers.RepeatedScalarFieldContainer[int]
    window_starts: _containers.RepeatedScalarFieldContainer[int]
    window_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[str] = ..., epsilon: _Optional[float] = ..., implemented_epsilon: _Optional[float] = ..., bin_values: _Optional[_Iterable[float]] = ..., loss: _Optional[str] = ..., bin_lower: _Optional[_Iterable[float]] = ..., bin_upper: _Optional[_Iterable[float]] = ..., support_bins: _Optional[_Iterable[int]] = ..., privacy_unit: _Optional[str] = ..., contribution_bound: _Optional[int] = ..., prior_contribution_bound: _Optional[int] = ..., epsilon_bound: _Optional[float] = ..., epsilon_example: _Optional[float] = ..., objective: _Optional[str] = ..., objective_epsilon: _Optional[float] = ..., base_weights: _Optional[_Iterable[int]] = ..., window_starts: _Optional[_Iterable[int]] = ..., window_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class NoisyPrior(_message.Message):
    __slots__ = ("support", "masses")
    SUPPORT_FIELD_NUMBER: _ClassVar[int]
    MASSES_FIELD_NUMBER: _ClassVar[int]
    support: _containers.RepeatedScalarFieldContainer[float]
    masses: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, support: _Optional[_Iterable[float]] = ..., masses: _Optional[_Iterable[float]] = ...) -> None: ...

class ReleaseHeader(_message.Message):
    __slots__ = ("format_version", "release_id", "sender_id", "sender_key_id", "recipient_id", "created_at_unix_ms", "expires_at_unix_ms", "label_type", "epsilon_total", "epsilon_prior", "epsilon_randomize", "mechanism", "prior", "example_count", "chunk_count", "payload_sha256", "bin_encoding", "recipient_tenant", "groups", "priors_id")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RELEASE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LABEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    EPSILON_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EPSILON_PRIOR_FIELD_NUMBER: _ClassVar[int]
    EPSILON_RANDOMIZE_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    BIN_ENCODING_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_TENANT_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    PRIORS_ID_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    release_id: str
    sender_id: str
    sender_key_id: str
    recipient_id: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    label_type: str
    epsilon_total: float
    epsilon_prior: float
    epsilon_randomize: float
    mechanism: Mechanism
    prior: NoisyPrior
    example_count: int
    chunk_count: int
    payload_sha256: bytes
    bin_encoding: BinEncoding
    recipient_tenant: str
    groups: _containers.RepeatedCompositeFieldContainer[GroupMechanism]
    priors_id: str
    def __init__(self, format_version: _Optional[int] = ..., release_id: _Optional[str] = ..., sender_id: _Optional[str] = ..., sender_key_id: _Optional[str] = ..., recipient_id: _Optional[str] = ..., created_at_unix_ms: _Optional[int] = ..., expires_at_unix_ms: _Optional[int] = ..., label_type: _Optional[str] = ..., epsilon_total: _Optional[float] = ..., epsilon_prior: _Optional[float] = ..., epsilon_randomize: _Optional[float] = ..., mechanism: _Optional[_Union[Mechanism, _Mapping]] = ..., prior: _Optional[_Union[NoisyPrior, _Mapping]] = ..., example_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., payload_sha256: _Optional[bytes] = ..., bin_encoding: _Optional[_Union[BinEncoding, str]] = ..., recipient_tenant: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[GroupMechanism, _Mapping]]] = ..., priors_id: _Optional[str] = ...) -> None: ...

class GroupMechanism(_message.Message):
    __slots__ = ("mechanism", "prior")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    mechanism: Mechanism
    prior: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, mechanism: _Optional[_Union[Mechanism, _Mapping]] = ..., prior: _Optional[_Iterable[float]] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("index", "examples", "example_ids", "bins", "groups")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_IDS_FIELD_NUMBER: _ClassVar[int]
    BINS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    index: int
    examples: int
    example_ids: bytes
    bins: bytes
    groups: bytes
    def __init__(self, index: _Optional[int] = ..., examples: _Optional[int] = ..., example_ids: _Optional[bytes] = ..., bins: _Optional[bytes] = ..., groups: _Optional[bytes] = ...) -> None: ...

class DeliveryReceipt(_message.Message):
    __slots__ = ("release_id", "example_count", "payload_sha256", "receiver_id")
    RELEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    release_id: str
    example_count: int
    payload_sha256: bytes
    receiver_id: str
    def __init__(self, release_id: _Optional[str] = ..., example_count: _Optional[int] = ..., payload_sha256: _Optional[bytes] = ..., receiver_id: _Optional[str] = ...) -> None: ...

class SignedModel(_message.Message):
    __slots__ = ("envelope",)
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    envelope: bytes
    def __init__(self, envelope: _Optional[bytes] = ...) -> None: ...

class ModelReceipt(_message.Message):
    __slots__ = ("model_id", "message_sha256", "receiver_id")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SHA256_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    message_sha256: bytes
    receiver_id: str
    def __init__(self, model_id: _Optional[str] = ..., message_sha256: _Optional[bytes] = ..., receiver_id: _Optional[str] = ...) -> None: ...
