"""Senders, and what they deliver, belong to the tenant that pinned them — over real HTTP and gRPC.

A sender id is unique per tenant; another tenant may pin the same id with the key it trusts, and the
signature decides whose a message is. Another tenant's releases and models answer 404 everywhere
(listing, reading, joins, training, the non-sensitive export); a key pinned under one sender id by
two tenants delivers to neither; pins and deliveries from before pins had owners are attributed by
migration f0008."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from features_party import tenants
from features_party.config import FeaturesSettings
from features_party.storage import db
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.model_message import sign_model
from labeldp.common.wire.sender import ReleaseMessage, build_frames
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER, release
from tests.support.receiver import model_payload
from tests.support.servers import features_server_thread, features_tenant_key


@dataclass
class Party:
    settings: FeaturesSettings
    base: str
    port: int

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def deliver(self, rel: ReleaseMessage, signer: Identity) -> grpc.StatusCode:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            try:
                pb_grpc.FeaturesPartyStub(channel).DeliverRelease(iter(build_frames(rel, signer)), timeout=60)  # type: ignore[no-untyped-call]
            except grpc.RpcError as exc:
                code: grpc.StatusCode = exc.code()
                return code
        return grpc.StatusCode.OK

    def deliver_model(self, envelope: bytes) -> grpc.StatusCode:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            call = channel.unary_unary(
                "/labeldp.v1.FeaturesParty/DeliverModel",
                request_serializer=pb.SignedModel.SerializeToString,
                response_deserializer=pb.ModelReceipt.FromString,
            )
            try:
                call(pb.SignedModel(envelope=envelope), timeout=30)
            except grpc.RpcError as exc:
                code: grpc.StatusCode = exc.code()
                return code
        return grpc.StatusCode.OK


@pytest.fixture
def party(tmp_path: Path) -> Iterator[Party]:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    with features_server_thread(settings) as base:
        yield Party(settings, base, 0)  # the gRPC port: from a tenant's GET /v1/identity


def pin(c: httpx.Client, identity: Identity, sender_id: str = SENDER) -> httpx.Response:
    return c.post(
        "/v1/senders", json={"id": sender_id, "public_key_pem": public_key_pem(identity.public_key)}
    )


def features(ids: list[str]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"example_id": ids, "hour": [float(i % 24) for i in range(len(ids))]}), buf)
    return buf.getvalue()


def put_table(c: httpx.Client, ids: list[str]) -> None:
    r = c.put(
        "/v1/feature-tables/clicks",
        params={"non_sensitive": "hour"},
        content=features(ids),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert r.status_code == 201, r.text


def test_each_tenant_gets_what_its_own_pin_verifies_and_nothing_else(party: Party) -> None:
    a = party.client(features_tenant_key(party.settings, "ml"))
    b = party.client(features_tenant_key(party.settings, "other-team"))
    c = party.client(features_tenant_key(party.settings, "third-team"))
    party.port = a.get("/v1/identity").json()["grpc_port"]
    key_a, key_b = Identity.generate(), Identity.generate()
    # a sender id is unique per tenant, not per party: B cannot squat A's sender, nor A pin twice
    assert pin(a, key_a).status_code == 201
    assert pin(b, key_b).status_code == 201
    again = pin(a, key_b)
    assert again.status_code == 409 and again.json()["type"] == "sender-exists"
    assert [s["key_id"] for s in a.get("/v1/senders").json()["items"]] == [key_a.key_id]
    assert [s["key_id"] for s in b.get("/v1/senders").json()["items"]] == [key_b.key_id]

    ids = [f"e{i}" for i in range(200)]
    for client in (a, b):
        put_table(client, ids)
    for_a, for_b = release(ids), release(ids)
    assert party.deliver(for_a, key_a) == grpc.StatusCode.OK
    assert party.deliver(for_b, key_b) == grpc.StatusCode.OK
    assert [r["release_id"] for r in a.get("/v1/releases").json()["items"]] == [for_a.release_id]
    assert [r["release_id"] for r in b.get("/v1/releases").json()["items"]] == [for_b.release_id]
    # every route that takes a release answers 404 for another tenant's, as for a missing one
    for owner, stranger, rel in ((a, b, for_a), (b, a, for_b)):
        rid = rel.release_id
        assert owner.get(f"/v1/releases/{rid}").status_code == 200
        assert owner.post("/v1/joins", json={"release_id": rid, "feature_table": "clicks"}).status_code == 200
        assert (
            owner.get("/v1/feature-tables/clicks/non-sensitive-rows", params={"release_id": rid}).status_code
            == 200
        )
        answers = [
            stranger.get(f"/v1/releases/{rid}"),
            stranger.post("/v1/joins", json={"release_id": rid, "feature_table": "clicks"}),
            stranger.post("/v1/models", json={"release_id": rid, "feature_table": "clicks"}),
            stranger.get("/v1/feature-tables/clicks/non-sensitive-rows", params={"release_id": rid}),
        ]
        for r in answers:
            assert r.status_code == 404 and r.json()["type"] == "not-found", r.text
    assert c.get("/v1/releases").json()["items"] == [] and c.get("/v1/models").json()["items"] == []
    assert b.get("/v1/models").json()["items"] == []  # B's refused training request stored no job

    # B's sender cannot take A's release over, whatever it sends under its id
    hijack = replace(for_a, bins=for_a.bins)
    assert party.deliver(hijack, key_b) == grpc.StatusCode.ALREADY_EXISTS
    assert [r["release_id"] for r in a.get("/v1/releases").json()["items"]] == [for_a.release_id]

    # models: the same rule
    model_a, model_b = model_payload(key_a), model_payload(key_b)
    assert party.deliver_model(sign_model(model_a, key_a)) == grpc.StatusCode.OK
    assert party.deliver_model(sign_model(model_b, key_b)) == grpc.StatusCode.OK
    for owner, stranger, model in ((a, b, model_a), (b, a, model_b)):
        mid = model.model_id
        assert [m["model_id"] for m in owner.get("/v1/semi-sensitive-models").json()["items"]] == [mid]
        assert owner.get(f"/v1/semi-sensitive-models/{mid}/artifact").status_code == 200
        for path in (f"/v1/semi-sensitive-models/{mid}", f"/v1/semi-sensitive-models/{mid}/artifact"):
            assert stranger.get(path).status_code == 404
    stolen = model_a.model_copy(update={"sender_key_id": key_b.key_id})
    assert party.deliver_model(sign_model(stolen, key_b)) == grpc.StatusCode.ALREADY_EXISTS

    # C pins A's key under the same sender id: the message cannot say whose it is, so it is nobody's
    assert pin(c, key_a).status_code == 201
    ambiguous = release(ids)
    assert party.deliver(ambiguous, key_a) == grpc.StatusCode.FAILED_PRECONDITION
    assert party.deliver_model(sign_model(model_payload(key_a), key_a)) == grpc.StatusCode.FAILED_PRECONDITION
    for client in (a, c):
        assert client.get(f"/v1/releases/{ambiguous.release_id}").status_code == 404
    assert len(list((party.settings.data_dir / "releases").glob("*"))) == 2
    assert len(list((party.settings.data_dir / "models-received").glob("*"))) == 2


WHEN = "2026-01-01 00:00:00.000000"  # as SQLite stores a timestamp


def _legacy_database(settings: FeaturesSettings, tenant_names: list[str]) -> dict[str, str]:
    """A features party at migration f0007 with a pinned sender, a release and a model it delivered,
    and another release whose sender is no longer pinned; returns tenant name -> API key."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = db.make_engine(settings.resolved_database_url())
    keys = {}
    try:
        db.migrate(engine, "f0007")
        with db.session_factory(engine).begin() as s:
            for name in tenant_names:
                keys[name] = tenants.create_tenant(s, name).api_key
        signer = Identity.generate()
        rel = release([f"e{i}" for i in range(10)])
        header = build_frames(rel, signer)[0].header
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO senders (id, key_id, public_key_pem, created_at) VALUES (:i, :k, :p, :t)"),
                {
                    "i": SENDER,
                    "k": signer.key_id,
                    "p": public_key_pem(signer.public_key),
                    "t": WHEN,
                },
            )
            for release_id, sender in ((rel.release_id, SENDER), (str(uuid.uuid4()), "unpinned-since")):
                conn.execute(
                    text(
                        "INSERT INTO received_releases (release_id, sender_id, sender_key_id, "
                        "payload_sha256, example_count, chunk_count, signed_header, signature, summary, "
                        "path, received_at) VALUES (:r, :s, :k, 'x', 10, 1, :h, :g, '{}', '/nonexistent', :t)"
                    ),
                    {
                        "r": release_id,
                        "s": sender,
                        "k": signer.key_id,
                        "h": header.header,
                        "g": header.signature,
                        "t": WHEN,
                    },
                )
            conn.execute(
                text(
                    "INSERT INTO received_models (model_id, sender_id, sender_key_id, message_sha256, "
                    "label_release_id, guarantee, columns, path, received_at) VALUES "
                    "(:m, :s, :k, 'x', :r, '{}', '{}', '/nonexistent', :t)"
                ),
                {"m": str(uuid.uuid4()), "s": SENDER, "k": signer.key_id, "r": rel.release_id, "t": WHEN},
            )
    finally:
        engine.dispose()
    return keys


