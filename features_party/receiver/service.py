"""The gRPC receiver: trusts nothing unsigned, stores nothing partial, turns nothing from the wire into
a path.

Order of checks for one ``DeliverRelease`` stream (frames arrive as raw bytes and are parsed here, so
a malformed frame is INVALID_ARGUMENT, never INTERNAL):
1. the first frame is the signed header; its release id is a UUID and its sender id plain text; its
   signature verifies against a *pinned* key of the sender it names (UNAUTHENTICATED otherwise),
   before any chunk is read. Pins belong to tenants. A header names the tenant it is for
   (``recipient_tenant``): only that tenant's pins are tried, and the release is that tenant's —
   another tenant's pin of the same key is never consulted, so it can neither take the release nor
   block it. A header from before the field belongs to the tenant whose pin the signature verifies
   under (a legacy pin: to every tenant); when several tenants pinned that key under that sender id
   it cannot say which one it is for and is refused
   (FAILED_PRECONDITION): nothing is ever filed for a tenant it may not be for;
2. it is addressed to this party (PERMISSION_DENIED), not expired (FAILED_PRECONDITION), announces
   counts an honest sender could (INVALID_ARGUMENT; RESOURCE_EXHAUSTED past the size limit) and states
   a well-formed published mechanism whose sizes are bounded before anything is derived from them
   (INVALID_ARGUMENT);
3. a release id already stored answers with the same receipt if the same sender of the same tenant
   sent the same digest (idempotent re-delivery) and ALREADY_EXISTS otherwise — a sender never
   touches another's release;
4. chunks are spooled to a file in this process's own spool folder while their digest is computed,
   in order and within the size limit (INVALID_ARGUMENT, RESOURCE_EXHAUSTED); nothing is decoded
   before the digest matches;
5. each chunk's example IDs are decompressed only within the size an honest chunk of its examples
   could have (RESOURCE_EXHAUSTED otherwise) and must follow the upload rules — valid UTF-8, present,
   at most 256 bytes, no control characters — and be unique across the whole message (checked in
   bounded memory: ``unique_ids``) (INVALID_ARGUMENT);
6. the decoded release is written to a temporary Parquet file and renamed to a storage name this
   party chose (a fresh UUID), together with its row; any failure removes the file, so nothing
   partial is ever visible.

This module is the work, one synchronous step at a time (``open``, then a ``Spool`` that takes the
chunks and ``finish``es); the gRPC server (``server.py``) reads the frames as they come, without a
thread per stream, bounds who may hold how many streams and for how long (``admission.py``), and
runs these steps on its worker threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party.receiver.store import SenderRegistry, release_schema
from features_party.receiver.unique_ids import Keys, UniqueIds
from features_party.storage.data_dir import DataDir
from features_party.storage.orm import ReceivedModel, ReceivedRelease
from labeldp.common.files import write_bytes_atomic
from labeldp.common.inputs import is_uuid
from labeldp.common.instance import Instance
from labeldp.common.model_message import ModelPayload, check_model
from labeldp.common.wire.format import WireError
from labeldp.common.wire.receiver import ChunkStream, check_fits, check_header, decode_chunk
from labeldp.common.wire.records import read_records, write_records
from labeldp.v1 import delivery_pb2 as pb

log = logging.getLogger("labeldp.features.receiver")


def summary_of(header: pb.ReleaseHeader) -> dict[str, Any]:
    """The header's metadata for listings: everything but the digest bytes and the groups' mechanisms,
    which a feature-aware release states by their number (``group_count``; the mechanisms themselves
    are read from the stored signed header: ``store.group_mechanisms``)."""
    bare = pb.ReleaseHeader()
    bare.CopyFrom(header)
    del bare.groups[:]  # up to 262,144 prior masses: kept in the signed header, counted here
    out = MessageToDict(bare, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    out.pop("payload_sha256", None)
    out.pop("groups", None)
    out["group_count"] = len(header.groups)
    return out


def _ignore(outcome: str, examples: int) -> None:
    pass


def owner_of(owners: tuple[str | None, ...], sender_id: str, named: str | None = None) -> str | None:
    """The tenant a verified message belongs to: the tenant it names (its signature verified under
    that tenant's pin: ``for_tenant``); for a message that names none (a sender from
    before ``recipient_tenant``), the one tenant whose pin its signature verifies under (a tenant's pin
    over a legacy one), ``None`` for a legacy pin alone — and when several tenants pinned its key, the
    message cannot say which it is for: FAILED_PRECONDITION, nothing filed."""
    if named:
        return named
    tenants = {o for o in owners if o is not None}
    if len(tenants) > 1:
        raise WireError(
            "failed_precondition",
            f"sender {sender_id!r}'s key is pinned by several tenants of this party, so the message "
            "cannot be filed for one; its operator must keep one pin",
        )
    return next(iter(tenants), None)


def _frame(data: bytes) -> pb.ReleaseFrame:
    try:
        return pb.ReleaseFrame.FromString(data)
    except DecodeError as exc:
        raise WireError("invalid_argument", "a frame is not a valid ReleaseFrame") from exc


@dataclass(frozen=True)
class Opened:
    """A verified header whose chunks are still to come: the tenant it is for, and what it signed."""

    header: pb.ReleaseHeader
    signed: pb.SignedHeader
    tenant: str | None


class Spool:
    """One release's chunks, spooled to a file of the receiving process while they are hashed, in
    order and within the size limit; ``finish`` checks the digest, decodes and commits. Its steps run
    on the server's worker threads one after another; ``close`` may come from another thread while one
    still runs (a sender gone mid-stream), so they take turns (``lock``) and nothing runs after it."""

    def __init__(self, receiver: Receiver, opened: Opened) -> None:
        self.receiver, self.opened = receiver, opened
        receiver.spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=receiver.spool_dir, suffix=".chunks")
        self.path = Path(name)
        self.file = os.fdopen(fd, "wb")
        self.stream = ChunkStream(opened.header, receiver.max_release_bytes)
        self.lock = threading.Lock()
        self.closed = False

    def add(self, data: bytes) -> None:
        with self.lock:
            if self.closed:
                raise WireError("invalid_argument", "the stream has ended")
            write_records(self.file, [self.stream.add(_frame(data))])

    def finish(self) -> tuple[pb.DeliveryReceipt, str]:
        with self.lock:
            if self.closed:
                raise WireError("invalid_argument", "the stream has ended")
            self.file.close()
            digest = self.stream.finish()
            opened = self.opened
            staged = self.receiver.decode(self.path, opened.header)
            try:
                return self.receiver.commit(opened.header, opened.tenant, opened.signed, digest, staged)
            finally:
                staged.unlink(missing_ok=True)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.file.close()
            self.path.unlink(missing_ok=True)


@dataclass
class Receiver:
    sessions: sessionmaker[Session]
    data_dir: DataDir
    party_id: str
    max_release_bytes: int
    on_outcome: Callable[[str, int], None] = _ignore  # (stored | replayed | rejection code, examples)
    instance: Instance = field(default_factory=Instance.current)

    def __post_init__(self) -> None:
        self.senders = SenderRegistry(self.sessions)

    @property
    def spool_dir(self) -> Path:
        return self.data_dir.spool(self.instance.token)

    def open(self, first: bytes) -> Opened | pb.DeliveryReceipt:
        """The first frame: the signed header, verified (steps 1-3 of the module docstring); the
        receipt at once for a release already stored (a replay)."""
        frame = _frame(first)
        verified = check_header(frame, self.senders.pins, self.party_id, int(time.time() * 1000))
        header = verified.header
        tenant = owner_of(verified.owners, header.sender_id, header.recipient_tenant)
        existing = self._stored(header.release_id)
        if existing is not None:
            return self._replay(existing, header, tenant)
        check_fits(header, self.max_release_bytes)
        return Opened(header, frame.header, tenant)

    def spool(self, opened: Opened) -> Spool:
        return Spool(self, opened)

    def deliver_model(self, request: bytes) -> pb.ModelReceipt:
        """A signed model message: verified against a pinned sender key (its tenant's, as for a release),
        addressed to this party, unexpired and every field within its public bounds (finite weights of
        the shapes its columns and width imply: ``check_bounds``) before anything is stored; stored
        under a name this party chooses."""
        return self._deliver_model(request)

    def _deliver_model(self, request: bytes) -> pb.ModelReceipt:
        try:
            envelope = pb.SignedModel.FromString(request).envelope
        except DecodeError as exc:
            raise WireError("invalid_argument", "the request is not a SignedModel") from exc
        verified = check_model(envelope, self.senders.pins, self.party_id, int(time.time() * 1000))
        payload = verified.payload
        if not is_uuid(payload.model_id):
            raise WireError("invalid_argument", "model_id must be a UUID (lowercase, 8-4-4-4-12)")
        tenant = owner_of(verified.owners, payload.sender_id, payload.recipient_tenant)
        digest = hashlib.sha256(envelope).hexdigest()
        existing = self._stored_model(payload.model_id)
        if existing is not None:
            return self._model_replay(existing, payload, tenant, digest)
        final = self.data_dir.new_received_model()
        row = ReceivedModel(
            model_id=payload.model_id,
            tenant_id=tenant,
            sender_id=payload.sender_id,
            sender_key_id=payload.sender_key_id,
            message_sha256=digest,
            label_release_id=payload.guarantee.label_release_id,
            guarantee=payload.guarantee.model_dump(mode="json"),
            columns={
                "non_sensitive": [c.model_dump(mode="json") for c in payload.non_sensitive],
                "semi_sensitive": [c.model_dump(mode="json") for c in payload.semi_sensitive],
            },
            path=str(final),
        )
        try:
            write_bytes_atomic(final, envelope)
            with self.sessions.begin() as session:
                session.add(row)
                session.flush()
        except IntegrityError:
            final.unlink(missing_ok=True)
            existing = self._stored_model(payload.model_id)
            if existing is None:
                raise
            return self._model_replay(existing, payload, tenant, digest)
        except BaseException:
            final.unlink(missing_ok=True)
            raise
        log.info("model stored", extra={"release_id": payload.model_id})
        return pb.ModelReceipt(
            model_id=payload.model_id, message_sha256=bytes.fromhex(digest), receiver_id=self.party_id
        )

    def _stored_model(self, model_id: str) -> ReceivedModel | None:
        with self.sessions() as session:
            return session.get(ReceivedModel, model_id)

    def _model_replay(
        self, existing: ReceivedModel, payload: ModelPayload, tenant: str | None, digest: str
    ) -> pb.ModelReceipt:
        same_sender = (existing.sender_id, existing.tenant_id) == (payload.sender_id, tenant)
        if not same_sender or existing.message_sha256 != digest:
            raise WireError(
                "already_exists", f"model {payload.model_id} was already received with other contents"
            )
        return pb.ModelReceipt(
            model_id=existing.model_id, message_sha256=bytes.fromhex(digest), receiver_id=self.party_id
        )

    def decode(self, spool: Path, header: pb.ReleaseHeader) -> Path:
        """Decode the verified chunks into a temporary Parquet file (example_id, bin and, for a
        feature-aware release, each example's ``group``: int16, -1 for the release's own mechanism), a
        chunk at a time; refused (and removed) if any ID breaks the rules or repeats anywhere in the
        message."""
        staged = spool.with_suffix(".parquet")
        grouped = len(header.groups) > 0
        schema = release_schema(grouped)
        seen = UniqueIds(header.example_count, self.spool_dir)
        # a chunk's IDs are hashed (compiled, without the interpreter lock) on a helper thread while
        # this one decodes the next chunk, writes this one and files the keys hashed before: the work
        # overlaps on two cores. The helper hashes in message order, at most two chunks ahead.
        hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="receiver-ids")
        hashed: Future[Keys] | None = None
        try:
            # no dictionary for the IDs (each unique: pyarrow would build one until it overflowed)
            with pq.ParquetWriter(staged, schema, use_dictionary=["bin", "group"][: 1 + grouped]) as writer:
                offset = 0
                for data in read_records(spool):
                    ids, bins, groups = decode_chunk(data, header, offset)
                    following = hashing.submit(seen.keys, ids)
                    if hashed is not None:
                        seen.add_keys(hashed.result())
                    hashed = following
                    offset += len(ids)
                    columns = {"example_id": ids, "bin": pa.array(bins, pa.uint16())}
                    if groups is not None:
                        columns["group"] = pa.array(groups, pa.int16())
                    writer.write_table(pa.table(columns, schema=schema))
            if hashed is not None:
                seen.add_keys(hashed.result())
            repeats = seen.repeats()
            if repeats:
                raise WireError("invalid_argument", f"the message lists {repeats} example IDs more than once")
            with open(staged, "rb") as fh:
                os.fsync(fh.fileno())
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        finally:
            hashing.shutdown(wait=True, cancel_futures=True)  # a hash in flight ends before the close
            seen.close()
        return staged

    def commit(
        self,
        header: pb.ReleaseHeader,
        tenant: str | None,
        signed: pb.SignedHeader,
        digest: bytes,
        staged: Path,
    ) -> tuple[pb.DeliveryReceipt, str]:
        final = self.data_dir.new_release()
        final.parent.mkdir(parents=True, exist_ok=True)
        row = ReceivedRelease(
            release_id=header.release_id,
            tenant_id=tenant,
            sender_id=header.sender_id,
            sender_key_id=header.sender_key_id,
            payload_sha256=digest.hex(),
            example_count=header.example_count,
            chunk_count=header.chunk_count,
            signed_header=signed.header,
            signature=signed.signature,
            summary=json.loads(json.dumps(summary_of(header))),
            path=str(final),
        )
        try:
            with self.sessions.begin() as session:
                session.add(row)
                session.flush()  # a concurrent delivery of the same release loses here
                os.replace(staged, final)  # visible only if the row commits; removed below if not
        except IntegrityError:
            existing = self._stored(header.release_id)
            if existing is None:
                raise
            return self._replay(existing, header, tenant), "replayed"
        except BaseException:
            final.unlink(missing_ok=True)
            raise
        log.info("release stored", extra={"release_id": header.release_id, "examples": header.example_count})
        return self._receipt(header.release_id, header.example_count, digest), "stored"

    def _stored(self, release_id: str) -> ReceivedRelease | None:
        with self.sessions() as session:
            return session.execute(
                select(ReceivedRelease).where(ReceivedRelease.release_id == release_id)
            ).scalar_one_or_none()

    def _replay(
        self, existing: ReceivedRelease, header: pb.ReleaseHeader, tenant: str | None
    ) -> pb.DeliveryReceipt:
        if (existing.sender_id, existing.tenant_id) != (header.sender_id, tenant):
            raise WireError("already_exists", f"release {header.release_id} belongs to another sender")
        if existing.payload_sha256 != header.payload_sha256.hex():
            raise WireError(
                "already_exists", f"release {header.release_id} was already received with other contents"
            )
        return self._receipt(
            existing.release_id, existing.example_count, bytes.fromhex(existing.payload_sha256)
        )

    def _receipt(self, release_id: str, examples: int, digest: bytes) -> pb.DeliveryReceipt:
        return pb.DeliveryReceipt(
            release_id=release_id, example_count=examples, payload_sha256=digest, receiver_id=self.party_id
        )
