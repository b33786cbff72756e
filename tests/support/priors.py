"""Two real parties for the priors exchange (feature-aware releases): a labels party and a features party,
each served over real HTTP, the features party's gRPC receiver behind mutual TLS with a development CA.

The advertiser ``acme`` uploads 4,000 census examples (weeks worked, 0..52) and releases the first 1,500
to the publisher's tenant ``pub-a``, which holds features for the first 3,800, trains a model on the
release and may grant it to price the advertiser's examples. A second publisher tenant ``pub-b`` pins
the same labels party. Everything goes through the parties' REST APIs and the gRPC delivery.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity
from labeldp.common.tls import DevCertificates, dev_ca
from labeldp.samples import weeks_worked
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.features_party import put_table, train
from tests.support.servers import (
    features_server_thread,
    features_tenant_key,
    labels_server_thread,
    tenant_key,
)

EXAMPLES, WITH_FEATURES, RELEASED = 4000, 3800, 1500
SUPPORT = tuple(float(v) for v in range(53))  # the weeks dataset's integer grid 0..52


@dataclass
class Parties:
    labels: httpx.Client  # the advertiser acme
    labels_settings: LabelsSettings
    features: httpx.Client  # the publisher's tenant pub-a
    features_b: httpx.Client  # another tenant of the same features party
    features_settings: FeaturesSettings
    identity: dict[str, Any]  # the features party's, as tenant pub-a sees it
    labels_identity: dict[str, Any]
    certs: DevCertificates
    dataset_id: str
    release_id: str
    model_id: str
    ids: list[str]
    labels_base: str
    labels_tenant_id: str

    @property
    def grpc_port(self) -> int:
        return int(self.identity["grpc_port"])

    def recipient(self, **changes: Any) -> dict[str, Any]:
        """The publisher as a recipient of tenant pub-a: address, CA, pinned key, tenant."""
        return {
            "name": "publisher",
            "grpc_address": f"localhost:{self.grpc_port}",
            "tls_ca_pem": self.certs.ca.read_text(),
            "fingerprint": self.identity["key_id"],
            "recipient_tenant": self.identity["tenant_id"],
            **changes,
        }

    def labels_tenant(self, name: str) -> httpx.Client:
        _, key = tenant_key(self.labels_settings.resolved_database_url(), name, "10")
        return httpx.Client(
            base_url=self.labels_base, headers={"Authorization": f"Bearer {key}"}, timeout=120
        )

    def features_identity_key(self) -> Identity:
        """The features party's signing key (what a hostile copy of it would sign with)."""
        return Identity.load_or_create(self.features_settings.identity_path())

    def grant(self, **body: Any) -> httpx.Response:
        return self.features.put(
            f"/v1/senders/{self.labels_identity['party_id']}/pricing",
            json={"model_id": self.model_id, **body},
        )


def _csv(ids: list[str], labels: np.ndarray) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["example_id", "label"])
    writer.writerows(zip(ids, labels.astype(int).tolist(), strict=True))
    return out.getvalue().encode()


@contextmanager
def two_parties(tmp_path: Path) -> Iterator[Parties]:
    certs = dev_ca(tmp_path / "certs", other_clients=("mallory",))
    features_settings = FeaturesSettings(
        party_id="publisher",
        data_dir=tmp_path / "features",
        grpc_port=0,
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        tls_ca=certs.ca,
    )
    key_a = features_tenant_key(features_settings, "pub-a")
    key_b = features_tenant_key(features_settings, "pub-b")
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    labels_settings = LabelsSettings(
        data_dir=labels_dir,
        database_url=sqlite_url(labels_dir),
        tls_cert=certs.client_cert,
        tls_key=certs.client_key,
        allow_plaintext=True,  # for a recipient registered without a CA: the tests' hostile proxy
        delivery_attempts=2,
        delivery_timeout_seconds=60,
    )
    labels_tenant_id, labels_key = tenant_key(labels_settings.resolved_database_url(), "acme", "10")
    with ExitStack() as stack:
        features_base = stack.enter_context(features_server_thread(features_settings))
        labels_base = stack.enter_context(labels_server_thread(labels_settings))
        features = stack.enter_context(
            httpx.Client(base_url=features_base, headers={"Authorization": f"Bearer {key_a}"}, timeout=120)
        )
        features_b = stack.enter_context(
            httpx.Client(base_url=features_base, headers={"Authorization": f"Bearer {key_b}"}, timeout=120)
        )
        labels = stack.enter_context(
            httpx.Client(base_url=labels_base, headers={"Authorization": f"Bearer {labels_key}"}, timeout=120)
        )
        identity = features.get("/v1/identity").json()
        me = labels.get("/v1/identity").json()
        for client in (features, features_b):  # both publisher tenants pin the advertiser's key
            pinned = client.post(
                "/v1/senders", json={"id": me["party_id"], "public_key_pem": me["public_key_pem"]}
            )
            assert pinned.status_code == 201, pinned.text

        data = weeks_worked()
        ids = [f"w{i}" for i in range(EXAMPLES)]
        labels_of = data.labels[:EXAMPLES]
        ds = labels.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52})
        dataset_id = ds.json()["id"]
        up = labels.put(
            f"/v1/datasets/{dataset_id}/labels",
            content=_csv(ids, labels_of),
            headers={"Content-Type": "text/csv"},
        )
        assert up.status_code in (200, 201), up.text
        table = data.features.slice(0, WITH_FEATURES).append_column(
            "example_id", pa.array(ids[:WITH_FEATURES])
        )
        assert put_table(features, "census", table).status_code in (200, 201)

        parties = Parties(
            labels,
            labels_settings,
            features,
            features_b,
            features_settings,
            identity,
            me,
            certs,
            dataset_id,
            "",
            "",
            ids,
            labels_base,
            labels_tenant_id,
        )
        assert labels.post("/v1/recipients", json=parties.recipient()).status_code == 201
        rel = labels.post(
            f"/v1/datasets/{dataset_id}/releases",
            json={"epsilon": 4.0, "recipient": "publisher", "example_ids": ids[:RELEASED]},
            headers={"Idempotency-Key": "stage-1"},
        )
        assert rel.status_code == 201, rel.text
        parties.release_id = rel.json()["id"]
        sent = labels.post(f"/v1/releases/{parties.release_id}/deliveries")
        assert sent.status_code == 201, sent.text
        parties.model_id = train(features, release_id=parties.release_id, feature_table="census")
        yield parties
