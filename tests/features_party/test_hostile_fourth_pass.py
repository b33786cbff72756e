"""Hostile input, fourth pass, against the features party's real interfaces: a feature table that
would decode to far more than its body is refused for it, and another tenant's work goes on while it
is sent."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from features_party.tables.validation import DECODED_ALLOWANCE, DECODED_PER_BODY_BYTE
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.model_message import sign_model, verify_model
from labeldp.common.wire.sender import ReleaseMessage, build_frames
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.features_party import peak_rss_growth
from tests.support.messages import release
from tests.support.receiver import model_payload
from tests.support.servers import features_server_thread, features_tenant_key

PARQUET = "application/vnd.apache.parquet"
PEAK_MIB = 48  # what refusing a table for its decoded size may raise the peak by, beyond 4 × its body


def constant_columns(columns: int, rows: int) -> bytes:
    """``columns`` boolean columns of ``rows`` zeros (and unique IDs), written a row group at a time:
    a megabyte or two of Parquet that decodes to 8 bytes a value."""
    per_group = 100_000
    fields = [pa.field("example_id", pa.int64()), *(pa.field(f"f{i}", pa.bool_()) for i in range(columns))]
    schema = pa.schema(fields)
    zeros = pa.array(np.zeros(per_group, bool))
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for start in range(0, rows, per_group):
            ids = pa.array(np.arange(start, start + per_group, dtype=np.int64))
            writer.write_table(pa.table([ids, *[zeros] * columns], schema=schema))
    return sink.getvalue()


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    keys = [features_tenant_key(settings, name) for name in ("mallory", "publisher")]
    with features_server_thread(settings) as base:
        mallory, publisher = (
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {k}"}, timeout=120) for k in keys
        )
        yield mallory, publisher


def test_a_table_is_bounded_by_what_its_body_may_decode_to(
    tenants: tuple[httpx.Client, httpx.Client],
) -> None:
    """300 constant columns × 1M rows: 1.4 MB of Parquet, 2.4 GB decoded (under 4 × the 4 GiB upload
    limit, the bound before: it raised the server by 2.7 GiB before a 422). Refused from its footer and
    page headers for decoding to more than 4 × its body + 64 MiB, the peak within 4 × the body +
    ``PEAK_MIB``, while another tenant's tables land."""
    mallory, publisher = tenants
    body = constant_columns(300, 1_000_000)
    assert len(body) < 8 * 2**20
    stop, landed = threading.Event(), []

    def other_tenant() -> None:
        n = 0
        while not stop.is_set():
            table = pa.table({"example_id": [f"p{n}-{i}" for i in range(5000)], "x": np.arange(5000.0)})
            sink = io.BytesIO()
            pq.write_table(table, sink)
            put = publisher.put(
                f"/v1/feature-tables/t{n}", content=sink.getvalue(), headers={"Content-Type": PARQUET}
            )
            landed.append(put.status_code)
            n += 1

    beside = threading.Thread(target=other_tenant)
    beside.start()
    try:
        with peak_rss_growth() as peak:
            refused = mallory.put("/v1/feature-tables/wide", content=body, headers={"Content-Type": PARQUET})
    finally:
        stop.set()
        beside.join(timeout=120)
    assert refused.status_code == 413 and refused.json()["type"] == "table-too-large", refused.text
    allowed = DECODED_PER_BODY_BYTE * len(body) + DECODED_ALLOWANCE
    assert f"at most {allowed}" in refused.json()["detail"]
    assert peak.mib <= 4 * len(body) / 2**20 + PEAK_MIB, peak
    assert mallory.get("/v1/feature-tables").json()["items"] == []
    assert landed and set(landed) == {201}
    # 30 such columns of 100,000 rows decode to 25 MB: within the allowance, however well compressed
    small = mallory.put(
        "/v1/feature-tables/wide", content=constant_columns(30, 100_000), headers={"Content-Type": PARQUET}
    )
    assert small.status_code == 201, small.text


