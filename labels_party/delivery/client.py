"""Streaming a stored message to its recipient: deadlines, exponential backoff on UNAVAILABLE and
DEADLINE_EXCEEDED, and a check that the receipt matches what was signed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from labeldp.common.wire import MAX_MESSAGE_BYTES, read_records, stored_header
from labeldp.v1 import delivery_pb2 as pb

METHOD = "/labeldp.v1.FeaturesParty/DeliverRelease"
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
BACKOFF_BASE_S = 0.25
BACKOFF_CAP_S = 8.0
_jitter = secrets.SystemRandom()


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    attempts: int
    status: str
    detail: str
    receipt: pb.DeliveryReceipt | None
    wire_bytes: int


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter: 0.25 s, 0.5 s, 1 s, … capped at 8 s, times 0.5–1."""
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1)) * _jitter.uniform(0.5, 1.0)


def channel_for(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 2**20)]
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)


def deliver(
    path: Path,
    address: str,
    credentials: grpc.ChannelCredentials | None,
    *,
    timeout_s: float,
    attempts: int,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    header = stored_header(path)
    wire = path.stat().st_size
    last_code, last_detail = "UNKNOWN", ""
    for attempt in range(1, attempts + 1):
        channel = channel_for(address, credentials)
        try:
            call = channel.stream_unary(METHOD, response_deserializer=pb.DeliveryReceipt.FromString)
            receipt: pb.DeliveryReceipt = call(read_records(path), timeout=timeout_s)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            last_code, last_detail = code.name, str(exc.details() or "")
            if code not in RETRYABLE or attempt == attempts:
                return Outcome(False, attempt, last_code, last_detail, None, wire)
            sleep(backoff(attempt))
            continue
        finally:
            channel.close()
        if receipt.release_id != header.release_id or receipt.payload_sha256 != header.payload_sha256:
            return Outcome(
                False,
                attempt,
                "RECEIPT_MISMATCH",
                "the receipt does not match the signed message",
                receipt,
                wire,
            )
        return Outcome(True, attempt, "OK", "", receipt, wire)
    return Outcome(False, attempts, last_code, last_detail, None, wire)  # pragma: no cover


MODEL_METHOD = "/labeldp.v1.FeaturesParty/DeliverModel"


def deliver_model(
    envelope: bytes,
    model_id: str,
    address: str,
    credentials: grpc.ChannelCredentials | None,
    *,
    timeout_s: float,
    attempts: int,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Send a signed model message (one unary call), with the same retries and receipt check."""
    import hashlib

    digest = hashlib.sha256(envelope).digest()
    request = pb.SignedModel(envelope=envelope)
    last_code, last_detail = "UNKNOWN", ""
    for attempt in range(1, attempts + 1):
        channel = channel_for(address, credentials)
        try:
            call = channel.unary_unary(
                MODEL_METHOD,
                request_serializer=pb.SignedModel.SerializeToString,
                response_deserializer=pb.ModelReceipt.FromString,
            )
            receipt: pb.ModelReceipt = call(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            last_code, last_detail = code.name, str(exc.details() or "")
            if code not in RETRYABLE or attempt == attempts:
                return Outcome(False, attempt, last_code, last_detail, None, len(envelope))
            sleep(backoff(attempt))
            continue
        finally:
            channel.close()
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
    return Outcome(False, attempts, last_code, last_detail, None, len(envelope))  # pragma: no cover
