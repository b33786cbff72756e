"""Answering a pricing request (``FeaturesParty.PriceExamples``), one synchronous step at a time; the
gRPC server (``receiver/server.py``) reads the frames and runs these steps on its worker threads.

Order of checks (nothing is loaded, decoded or computed before the step that needs it):
1. the first frame, at most ``MAX_REQUEST_BYTES``, is the signed request; its signature verifies against
   a key pinned by the tenant it names (UNAUTHENTICATED), it is addressed to this party
   (PERMISSION_DENIED), unexpired (FAILED_PRECONDITION), with counts an honest sender could state and
   a label type, loss and support the labels party knows (INVALID_ARGUMENT), ``max_groups`` in
   [1, 1,024] with G × k ≤ 262,144 (INVALID_ARGUMENT), within the size limit (RESOURCE_EXHAUSTED), and a
   request id not answered before (ALREADY_EXISTS) — all before any chunk is read;
2. the tenant has granted a model to this sender (PERMISSION_DENIED otherwise: ``PUT
   /v1/senders/{id}/pricing``);
3. the ID chunks are spooled while hashed, in order, within the size limit; nothing is decoded before
   the digest matches; the IDs then follow the upload rules and are unique across the request
   (INVALID_ARGUMENT);
4. only then is the granted model loaded (its release's support and label type must be the request's:
   INVALID_ARGUMENT), the feature table read and the examples priced; the answer is signed with this
   party's key and recorded before it leaves.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party.pricing.grants import PricingGrants
from features_party.pricing.prices import price
from features_party.receiver.service import owner_of
from features_party.receiver.store import SenderRegistry, published_mechanism
from features_party.receiver.unique_ids import UniqueIds
from features_party.storage.data_dir import DataDir
from features_party.storage.orm import Pricing, PricingGrant, ReceivedRelease, TrainingJob
from features_party.tables.service import FeatureTables
from features_party.training.fit import Trained
from features_party.training.jobs import load
from labeldp.common.errors import DomainError
from labeldp.common.identity import Identity
from labeldp.common.instance import Instance
from labeldp.common.pages import PageRequest
from labeldp.common.wire.format import WireError
from labeldp.common.wire.pricing import (
    IdChunks,
    PriorsAnswer,
    VerifiedRequest,
    answer_frames,
    check_request,
    decode_ids,
)
from labeldp.common.wire.records import read_records, write_records
from labeldp.priors import MAX_GROUP_CELLS, MAX_GROUPS
from labeldp.v1 import priors_pb2 as ppb

log = logging.getLogger("labeldp.features.pricing")
ANSWER_TTL_SECONDS = 3600  # an answer older than this is refused by the labels party
_MODELS_CACHED = 4


@dataclass(frozen=True)
class Opened:
    """A verified request whose ID chunks are still to come, for the tenant it names."""

    request: ppb.PricingRequest
    tenant: str


class PricingSpool:
    """One request's ID chunks, spooled to a file of this process while they are hashed; ``finish``
    checks the digest, decodes, prices and signs. Like the receiver's spool, its steps take turns
    (``close`` may come from another thread while one runs)."""

    def __init__(self, pricer: Pricer, opened: Opened) -> None:
        self.pricer, self.opened = pricer, opened
        pricer.spool_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=pricer.spool_dir, suffix=".ids")
        self.path = Path(name)
        self.file = os.fdopen(fd, "wb")
        self.chunks = IdChunks(opened.request, pricer.max_request_bytes)
        self.lock = threading.Lock()
        self.closed = False

    @property
    def tenant(self) -> str:
        return self.opened.tenant

    @property
    def examples(self) -> int:
        return int(self.opened.request.example_count)

    def add(self, data: bytes) -> None:
        with self.lock:
            if self.closed:
                raise WireError("invalid_argument", "the stream has ended")
            write_records(self.file, [self.chunks.add(data)])

    def finish(self) -> list[bytes]:
        with self.lock:
            if self.closed:
                raise WireError("invalid_argument", "the stream has ended")
            self.file.close()
            self.chunks.finish()
            ids = self.pricer.decode(self.path, self.opened.request)
            return self.pricer.answer(self.opened, ids, self.chunks.sizes)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.file.close()
            self.path.unlink(missing_ok=True)


@dataclass
class Pricer:
    sessions: sessionmaker[Session]
    data_dir: DataDir
    party_id: str
    identity: Identity
    tables: FeatureTables
    max_request_bytes: int
    instance: Instance = field(default_factory=Instance.current)
    on_outcome: Callable[[str, int], None] = lambda outcome, examples: None  # (answered | refusal, examples)

    def __post_init__(self) -> None:
        self.senders = SenderRegistry(self.sessions)
        self.grants = PricingGrants(self.sessions)
        self._models: OrderedDict[str, Trained] = OrderedDict()
        self._models_lock = threading.Lock()

    @property
    def spool_dir(self) -> Path:
        return self.data_dir.spool(self.instance.token)

    def open(self, first: bytes) -> PricingSpool:
        """The first frame: the signed request, verified (steps 1-2 of the module docstring)."""
        verified = check_request(first, self.senders.pins, self.party_id, int(time.time() * 1000))
        request = verified.request
        tenant = self._tenant(verified)
        k = len(request.support)
        if not 1 <= request.max_groups <= MAX_GROUPS or request.max_groups * k > MAX_GROUP_CELLS:
            raise WireError(
                "invalid_argument",
                f"max_groups must lie in [1, {MAX_GROUPS}] with max_groups × support ≤ {MAX_GROUP_CELLS}",
            )
        if request.example_count > self.max_request_bytes:  # every ID takes at least a byte
            raise WireError(
                "resource_exhausted",
                f"{request.example_count} example IDs cannot fit the limit of {self.max_request_bytes} bytes",
            )
        if self.grants.of_sender(tenant, request.sender_id) is None:
            raise WireError(
                "permission_denied",
                f"the tenant this request is for has not granted a model to price {request.sender_id!r}'s "
                "examples (PUT /v1/senders/{sender_id}/pricing)",
            )
        with self.sessions() as session:
            answered = session.execute(
                select(Pricing.id).where(
                    Pricing.tenant_id == tenant, Pricing.request_id == request.request_id
                )
            ).first()
        if answered is not None:
            raise WireError("already_exists", f"request {request.request_id} was answered already")
        return PricingSpool(self, Opened(request, tenant))

    @staticmethod
    def _tenant(verified: VerifiedRequest) -> str:
        tenant = owner_of(verified.owners, verified.request.sender_id, verified.request.recipient_tenant)
        if tenant is None:  # a legacy pin no tenant was credited with: no tenant has a grant for it
            raise WireError(
                "permission_denied", "only a tenant's own pin of the sender can have its examples priced"
            )
        return tenant

    def decode(self, spool: Path, request: ppb.PricingRequest) -> pa.Array:
        """The request's IDs, in order, each by the upload rules and unique across the request."""
        seen = UniqueIds(request.example_count, self.spool_dir)
        parts, offset = [], 0
        try:
            for data in read_records(spool):
                ids = decode_ids(data, offset)
                seen.add(ids)
                parts.append(ids)
                offset += len(ids)
            repeats = seen.repeats()
        finally:
            seen.close()
        if repeats:
            raise WireError("invalid_argument", f"the request lists {repeats} example IDs more than once")
        return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]

    def _grant(self, opened: Opened) -> tuple[PricingGrant, TrainingJob, ReceivedRelease]:
        request = opened.request
        grant = self.grants.of_sender(opened.tenant, request.sender_id)
        if grant is None:  # withdrawn while the IDs arrived
            raise WireError("permission_denied", "the pricing grant was withdrawn")
        with self.sessions() as session:
            job = session.get(TrainingJob, grant.model_id)
            release = session.get(ReceivedRelease, job.release_id) if job is not None else None
        if job is None or release is None or job.status != "succeeded":
            raise WireError("failed_precondition", "the granted model is no longer available")
        return grant, job, release

    def _trained(self, job: TrainingJob) -> Trained:
        with self._models_lock:
            if job.id in self._models:
                self._models.move_to_end(job.id)
                return self._models[job.id]
        trained = load(self.data_dir.model(job.id))
        with self._models_lock:
            self._models[job.id] = trained
            while len(self._models) > _MODELS_CACHED:
                self._models.popitem(last=False)
        return trained

    def answer(self, opened: Opened, ids: pa.Array, sizes: list[int]) -> list[bytes]:
        """Price ``ids`` with the granted model, sign the answer and record it (step 4)."""
        request = opened.request
        grant, job, release = self._grant(opened)
        mechanism = published_mechanism(release)
        if not np.array_equal(np.asarray(request.support), np.asarray(mechanism.support)):
            raise WireError(
                "invalid_argument", "the request's support is not the one the granted model's release used"
            )
        if request.label_type != release.summary.get("label_type"):
            raise WireError(
                "invalid_argument", "the request's label type is not the one the granted model's release had"
            )
        max_groups = min(request.max_groups, grant.max_groups or MAX_GROUPS)
        try:
            table = self.tables.get(opened.tenant, job.feature_table)
        except DomainError as exc:
            raise WireError(
                "failed_precondition", f"the model's feature table {job.feature_table!r} is gone"
            ) from exc
        try:
            prices = price(ids, self.tables.read(table), job, self._trained(job), mechanism, max_groups)
        except DomainError as exc:
            raise WireError("failed_precondition", exc.detail) from exc
        if prices.priced.count == 0:
            raise WireError(
                "failed_precondition",
                f"none of the requested examples has a row in feature table {job.feature_table!r}",
            )
        now = int(time.time() * 1000)
        answer = PriorsAnswer(
            priors_id=str(uuid.uuid4()),
            request=request,
            sender_id=self.party_id,
            created_at_unix_ms=now,
            expires_at_unix_ms=now + 1000 * ANSWER_TTL_SECONDS,
            model_id=job.id,
            rule=prices.rule,
            priors=prices.priced.priors,
        )
        frames = answer_frames(answer, prices.priced.groups, sizes, self.identity)
        digest = hashlib.sha256()
        for frame in frames:
            digest.update(frame)
        self._record(opened, answer, prices.priced.groups, digest.hexdigest())
        return frames

    def _record(self, opened: Opened, answer: PriorsAnswer, groups: np.ndarray, digest: str) -> None:
        request = opened.request
        row = Pricing(
            id=answer.priors_id,
            tenant_id=opened.tenant,
            sender_id=request.sender_id,
            sender_key_id=request.sender_key_id,
            request_id=request.request_id,
            model_id=answer.model_id,
            examples=request.example_count,
            priced=int((groups >= 0).sum()),
            groups=int(answer.priors.shape[0]),
            support_k=len(request.support),
            answer_sha256=digest,
        )
        try:
            with self.sessions.begin() as session:
                session.add(row)
        except IntegrityError as exc:  # the same request, answered by another stream meanwhile
            raise WireError("already_exists", f"request {request.request_id} was answered already") from exc
        log.info(
            "examples priced",
            extra={"priors_id": answer.priors_id, "examples": request.example_count},
        )


class Pricings:
    """What this party answered, per tenant (``GET /v1/pricings``)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def list(self, tenant_id: str, paging: PageRequest) -> list[Pricing]:
        with self.sessions() as session:
            query = (
                select(Pricing).where(Pricing.tenant_id == tenant_id).order_by(Pricing.created_at, Pricing.id)
            )
            return list(session.execute(paging.window(query)).scalars())