def test_another_tenants_pin_of_the_senders_key_neither_takes_nor_blocks_its_releases(tmp_path: Path) -> None:
    """Mallory, a tenant of the features party, pins the advertiser's public key under its sender id
    (a public key is public). Every delivery to the victim tenant failed from then on ("pinned by
    several tenants"), and the victim could not undo it. Now the labels party's messages name the
    recipient's tenant, signed (the recipient registered with ``recipient_tenant`` from the victim's
    identity), so the receiver tries only that tenant's pins: releases and models reach the victim,
    Mallory reads none of them, and a message from before the field — which cannot say which tenant it
    is for — is still refused rather than given to either."""
    from labels_party.config import LabelsSettings
    from labels_party.storage.db import sqlite_url
    from tests.support.servers import labels_server_thread, tenant_key

    features_settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    victim_key, mallory_key = (features_tenant_key(features_settings, n) for n in ("publisher", "mallory"))
    labels_data = tmp_path / "labels"
    labels_data.mkdir()
    labels_settings = LabelsSettings(
        data_dir=labels_data, database_url=sqlite_url(labels_data), allow_plaintext=True
    )
    _, advertiser_key = tenant_key(labels_settings.resolved_database_url(), "acme", "10")
    with features_server_thread(features_settings) as fbase, labels_server_thread(labels_settings) as lbase:
        victim, mallory = (
            httpx.Client(base_url=fbase, headers={"Authorization": f"Bearer {k}"}, timeout=60)
            for k in (victim_key, mallory_key)
        )
        a = httpx.Client(base_url=lbase, headers={"Authorization": f"Bearer {advertiser_key}"}, timeout=120)
        advertiser, publisher = a.get("/v1/identity").json(), victim.get("/v1/identity").json()
        pin = {"id": advertiser["party_id"], "public_key_pem": advertiser["public_key_pem"]}
        assert victim.post("/v1/senders", json=pin).status_code == 201
        assert mallory.post("/v1/senders", json=pin).status_code == 201  # the attack: it only affects Mallory
        address = f"127.0.0.1:{publisher['grpc_port']}"
        registered = a.post(
            "/v1/recipients",
            json={
                "name": publisher["party_id"],
                "grpc_address": address,
                "recipient_tenant": publisher["tenant_id"],
            },
        )
        assert (
            registered.status_code == 201 and registered.json()["recipient_tenant"] == publisher["tenant_id"]
        )
        ds = a.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
        body = "example_id,label\n" + "".join(f"e{i},{i % 53}\n" for i in range(500))
        a.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).raise_for_status()
        rel = a.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1.0, "recipient": "publisher"},
            headers={"Idempotency-Key": "r"},
        ).json()["id"]
        sent = a.post(f"/v1/releases/{rel}/deliveries")
        assert sent.status_code == 201 and sent.json()["outcome"] == "delivered", sent.text
        assert [r["release_id"] for r in victim.get("/v1/releases").json()["items"]] == [rel]
        assert mallory.get("/v1/releases").json()["items"] == []
        assert mallory.get(f"/v1/releases/{rel}").status_code == 404

        signer = Identity.load_or_create(labels_settings.identity_path())  # the advertiser's own key
        port = publisher["grpc_port"]
        legacy = replace(release([f"x{i}" for i in range(50)]), sender_id=advertiser["party_id"])
        assert deliver(port, legacy, signer) == grpc.StatusCode.FAILED_PRECONDITION  # says no tenant
        named = replace(legacy, release_id=str(uuid.uuid4()), recipient_tenant=publisher["tenant_id"])
        assert deliver(port, named, signer) == grpc.StatusCode.OK
        model = model_payload(signer).model_copy(
            update={"sender_id": advertiser["party_id"], "recipient_tenant": publisher["tenant_id"]}
        )
        assert deliver_model(port, sign_model(model, signer)) == grpc.StatusCode.OK
        assert [m["model_id"] for m in victim.get("/v1/semi-sensitive-models").json()["items"]] == [
            model.model_id
        ]
        assert mallory.get("/v1/semi-sensitive-models").json()["items"] == []
        artifact = victim.get(f"/v1/semi-sensitive-models/{model.model_id}/artifact").content
        verified = verify_model(artifact, lambda s, k: signer.public_key)  # anyone, with the key alone
        assert verified.recipient_tenant == publisher["tenant_id"]
        # a message naming a tenant whose pins do not hold the signing key is not authenticated
        stranger = replace(legacy, release_id=str(uuid.uuid4()), recipient_tenant=str(uuid.uuid4()))
        assert deliver(port, stranger, signer) == grpc.StatusCode.UNAUTHENTICATED


def deliver(port: int, message: ReleaseMessage, signer: Identity) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            pb_grpc.FeaturesPartyStub(channel).DeliverRelease(iter(build_frames(message, signer)), timeout=60)  # type: ignore[no-untyped-call]
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


def deliver_model(port: int, envelope: bytes) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
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


def test_a_tenant_pins_a_bounded_number_of_senders(tenants: tuple[httpx.Client, httpx.Client]) -> None:
    """Every delivery looks its sender's pins up: one tenant's pins are bounded (409 beyond), and
    another tenant pins as before."""
    from features_party.receiver.store import MAX_PINS_PER_TENANT

    mallory, publisher = tenants
    pem = public_key_pem(Identity.generate().public_key)
    for i in range(MAX_PINS_PER_TENANT):
        assert mallory.post("/v1/senders", json={"id": f"s{i}", "public_key_pem": pem}).status_code == 201
    over = mallory.post("/v1/senders", json={"id": "one-more", "public_key_pem": pem})
    assert over.status_code == 409 and over.json()["type"] == "too-many-senders"
    assert publisher.post("/v1/senders", json={"id": "s0", "public_key_pem": pem}).status_code == 201


