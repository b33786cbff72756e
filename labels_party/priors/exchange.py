"""Asking a features party for priors over gRPC (``FeaturesParty.PriceExamples``), dialled exactly as
deliveries are (checked addresses, mutual TLS, retries with backoff while it cannot be reached or asks
to be retried; not after a deadline: it was pricing), and reading its answer within
bounds: each frame at most gRPC's receive limit (set to what an honest answer needs), the whole answer
at most ``answer_bytes_bound``, the call at most its deadline.

The ID chunks are spooled once; every attempt signs a fresh request over them with a new request id,
which the answer must echo, so an answer to another (earlier) request is refused. Nothing is stored
here: the caller stores an answer only once every check has passed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.errors import DomainError
from labeldp.common.wire.format import CHUNK_MAX_EXAMPLES, WireError
from labeldp.common.wire.pricing import (
    GROUP_BYTES,
    MAX_PRIORS_HEADER_BYTES,
    GroupChunks,
    PricingAsk,
    SpooledIds,
    answer_bytes_bound,
    open_priors,
    signed_request,
    spool_ids,
)
from labeldp.common.wire.records import read_records
from labeldp.v1 import priors_pb2 as ppb
from labels_party.delivery.addresses import Target
from labels_party.delivery.client import with_retries
from labels_party.delivery.message import Signer
from labels_party.priors.verify import Expected, check_header

METHOD = "/labeldp.v1.FeaturesParty/PriceExamples"
REQUEST_TTL_SECONDS = 600  # a request is answered at once; it need not stay valid for long
RECEIVE_BYTES = MAX_PRIORS_HEADER_BYTES + GROUP_BYTES * CHUNK_MAX_EXAMPLES + 2**16  # the largest frame
# retried (with backoff) when the features party was not reached; an attempt that ran out of time is not
# (it was pricing: another attempt would price everything again) — nor is a refusal, unless it asks
RETRY_ON = frozenset({grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True)
class Asked:
    """What this party asks the features party (public parameters of the dataset and the request)."""

    features_party: str  # the recipient's party id
    recipient_tenant: str
    label_type: str
    loss: str
    support: tuple[float, ...]
    max_groups: int


@dataclass(frozen=True)
class Answer:
    header: ppb.PriorsHeader
    groups: npt.NDArray[np.int64]  # per requested ID, in request order; -1: no group
    priors: npt.NDArray[np.float64]  # G × k, rows normalized
    frames: list[bytes]  # exactly as received (kept for audit)


class PriorsRefusedError(DomainError):
    """An answer that was not given or not accepted: 502 with the reason and the recipient's gRPC status
    when it refused (nothing stored)."""

    def __init__(self, reason: str, grpc_status: str | None = None, attempts: int = 1) -> None:
        super().__init__(
            "priors-refused",
            f"no priors were stored: {reason}",
            status=502,
            reason=reason,
            grpc_status=grpc_status,
            attempts=attempts,
        )


@dataclass
class Exchange:
    signer: Signer
    target: Target
    credentials: grpc.ChannelCredentials | None
    pinned: str  # the recipient's pinned key fingerprint
    timeout_s: float
    attempts: int
    sleep: Callable[[float], None] = time.sleep

    def run(self, asked: Asked, ids: pa.Array, spool_dir: Path) -> tuple[Answer | None, int, str, str]:
        """Ask for priors of ``ids``; (the checked answer or None, attempts, the last gRPC status and its
        detail). An answer that fails a check raises ``WireError`` (no retry: it was given)."""
        spool_dir.mkdir(parents=True, exist_ok=True)
        path = spool_dir / f"priors-{uuid.uuid4().hex}.ids"
        try:
            spooled = spool_ids(path, ids)
            return with_retries(
                lambda channel: self._attempt(channel, asked, spooled),
                self.target,
                self.credentials,
                self.attempts,
                self.sleep,
                receive_bytes=RECEIVE_BYTES,
                retryable=RETRY_ON,
            )
        finally:
            path.unlink(missing_ok=True)

    def _attempt(self, channel: grpc.Channel, asked: Asked, spooled: SpooledIds) -> Answer:
        now = int(time.time() * 1000)
        ask = PricingAsk(
            request_id=str(uuid.uuid4()),
            sender_id=self.signer.party_id,
            recipient_id=asked.features_party,
            recipient_tenant=asked.recipient_tenant,
            created_at_unix_ms=now,
            expires_at_unix_ms=now + 1000 * REQUEST_TTL_SECONDS,
            label_type=asked.label_type,
            loss=asked.loss,
            support=asked.support,
            max_groups=asked.max_groups,
        )
        first = signed_request(ask, self.signer.identity, spooled)

        def frames() -> Iterator[bytes]:
            yield first
            yield from read_records(spooled.path)

        expected = Expected(
            ask.request_id,
            self.signer.party_id,
            asked.features_party,
            asked.recipient_tenant,
            asked.support,
            asked.max_groups,
            spooled.examples,
            len(spooled.sizes),
        )
        call = channel.stream_stream(METHOD)
        responses = call(frames(), timeout=self.timeout_s)
        try:
            return _read(responses, self.pinned, expected, spooled.sizes)
        except WireError:
            responses.cancel()
            raise


def _read(responses: Iterator[bytes], pinned: str, expected: Expected, sizes: tuple[int, ...]) -> Answer:
    bound = answer_bytes_bound(expected.examples, expected.chunks)
    first = next(responses, None)
    if first is None:
        raise WireError("invalid_argument", "the answer is empty")
    header, _ = open_priors(first, pinned)
    priors = check_header(header, expected, int(time.time() * 1000))
    chunks, received, frames = GroupChunks(header, sizes), len(first), [first]
    for data in responses:
        received += len(data)
        if received > bound:
            raise WireError("resource_exhausted", f"the answer exceeds the {bound} bytes an honest one takes")
        chunks.add(data)
        frames.append(data)
    return Answer(header, chunks.finish(), priors, frames)