def test_with_one_tenant_everything_before_the_migration_becomes_that_tenants(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    keys = _legacy_database(settings, ["only"])
    with features_server_thread(settings) as base:  # start-up migrates to f0008
        only = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['only']}"})
        assert [s["id"] for s in only.get("/v1/senders").json()["items"]] == [SENDER]
        assert len(only.get("/v1/releases").json()["items"]) == 2  # its pin's release, and the orphan
        assert len(only.get("/v1/semi-sensitive-models").json()["items"]) == 1
        newcomer = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {features_tenant_key(settings, 'new')}"}
        )
        items = newcomer.get("/v1/releases").json()["items"]
        assert [r["sender_id"] for r in items] == ["unpinned-since"]  # nobody's: still everybody's
        assert newcomer.get("/v1/senders").json()["items"] == []
        assert newcomer.get("/v1/semi-sensitive-models").json()["items"] == []
    engine = db.make_engine(settings.resolved_database_url())
    try:
        with engine.begin() as conn:
            owners = (
                conn.execute(text("SELECT tenant_id FROM received_releases ORDER BY sender_id"))
                .scalars()
                .all()
            )
        assert owners[0] is not None and owners[1] is None
    finally:
        engine.dispose()


def test_with_several_tenants_legacy_pins_stay_everyones_until_assigned(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    keys = _legacy_database(settings, ["one", "two"])
    legacy_key = None
    with features_server_thread(settings) as base:
        for name in ("one", "two"):
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys[name]}"})
            pins = c.get("/v1/senders").json()["items"]
            assert [s["id"] for s in pins] == [SENDER]
            legacy_key = pins[0]["key_id"]
            assert len(c.get("/v1/releases").json()["items"]) == 2
            assert len(c.get("/v1/semi-sensitive-models").json()["items"]) == 1
        # a tenant may still pin the legacy sender id with its own key
        one = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {keys['one']}"})
        assert pin(one, Identity.generate()).status_code == 201
    engine = db.make_engine(settings.resolved_database_url())
    try:
        cfg = Config()
        cfg.set_main_option("script_location", str(db.MIGRATIONS))
        with engine.begin() as conn:  # and back down: one pin per sender id again, the earliest
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "f0007")
        with engine.begin() as conn:
            rows = conn.execute(text("SELECT id, key_id FROM senders")).all()
        assert [r[0] for r in rows] == [SENDER] and rows[0][1] == legacy_key
    finally:
        engine.dispose()
