"""Datasets over the labels party's REST API (real HTTP, SQLite and PostgreSQL): public parameters
validated before any upload, uploads upserted in three formats, bad uploads refused with nothing
changed, clipping reported, the universe listed whole, and large uploads' key pairs kept off the heap."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labels_party.config import LabelsSettings
from labels_party.datasets import key_pairs
from tests.support.labels_api import (
    WEEKS,
    Api,
    csv,
    dataset,
    problem,
    release,
    upload,
    with_recipient,
)
from tests.support.servers import labels_server_thread


def test_dataset_specs_are_validated(api: Api) -> None:
    c = api.tenant("acme")
    problem(
        c.post("/v1/datasets", json={"name": "x", "label_type": "count", "lo": 5, "hi": 1}),
        422,
        "invalid-request",
    )
    problem(
        c.post("/v1/datasets", json={"name": "x", "label_type": "real", "lo": 0, "hi": 1}),
        422,
        "invalid-request",
    )
    problem(
        c.post("/v1/datasets", json={"name": "x", "label_type": "binary", "lo": 0, "hi": 3}),
        422,
        "invalid-request",
    )
    # at most 10,000 support points (docs/limitations.md: the optimizer's worst case is O(k²))
    problem(
        c.post(
            "/v1/datasets",
            json={
                "name": "x",
                "label_type": "real",
                "lo": 0,
                "hi": 1,
                "support": {"kind": "uniform", "k": 10_001},
            },
        ),
        422,
        "invalid-request",
    )
    ok = c.post(
        "/v1/datasets",
        json={
            "name": "prices",
            "label_type": "real",
            "lo": 0,
            "hi": 20000,
            "support": {"kind": "uniform", "k": 201},
        },
    )
    assert ok.status_code == 201 and ok.json()["support_size"] == 201
    assert [d["name"] for d in c.get("/v1/datasets").json()["items"]] == ["prices"]


def test_uploads_upsert_in_three_formats(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    r = upload(c, ds, csv([("a", 1), ("b", 2), ("c", 52)]))
    assert r.status_code == 200 and r.json()["rows"] == 3 and r.json()["label_count"] == 3
    nd = b'{"example_id": "c", "label": 7}\n{"example_id": "d", "label": 0}\n'
    r = upload(c, ds, nd, "application/x-ndjson")
    assert r.status_code == 200 and r.json()["label_count"] == 4 and r.json()["version"] == 2
    buf = io.BytesIO()
    pq.write_table(pa.table({"example_id": ["e"], "label": [3.0], "user_id": ["u1"]}), buf)
    r = upload(c, ds, buf.getvalue(), "application/vnd.apache.parquet")
    assert r.status_code == 200 and r.json()["label_count"] == 5
    versions = c.get(f"/v1/datasets/{ds}").json()
    assert (versions["labels_version"], versions["universe_version"], versions["non_sensitive_version"]) == (
        3,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("body", "code", "rows"),
    [
        (csv([("a", 1), ("b", 2), ("a", 3)]), "duplicate-example-id", [1, 3]),
        (csv([("a", 1), ("b", "x")]), "invalid-label", [2]),
        (csv([("a", 1), ("b", "inf")]), "invalid-label", [2]),
        (csv([("a", 1), ("b", "nan")]), "invalid-label", [2]),
        (csv([("a", 1.5)]), "wrong-label-type", [1]),
        (csv([("a", -1)]), "wrong-label-type", [1]),
        (csv([("a", 1), ("b", 60)]), "out-of-bounds", [2]),
        (csv([("a", 1)], header="id,label"), "missing-column", []),
        (csv([("", 1)]), "missing-example-id", [1]),
        (b"not,a\ncsv", "unparseable-upload", [1]),
    ],
)
def test_bad_uploads_are_rejected_and_change_nothing(
    api: Api, body: bytes, code: str, rows: list[int]
) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    assert upload(c, ds, csv([("keep", 5)])).status_code == 200
    before = c.get(f"/v1/datasets/{ds}").json()
    got = problem(upload(c, ds, body), 422, code)
    assert got["rows"] == rows
    assert c.get(f"/v1/datasets/{ds}").json() == before


def test_a_parse_error_and_a_check_number_a_row_alike_and_never_show_its_values(api: Api) -> None:
    """One row numbering (data rows from 1, the header not counted) for Arrow's parse errors and the
    checks alike, and no value in either answer (a label is a secret)."""
    c = api.tenant("acme")
    ds = dataset(c)
    rows: list[tuple[str, object]] = [(f"c-{i}", i) for i in range(8)]
    extra = csv(rows) + b"c-8,7.25,secret\n"  # data row 9 (line 10 of the file) has a third field
    parse = problem(upload(c, ds, extra), 422, "unparseable-upload")
    bad = problem(upload(c, ds, csv([*rows, ("c-8", "7.25x")])), 422, "invalid-label")
    unquoted = problem(upload(c, ds, csv(rows) + b'"c-8,7.25\nc-9,1\n'), 422, "unparseable-upload")
    assert parse["rows"] == bad["rows"] == unquoted["rows"] == [9]
    assert parse["detail"] == (
        "data row 9 has 3 fields; the header has 2 (a value holding a comma, a quote or a line break must "
        "be quoted)"
    )
    for answer in (parse, bad, unquoted):
        assert "7.25" not in str(answer) and "secret" not in str(answer) and "c-8" not in str(answer)
    utf8 = problem(upload(c, ds, csv(rows) + b"c-8,7\xff\n"), 422, "unparseable-upload")
    assert (
        utf8["rows"] == [9]
        and utf8["detail"] == "data row 9: column 'label' holds text that is not valid UTF-8"
    )
    assert c.get(f"/v1/datasets/{ds}").json()["label_count"] == 0


@pytest.mark.parametrize(("delimiter", "name"), [(";", "semicolons"), ("\t", "tabs")])
def test_another_delimiter_gets_a_hint_not_a_guess(api: Api, delimiter: str, name: str) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    body = f"example_id{delimiter}label\na{delimiter}1\n".encode()
    got = problem(upload(c, ds, body), 422, "missing-column")
    assert got["detail"].startswith("the upload needs an example_id column (the header reads as 1 column")
    assert f"this file looks separated by {name}" in got["detail"]
    plain = problem(upload(c, ds, csv([("a", 1)], header="id,label")), 422, "missing-column")
    assert plain["detail"] == "the upload needs an example_id column"  # no hint without a sign of one


def test_unsupported_content_type_and_unknown_dataset(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    problem(upload(c, ds, b"x", "text/plain"), 415, "unsupported-media-type")
    problem(upload(c, "nope", csv([("a", 1)])), 404, "not-found")


def test_clip_policy_reports_clipped_labels(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c, **WEEKS, out_of_bounds="clip")
    r = upload(c, ds, csv([("a", 1), ("b", 70), ("c", 99)]))
    assert r.status_code == 200 and r.json()["clipped"] == 2


def test_universe_lists_every_id_and_missing_labels_take_the_default(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c, **WEEKS, default_label=0)
    upload(c, ds, csv([("click1", 13), ("click3", 52)]))
    universe = b"example_id\n" + b"\n".join(f"click{i}".encode() for i in range(10)) + b"\n"
    assert upload(c, ds, universe, what="universe").json()["universe_count"] == 10
    assert c.get(f"/v1/datasets/{ds}").json()["universe_version"] == 1
    rel = release(c, ds, "u1").json()
    assert rel["examples"] == 10 and rel["examples_defaulted"] == 8 and rel["universe_declared"]
    out = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rel['id']}/noisy-labels").content))
    assert sorted(out.column("example_id").to_pylist()) == sorted(f"click{i}" for i in range(10))
    no_default = dataset(c, "strict")
    upload(c, no_default, csv([("click1", 13)]))
    upload(c, no_default, universe, what="universe")
    problem(release(c, no_default, "u2"), 422, "missing-labels")


def test_large_uploads_keep_key_pairs_in_an_unnamed_mapped_file(
    database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From ``SPILL_FROM`` rows the key-pair set is a memory map of an unlinked file: the same answers
    (upsert, duplicates) as in memory, and no file left behind. Lowered to 1 so every upload spills —
    in this process, so the server runs its file work in its own threads (``file_workers=0``)."""
    made: list[bool] = []
    real = key_pairs._array

    def spy(shape: tuple[int, int], spill_dir: Path) -> Any:
        out = real(shape, spill_dir)
        made.append(isinstance(out, np.memmap))
        return out

    monkeypatch.setattr(key_pairs, "SPILL_FROM", 1)
    monkeypatch.setattr(key_pairs, "_array", spy)
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=database_url, file_workers=0)
    with labels_server_thread(settings) as base:
        _spilled_uploads(Api(base, database_url, settings.data_dir), made)

    rng = np.random.default_rng(5)  # and the two layouts hold the same set
    keys, checks = rng.integers(-(2**63), 2**63 - 1, (2, 5_000), dtype=np.int64)
    keys[:10], checks[:10] = keys[10:20], checks[10:20]
    batches = lambda: [(keys[:3_000], checks[:3_000]), (keys[3_000:], checks[3_000:])]  # noqa: E731
    spill = tmp_path / "spill"
    spill.mkdir()
    spilled = key_pairs.KeyPairSet.collect(batches, spill)
    monkeypatch.setattr(key_pairs, "SPILL_FROM", 10**9)
    held = key_pairs.KeyPairSet.collect(batches, spill)
    assert isinstance(spilled.pairs, np.memmap) and not isinstance(held.pairs, np.memmap)
    np.testing.assert_array_equal(np.asarray(spilled.pairs), held.pairs)
    for a, b in zip(spilled.duplicates(), held.duplicates(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert spilled.duplicates()[0].size == 10
    probe_keys, probe_checks = (
        np.concatenate([keys[::7], keys[:5] + 1]),
        np.concatenate([checks[::7], checks[:5]]),
    )
    np.testing.assert_array_equal(
        spilled.contains(probe_keys, probe_checks), held.contains(probe_keys, probe_checks)
    )
    assert not list(spill.iterdir())


def _spilled_uploads(api: Api, made: list[bool]) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    r = upload(c, ds, csv([(f"id{i}", i % 50) for i in range(2_000)]))
    assert r.status_code == 200 and r.json()["label_count"] == 2_000
    r = upload(c, ds, csv([(f"id{i}", 1) for i in range(1_500, 2_500)]))  # 500 replaced, 500 new
    assert r.status_code == 200 and r.json()["label_count"] == 2_500
    assert problem(upload(c, ds, csv([("x", 1), ("id5", 2), ("x", 3)])), 422, "duplicate-example-id")[
        "rows"
    ] == [1, 3]
    assert made == [True, True, True]
    assert not [p for p in api.data_dir.rglob("*") if "key-pairs" in p.name]