def stalled_calls(
    channel: grpc.Channel, first: list[bytes], n: int, gate: threading.Event
) -> list[grpc.Future]:
    """``n`` DeliverRelease streams on ``channel`` that send ``first`` (nothing, or a header) and then
    nothing until ``gate`` is set."""

    def frames() -> Iterator[bytes]:
        yield from first
        gate.wait(120)

    call = channel.stream_unary("/labeldp.v1.FeaturesParty/DeliverRelease")
    return [call.future(frames(), timeout=120) for _ in range(n)]


def ended(calls: list[grpc.Future]) -> list[grpc.StatusCode]:
    return [c.exception().code() if c.exception() else grpc.StatusCode.OK for c in calls]


def test_stalled_streams_cannot_stop_another_senders_deliveries(tmp_path: Path) -> None:
    """Mallory holds a client certificate of the party's CA and nothing else. 64 streams that send
    nothing (32 used to hold every worker for 60 s, renewable at once: every delivery to every tenant
    failed): 16 are held until the header deadline cuts them (DEADLINE_EXCEEDED), 48 are refused at once
    (RESOURCE_EXHAUSTED, with a retry pushback). Before them, as a tenant with a key of its own pinned,
    20 streams that send a valid header and stall: 8 are held (the tenant's streams at once) until the
    idle deadline, 12 refused. Meanwhile the advertiser's releases and a model reach the victim tenant
    over mTLS at the first attempt."""
    from features_party import tenants
    from features_party.storage.orm import Sender
    from tests.support.receiver import start

    h = start(tmp_path, tls=True, idle_s=3.0, stream_header_seconds=3.0)
    gate = threading.Event()
    mallory_channel, sender_channel = h.channel_as("mallory"), h.channel_as("labels-party")
    try:
        mallory_key = Identity.generate()
        with h.receiver.sessions.begin() as s:  # Mallory, a tenant of the party, pins a key of its own
            mallory = tenants.create_tenant(s, "mallory").tenant_id
            s.add(
                Sender(
                    tenant_id=mallory,
                    id="mallory",
                    key_id=mallory_key.key_id,
                    public_key_pem=public_key_pem(mallory_key.public_key),
                )
            )
        own = replace(release([f"m{i}" for i in range(10)]), sender_id="mallory", recipient_tenant=mallory)
        header = build_frames(own, mallory_key)[0].SerializeToString()
        with_header = stalled_calls(mallory_channel, [header], 20, gate)
        time.sleep(0.5)  # their headers are verified: they are the tenant's now, no longer the peer's
        silent = stalled_calls(mallory_channel, [], 64, gate)
        time.sleep(0.5)  # every stream is open
        stub = pb_grpc.FeaturesPartyStub(sender_channel)  # type: ignore[no-untyped-call]
        for n in range(3):
            victim = replace(release([f"v{n}-{i}" for i in range(5000)]), recipient_tenant=h.tenant_id)
            assert stub.DeliverRelease(iter(build_frames(victim, h.sender)), timeout=30).example_count == 5000
        model = model_payload(h.sender).model_copy(update={"recipient_tenant": h.tenant_id})
        sent = sender_channel.unary_unary(
            "/labeldp.v1.FeaturesParty/DeliverModel",
            request_serializer=pb.SignedModel.SerializeToString,
            response_deserializer=pb.ModelReceipt.FromString,
        )(pb.SignedModel(envelope=sign_model(model, h.sender)), timeout=30)
        assert sent.model_id == model.model_id
        codes = ended(silent)  # the deadlines end every held stream without the gate
        assert sorted(codes, key=str) == sorted(
            [grpc.StatusCode.DEADLINE_EXCEEDED] * 16 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 48, key=str
        )
        refused = next(c for c in silent if c.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert ("grpc-retry-pushback-ms", "1000") in [
            tuple(m) for m in refused.exception().trailing_metadata()
        ]
        codes = ended(with_header)
        assert codes.count(grpc.StatusCode.DEADLINE_EXCEEDED) == 8
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 12
        assert h.stored() == 3 and h.models_stored() == 1 and h.no_leftovers()
    finally:
        gate.set()
        mallory_channel.close()
        sender_channel.close()
        h.channel.close()
        h.server.stop(None)


@pytest.mark.parametrize("label_type", ["<img src=x onerror=alert(1)>", "", "categorical", "COUNT"])
def test_a_label_type_the_labels_party_does_not_know_is_refused(tmp_path: Path, label_type: str) -> None:
    """The label type is stored and shown (and trained by): it must be one the labels party has, and
    take the mechanism's loss (``categorical`` does not take ``squared``), or the message is refused
    before any chunk is read."""
    from tests.support.receiver import start

    h = start(tmp_path)
    try:
        bad = replace(release([f"e{i}" for i in range(20)]), label_type=label_type)
        with pytest.raises(grpc.RpcError) as info:
            h.stub.DeliverRelease(iter(build_frames(bad, h.sender)), timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "label" in str(info.value.details())
        good = replace(release([f"e{i}" for i in range(20)]), label_type="real")
        assert h.stub.DeliverRelease(iter(build_frames(good, h.sender)), timeout=30).example_count == 20
        assert h.stored() == 1
    finally:
        h.channel.close()
        h.server.stop(None)
