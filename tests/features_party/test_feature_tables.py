"""Feature tables and the join report over real HTTP (features party, SQLite)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.wire.sender import build_frames
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER, release
from tests.support.servers import features_server_thread, features_tenant_key


@dataclass
class Features:
    settings: FeaturesSettings
    base: str

    def client(self, tenant: str) -> httpx.Client:
        key = features_tenant_key(self.settings, tenant)
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture
def features(tmp_path: Path) -> Iterator[Features]:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    with features_server_thread(settings) as base:
        yield Features(settings, base)


def put(c: httpx.Client, name: str, body: bytes, ctype: str = "text/csv", **params: str) -> httpx.Response:
    return c.put(f"/v1/feature-tables/{name}", content=body, headers={"Content-Type": ctype}, params=params)


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["type"] == code
    return body


CSV = b"example_id,age,income,device\ne1,30,1000.5,ios\ne2,41,,android\ne3,25,300,ios\n"


def test_schema_is_inferred_overridable_and_versions_replace(features: Features) -> None:
    c = features.client("ml")
    r = put(c, "users", CSV)
    assert r.status_code == 201, r.text
    assert r.json()["schema"] == {"age": "numeric", "income": "numeric", "device": "categorical"}
    r = put(c, "users", CSV, categorical="age")
    assert r.status_code == 200 and r.json()["version"] == 2 and r.json()["schema"]["age"] == "categorical"
    buf = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "example_id": ["a", "b"],
                "color": pa.array(["red", "blue"]).dictionary_encode(),
                "x": [1.0, 2.0],
            }
        ),
        buf,
    )
    r = put(c, "colors", buf.getvalue(), "application/vnd.apache.parquet")
    assert r.status_code == 201 and r.json()["schema"] == {"color": "categorical", "x": "numeric"}
    assert [t["name"] for t in c.get("/v1/feature-tables").json()["items"]] == ["colors", "users"]
    first = c.get("/v1/feature-tables", params={"limit": 1}).json()
    assert [t["name"] for t in first["items"]] == ["colors"] and first["next_offset"] == 1
    second = c.get(first["next"]).json()
    assert [t["name"] for t in second["items"]] == ["users"] and second["next"] is None


@pytest.mark.parametrize(
    ("body", "params", "code", "rows", "columns"),
    [
        (b"id,age\ne1,3\n", {}, "missing-column", [], ["example_id"]),
        (b"example_id,age\ne1,3\ne2,4\ne1,5\n", {}, "duplicate-example-id", [1, 3], ["example_id"]),
        (b"example_id,age\n,3\n", {}, "missing-example-id", [1], ["example_id"]),
        (b"example_id,device\ne1,ios\ne2,3\n", {"numeric": "device"}, "unparseable-column", [1], ["device"]),
        (b"example_id,age\ne1,3\n", {"numeric": "nope"}, "unknown-column", [], ["nope"]),
        (b"example_id\ne1\n", {}, "no-features", [], []),
        (b"a,b\n1\n", {}, "unparseable-upload", [1], []),
        (b"example_id;age\ne1;3\n", {}, "missing-column", [], ["example_id"]),
    ],
)
def test_bad_tables_are_rejected_and_store_nothing(
    features: Features, body: bytes, params: dict[str, str], code: str, rows: list[int], columns: list[str]
) -> None:
    c = features.client("ml")
    assert put(c, "users", CSV).status_code == 201
    before = c.get("/v1/feature-tables/users").json()
    got = problem(put(c, "users", body, **params), 422, code)
    assert got["rows"] == rows and got["columns"] == columns
    assert c.get("/v1/feature-tables/users").json() == before
    problem(put(c, "fresh", body, **params), 422, code)
    problem(c.get("/v1/feature-tables/fresh"), 404, "not-found")


def test_a_parse_error_names_its_data_row_and_no_value_past_the_first_block(features: Features) -> None:
    """A row past the first 4 MiB (read by threads, which do not number rows) is still named as a data
    row counted from 1 after the header, like every other check, and its values are not shown."""
    c = features.client("ml")
    head = b"example_id,age\n" + b"".join(b"e%07d,3\n" % i for i in range(500_000))  # 6 MB
    got = problem(put(c, "users", head + b"e-x,4,secret\n"), 422, "unparseable-upload")
    assert got["rows"] == [500_001] and "secret" not in str(got) and "e-x" not in str(got)
    dup = problem(put(c, "users", head + b"e0000000,4\n"), 422, "duplicate-example-id")
    assert dup["rows"] == [1, 500_001]


def test_other_requests_errors(features: Features) -> None:
    c = features.client("ml")
    problem(put(c, "users", CSV, "text/plain"), 415, "unsupported-media-type")
    problem(put(c, "users", CSV, categorical="age", numeric="age"), 422, "conflicting-overrides")
    problem(httpx.put(f"{features.base}/v1/feature-tables/users", content=CSV), 401, "unauthenticated")


def test_join_report_and_tenant_isolation(features: Features) -> None:
    c = features.client("ml")
    other = features.client("other-team")
    sender = Identity.generate()
    c.post(
        "/v1/senders", json={"id": SENDER, "public_key_pem": public_key_pem(sender.public_key)}
    ).raise_for_status()
    rel = release([f"e{i}" for i in range(1000)])
    port = c.get("/v1/identity").json()["grpc_port"]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        pb_grpc.FeaturesPartyStub(channel).DeliverRelease(iter(build_frames(rel, sender)))  # type: ignore[no-untyped-call]
    rows = "example_id,f\n" + "".join(f"e{i},{i}\n" for i in range(500, 1700))
    assert put(c, "users", rows.encode()).status_code == 201
    r = c.post("/v1/joins", json={"release_id": rel.release_id, "feature_table": "users"})
    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["in_both"], report["only_in_release"], report["only_in_features"]) == (500, 500, 700)
    assert report["release_match_rate"] == 0.5 and abs(report["feature_match_rate"] - 500 / 1200) < 1e-12
    problem(
        other.post("/v1/joins", json={"release_id": rel.release_id, "feature_table": "users"}),
        404,
        "not-found",
    )
    problem(other.get("/v1/feature-tables/users"), 404, "not-found")
    assert other.get("/v1/feature-tables").json()["items"] == []
    problem(c.post("/v1/joins", json={"release_id": "nope", "feature_table": "users"}), 404, "not-found")


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("body", "ctype", "code"),
    [
        (b"example_id,ag\xe9\ne1,3\n", "text/csv", "unparseable-upload"),
        (b"example_id,city\ne1,\xff\xfe\n", "text/csv", "unparseable-upload"),
        (
            parquet_bytes(pa.table({"example_id": ["a", "b"], "x": [[1], [2]]})),
            "application/vnd.apache.parquet",
            "unparseable-column",
        ),
        (
            parquet_bytes(pa.table({"example_id": ["a", "b"], "x": [{"k": 1}, {"k": 2}]})),
            "application/vnd.apache.parquet",
            "unparseable-column",
        ),
        (
            parquet_bytes(pa.table({"example_id": ["a", "b"], "x": pa.array([b"1", b"2"], pa.binary())})),
            "application/vnd.apache.parquet",
            "unparseable-column",
        ),
        (
            parquet_bytes(pa.table({"example_id": pa.array([b"a", b"b"], pa.binary()), "x": [1, 2]})),
            "application/vnd.apache.parquet",
            "unparseable-column",
        ),
        (
            parquet_bytes(
                pa.table(
                    {
                        "example_id": ["a", "b"],
                        "c": pa.array([b"ok", b"\xff"], pa.binary()).cast(pa.string(), safe=False),
                    }
                )
            ),
            "application/vnd.apache.parquet",
            "unparseable-column",
        ),
        (b"example_id,x\n" + b"q" * 300 + b",1\n", "text/csv", "example-id-too-long"),
    ],
)
def test_hostile_tables_are_refused_and_store_nothing(
    features: Features, body: bytes, ctype: str, code: str
) -> None:
    c = features.client("ml")
    problem(put(c, "t", body, ctype), 422, code)
    assert c.get("/v1/feature-tables").json()["items"] == []
    assert httpx.get(f"{features.base}/healthz").status_code == 200


def test_uint64_features_are_numbers(features: Features) -> None:
    c = features.client("ml")
    table = pa.table({"example_id": ["a", "b"], "big": pa.array([2**64 - 1, 3], pa.uint64())})
    r = put(c, "big", parquet_bytes(table), "application/vnd.apache.parquet")
    assert r.status_code == 201 and r.json()["schema"] == {"big": "numeric"}


def test_table_names_are_bounded(features: Features) -> None:
    c = features.client("ml")
    problem(put(c, "x" * 201, CSV), 422, "invalid-request")
    problem(put(c, "bad%01name", CSV), 422, "invalid-request")
    problem(c.get("/v1/feature-tables/" + "x" * 201), 422, "invalid-request")
