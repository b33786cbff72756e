"""Streaming a stored message to its recipient: deadlines, exponential backoff on UNAVAILABLE and
DEADLINE_EXCEEDED (and on any refusal that asks to be retried: ``grpc-retry-pushback-ms``), and a check
that the receipt matches what was signed."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from labeldp.common.wire.format import MAX_MESSAGE_BYTES, PUSHBACK_METADATA
from labeldp.common.wire.records import read_records, stored_header
from labeldp.v1 import delivery_pb2 as pb
from labels_party.delivery.addresses import Target

METHOD = "/labeldp.v1.FeaturesParty/DeliverRelease"
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 8.0
_jitter = secrets.SystemRandom()
_Receipt = TypeVar("_Receipt")


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    attempts: int
    status: str
    detail: str
    receipt: pb.DeliveryReceipt | None
    wire_bytes: int


def _pushback_s(exc: grpc.RpcError) -> float | None:
    """How long the receiver asked to wait before retrying (gRPC's ``grpc-retry-pushback-ms``
    trailer: a limit of this sender's that frees itself, such as too many streams at once), or None
    when it did not ask — a refusal to keep."""
    trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == PUSHBACK_METADATA and str(value).isdigit():
            return min(int(value) / 1000, BACKOFF_CAP_S)
    return None


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter: 0.25 s, 0.5 s, 1 s, … capped at 8 s, times 0.5–1."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * _jitter.uniform(0.5, 1.0)


def channel_for(
    target: Target, credentials: grpc.ChannelCredentials | None, receive_bytes: int | None = None
) -> grpc.Channel:
    """A channel to the checked addresses of ``target`` (never its name again: ``addresses``), TLS
    checking the recipient's certificate against the name it was registered under; ``receive_bytes``:
    the largest message it accepts from the recipient (gRPC's default, 4 MiB, when None)."""
    options: list[tuple[str, int | str]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 2**20),
        ("grpc.default_authority", target.host),
    ]
    if receive_bytes is not None:
        options.append(("grpc.max_receive_message_length", receive_bytes))
    if credentials is None:
        return grpc.insecure_channel(target.target, options=options)
    options.append(("grpc.ssl_target_name_override", target.host))
    return grpc.secure_channel(target.target, credentials, options=options)


def with_retries(
    send: Callable[[grpc.Channel], _Receipt],
    target: Target,
    credentials: grpc.ChannelCredentials | None,
    attempts: int,
    sleep: Callable[[float], None],
    receive_bytes: int | None = None,
    retryable: frozenset[grpc.StatusCode] = RETRYABLE,
) -> tuple[_Receipt | None, int, str, str]:
    """``send`` on a fresh channel until it answers, backing off on ``retryable`` statuses (UNAVAILABLE
    and DEADLINE_EXCEEDED) and as long as a refusal asks: (the receipt or None, attempts made, last
    status, its detail). Anything but a gRPC error that ``send`` raises ends the attempts at once."""
    last_code, last_detail = "UNKNOWN", ""
    for attempt in range(1, attempts + 1):
        channel = channel_for(target, credentials, receive_bytes)
        try:
            return send(channel), attempt, "OK", ""
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            last_code, last_detail = code.name, str(exc.details() or "")
            pushback = _pushback_s(exc)
            if (code not in retryable and pushback is None) or attempt == attempts:
                return None, attempt, last_code, last_detail
            sleep(max(backoff(attempt), pushback or 0.0))
        finally:
            channel.close()
    return None, attempts, last_code, last_detail  # pragma: no cover


def deliver(
    path: Path,
    target: Target,
    credentials: grpc.ChannelCredentials | None,
    *,
    timeout_s: float,
    attempts: int,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    header = stored_header(path)
    wire = path.stat().st_size

    def send(channel: grpc.Channel) -> pb.DeliveryReceipt:
        call = channel.stream_unary(METHOD, response_deserializer=pb.DeliveryReceipt.FromString)
        receipt: pb.DeliveryReceipt = call(read_records(path), timeout=timeout_s)
        return receipt

    receipt, attempt, status, detail = with_retries(send, target, credentials, attempts, sleep)
    if receipt is None:
        return Outcome(False, attempt, status, detail, None, wire)
    if receipt.release_id != header.release_id or receipt.payload_sha256 != header.payload_sha256:
        return Outcome(
            False, attempt, "RECEIPT_MISMATCH", "the receipt does not match the signed message", receipt, wire
        )
    return Outcome(True, attempt, "OK", "", receipt, wire)


MODEL_METHOD = "/labeldp.v1.FeaturesParty/DeliverModel"


def deliver_model(
    envelope: bytes,
    model_id: str,
    target: Target,
    credentials: grpc.ChannelCredentials | None,
    *,
    timeout_s: float,
    attempts: int,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Send a signed model message (one unary call), with the same retries and receipt check."""
    digest = hashlib.sha256(envelope).digest()

    def send(channel: grpc.Channel) -> pb.ModelReceipt:
        call = channel.unary_unary(
            MODEL_METHOD,
            request_serializer=pb.SignedModel.SerializeToString,
            response_deserializer=pb.ModelReceipt.FromString,
        )
        receipt: pb.ModelReceipt = call(pb.SignedModel(envelope=envelope), timeout=timeout_s)
        return receipt

    receipt, attempt, status, detail = with_retries(send, target, credentials, attempts, sleep)
    if receipt is None:
        return Outcome(False, attempt, status, detail, None, len(envelope))
    if receipt.model_id != model_id or receipt.message_sha256 != digest:
        return Outcome(
            False,
            attempt,
            "RECEIPT_MISMATCH",
            "the receipt does not match the signed model",
            None,
            len(envelope),
        )
    return Outcome(True, attempt, "OK", "", None, len(envelope))
