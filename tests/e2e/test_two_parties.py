"""Both parties as real processes, configured and connected only through their public interfaces:
the CLI (tenants, dev CA), REST (identity, pinning, recipients, releases, deliveries) and gRPC over
mutual TLS."""

from __future__ import annotations

from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from labeldp.demo.parties import cli
from labeldp.mechanisms import PublishedMechanism
from labeldp.processes import FeaturesProcess, free_port
from tests.support.metrics import scrape, value
from tests.support.servers import LabelsProcess

pytestmark = pytest.mark.processes


def test_release_travels_from_labels_party_to_features_party_over_mtls(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    cli({}, "keys", "dev-ca", "--out", str(certs))
    grpc_port = free_port()
    features_env = {
        "LABELDP_FEATURES_DATA_DIR": str(tmp_path / "features"),
        "LABELDP_FEATURES_PARTY_ID": "publisher",
        "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
        "LABELDP_FEATURES_TLS_CERT": str(certs / "features-party.pem"),
        "LABELDP_FEATURES_TLS_KEY": str(certs / "features-party-key.pem"),
        "LABELDP_FEATURES_TLS_CA": str(certs / "ca.pem"),
    }
    labels_env = {
        "LABELDP_DATA_DIR": str(tmp_path / "labels"),
        "LABELDP_PARTY_ID": "advertiser",
        "LABELDP_TLS_CERT": str(certs / "labels-party.pem"),
        "LABELDP_TLS_KEY": str(certs / "labels-party-key.pem"),
    }
    features_key = cli(features_env, "features", "tenant", "create", "publisher-ml").strip().splitlines()[-1]
    labels_key = (
        cli(labels_env, "labels", "tenant", "create", "acme", "--epsilon-per-example", "4")
        .strip()
        .splitlines()[-1]
    )
    features = FeaturesProcess(features_env)
    labels = LabelsProcess(
        tmp_path / "labels", f"sqlite:///{tmp_path / 'labels' / 'labels.db'}", env=labels_env
    )
    features.start()
    labels.start()
    try:
        f = httpx.Client(
            base_url=features.base_url, headers={"Authorization": f"Bearer {features_key}"}, timeout=60
        )
        a = httpx.Client(
            base_url=labels.base_url, headers={"Authorization": f"Bearer {labels_key}"}, timeout=120
        )
        publisher = f.get("/v1/identity").json()
        advertiser = a.get("/v1/identity").json()
        assert publisher["grpc_port"] == grpc_port
        # each side registers the other: the publisher pins the advertiser's signing key ...
        pinned = f.post(
            "/v1/senders", json={"id": advertiser["party_id"], "public_key_pem": advertiser["public_key_pem"]}
        )
        assert pinned.status_code == 201 and pinned.json()["key_id"] == advertiser["key_id"]
        assert (
            f.post("/v1/senders", json={"id": "x", "public_key_pem": "nope"}).json()["type"]
            == "invalid-public-key"
        )
        # ... and the advertiser registers the publisher's receiver, its CA and fingerprint
        a.post(
            "/v1/recipients",
            json={
                "name": publisher["party_id"],
                "grpc_address": f"localhost:{grpc_port}",
                "tls_ca_pem": (certs / "ca.pem").read_text(),
                "fingerprint": publisher["key_id"],
            },
        ).raise_for_status()
        ds = a.post(
            "/v1/datasets",
            json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52, "default_label": 0},
        ).json()["id"]
        labels_csv = "example_id,label\n" + "".join(
            f"click-{i},{(i * 7) % 53}\n" for i in range(0, 30_000, 3)
        )
        a.put(
            f"/v1/datasets/{ds}/labels", content=labels_csv, headers={"Content-Type": "text/csv"}
        ).raise_for_status()
        universe = "example_id\n" + "".join(f"click-{i}\n" for i in range(30_000))
        a.put(
            f"/v1/datasets/{ds}/universe", content=universe, headers={"Content-Type": "text/csv"}
        ).raise_for_status()
        rel = a.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1.0, "loss": "poisson", "recipient": "publisher", "mechanism": "rr_on_bins"},
            headers={"Idempotency-Key": "first"},
        ).json()
        delivered = a.post(f"/v1/releases/{rel['id']}/deliveries")
        assert delivered.status_code == 201, delivered.text
        received = f.get("/v1/releases").json()["items"]
        assert [r["release_id"] for r in received] == [rel["id"]]
        got = received[0]
        assert got["example_count"] == 30_000 and got["sender_id"] == "advertiser"
        assert got["header"]["recipient_id"] == "publisher" and got["header"]["epsilon_total"] == 1.0
        assert got["header"]["mechanism"]["bin_values"] == rel["bins"]
        # the mechanism the features party's trainer reads is the one the labels party published
        assert got["mechanism"] == rel["mechanism"]
        published = PublishedMechanism.model_validate(rel["mechanism"])
        assert PublishedMechanism.model_validate(got["mechanism"]) == published
        # both parties state the same data-independent attack bounds for it
        for bound in ("worst_case_additive_advantage", "max_multiplicative_advantage"):
            assert got[bound] == rel[bound] == getattr(published, bound)
        # and the same bin transition: keep on the diagonal, move off it
        transition = published.bin_transition()
        assert got["keep_probability"] == rel["keep_probability"] == transition[0, 0]
        assert got["move_probability"] == rel["move_probability"] == transition[0, 1]
        assert published.kind == "rr_on_bins" and published.loss == "poisson" and published.epsilon <= 1.0
        (stored_file,) = (tmp_path / "features" / "releases").glob("*.parquet")  # a name the receiver chose
        stored = pq.read_table(stored_file)
        assert sorted(stored.column("example_id").to_pylist()) == sorted(f"click-{i}" for i in range(30_000))
        assert (
            f.get(f"/v1/releases/{rel['id']}").json()["payload_sha256"] == delivered.json()["receipt_sha256"]
        )
        assert httpx.get(f"{features.base_url}/v1/releases").status_code == 401
        assert a.post(f"/v1/releases/{rel['id']}/deliveries").status_code == 201  # re-delivery: same bytes
        sent, received_metrics = scrape(labels.base_url), scrape(features.base_url)
        assert value(sent, "labeldp_deliveries_total", outcome="delivered") == 2
        assert value(sent, "labeldp_example_epsilon_charged_total") == 30_000
        assert value(received_metrics, "labeldp_received_releases_total", outcome="stored") == 1
        assert value(received_metrics, "labeldp_received_releases_total", outcome="replayed") == 1
        assert value(received_metrics, "labeldp_examples_received_total") == 30_000
    finally:
        labels.stop()
        features.stop()
