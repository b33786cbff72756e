"""Hostile pricing requests at the features party (``PriceExamples``), over real gRPC: each is refused
with its status before the granted model is loaded — and the header's refusals before a single ID chunk
is sent. The grant here names a model whose files are gone: a valid request reaches the model and fails
there (INTERNAL), so any other status proves the request was refused earlier."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import httpx
import pyarrow as pa
import pytest
from sqlalchemy import func, select

from features_party.config import FeaturesSettings
from features_party.storage import db
from features_party.storage.orm import Pricing, TrainingJob
from labeldp.common.identity import Identity
from labeldp.common.model_message import sign_model
from labeldp.common.wire.pricing import PricingAsk, signed_request, spool_ids
from labeldp.common.wire.records import read_records
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import priors_pb2 as ppb
from tests.support.features_party import deliver, pin_sender, put_table
from tests.support.labels_api import problem
from tests.support.messages import SENDER, identity_bins, release
from tests.support.receiver import model_payload
from tests.support.servers import features_server_thread, features_tenant_key

METHOD = "/labeldp.v1.FeaturesParty/PriceExamples"
IDS = [f"x{i}" for i in range(200)]


@dataclass
class Setup:
    settings: FeaturesSettings
    port: int
    sender: Identity
    tenant: str
    other_tenant: str
    tmp: Path
    client: httpx.Client
    release_id: str

    def job(self, **changes: object) -> str:
        """A training job row of this tenant (its files never written: only the grant reads it)."""
        job = TrainingJob(
            id=str(uuid.uuid4()),
            tenant_id=self.tenant,
            release_id=self.release_id,
            feature_table="census",
            feature_table_version=1,
            kind="hgb",
            debias="affine",
            loss="squared",
            validation_fraction=0.2,
            status="succeeded",
            progress={},
            metrics={"validation_loss_vs_binned_true_labels_unbiased": 40.0},
            provenance={},
        )
        for name, value in changes.items():
            setattr(job, name, value)
        engine = db.make_engine(self.settings.resolved_database_url())
        try:
            with db.session_factory(engine).begin() as s:
                s.add(job)
        finally:
            engine.dispose()
        return job.id

    def ask(self, **changes: object) -> PricingAsk:
        now = int(time.time() * 1000)
        ask = PricingAsk(
            request_id=str(uuid.uuid4()),
            sender_id=SENDER,
            recipient_id="publisher",
            recipient_tenant=self.tenant,
            created_at_unix_ms=now,
            expires_at_unix_ms=now + 600_000,
            label_type="count",
            loss="squared",
            support=tuple(float(v) for v in range(53)),
            max_groups=8,
        )
        return replace(ask, **changes)  # type: ignore[arg-type]

    def frames(
        self, ask: PricingAsk | None = None, ids: list[str] | None = None, signer: Identity | None = None
    ) -> list[bytes]:
        path = self.tmp / f"{uuid.uuid4().hex}.ids"
        spooled = spool_ids(path, pa.array(IDS if ids is None else ids, pa.string()))
        return [signed_request(ask or self.ask(), signer or self.sender, spooled), *read_records(path)]

    def send(self, frames: list[bytes], *, hold: bool = False) -> grpc.StatusCode:
        """The stream's status; ``hold``: send the first frame only and keep the stream open, so a refusal
        that arrives came before any chunk."""
        gate = threading.Event()

        def requests() -> Iterator[bytes]:
            yield frames[0]
            if hold:
                gate.wait(30)
                return
            yield from frames[1:]

        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            try:
                list(channel.stream_stream(METHOD)(requests(), timeout=20))
            except grpc.RpcError as exc:
                code: grpc.StatusCode = exc.code()
                return code
            finally:
                gate.set()
        return grpc.StatusCode.OK

    def pricings(self) -> int:
        engine = db.make_engine(self.settings.resolved_database_url())
        try:
            with db.session_factory(engine)() as s:
                return int(s.execute(select(func.count()).select_from(Pricing)).scalar_one())
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("pricing-requests")
    settings = FeaturesSettings(
        party_id="publisher", data_dir=tmp / "features", grpc_port=0, allow_plaintext=True
    )
    key = features_tenant_key(settings, "pub-a")
    other = features_tenant_key(settings, "pub-b")
    sender = Identity.generate()
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        c_other = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {other}"}, timeout=60)
        pin_sender(c, sender)
        rel = release(IDS, mechanism=identity_bins(53))
        deliver(c, rel, sender)
        assert (
            put_table(c, "census", pa.table({"example_id": IDS, "age": list(range(200))})).status_code == 201
        )
        tenant = c.get("/v1/identity").json()["tenant_id"]
        port = int(c.get("/v1/identity").json()["grpc_port"])
        other_tenant = c_other.get("/v1/identity").json()["tenant_id"]
        found = Setup(settings, port, sender, tenant, other_tenant, tmp, c, rel.release_id)
        model_id = found.job()  # a model whose files are gone
        granted = c.put(f"/v1/senders/{SENDER}/pricing", json={"model_id": model_id})
        assert granted.status_code == 200, granted.text
        yield found


def test_a_valid_request_reaches_the_model(setup: Setup) -> None:
    assert setup.send(setup.frames()) == grpc.StatusCode.INTERNAL  # its files are gone


def _resigned(
    setup: Setup, change: Callable[[ppb.PricingRequest], None], signer: Identity | None = None
) -> list[bytes]:
    frames = setup.frames()
    signed = ppb.PricingFrame.FromString(frames[0]).request
    request = ppb.PricingRequest.FromString(signed.request)
    change(request)
    data = request.SerializeToString(deterministic=True)
    first = ppb.PricingFrame(
        request=ppb.SignedPricingRequest(request=data, signature=(signer or setup.sender).sign(data))
    )
    return [first.SerializeToString(), *frames[1:]]


def _huge(request: ppb.PricingRequest) -> None:
    request.example_count, request.chunk_count = 2**40, 2**22


HEADER_REFUSALS: dict[str, tuple[Callable[[Setup], list[bytes]], grpc.StatusCode]] = {
    "unsigned": (
        lambda s: [
            ppb.PricingFrame(
                request=ppb.SignedPricingRequest(
                    request=ppb.PricingFrame.FromString(s.frames()[0]).request.request
                )
            ).SerializeToString()
        ],
        grpc.StatusCode.UNAUTHENTICATED,
    ),
    "signed by an unpinned key": (
        lambda s: s.frames(signer=Identity.generate()),
        grpc.StatusCode.UNAUTHENTICATED,
    ),
    "an unknown sender": (lambda s: s.frames(s.ask(sender_id="mallory")), grpc.StatusCode.UNAUTHENTICATED),
    "for a tenant that did not pin the sender": (
        lambda s: s.frames(s.ask(recipient_tenant=s.other_tenant)),
        grpc.StatusCode.UNAUTHENTICATED,
    ),
    "expired": (lambda s: s.frames(s.ask(expires_at_unix_ms=1)), grpc.StatusCode.FAILED_PRECONDITION),
    "addressed to another party": (
        lambda s: s.frames(s.ask(recipient_id="elsewhere")),
        grpc.StatusCode.PERMISSION_DENIED,
    ),
    "a request id that is not a UUID": (
        lambda s: s.frames(s.ask(request_id="1")),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    "no groups": (lambda s: s.frames(s.ask(max_groups=0)), grpc.StatusCode.INVALID_ARGUMENT),
    "more than 1,024 groups": (lambda s: s.frames(s.ask(max_groups=1025)), grpc.StatusCode.INVALID_ARGUMENT),
    "G × k over 262,144": (
        lambda s: s.frames(s.ask(max_groups=1024, support=tuple(float(v) for v in range(300)))),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    "a loss the label type does not take": (
        lambda s: s.frames(s.ask(loss="zero_one")),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    "an unsorted support": (lambda s: s.frames(s.ask(support=(1.0, 0.0))), grpc.StatusCode.INVALID_ARGUMENT),
    "more examples than chunks can hold": (
        lambda s: _resigned(s, lambda r: setattr(r, "example_count", 10_000_000)),
        grpc.StatusCode.INVALID_ARGUMENT,
    ),
    "more examples than the size limit": (
        lambda s: _resigned(s, _huge),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ),
    "an oversize request": (
        lambda s: s.frames(s.ask(support=tuple(float(v) for v in range(600_000)))),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ),
}


@pytest.mark.parametrize("case", list(HEADER_REFUSALS))
def test_a_hostile_request_is_refused_before_any_chunk(setup: Setup, case: str) -> None:
    make, status = HEADER_REFUSALS[case]
    before = setup.pricings()
    started = time.monotonic()
    assert setup.send(make(setup), hold=True) == status
    assert time.monotonic() - started < 15  # answered while the stream still held its chunks back
    assert setup.pricings() == before


def _chunk(setup: Setup, ids_bytes: bytes, examples: int) -> list[bytes]:
    """A request whose one chunk holds ``ids_bytes`` as its IDs, correctly hashed and signed."""
    chunk = ppb.PricingChunk(index=0, examples=examples, example_ids=ids_bytes)
    frames = setup.frames()
    signed = ppb.PricingFrame.FromString(frames[0]).request
    request = ppb.PricingRequest.FromString(signed.request)
    request.example_count, request.chunk_count = examples, 1
    request.ids_sha256 = hashlib.sha256(chunk.SerializeToString(deterministic=True)).digest()
    data = request.SerializeToString(deterministic=True)
    first = ppb.PricingFrame(
        request=ppb.SignedPricingRequest(request=data, signature=setup.sender.sign(data))
    )
    return [first.SerializeToString(), ppb.PricingFrame(chunk=chunk).SerializeToString()]


def _tampered_chunk(setup: Setup) -> list[bytes]:
    frames = setup.frames()
    chunk = ppb.PricingFrame.FromString(frames[1]).chunk
    chunk.examples -= 1
    return [frames[0], ppb.PricingFrame(chunk=chunk).SerializeToString()]


CHUNK_REFUSALS: dict[str, Callable[[Setup], list[bytes]]] = {
    "malformed ID bytes": lambda s: _chunk(s, b"\x00" * 64, 3),
    "IDs repeated": lambda s: s.frames(ids=["a", "b", "a"]),
    "an ID with a control character": lambda s: s.frames(ids=["a", "b\x07"]),
    "an empty ID": lambda s: s.frames(ids=["a", ""]),
    "a chunk that does not match the digest": _tampered_chunk,
    "a missing chunk": lambda s: s.frames()[:1],
    "another support than the model's": lambda s: s.frames(s.ask(support=tuple(float(v) for v in range(54)))),
    "another label type than the model's": lambda s: s.frames(s.ask(label_type="real")),
}


@pytest.mark.parametrize("case", list(CHUNK_REFUSALS))
def test_hostile_ids_are_refused_before_the_model_is_loaded(setup: Setup, case: str) -> None:
    before = setup.pricings()
    assert setup.send(CHUNK_REFUSALS[case](setup)) == grpc.StatusCode.INVALID_ARGUMENT
    assert setup.pricings() == before
    spools = setup.settings.data_dir / "tmp"
    assert not any(p.is_file() for p in spools.rglob("*")), "a spooled file was left behind"


def test_only_a_complete_model_of_the_tenants_own_can_be_granted(setup: Setup) -> None:
    c = setup.client

    def grant(model_id: str) -> httpx.Response:
        return c.put(f"/v1/senders/{SENDER}/pricing", json={"model_id": model_id})

    before = c.get(f"/v1/senders/{SENDER}/pricing").json()
    problem(grant(setup.job(status="running")), 409, "model-not-complete")
    problem(grant(setup.job(loss="poisson")), 409, "model-not-priceable")
    problem(grant(setup.job(tenant_id=setup.other_tenant)), 404, "not-found")
    problem(grant(str(uuid.uuid4())), 404, "not-found")
    # a semi-sensitive model, trained by the labels party and delivered here: not this party's to price with
    payload = model_payload(setup.sender, recipient_id="publisher", recipient_tenant=setup.tenant)
    with grpc.insecure_channel(f"127.0.0.1:{setup.port}") as channel:
        channel.unary_unary(
            "/labeldp.v1.FeaturesParty/DeliverModel",
            request_serializer=pb.SignedModel.SerializeToString,
            response_deserializer=pb.ModelReceipt.FromString,
        )(pb.SignedModel(envelope=sign_model(payload, setup.sender)), timeout=30)
    assert c.get(f"/v1/semi-sensitive-models/{payload.model_id}").status_code == 200
    problem(grant(payload.model_id), 409, "model-not-priceable")
    problem(c.put("/v1/senders/nobody/pricing", json={"model_id": before["model_id"]}), 404, "not-found")
    assert c.get(f"/v1/senders/{SENDER}/pricing").json() == before  # every refusal changed nothing
