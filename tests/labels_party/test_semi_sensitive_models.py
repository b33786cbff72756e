"""Training with semi-sensitive features through the labels party's REST API (SQLite and PostgreSQL):
the (ε₂, δ) charge comes before any draw, a refused charge draws nothing and leaves nothing, and the
signed model message verifies, carries its guarantee and is refused when tampered with."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

pytest.importorskip("torch")  # the dpsgd extra; `make test` installs it

from labeldp.common.identity import load_public_key
from labeldp.common.model_message import ModelMessageError, verify_model
from labeldp.mechanisms import rng
from labeldp.semi_sensitive import TwoTower, predict
from labeldp.semi_sensitive.encoding import ColumnEncoding, encode
from labels_party.budget.epsilon import to_atto_floor
from labels_party.budget.ledger import set_delta_budget
from labels_party.config import LabelsSettings
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry, SemiSensitiveModel
from tests.support.servers import labels_server_thread, tenant_key

N = 1200
SPEC: dict[str, Any] = {
    "name": "purchases",
    "label_type": "binary",
    "lo": 0,
    "hi": 1,
    "semi_sensitive": [
        {"name": "cart_adds", "kind": "number", "lo": 0, "hi": 10},
        {"name": "remarketing", "kind": "category", "categories": ["none", "shoes"]},
    ],
    "non_sensitive": [
        {"name": "hour", "kind": "number", "lo": 0, "hi": 24},
        {"name": "device", "kind": "category", "categories": ["mobile", "desktop"]},
    ],
}


class Party:
    def __init__(self, base: str, database_url: str, data_dir: Path) -> None:
        self.database_url, self.data_dir = database_url, data_dir
        self.tenant_id, key = tenant_key(database_url, "acme", "10")
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=300)

    def set_delta(self, delta: str) -> None:
        engine = make_engine(self.database_url)
        with session_factory(engine).begin() as s:
            set_delta_budget(s, self.tenant_id, to_atto_floor(delta), api_key_id=None, note="test")
        engine.dispose()

    def rows(self, model: type[Any]) -> list[Any]:
        engine = make_engine(self.database_url)
        with session_factory(engine)() as s:
            out = list(s.execute(select(model)).scalars())
        engine.dispose()
        return out


@pytest.fixture
def party(database_url: str, tmp_path: Path) -> Iterator[Party]:
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=database_url)
    with labels_server_thread(settings) as base:
        yield Party(base, database_url, settings.data_dir)


def synthetic() -> tuple[pa.Table, pa.Table]:
    """Labels that depend mostly on the semi-sensitive columns (what phase 2 is for)."""
    g = np.random.default_rng(3)
    cart = g.integers(0, 11, N)
    shoes = g.integers(0, 2, N)
    hour = g.integers(0, 24, N)
    mobile = g.integers(0, 2, N)
    score = 0.6 * cart - 3 + 1.5 * shoes + 0.3 * mobile + g.logistic(size=N)
    ids = [f"click-{i}" for i in range(N)]
    labels = pa.table(
        {
            "example_id": ids,
            "label": (score > 0).astype(np.int64),
            "cart_adds": cart,
            "remarketing": np.where(shoes == 1, "shoes", "none"),
        }
    )
    features = pa.table(
        {"example_id": ids, "hour": hour, "device": np.where(mobile == 1, "mobile", "desktop")}
    )
    return labels, features


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def prepared(p: Party, upload_features: bool = True) -> tuple[str, str]:
    """A dataset with labels, semi-sensitive and (optionally) non-sensitive rows, and a label release."""
    ds = prepared_dataset(p, upload_features)
    made = p.client.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 3.0, "recipient": "publisher"},
        headers={"Idempotency-Key": "phase-1"},
    )
    assert made.status_code == 201, made.text
    return ds, made.json()["id"]


def prepared_dataset(p: Party, upload_features: bool = True) -> str:
    """A dataset with labels, semi-sensitive and (optionally) non-sensitive rows; no release yet."""
    c = p.client
    labels, features = synthetic()
    assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json=SPEC).json()["id"]
    put = c.put(
        f"/v1/datasets/{ds}/labels",
        content=parquet(labels),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200, put.text
    if upload_features:
        put = c.put(
            f"/v1/datasets/{ds}/non-sensitive-features",
            content=parquet(features),
            headers={"Content-Type": "application/vnd.apache.parquet"},
        )
        assert put.status_code == 200 and put.json()["rows"] == N, put.text
    return str(ds)


def body(release_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "label_release_id": release_id,
        "epsilon_dpsgd": 2.0,
        "delta": 1e-7,
        "epochs": 2,
        "batch_size": 200,
        **extra,
    }


class DrawSpy:
    """Records, for every CSPRNG stream the service opens, whether the DP-SGD charge had already been
    committed (a real SecureRandom runs; the spy only looks at the ledger when one is created)."""

    def __init__(self, p: Party, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[bool] = []
        original = rng.SecureRandom.__init__
        spy = self

        def init(self_: rng.SecureRandom) -> None:
            if threading.current_thread() is not threading.main_thread():  # the server's threads
                entries = p.rows(LedgerEntry)
                spy.seen.append(any(e.delta_atto and e.kind == "charge" for e in entries))
            original(self_)

        monkeypatch.setattr(rng.SecureRandom, "__init__", init)


def test_a_model_is_charged_first_trained_signed_and_verifiable(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    party.set_delta("1e-6")
    ds, rid = prepared(party)
    c = party.client
    spy = DrawSpy(party, monkeypatch)
    made = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m1"}
    )
    assert made.status_code == 201, made.text
    model = made.json()
    assert model["status"] == "complete" and model["examples"] == N and model["steps"] == 12
    assert spy.seen and all(spy.seen)  # every draw came after the (ε₂, δ) charge committed
    # the ledger: ε₁ for the release, then (ε₂, δ) for the model, on every example
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert [(e["epsilon"], e["delta"], e["examples"]) for e in charges] == [(3.0, None, N), (2.0, 1e-7, N)]
    budget = c.get(f"/v1/datasets/{ds}/budget").json()
    assert budget["max_spent"] == budget["min_spent"] == 5.0 and budget["delta_spent"] == 1e-7
    # a replay returns the same model and charges nothing
    again = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m1"}
    )
    assert again.status_code == 200 and again.json()["id"] == model["id"]
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == 2
    # the message verifies with the labels party's pinned key and carries the guarantee
    raw = c.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    identity = c.get("/v1/identity").json()
    key = load_public_key(identity["public_key_pem"])

    def pinned(sender: str, key_id: str) -> Any:
        return key if (sender, key_id) == (identity["party_id"], identity["key_id"]) else None

    payload = verify_model(raw, pinned)
    g = payload.guarantee
    assert (g.epsilon_labels, g.epsilon_dpsgd, g.delta, g.epsilon_total) == (3.0, 2.0, 1e-7, 5.0)
    assert g.adjacency == "replace-one" and g.label_release_id == rid and g.examples == N
    assert g.noise_multiplier == model["noise_multiplier"] > 0
    # the weights are a working model that reads both kinds of columns
    net = TwoTower.from_arrays(3, 3, payload.architecture["width"], payload.weights)
    labels, features = synthetic()
    non = [
        ColumnEncoding("hour", "number", 0, 24),
        ColumnEncoding("device", "category", categories=("mobile", "desktop")),
    ]
    semi = [
        ColumnEncoding("cart_adds", "number", 0, 10),
        ColumnEncoding("remarketing", "category", categories=("none", "shoes")),
    ]
    x_non = encode({k: features.column(k).to_numpy(zero_copy_only=False) for k in ("hour", "device")}, non)
    x_semi = encode(
        {k: labels.column(k).to_numpy(zero_copy_only=False) for k in ("cart_adds", "remarketing")}, semi
    )
    p = predict(net, x_non, x_semi)
    assert p.shape == (N,) and np.all((p > 0) & (p < 1))
    # tampering: any changed byte of the payload, a wrong key, or another sender is refused
    envelope = json.loads(raw)
    for i in (0, len(envelope["payload"]) // 2, len(envelope["payload"]) - 5):
        flipped = dict(
            envelope,
            payload=envelope["payload"][:i]
            + ("A" if envelope["payload"][i] != "A" else "B")
            + envelope["payload"][i + 1 :],
        )
        with pytest.raises(ModelMessageError):
            verify_model(json.dumps(flipped).encode(), pinned)
    with pytest.raises(ModelMessageError, match="not pinned"):
        verify_model(raw, lambda s, k: None)
    with pytest.raises(ModelMessageError):
        verify_model(raw[:-10], pinned)


def test_a_refused_charge_draws_nothing_and_leaves_nothing(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, rid = prepared(party)  # a pure-ε tenant: δ budget 0
    spy = DrawSpy(party, monkeypatch)
    c = party.client
    before = c.get("/v1/ledger").json()["items"]
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m"}
    )
    assert refused.status_code == 409 and refused.json()["type"] == "delta-budget-exhausted"
    party.set_delta("1e-6")
    too_much = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models",
        json=body(rid, epsilon_dpsgd=8.0),
        headers={"Idempotency-Key": "m2"},
    )
    assert too_much.status_code == 409 and too_much.json()["type"] == "budget-exhausted"  # 3 + 8 > 10
    assert spy.seen == []  # no stream opened: no noise drawn
    assert party.rows(SemiSensitiveModel) == []
    after = c.get("/v1/ledger").json()["items"]
    assert [e for e in after if e["kind"] == "charge"] == [e for e in before if e["kind"] == "charge"]
    assert not list((party.data_dir / "models").glob("*")) if (party.data_dir / "models").exists() else True


def test_bad_requests_are_refused_before_the_charge(party: Party) -> None:
    party.set_delta("1e-6")
    ds, rid = prepared(party, upload_features=False)
    c = party.client

    def post(payload: dict[str, Any], key: str = "k", path: str | None = None) -> httpx.Response:
        url = path or f"/v1/datasets/{ds}/semi-sensitive-models"
        return c.post(url, json=payload, headers={"Idempotency-Key": key})

    assert post(body(rid)).json()["type"] == "no-non-sensitive-rows"
    features = synthetic()[1]
    partial = features.slice(0, N - 5)
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(partial),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200
    missing = post(body(rid))
    assert missing.status_code == 422 and missing.json()["type"] == "missing-non-sensitive-rows"
    bad_value = features.set_column(1, "hour", pa.array([30] * N))
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(bad_value),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 422 and put.json()["type"] == "invalid-non-sensitive"
    put = c.put(
        f"/v1/datasets/{ds}/non-sensitive-features",
        content=parquet(features),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200
    assert post(body("not-a-uuid")).status_code == 404
    assert post(body(rid, delta=0.5)).status_code == 422  # δ must be small
    assert post(body(rid, epochs=100, batch_size=1)).json()["type"] == "invalid-parameter"  # too many steps
    no_key = c.post(f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid))
    assert no_key.status_code == 400
    other = c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    assert (
        post(body(rid), path=f"/v1/datasets/{other}/semi-sensitive-models").json()["type"]
        == "not-semi-sensitive"
    )
    assert party.rows(SemiSensitiveModel) == []
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert len(charges) == 1  # the label release only


def test_the_whole_flow_from_the_cli(tmp_path: Path) -> None:
    """Declare the columns, upload labels and non-sensitive rows, release, train, show, download."""
    from typer.testing import CliRunner

    from labeldp.cli import app
    from labels_party.storage.db import sqlite_url

    data = tmp_path / "labels"
    data.mkdir()
    settings = LabelsSettings(data_dir=data, database_url=sqlite_url(data))
    with labels_server_thread(settings) as base:
        p = Party(base, sqlite_url(data), data)
        p.set_delta("1e-6")
        key = p.client.headers["Authorization"].removeprefix("Bearer ")
        L = ("--url", base, "--api-key", key)

        def ok(*args: str) -> str:
            result = CliRunner().invoke(app, list(args))
            assert result.exit_code == 0, (args, result.stdout, result.stderr)
            return result.stdout

        declared = tmp_path / "columns.json"
        declared.write_text(json.dumps({k: SPEC[k] for k in ("semi_sensitive", "non_sensitive")}))
        labels, features = synthetic()
        pq.write_table(labels, tmp_path / "labels.parquet")
        pq.write_table(features, tmp_path / "features.parquet")
        ok(
            "labels",
            "datasets",
            "create",
            "purchases",
            "--label-type",
            "binary",
            "--lo",
            "0",
            "--hi",
            "1",
            "--columns",
            str(declared),
            "-q",
            *L,
        )
        ok("labels", "upload", str(tmp_path / "labels.parquet"), "--dataset", "purchases", *L)
        assert f"{N:,} non-sensitive rows" in ok(
            "labels",
            "upload",
            str(tmp_path / "features.parquet"),
            "--dataset",
            "purchases",
            "--non-sensitive",
            *L,
        )
        assert p.client.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
        rel = ok(
            "labels",
            "release",
            "--dataset",
            "purchases",
            "--epsilon",
            "3",
            "--recipient",
            "publisher",
            "--loss",
            "zero_one",
            "--idempotency-key",
            "r1",
            "-q",
            *L,
        ).strip()
        model = ok(
            "labels",
            "semi-sensitive-models",
            "create",
            "--dataset",
            "purchases",
            "--release",
            rel,
            "--epsilon-dpsgd",
            "2",
            "--delta",
            "1e-7",
            "--epochs",
            "1",
            "--batch-size",
            "300",
            "-q",
            *L,
        ).strip()
        models = ("labels", "semi-sensitive-models")
        assert json.loads(ok(*models, "show", model, "--json", *L))["status"] == "complete"
        assert "bytes" in ok(*models, "download", model, "-o", str(tmp_path / "model.json"), *L)
        envelope = json.loads((tmp_path / "model.json").read_text())
        assert envelope["format"] == "labeldp.semi-sensitive-model/1" and envelope["signature"]
        refused = CliRunner().invoke(
            app,
            [
                "labels",
                "semi-sensitive-models",
                "create",
                "--dataset",
                "purchases",
                "--release",
                rel,
                "--epsilon-dpsgd",
                "2",
                "--delta",
                "5e-6",
                *L,
            ],
        )
        assert refused.exit_code == 1 and "delta-budget-exhausted" in refused.stderr


def test_the_model_message_travels_to_the_features_party_and_is_verified_there(tmp_path: Path) -> None:
    """Delivered over gRPC like a release: verified against the pinned sender key, stored once, listed
    with its guarantee, exported as the signed bytes; tampered, unpinned or misaddressed messages are
    refused with the gRPC status a release would get."""
    import grpc
    from typer.testing import CliRunner

    from features_party.config import FeaturesSettings
    from labeldp.cli import app
    from labeldp.common.identity import Identity
    from labeldp.common.model_message import ModelPayload, sign_model
    from labeldp.v1 import delivery_pb2 as pb
    from labels_party.storage.db import sqlite_url
    from tests.support.servers import features_server_thread, features_tenant_key

    data = tmp_path / "labels"
    data.mkdir()
    labels_settings = LabelsSettings(data_dir=data, database_url=sqlite_url(data), allow_plaintext=True)
    features_settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    features_key = features_tenant_key(features_settings, "pub")
    with labels_server_thread(labels_settings) as lbase, features_server_thread(features_settings) as fbase:
        p = Party(lbase, sqlite_url(data), data)
        p.set_delta("1e-6")
        a, f = p.client, httpx.Client(base_url=fbase, headers={"Authorization": f"Bearer {features_key}"})
        advertiser, publisher = a.get("/v1/identity").json(), f.get("/v1/identity").json()
        f.post(
            "/v1/senders", json={"id": advertiser["party_id"], "public_key_pem": advertiser["public_key_pem"]}
        )
        address = f"127.0.0.1:{publisher['grpc_port']}"
        a.post("/v1/recipients", json={"name": "publisher", "grpc_address": address}).raise_for_status()
        labels, features = synthetic()
        ds = a.post("/v1/datasets", json=SPEC).json()["id"]
        put = a.put(
            f"/v1/datasets/{ds}/labels",
            content=parquet(labels),
            headers={"Content-Type": "application/vnd.apache.parquet"},
        )
        assert put.status_code == 200, put.text
        rid = a.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 3.0, "recipient": "publisher"},
            headers={"Idempotency-Key": "r"},
        ).json()["id"]
        assert a.post(f"/v1/releases/{rid}/deliveries").json()["outcome"] == "delivered"
        # the publisher declares which of its columns are non-sensitive and exports only those
        table = features.append_column("secret_score", pa.array(np.arange(N, dtype=np.float64)))
        ptype = {"Content-Type": "application/vnd.apache.parquet"}
        bad = f.put(
            "/v1/feature-tables/clicks",
            params={"non_sensitive": "hour,nope"},
            content=parquet(table),
            headers=ptype,
        )
        assert bad.status_code == 422 and bad.json()["type"] == "unknown-column"
        assert (
            f.put("/v1/feature-tables/undeclared", content=parquet(table), headers=ptype).status_code == 201
        )
        none = f.get("/v1/feature-tables/undeclared/non-sensitive-rows", params={"release_id": rid})
        assert none.status_code == 409 and none.json()["type"] == "no-non-sensitive-columns"
        made = f.put(
            "/v1/feature-tables/clicks",
            params={"non_sensitive": "hour,device"},
            content=parquet(table),
            headers=ptype,
        )
        assert made.status_code == 201 and made.json()["non_sensitive"] == ["hour", "device"]
        exported = f.get("/v1/feature-tables/clicks/non-sensitive-rows", params={"release_id": rid})
        assert exported.status_code == 200
        rows = pq.read_table(io.BytesIO(exported.content))
        assert rows.column_names == ["example_id", "hour", "device"] and rows.num_rows == N  # no secret_score
        put = a.put(f"/v1/datasets/{ds}/non-sensitive-features", content=exported.content, headers=ptype)
        assert put.status_code == 200, put.text
        mid = a.post(
            f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m"}
        ).json()["id"]
        sent = a.post(f"/v1/semi-sensitive-models/{mid}/deliveries")
        assert sent.status_code == 200 and sent.json()["outcome"] == "delivered", sent.text
        again = a.post(f"/v1/semi-sensitive-models/{mid}/deliveries")  # the same bytes: the same receipt
        assert again.status_code == 200
        listed = f.get("/v1/semi-sensitive-models").json()["items"]
        assert [m["model_id"] for m in listed] == [mid]
        got = f.get(f"/v1/semi-sensitive-models/{mid}").json()
        assert got["guarantee"]["epsilon_dpsgd"] == 2.0 and got["guarantee"]["delta"] == 1e-7
        assert got["guarantee"]["label_release_id"] == rid and got["guarantee"]["adjacency"] == "replace-one"
        artifact = f.get(f"/v1/semi-sensitive-models/{mid}/artifact").content
        assert artifact == a.get(f"/v1/semi-sensitive-models/{mid}/message").content

        def send(envelope: bytes) -> grpc.StatusCode:
            with grpc.insecure_channel(address) as channel:
                call = channel.unary_unary(
                    "/labeldp.v1.FeaturesParty/DeliverModel",
                    request_serializer=pb.SignedModel.SerializeToString,
                    response_deserializer=pb.ModelReceipt.FromString,
                )
                try:
                    call(pb.SignedModel(envelope=envelope), timeout=30)
                except grpc.RpcError as exc:
                    return exc.code()
                return grpc.StatusCode.OK

        envelope = json.loads(artifact)
        body64 = envelope["payload"]
        tampered = dict(envelope, payload=body64[:40] + ("A" if body64[40] != "A" else "B") + body64[41:])
        assert send(json.dumps(tampered).encode()) == grpc.StatusCode.UNAUTHENTICATED
        assert send(b"\xff\x00garbage") == grpc.StatusCode.INVALID_ARGUMENT
        F = ("--url", fbase, "--api-key", features_key)
        L = ("--url", lbase, "--api-key", a.headers["Authorization"].removeprefix("Bearer "))
        cli_ok = CliRunner()
        out = cli_ok.invoke(app, ["labels", "semi-sensitive-models", "deliver", mid, *L])
        assert out.exit_code == 0 and "delivered" in out.stdout, out.stdout + out.stderr
        shown = cli_ok.invoke(app, ["features", "semi-sensitive-models", "show", mid, *F])
        assert shown.exit_code == 0 and "ε₂ = 2, δ = 1e-07 (DP-SGD), replace-one" in shown.stdout
        listed_cli = cli_ok.invoke(app, ["features", "semi-sensitive-models", "list", "--json", *F])
        assert json.loads(listed_cli.stdout)[0]["model_id"] == mid
        rows_file = tmp_path / "rows.parquet"
        exported_cli = cli_ok.invoke(
            app,
            [
                "features",
                "non-sensitive-rows",
                "--table",
                "clicks",
                "--release",
                rid,
                "-o",
                str(rows_file),
                *F,
            ],
        )
        assert exported_cli.exit_code == 0 and pq.read_table(rows_file).equals(rows)
        got_file = tmp_path / "artifact.json"
        done = cli_ok.invoke(
            app, ["features", "semi-sensitive-models", "download", mid, "-o", str(got_file), *F]
        )
        assert done.exit_code == 0 and got_file.read_bytes() == artifact
        payload = ModelPayload.model_validate_json(base64.b64decode(body64))
        stranger = Identity.generate()  # signs well, but nobody pinned it
        forged = payload.model_copy(
            update={"model_id": "00000000-0000-4000-8000-000000000001", "sender_key_id": stranger.key_id}
        )
        assert send(sign_model(forged, stranger)) == grpc.StatusCode.UNAUTHENTICATED
        # the advertiser's own key, addressed elsewhere or expired: refused too
        signer = Identity.load_or_create(labels_settings.identity_path())
        elsewhere = payload.model_copy(
            update={"model_id": "00000000-0000-4000-8000-000000000002", "recipient_id": "someone-else"}
        )
        assert send(sign_model(elsewhere, signer)) == grpc.StatusCode.PERMISSION_DENIED
        expired = payload.model_copy(
            update={"model_id": "00000000-0000-4000-8000-000000000003", "expires_at_unix_ms": 1}
        )
        assert send(sign_model(expired, signer)) == grpc.StatusCode.FAILED_PRECONDITION
        changed = payload.model_copy(update={"created_at_unix_ms": payload.created_at_unix_ms + 1})
        assert send(sign_model(changed, signer)) == grpc.StatusCode.ALREADY_EXISTS  # same id, other bytes
        assert [m["model_id"] for m in f.get("/v1/semi-sensitive-models").json()["items"]] == [mid]
        assert f.get("/v1/semi-sensitive-models/not-a-uuid").status_code == 404


def test_a_user_level_label_release_gives_a_user_level_model(party: Party) -> None:
    """After a user-level release (τ kept examples per user), DP-SGD trains on the kept examples only;
    every user pays τ·ε₂ more, the tenant pays the group-privacy δ, and the guarantee says so."""
    party.set_delta("1e-6")
    c = party.client
    labels, features = synthetic()
    users = pa.array([f"user-{i // 4}" for i in range(N)])  # 300 users with 4 clicks each
    labels = labels.add_column(2, "user_id", users)
    assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json=SPEC).json()["id"]
    ptype = {"Content-Type": "application/vnd.apache.parquet"}
    assert c.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
    put = c.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
    assert put.status_code == 200
    made = c.post(
        f"/v1/datasets/{ds}/releases",
        headers={"Idempotency-Key": "u"},
        json={
            "privacy_unit": "user",
            "epsilon_user": 3.0,
            "contribution_bound": 2,
            "recipient": "publisher",
            "loss": "zero_one",
        },
    )
    assert made.status_code == 201, made.text
    rid = made.json()["id"]
    model = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models",
        json=body(rid, batch_size=100),
        headers={"Idempotency-Key": "m"},
    )
    assert model.status_code == 201, model.text
    assert model.json()["examples"] == 600  # τ = 2 of each user's 4 clicks
    raw = c.get(f"/v1/semi-sensitive-models/{model.json()['id']}/message").content
    payload = json.loads(base64.b64decode(json.loads(raw)["payload"]))
    g = payload["guarantee"]
    delta_tau = 1e-7 * (1 + np.exp(2.0))
    assert g["unit"] == "user" and g["contribution_bound"] == 2 and g["epsilon_user"] == 3.0 + 2 * 2.0
    assert g["delta_user"] == pytest.approx(delta_tau, rel=1e-12) and g["delta_user"] >= delta_tau
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon_user": 1}).json()
    assert budget["users"]["spent"]["max"] == 7.0 and budget["users"]["spent"]["p50"] == 7.0
    assert budget["delta_spent"] == pytest.approx(delta_tau, rel=1e-9)


def users_dataset(p: Party, clicks_per_user: int, key: str, **release: Any) -> tuple[str, str]:
    """Labels (with the non-sensitive rows) whose users have ``clicks_per_user`` clicks each, and a
    label release of them (example level unless ``release`` says otherwise)."""
    c = p.client
    labels, features = synthetic()
    users = pa.array([f"user-{i // clicks_per_user}" for i in range(N)])
    labels = labels.add_column(2, "user_id", users)
    if c.get("/v1/recipients").json()["items"] == []:
        assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json={**SPEC, "name": f"purchases-{key}"}).json()["id"]
    ptype = {"Content-Type": "application/vnd.apache.parquet"}
    assert c.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
    put = c.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
    assert put.status_code == 200
    made = c.post(
        f"/v1/datasets/{ds}/releases",
        headers={"Idempotency-Key": f"release-{key}"},
        json={"recipient": "publisher", **(release or {"epsilon": 1.0})},
    )
    assert made.status_code == 201, made.text
    return ds, made.json()["id"]


def test_with_a_per_user_budget_the_delta_charged_is_every_users_group_privacy_delta(party: Party) -> None:
    """An example-level model costs a user with c training examples (c·ε₂, δ·Σ_{i<c} e^{iε₂}) by group
    privacy; with a per-user budget the tenant's δ counter takes that δ, so that it bounds every user's
    δ as the per-user ledger bounds their ε. A δ that would not be below 1 is refused (422) before
    anything is charged; without a per-user budget the counter takes δ (per example)."""
    party.set_delta("0.5")
    c = party.client
    ds, rid = users_dataset(party, 4, "plain")
    plain = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "a"}
    )
    assert plain.status_code == 201, plain.text
    assert [e["delta"] for e in c.get("/v1/ledger").json()["items"] if e["delta"]][-1] == 1e-7
    set_user_budget_of(party, "100")
    ds, rid = users_dataset(party, 4, "grouped")
    grouped = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "b"}
    )
    assert grouped.status_code == 201, grouped.text
    expected = 1e-7 * sum(np.exp(i * 2.0) for i in range(4))
    assert (
        grouped.json()["delta"] == pytest.approx(expected, rel=1e-9) and grouped.json()["delta"] >= expected
    )
    entry = [e for e in c.get("/v1/ledger").json()["items"] if e["delta"] and e["kind"] == "charge"][-1]
    assert entry["delta"] == pytest.approx(expected, rel=1e-9) and entry["user_epsilon"] == 8.0
    ds, rid = users_dataset(party, 60, "vacuous")  # 60 examples of a user at ε₂ = 2: δ·e^118 > 1
    before = c.get("/v1/ledger").json()["items"]
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "c"}
    )
    assert refused.status_code == 422 and refused.json()["type"] == "user-delta-too-large", refused.text
    assert c.get("/v1/ledger").json()["items"] == before
    assert len(party.rows(SemiSensitiveModel)) == 2  # nothing left of the refused one


def test_a_user_level_run_whose_group_delta_is_not_below_one_is_refused_before_anything(party: Party) -> None:
    party.set_delta("0.5")
    c = party.client
    ds, rid = users_dataset(
        party, 40, "tau", privacy_unit="user", epsilon_user=3.0, contribution_bound=40, loss="zero_one"
    )
    before = len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"])
    refused = c.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "t"}
    )
    assert refused.status_code == 422 and refused.json()["type"] == "invalid-parameter", refused.text
    assert "group-privacy δ" in refused.json()["detail"]
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == before
    assert party.rows(SemiSensitiveModel) == []


def set_user_budget_of(p: Party, budget: str) -> None:
    from labels_party.budget.epsilon import to_micro_floor
    from labels_party.budget.ledger import set_user_budget

    engine = make_engine(p.database_url)
    with session_factory(engine).begin() as s:
        set_user_budget(s, p.tenant_id, to_micro_floor(budget), api_key_id=None, note="test")
    engine.dispose()


@pytest.mark.slow
def test_concurrent_models_answer_without_a_server_error(party: Party) -> None:
    """Plans and σ calibrations (seconds each) run outside any transaction and the write transaction
    holds only the charge: 20 concurrent (ε, δ) requests on SQLite (8 on PostgreSQL) on one tenant,
    whose budget admits three, answer 201 three times and 409 for the rest — never 5xx (before: 11 ×
    500 "database is locked" on SQLite after 61–73 s)."""
    party.set_delta("1e-6")
    ds, rid = prepared(party)  # ε = 3 spent; 10 per example: three models at ε₂ ≈ 2 fit
    c = party.client
    n = 20 if party.database_url.startswith("sqlite") else 8
    start = threading.Barrier(n)
    results: list[httpx.Response | None] = [None] * n

    def run(i: int) -> None:
        start.wait()
        with httpx.Client(base_url=str(c.base_url), headers=c.headers, timeout=600) as own:
            results[i] = own.post(  # a σ calibration of its own each: ε₂ = 2.000, 2.001, …
                f"/v1/datasets/{ds}/semi-sensitive-models",
                json=body(rid, epochs=1, epsilon_dpsgd=2.0 + i / 1000),
                headers={"Idempotency-Key": f"m{i}"},
            )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results if r is not None)
    errors = [r.text for r in results if r is not None and r.status_code >= 500]
    assert codes == [201] * 3 + [409] * (n - 3), errors
    models = party.rows(SemiSensitiveModel)
    assert len(models) == 3 and all(m.status == "complete" for m in models)
    spent = c.get(f"/v1/datasets/{ds}/budget").json()
    charged = 3.0 + sum(m.epsilon_dpsgd_micro for m in models) / 1e6
    assert spent["max_spent"] == spent["min_spent"] == pytest.approx(charged, abs=1e-9)
    assert charged <= 10 and spent["delta_spent"] == pytest.approx(3e-7)


def test_the_stored_noise_spends_no_more_than_was_charged_by_two_other_accountants(party: Party) -> None:
    """Recompute ε from the σ, q and T the model states (REST and its signed guarantee), with
    accountants the service does not call: a PLD accountant built here (replace-one, the service's
    adjacency) must give at most the charged ε₂, and Opacus's PRV accountant for add/remove adjacency
    — which replace-one contains, so its ε can only be smaller — too. Halving σ after calibration
    (ε ≈ 4.6 for a charged 2.0) fails both."""
    import dp_accounting
    from opacus.accountants import PRVAccountant

    party.set_delta("1e-6")
    ds, rid = prepared(party)
    made = party.client.post(
        f"/v1/datasets/{ds}/semi-sensitive-models", json=body(rid), headers={"Idempotency-Key": "m"}
    )
    assert made.status_code == 201, made.text
    model = made.json()
    raw = party.client.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    g = json.loads(base64.b64decode(json.loads(raw)["payload"]))["guarantee"]
    sigma, q, steps = model["noise_multiplier"], model["sampling_rate"], model["steps"]
    assert (g["noise_multiplier"], g["sampling_rate"], g["steps"]) == (sigma, q, steps)
    charged = [e for e in party.client.get("/v1/ledger").json()["items"] if e["delta"]][-1]
    epsilon, delta = charged["epsilon"], charged["delta"]
    assert (epsilon, delta) == (2.0, 1e-7)
    pld = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    pld.compose(step, steps)
    assert pld.get_epsilon(delta) <= epsilon * (1 + 1e-6)
    prv = PRVAccountant()
    prv.history = [(sigma, q, steps)]
    assert prv.get_epsilon(delta) <= epsilon


def test_dpsgd_alone_needs_no_label_release_and_says_so_in_its_guarantee(party: Party) -> None:
    """Where the public plan skips the label phase, the model is DP-SGD alone on every labelled example:
    one (ε₂, δ) charge, addressed to the named recipient, with ε₁ = 0 and no release in its guarantee."""
    party.set_delta("1e-6")
    ds = prepared_dataset(party)
    c = party.client
    alone = {"recipient": "publisher", "epsilon_dpsgd": 2.0, "delta": 1e-7, "epochs": 2, "batch_size": 200}

    def post(payload: dict[str, Any], key: str) -> httpx.Response:
        return c.post(
            f"/v1/datasets/{ds}/semi-sensitive-models", json=payload, headers={"Idempotency-Key": key}
        )

    for idem, bad, code in (
        ("b1", {**alone, "label_release_id": "x"}, "invalid-request"),  # both sources
        ("b2", {k: v for k, v in alone.items() if k != "recipient"}, "invalid-request"),  # neither
        ("b3", {**alone, "recipient": "stranger"}, "unknown-recipient"),
    ):
        r = post(bad, idem)
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"] == code, r.text
    assert party.rows(SemiSensitiveModel) == [] and not [
        e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"
    ]
    made = post(alone, "alone")
    assert made.status_code == 201, made.text
    model = made.json()
    assert model["status"] == "complete" and model["label_release_id"] is None and model["examples"] == N
    charges = [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
    assert [(e["epsilon"], e["delta"], e["examples"]) for e in charges] == [(2.0, 1e-7, N)]
    raw = c.get(f"/v1/semi-sensitive-models/{model['id']}/message").content
    identity = c.get("/v1/identity").json()
    key = load_public_key(identity["public_key_pem"])
    payload = verify_model(
        raw, lambda s, k: key if (s, k) == (identity["party_id"], identity["key_id"]) else None
    )
    g = payload.guarantee
    assert (g.epsilon_labels, g.label_release_id, g.epsilon_dpsgd, g.epsilon_total) == (0.0, None, 2.0, 2.0)
    assert payload.recipient_id == "publisher"
    assert post(alone, "alone").json()["id"] == model["id"]  # a replay
    assert len([e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]) == 1


def test_the_plan_is_free_and_is_the_documented_rule(party: Party) -> None:
    """``:plan`` answers the public rule for the dataset's labelled examples: the label phase exactly
    when the paper's split leaves DP-SGD a step noise σ/B at most the threshold; never more than ε;
    refused values are problem+json; nothing is charged or stored."""
    ds = prepared_dataset(party)
    c = party.client
    url = f"/v1/datasets/{ds}/semi-sensitive-models:plan"
    small = c.post(url, json={"epsilon": 1.0, "delta": 1e-7, "batch_size": 200, "epochs": 2})
    large = c.post(url, json={"epsilon": 20.0, "delta": 1e-7, "batch_size": 1000, "epochs": 2})
    for r, eps in ((small, 1.0), (large, 20.0)):
        assert r.status_code == 200, r.text
        plan = r.json()
        assert plan["examples"] == N
        assert plan["label_phase"] is (plan["split_step_noise"] <= plan["max_step_noise"])
        assert plan["epsilon_labels"] + plan["epsilon_dpsgd"] <= eps
        if not plan["label_phase"]:
            assert (plan["epsilon_labels"], plan["epsilon_dpsgd"]) == (0.0, eps)
        else:
            assert (plan["epsilon_labels"], plan["epsilon_dpsgd"]) == (
                min(0.6 * eps, 3.0),
                eps - min(0.6 * eps, 3.0),
            )
    assert small.json()["label_phase"] is False and large.json()["label_phase"] is True
    for bad in (
        {"epsilon": -1, "delta": 1e-7},
        {"epsilon": 1.0, "delta": 0.5},
        {"epsilon": "1", "delta": 1e-7},
    ):
        r = c.post(url, json=bad)
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    weeks = c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    r = c.post(f"/v1/datasets/{weeks}/semi-sensitive-models:plan", json={"epsilon": 1.0, "delta": 1e-7})
    assert r.status_code == 422 and r.json()["type"] == "not-semi-sensitive"
    assert party.rows(SemiSensitiveModel) == []
    assert not [e for e in c.get("/v1/ledger").json()["items"] if e["kind"] == "charge"]
