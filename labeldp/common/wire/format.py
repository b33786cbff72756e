"""The message format both parties share: its version, the bounds every frame stays within, and
the one error a refused message raises (its code is the gRPC status the receiver answers with).

A release travels as one signed header and chunks of ``(example IDs, bin codes)``: IDs as a
zstd-compressed Arrow string column (framing costs almost nothing on the wire), codes packed as uint8
(at most 256 codes) or little-endian uint16; ``0..m-1`` are the mechanism's bins, and a user-level
release adds ``m`` for examples over the contribution bound (listed, but carrying no label
information).
"""

from __future__ import annotations

import struct
from typing import Final

import pyarrow as pa

from labeldp.common.errors import DomainError

FORMAT_VERSION = 1


CHUNK_MAX_EXAMPLES = 262_144


CHUNK_MAX_ID_BYTES = 2 * 2**20  # keeps every frame well under the 8 MiB message limit below


MAX_MESSAGE_BYTES = 8 * 2**20


ID_SCHEMA = pa.schema([("example_id", pa.string())])


LENGTH_PREFIX = struct.Struct("<I")


# gRPC's own trailer for "retry after this many milliseconds": the receiver sets it on a refusal that
# frees itself (a limit of the sender's streams), and the labels party waits that long and retries
PUSHBACK_METADATA: Final = "grpc-retry-pushback-ms"


HTTP_FOR_GRPC = {
    "unauthenticated": 401,
    "permission_denied": 403,
    "failed_precondition": 412,
    "resource_exhausted": 413,
    "already_exists": 409,
    "invalid_argument": 400,
}


class WireError(DomainError):
    """A refused message; ``code`` is the gRPC status the receiver answers with, in snake case."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message, status=HTTP_FOR_GRPC.get(code, 400), grpc_code=code.upper())
