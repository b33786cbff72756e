"""Delivery end to end: the labels party's REST API streams a release's stored, signed message over
gRPC to a real features-party receiver (plaintext for development, and mTLS)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path

import grpc
import httpx
import pyarrow.parquet as pq
import pytest

from features_party.storage.orm import Sender
from labeldp.common.identity import load_public_key
from labeldp.common.wire.records import read_records
from labeldp.processes import free_port
from labels_party.config import LabelsSettings
from labels_party.delivery.client import METHOD, backoff
from labels_party.storage.db import sqlite_url
from tests.support.receiver import start
from tests.support.servers import LabelsProcess, labels_server_thread, tenant_key

BODY = "example_id,label\n" + "".join(f"click-{i},{i % 53}\n" for i in range(20_000))


def labels_settings(tmp_path: Path, **extra: object) -> LabelsSettings:
    data = tmp_path / "labels"
    return LabelsSettings(data_dir=data, database_url=sqlite_url(data), delivery_attempts=3, **extra)  # type: ignore[arg-type]


def released(c: httpx.Client, recipient: Mapping[str, object]) -> str:
    assert c.post("/v1/recipients", json=recipient).status_code == 201
    ds = c.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
    c.put(f"/v1/datasets/{ds}/labels", content=BODY, headers={"Content-Type": "text/csv"}).raise_for_status()
    r = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 1.0, "recipient": recipient["name"]},
        headers={"Idempotency-Key": "r1"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def pin(receiver_harness: object, identity: dict[str, str]) -> None:
    sessions = receiver_harness.receiver.sessions  # type: ignore[attr-defined]
    with sessions.begin() as s:
        s.query(Sender).delete()
        s.add(
            Sender(
                id=identity["party_id"], key_id=identity["key_id"], public_key_pem=identity["public_key_pem"]
            )
        )


def test_plaintext_delivery_redelivery_and_identity(tmp_path: Path) -> None:
    receiver = start(tmp_path)
    settings = labels_settings(tmp_path, allow_plaintext=True)
    settings.data_dir.mkdir(parents=True)
    try:
        with labels_server_thread(settings) as base:
            _, key = tenant_key(settings.resolved_database_url(), "acme", "5")
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            identity = c.get("/v1/identity").json()
            assert identity["party_id"] == "advertiser" and identity["key_id"].startswith("ed25519:")
            load_public_key(identity["public_key_pem"])
            assert (settings.data_dir / "identity.pem").stat().st_mode & 0o777 == 0o600
            pin(receiver, identity)
            rel = released(c, {"name": "publisher", "grpc_address": f"127.0.0.1:{receiver.port}"})
            ledger_before = c.get("/v1/ledger").json()["items"]
            first = c.post(f"/v1/releases/{rel}/deliveries")
            assert first.status_code == 201, first.text
            assert first.json()["outcome"] == "delivered" and first.json()["attempts"] == 1
            stored = pq.read_table(receiver.stored_file(rel))
            assert stored.num_rows == 20_000
            again = c.post(f"/v1/releases/{rel}/deliveries")  # same bytes, same receipt, no new charge
            assert (
                again.status_code == 201 and again.json()["receipt_sha256"] == first.json()["receipt_sha256"]
            )
            assert c.get("/v1/ledger").json()["items"] == ledger_before
            assert [d["outcome"] for d in c.get(f"/v1/releases/{rel}/deliveries").json()["items"]] == [
                "delivered",
                "delivered",
            ]
            assert receiver.stored() == 1
    finally:
        receiver.server.stop(None)


def test_unreachable_recipient_is_retried_with_backoff_then_reported(tmp_path: Path) -> None:
    settings = labels_settings(tmp_path, allow_plaintext=True)
    settings.data_dir.mkdir(parents=True)
    with labels_server_thread(settings) as base:
        _, key = tenant_key(settings.resolved_database_url(), "acme", "5")
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        rel = released(c, {"name": "publisher", "grpc_address": f"127.0.0.1:{free_port()}"})
        start_t = time.monotonic()
        r = c.post(f"/v1/releases/{rel}/deliveries")
        elapsed = time.monotonic() - start_t
        assert r.status_code == 502 and r.headers["content-type"].startswith("application/problem+json")
        body = r.json()
        assert (
            body["type"] == "delivery-failed"
            and body["grpc_status"] == "UNAVAILABLE"
            and body["attempts"] == 3
        )
        assert elapsed >= 0.5 * (0.25 + 0.5)  # two backoff sleeps between three attempts
        log = c.get(f"/v1/releases/{rel}/deliveries").json()["items"]
        assert [(d["outcome"], d["status"]) for d in log] == [("failed", "UNAVAILABLE")]


def test_backoff_grows_and_is_capped() -> None:
    assert all(0.125 <= backoff(1) <= 0.25 for _ in range(50))
    assert all(2.0 <= backoff(5) <= 4.0 for _ in range(50))
    assert all(backoff(20) <= 8.0 for _ in range(50))


def test_plaintext_needs_explicit_permission_and_mtls_delivers(tmp_path: Path) -> None:
    receiver = start(tmp_path, tls=True)
    certs = tmp_path / "certs"
    try:
        strict = labels_settings(tmp_path)
        strict.data_dir.mkdir(parents=True)
        with labels_server_thread(strict) as base:
            _, key = tenant_key(strict.resolved_database_url(), "acme", "5")
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            rel = released(c, {"name": "publisher", "grpc_address": f"localhost:{receiver.port}"})
            r = c.post(f"/v1/releases/{rel}/deliveries")
            assert r.status_code == 409 and r.json()["type"] == "tls-not-configured"
        mtls = LabelsSettings(
            data_dir=strict.data_dir,
            database_url=strict.database_url,
            tls_cert=certs / "labels-party.pem",
            tls_key=certs / "labels-party-key.pem",
        )
        with labels_server_thread(mtls) as base:
            _, key2 = tenant_key(mtls.resolved_database_url(), "beta", "5")
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key2}"}, timeout=120)
            pin(receiver, c.get("/v1/identity").json())
            tls_recipient = {
                "name": "publisher",
                "grpc_address": f"localhost:{receiver.port}",
                "tls_ca_pem": (certs / "ca.pem").read_text(),
            }
            rel = released(c, tls_recipient)
            delivered = c.post(f"/v1/releases/{rel}/deliveries")
            assert delivered.status_code == 201, delivered.text
            assert delivered.json()["outcome"] == "delivered"
            assert receiver.stored() == 1
    finally:
        receiver.server.stop(None)


@pytest.mark.processes
def test_a_delivery_is_recorded_before_the_recipient_is_dialled(tmp_path: Path) -> None:
    """``kill -9`` of the labels party after the receiver stored a release, before the answer reached
    the labels party: the delivery was recorded (``sending``) before the dial, so after the restart it
    reads ``interrupted`` — it used to be missing while the publisher held the release — and
    delivering again gets the receiver's receipt for what it stored. The receiver is real; a proxy in
    front of it holds its answer back."""
    receiver = start(tmp_path)
    answer = threading.Event()
    upstream = grpc.insecure_channel(f"127.0.0.1:{receiver.port}")
    forward = upstream.stream_unary(METHOD)

    def hold_the_answer(frames: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        receipt: bytes = forward(iter(list(frames)), timeout=60)  # the receiver stores the release
        answer.wait(120)
        return receipt

    proxy = grpc.server(futures.ThreadPoolExecutor(4))
    proxy.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "labeldp.v1.FeaturesParty",
                {"DeliverRelease": grpc.stream_unary_rpc_method_handler(hold_the_answer)},
            ),
        )
    )
    proxy_port = proxy.add_insecure_port("127.0.0.1:0")
    proxy.start()
    data = tmp_path / "labels"
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "5")
    env = {"LABELDP_ALLOW_PLAINTEXT": "true", "LABELDP_DELIVERY_TIMEOUT_SECONDS": "120"}
    server = LabelsProcess(data, url, env=env)
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        pin(receiver, c.get("/v1/identity").json())
        rel = released(c, {"name": "publisher", "grpc_address": f"127.0.0.1:{proxy_port}"})

        def deliver() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server is killed under it
                c.post(f"/v1/releases/{rel}/deliveries")

        sending = threading.Thread(target=deliver)
        sending.start()
        deadline = time.monotonic() + 60
        while receiver.stored() == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        listed = c.get(f"/v1/releases/{rel}/deliveries").json()["items"]
        assert [(d["outcome"], d["finished_at"]) for d in listed] == [("sending", None)]
        server.kill()
        sending.join(timeout=60)
        server.start()  # the same data directory and database
        (interrupted,) = c.get(f"/v1/releases/{rel}/deliveries").json()["items"]
        assert interrupted["outcome"] == "interrupted" and interrupted["status"] == "UNKNOWN"
        assert "deliver again" in interrupted["detail"] and interrupted["finished_at"] is not None
        answer.set()
        again = c.post(f"/v1/releases/{rel}/deliveries")
        assert again.status_code == 201 and again.json()["outcome"] == "delivered", again.text
        assert receiver.stored() == 1
    finally:
        answer.set()
        server.stop()
        proxy.stop(None)
        upstream.close()
        receiver.server.stop(None)


def test_a_refusal_that_asks_for_a_retry_is_retried(tmp_path: Path) -> None:
    """The receiver refuses a stream over its tenant's limit (RESOURCE_EXHAUSTED) with
    ``grpc-retry-pushback-ms``: the labels party waits and retries, and delivers once the tenant's other
    stream — one that sent its header and stalled — has been cut by the idle deadline."""
    receiver = start(tmp_path, idle_s=2.0, grpc_streams_per_tenant=1)
    settings = labels_settings(tmp_path, allow_plaintext=True)
    settings.data_dir.mkdir(parents=True)
    gate = threading.Event()
    try:
        with labels_server_thread(settings) as base:
            _, key = tenant_key(settings.resolved_database_url(), "acme", "5")
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            pin(receiver, c.get("/v1/identity").json())
            rel = released(c, {"name": "publisher", "grpc_address": f"127.0.0.1:{receiver.port}"})
            header = next(read_records(settings.paths().message(rel)))

            def stalled() -> Iterator[bytes]:
                yield header  # the same release's header: verified, then nothing
                gate.wait(60)

            held = receiver.channel.stream_unary(METHOD).future(stalled(), timeout=60)
            time.sleep(0.5)
            sent = c.post(f"/v1/releases/{rel}/deliveries")
            assert sent.status_code == 201 and sent.json()["outcome"] == "delivered", sent.text
            assert sent.json()["attempts"] >= 2  # refused while the stalled stream held the tenant's one
            assert held.exception().code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        gate.set()
        receiver.server.stop(None)
