"""A model trained with semi-sensitive features end to end: from the CLI, and its signed message
delivered to the features party, verified there with its guarantee and refused when tampered with."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")  # the dpsgd extra; `make test` installs it

from labels_party.config import LabelsSettings
from tests.support.semi_sensitive_models import SPEC, N, Party, body, parquet, synthetic
from tests.support.servers import labels_server_thread


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


def test_a_dpsgd_alone_model_is_delivered_end_to_end(tmp_path: Path) -> None:
    """A model of DP-SGD alone (no label release, ε₁ = 0) is charged, trained, delivered over gRPC and
    stored by the features party with its guarantee — refused there before (``epsilon_labels must be
    finite, > 0`` and a label release required), so such a model could never be delivered."""
    from typer.testing import CliRunner

    from features_party.config import FeaturesSettings
    from labeldp.cli import app
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
        a = p.client
        f = httpx.Client(base_url=fbase, headers={"Authorization": f"Bearer {features_key}"})
        advertiser, publisher = a.get("/v1/identity").json(), f.get("/v1/identity").json()
        f.post(
            "/v1/senders", json={"id": advertiser["party_id"], "public_key_pem": advertiser["public_key_pem"]}
        ).raise_for_status()
        address = f"127.0.0.1:{publisher['grpc_port']}"
        a.post("/v1/recipients", json={"name": "publisher", "grpc_address": address}).raise_for_status()
        labels, features = synthetic()
        ds = a.post("/v1/datasets", json=SPEC).json()["id"]
        ptype = {"Content-Type": "application/vnd.apache.parquet"}
        assert a.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
        put = a.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
        assert put.status_code == 200
        alone = {
            "recipient": "publisher",
            "epsilon_dpsgd": 0.3,
            "delta": 1e-9,
            "epochs": 1,
            "batch_size": 200,
        }
        made = a.post(
            f"/v1/datasets/{ds}/semi-sensitive-models", json=alone, headers={"Idempotency-Key": "m"}
        )
        assert made.status_code == 201 and made.json()["label_release_id"] is None, made.text
        mid = made.json()["id"]
        sent = a.post(f"/v1/semi-sensitive-models/{mid}/deliveries")
        assert sent.status_code == 200 and sent.json()["outcome"] == "delivered", sent.text
        got = f.get(f"/v1/semi-sensitive-models/{mid}").json()
        g = got["guarantee"]
        assert (g["epsilon_labels"], g["label_release_id"], g["epsilon_dpsgd"], g["delta"]) == (
            0.0,
            None,
            0.3,
            1e-9,
        )
        assert got["label_release_id"] is None
        assert (
            f.get(f"/v1/semi-sensitive-models/{mid}/artifact").content
            == a.get(f"/v1/semi-sensitive-models/{mid}/message").content
        )
        shown = CliRunner().invoke(
            app, ["features", "semi-sensitive-models", "show", mid, "--url", fbase, "--api-key", features_key]
        )
        assert shown.exit_code == 0 and "no label phase, ε₂ = 0.3, δ = 1e-09 (DP-SGD)" in shown.stdout
