"""Hostile input against the labels party's real HTTP API, on SQLite and PostgreSQL: every request
below gets a 4xx problem+json, charges nothing, leaves no partial state, and the service stays up."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.labels_api import Api, charges, csv, dataset, problem, release, upload, with_recipient

PARQUET = "application/vnd.apache.parquet"


def parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def still_up(api: Api, c: httpx.Client, ds: str, before: dict[str, Any]) -> None:
    assert httpx.get(f"{api.base}/healthz").status_code == 200
    assert c.get(f"/v1/datasets/{ds}").json() == before  # nothing stored
    assert charges(c) == []


def test_a_deeply_nested_ndjson_value_is_refused_without_crashing(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    deep = b'{"example_id": "a", "label": 1, "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}\n"
    assert len(deep) < 64 * 1024
    problem(upload(c, ds, deep, "application/x-ndjson"), 422, "unparseable-upload")
    long_line = b'{"example_id": "a", "label": 1, "pad": "' + b"x" * 70_000 + b'"}\n'
    problem(upload(c, ds, long_line, "application/x-ndjson"), 422, "unparseable-upload")
    for line in (
        b'{"example_id": {"a": 1}, "label": 1}\n',
        b'{"example_id": ["a"], "label": 1}\n',
        b"[1, 2]\n",
    ):
        problem(upload(c, ds, line, "application/x-ndjson"), 422, "unparseable-upload")
    still_up(api, c, ds, before)
    ok = upload(
        c, ds, b'{"example_id": "a", "label": 3}\n{"example_id": 7, "label": true}\n', "application/x-ndjson"
    )
    assert ok.status_code == 200 and ok.json()["rows"] == 2


@pytest.mark.parametrize(
    ("table", "code"),
    [
        (pa.table({"example_id": pa.array([b"a", b"b"], pa.binary()), "label": [1, 2]}), "wrong-column-type"),
        (pa.table({"example_id": [["a"], ["b"]], "label": [1, 2]}), "wrong-column-type"),
        (pa.table({"example_id": [{"x": 1}, {"x": 2}], "label": [1, 2]}), "wrong-column-type"),
        (
            pa.table({"example_id": ["a", "b"], "label": [1, 2], "user_id": pa.array([b"u", b"v"])}),
            "wrong-column-type",
        ),
        (pa.table({"example_id": ["a"], "label": pa.array([2**64 - 1], pa.uint64())}), "out-of-bounds"),
        (pa.table({"example_id": ["a"], "label": [[1.0]]}), "wrong-column-type"),
        (pa.table({"example_id": ["a" * 300], "label": [1]}), "example-id-too-long"),
        (pa.table({"example_id": ["a\x00b"], "label": [1]}), "invalid-example-id"),
    ],
)
def test_parquet_columns_of_the_wrong_kind_are_refused(api: Api, table: pa.Table, code: str) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    problem(upload(c, ds, parquet(table), PARQUET), 422, code)
    still_up(api, c, ds, before)


def test_text_that_is_not_utf8_is_refused(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    problem(upload(c, ds, b"example_id,lab\xe9l\na,1\n"), 422, "unparseable-upload")
    problem(upload(c, ds, b"example_id,label\n\xff\xfe,1\n"), 422, "unparseable-upload")
    raw = parquet(
        pa.table(
            {
                "example_id": pa.array([b"ok", b"\xff\xfe"], pa.binary()).cast(pa.string(), safe=False),
                "label": [1, 2],
            }
        )
    )
    problem(upload(c, ds, raw, PARQUET), 422, "unparseable-upload")
    still_up(api, c, ds, before)


def test_one_huge_example_id_is_refused_at_upload(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    body = b"example_id,label\n" + b"x" * (12 * 2**20) + b",1\n"
    problem(upload(c, ds, body), 422, "row-too-long")  # longer than a read block: refused as a row
    body = b"example_id,label\n" + b"x" * (2**20) + b",1\n"
    problem(upload(c, ds, body), 422, "example-id-too-long")
    problem(upload(c, ds, b"example_id\n" + b"y" * 300 + b"\n", what="universe"), 422, "example-id-too-long")
    still_up(api, c, ds, before)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"epsilon": 1e-300}, "invalid-request"),
        ({"epsilon": 5e-324}, "invalid-request"),
        ({"epsilon": 60}, "invalid-request"),
        ({"epsilon": 1.0, "epsilon_prior": 1e-300}, "invalid-request"),
        ({"epsilon": 1.0, "epsilon_prior": 1.0}, "invalid-epsilon"),
        ({"epsilon": 1.0, "recipient": "pub\x00lisher"}, "invalid-request"),
        ({"epsilon": 1.0, "example_ids": []}, "invalid-request"),
        ({"epsilon": 1.0, "example_ids": ["a\x00"]}, "invalid-request"),
    ],
)
def test_release_parameters_out_of_range_charge_nothing(api: Api, body: dict[str, Any], code: str) -> None:
    c = with_recipient(api.tenant("acme", "100"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", i % 53) for i in range(200)]))
    problem(release(c, ds, "k", **body), 422, code)
    assert charges(c) == [] and c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []
    assert not (api.data_dir / "releases").exists() or not any((api.data_dir / "releases").iterdir())


def test_the_largest_allowed_epsilon_works_on_every_loss(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "1000"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(500)]))
    for i, loss in enumerate(("squared", "absolute", "poisson")):
        r = release(
            c, ds, f"max-{loss}", epsilon=30, loss=loss, example_ids=[f"e{j}" for j in range(i, 500, 3)]
        )
        assert r.status_code == 201 and r.json()["status"] == "complete", r.text


def test_names_and_queries_that_would_break_sql_are_refused(api: Api) -> None:
    c = api.tenant("acme")
    problem(
        c.post("/v1/datasets", json={"name": "we\x00ks", "label_type": "count", "lo": 0, "hi": 5}),
        422,
        "invalid-request",
    )
    problem(c.post("/v1/recipients", json={"name": "pub\x00"}), 422, "invalid-request")
    problem(c.post("/v1/recipients", json={"name": "p", "tls_ca_pem": "\x00"}), 422, "invalid-request")
    problem(c.get("/v1/datasets/a%00b"), 404, "not-found")
    ds = dataset(c)
    problem(c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": "inf"}), 422, "invalid-request")
    problem(c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": "nan"}), 422, "invalid-request")
    problem(c.get("/v1/ledger", params={"offset": 2**63}), 422, "invalid-request")
    problem(
        c.post("/v1/datasets", json={"name": "x", "label_type": "count", "lo": 0, "hi": 2e8}),
        422,
        "invalid-request",
    )
    problem(
        c.post("/v1/datasets", json={"name": "x", "label_type": "count", "lo": 0, "hi": 1e13}),
        422,
        "invalid-request",
    )
    assert httpx.get(f"{api.base}/healthz").status_code == 200


def test_dataset_names_are_unique_per_tenant(api: Api) -> None:
    c = api.tenant("acme")
    dataset(c, "weeks")
    problem(
        c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 5}),
        409,
        "dataset-exists",
    )
    other = api.tenant("other")
    dataset(other, "weeks")  # another tenant may use the name
    assert [d["name"] for d in c.get("/v1/datasets").json()["items"]] == ["weeks"]


def test_oversized_json_bodies_are_refused_before_parsing(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    body = json.dumps(
        {"epsilon": 1, "recipient": "publisher", "example_ids": ["x" * 60] * 1_200_000}
    ).encode()
    assert len(body) > 64 * 2**20
    r = c.post(
        f"/v1/datasets/{ds}/releases",
        content=body,
        headers={"Content-Type": "application/json", "Idempotency-Key": "big"},
    )
    problem(r, 413, "payload-too-large")
    assert charges(c) == []


def test_timestamps_are_timezone_aware_utc(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    rel = release(c, ds, "t").json()
    stamps = [
        c.get(f"/v1/datasets/{ds}").json()["created_at"],
        c.get(f"/v1/releases/{rel['id']}").json()["created_at"],
        c.get(f"/v1/releases/{rel['id']}").json()["completed_at"],
        c.get("/v1/ledger").json()["items"][-1]["created_at"],
        c.get("/v1/recipients").json()["items"][0]["created_at"],
    ]
    assert all(s.endswith(("+00:00", "Z")) for s in stamps), stamps
