"""Semi-sensitive feature columns uploaded with the labels, through the real REST API (SQLite and
PostgreSQL): declared up front, validated against their public bounds and categories, stored beside
the labels, and never part of a label release's message."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.labels_api import Api, problem, release, upload, with_recipient

SPEC: dict[str, Any] = {
    "label_type": "binary",
    "lo": 0,
    "hi": 1,
    "semi_sensitive": [
        {"name": "cart_adds", "kind": "number", "lo": 0, "hi": 100},
        {"name": "remarketing", "kind": "category", "categories": ["none", "shoes", "bags"]},
    ],
}
HEADER = "example_id,label,cart_adds,remarketing"


def body(*rows: str) -> bytes:
    return ("\n".join([HEADER, *rows]) + "\n").encode()


def stored(api: Api, ds: str) -> pa.Table:
    files = sorted((api.data_dir / "datasets" / ds).glob("labels-v*.parquet"))
    return pq.read_table(files[-1])


@pytest.mark.parametrize(
    ("column", "reason"),
    [
        ({"name": "label", "kind": "number", "lo": 0, "hi": 1}, "reserved"),
        ({"name": "Cart", "kind": "number", "lo": 0, "hi": 1}, "pattern"),
        ({"name": "x", "kind": "number", "lo": 1, "hi": 1}, "lo < hi"),
        ({"name": "x", "kind": "number", "lo": 0}, "needs lo and hi"),
        ({"name": "x", "kind": "category", "categories": []}, "needs categories"),
        ({"name": "x", "kind": "category", "categories": ["a", "a"]}, "distinct"),
        ({"name": "x", "kind": "category", "categories": ["a"], "lo": 0}, "no bounds"),
    ],
)
def test_bad_declarations_are_422(api: Api, column: dict[str, Any], reason: str) -> None:
    c = api.tenant("acme")
    resp = c.post("/v1/datasets", json={"name": "d", **SPEC, "semi_sensitive": [column]})
    assert reason in json.dumps(problem(resp, 422, "invalid-request"))
    twice = [SPEC["semi_sensitive"][0], SPEC["semi_sensitive"][0]]
    problem(
        c.post("/v1/datasets", json={"name": "d", **SPEC, "semi_sensitive": twice}), 422, "invalid-request"
    )
    assert c.get("/v1/datasets").json()["items"] == []


def test_columns_are_validated_and_stored_with_the_labels(api: Api) -> None:
    c = api.tenant("acme")
    ds = c.post("/v1/datasets", json={"name": "d", **SPEC}).json()["id"]
    ok = upload(c, ds, body("a,1,3,shoes", "b,0,0,none", "c,1,99.5,bags"))
    assert ok.status_code == 200, ok.text
    table = stored(api, ds)
    assert table.column("cart_adds").to_pylist() == [3.0, 0.0, 99.5]
    assert table.column("remarketing").to_pylist() == ["shoes", "none", "bags"]
    version = len(list((api.data_dir / "datasets" / ds).glob("labels-v*.parquet")))
    for rows, code, where in [
        (("d,1,101,none",), "invalid-semi-sensitive", [1]),  # above its public bound
        (("d,1,5,none", "e,0,-1,none"), "invalid-semi-sensitive", [2]),
        (("d,1,nan,none",), "invalid-semi-sensitive", [1]),
        (("d,1,5,hats",), "invalid-semi-sensitive", [1]),  # not a declared category
    ]:
        err = problem(upload(c, ds, body(*rows)), 422, code)
        assert err["rows"] == where
        assert "hats" not in err["detail"] and "101" not in err["detail"]  # never the values
    missing = upload(c, ds, b"example_id,label,cart_adds\nd,1,5\n")
    problem(missing, 422, "missing-column")
    # nothing changed by the refused uploads
    assert len(list((api.data_dir / "datasets" / ds).glob("labels-v*.parquet"))) == version
    # an upsert replaces the whole row, features included
    assert upload(c, ds, body("a,0,7,bags")).status_code == 200
    table = stored(api, ds).to_pylist()
    assert {r["example_id"]: (r["label"], r["cart_adds"], r["remarketing"]) for r in table} == {
        "a": (0.0, 7.0, "bags"),
        "b": (0.0, 0.0, "none"),
        "c": (1.0, 99.5, "bags"),
    }


def test_parquet_and_ndjson_uploads_carry_the_columns(api: Api) -> None:
    c = api.tenant("acme")
    ds = c.post("/v1/datasets", json={"name": "d", **SPEC}).json()["id"]
    sink = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "example_id": ["p", "q"],
                "label": [1, 0],
                "cart_adds": [1.5, 2],
                "remarketing": ["none", "bags"],
            }
        ),
        sink,
    )
    assert upload(c, ds, sink.getvalue(), "application/vnd.apache.parquet").status_code == 200
    nd = b'{"example_id": "r", "label": 1, "cart_adds": 4, "remarketing": "shoes"}\n'
    assert upload(c, ds, nd, "application/x-ndjson").status_code == 200
    assert sorted(stored(api, ds).column("example_id").to_pylist()) == ["p", "q", "r"]
    nested = b'{"example_id": "s", "label": 1, "cart_adds": [1], "remarketing": "shoes"}\n'
    problem(upload(c, ds, nested, "application/x-ndjson"), 422, "unparseable-upload")


def test_a_label_release_never_carries_the_semi_sensitive_columns(api: Api, tmp_path: Path) -> None:
    c = with_recipient(api.tenant("acme", budget="4"))
    ds = c.post("/v1/datasets", json={"name": "d", **SPEC}).json()["id"]
    rows = [f"x{i},{i % 2},{i % 50},{['none', 'shoes', 'bags'][i % 3]}" for i in range(300)]
    assert upload(c, ds, body(*rows)).status_code == 200
    made = release(c, ds, "k1", epsilon=1.0)
    assert made.status_code == 201, made.text
    rid = made.json()["id"]
    noisy = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rid}/noisy-labels").content))
    assert set(noisy.column_names).isdisjoint({"cart_adds", "remarketing"})


def test_adults_declared_columns_are_constants_the_rows_stay_inside() -> None:
    """Adult's declarations are UCI's value lists and census ranges written down in advance, not read
    off the file; every value in the file lies inside them (an upload would otherwise be refused)."""
    import numpy as np

    from labeldp.samples import adult_semi_sensitive
    from labels_party.datasets.spec import FeatureColumn

    data = adult_semi_sensitive()
    for declared, table in ((data.semi_sensitive, data.labels), (data.non_sensitive, data.features)):
        for column in map(FeatureColumn.model_validate, declared):
            values = table.column(column.name).to_numpy(zero_copy_only=False)
            if column.kind == "category":
                assert set(values) <= set(column.categories or []), column.name
            else:
                assert column.lo is not None and column.hi is not None
                assert np.all((values >= column.lo) & (values <= column.hi)), column.name
