"""The labels-party REST API over real HTTP (uvicorn on loopback), on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labels_party.config import LabelsSettings
from labels_party.datasets import key_pairs
from tests.support.labels_api import (
    WEEKS,
    Api,
    charges,
    csv,
    dataset,
    problem,
    race,
    release,
    upload,
    with_recipient,
)
from tests.support.servers import labels_server_thread


def test_every_route_needs_a_valid_bearer_key(api: Api) -> None:
    anonymous = httpx.Client(base_url=api.base)
    for method, path in (("GET", "/v1/datasets"), ("POST", "/v1/datasets"), ("GET", "/v1/ledger")):
        problem(anonymous.request(method, path), 401, "unauthenticated")
    bad = httpx.Client(base_url=api.base, headers={"Authorization": "Bearer ldp_not-a-key"})
    problem(bad.get("/v1/datasets"), 401, "unauthenticated")
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/openapi.json").json()["info"]["title"] == "labeldp labels party"


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
        (b"not,a\ncsv", "unparseable-upload", []),
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


def test_release_lifecycle_and_stored_output(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "2.0"))
    ds = dataset(c)
    assert upload(c, ds, csv([(f"ex{i}", i % 53) for i in range(500)])).status_code == 200
    r = release(c, ds, "k1", epsilon=1.0, loss="poisson")
    assert r.status_code == 201, r.text
    rel = r.json()
    assert rel["status"] == "complete" and rel["examples"] == 500
    assert rel["epsilon"] == 1.0 and rel["epsilon_charged_micro"] == 1_000_000
    assert rel["bins"] == sorted(rel["bins"]) and rel["mechanism"]["implemented_epsilon"] <= 1.0
    assert c.get(f"/v1/releases/{rel['id']}").json()["id"] == rel["id"]
    assert [x["id"] for x in c.get(f"/v1/datasets/{ds}/releases").json()["items"]] == [rel["id"]]
    out = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rel['id']}/noisy-labels").content))
    assert out.num_rows == 500 and set(out.column("example_id").to_pylist()) == {f"ex{i}" for i in range(500)}
    assert max(out.column("bin").to_pylist()) < len(rel["bins"])
    entries = charges(c)
    assert len(entries) == 1 and entries[0]["release_id"] == rel["id"] and entries[0]["examples"] == 500
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert budget == {
        "per_example_budget": 2.0,
        "examples": 500,
        "max_spent": 1.0,
        "min_spent": 1.0,
        "epsilon_asked": 1.0,
        "can_take": 500,
        "spend_distribution": [{"spent_from": 1.0, "spent_to": 1.0, "count": 500}],
        # every example is its own user (no user_id): an example-level release charged each ε once
        "users": {
            "per_user_budget": None,
            "users": 500,
            "spent": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "max": 1.0},
            "epsilon_user_asked": 1.0,
            "can_take": None,
            "spend_distribution": [{"spent_from": 1.0, "spent_to": 1.0, "count": 500}],
        },
        "delta_budget": 0.0,  # a pure-ε tenant
        "delta_spent": 0.0,
    }


def test_idempotency_key_is_required_and_replays_charge_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    r = c.post(f"/v1/datasets/{ds}/releases", json={"epsilon": 0.5, "recipient": "publisher"})
    problem(r, 400, "idempotency-key-required")
    first = release(c, ds, "same")
    again = release(c, ds, "same")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    problem(release(c, ds, "same", epsilon=0.25), 422, "idempotency-key-reused")
    assert len(charges(c)) == 1


def test_exhausted_budget_is_409_and_reuploading_ids_does_not_reset_it(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "1.0"))
    ds1 = dataset(c, "first")
    upload(c, ds1, csv([("a", 1), ("b", 2), ("c", 3)]))
    assert release(c, ds1, "r1", epsilon=0.75).status_code == 201
    body = problem(release(c, ds1, "r2", epsilon=0.5), 409, "budget-exhausted")
    assert body["examples_lacking_budget"] == 3
    ds2 = dataset(c, "copy")  # same example IDs under a new name
    upload(c, ds2, csv([("a", 1), ("b", 2), ("c", 3), ("d", 4)]))
    body = problem(release(c, ds2, "r3", epsilon=0.5), 409, "budget-exhausted")
    assert body["examples_lacking_budget"] == 3 and body["examples_requested"] == 4
    assert len(charges(c)) == 1
    assert release(c, ds2, "r4", epsilon=0.5, example_ids=["d"]).status_code == 201  # parallel composition


def test_a_budget_refusal_says_what_the_typical_and_the_worst_example_have_spent_and_left(
    api: Api,
) -> None:
    """Machine-readable spent / left over the release's examples (the median and the most spent, never
    one example's by key), the same numbers in words, and nothing charged."""
    c = with_recipient(api.tenant("acme", "1.0"))
    ds = dataset(c)
    upload(c, ds, csv([(e, 1) for e in "abcde"]))
    assert release(c, ds, "one", epsilon=0.75, example_ids=["a"]).status_code == 201
    body = problem(release(c, ds, "all", epsilon=0.5), 409, "budget-exhausted")
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).json()
    assert (body["examples_lacking_budget"], body["examples_requested"]) == (1, 5)
    assert (body["epsilon_requested"], body["per_example_budget"]) == (0.5, budget["per_example_budget"])
    assert body["spent"] == {"typical": 0.0, "worst": budget["max_spent"]}  # four of five spent nothing
    assert body["left"] == {"typical": 1.0, "worst": 1.0 - budget["max_spent"]}
    assert body["detail"] == (
        "1 of 5 examples lack budget for ε = 0.5: of the per-example budget 1, the typical example has "
        "spent 0 (1 left), the worst 0.75 (0.25 left)"
    )
    assert len(charges(c)) == 1  # nothing charged by the refusal
    assert c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.5}).json() == budget


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


def test_release_validation_errors_store_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1), ("b", 2)]))
    problem(release(c, ds, "v1", recipient="stranger"), 422, "unknown-recipient")
    problem(release(c, ds, "v2", loss="hinge"), 422, "invalid-request")
    problem(release(c, ds, "v3", epsilon=-1), 422, "invalid-request")
    problem(release(c, ds, "v4", epsilon=1.0, epsilon_prior=1.0), 422, "invalid-epsilon")
    problem(release(c, ds, "v5", example_ids=["zzz"]), 422, "unknown-example-ids")
    problem(release(c, ds, "v6", loss="zero_one"), 422, "invalid-loss")
    empty = dataset(c, "empty")
    problem(release(c, empty, "v7"), 422, "empty-release")
    assert charges(c) == [] and c.get(f"/v1/datasets/{ds}/releases").json()["items"] == []


def test_preview_is_free(api: Api) -> None:
    c = with_recipient(api.tenant("acme"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(300)]))
    r = c.post(f"/v1/datasets/{ds}/releases:preview", json={"epsilon": 1.0, "recipient": "publisher"})
    assert (
        r.status_code == 200
        and r.json()["m"] == len(r.json()["bin_values"])
        and r.json()["expected_loss"] > 0
    )
    assert charges(c) == []


def test_classes_are_released_and_previewed_with_rr_top_k(api: Api) -> None:
    """The factory picks the mechanism from the loss, for releases and previews alike: categorical
    labels and binary labels under the 0-1 loss use RR-Top-k over the classes."""
    c = with_recipient(api.tenant("acme", "10"))
    cat = dataset(c, "colors", label_type="categorical", lo=0, hi=4)
    upload(c, cat, csv([(f"e{i}", [0, 0, 0, 1, 1, 2, 3, 4][i % 8]) for i in range(800)]))
    preview = c.post(f"/v1/datasets/{cat}/releases:preview", json={"epsilon": 1.0, "recipient": "publisher"})
    assert preview.status_code == 200, preview.text
    assert preview.json()["mechanism"]["kind"] == "rr_top_k" and preview.json()["bin_values"][0] == 0.0
    problem(release(c, cat, "sq", loss="squared"), 422, "invalid-loss")
    r = release(c, cat, "cat", epsilon=2.0, loss="zero_one")
    assert r.status_code == 201, r.text
    rel = r.json()
    mechanism = rel["mechanism"]
    assert mechanism["kind"] == "rr_top_k" and mechanism["loss"] == "zero_one"
    assert mechanism["support"] == [0.0, 1.0, 2.0, 3.0, 4.0] and rel["bins"] == mechanism["bin_values"]
    assert mechanism["implemented_epsilon"] <= mechanism["epsilon_randomize"] <= rel["epsilon"]
    out = pq.read_table(io.BytesIO(c.get(f"/v1/releases/{rel['id']}/noisy-labels").content))
    assert out.num_rows == 800 and max(out.column("bin").to_pylist()) < len(rel["bins"])
    binary = dataset(c, "converted", label_type="binary", lo=0, hi=1)
    assert upload(c, binary, csv([(f"b{i}", int(i % 3 == 0)) for i in range(300)])).status_code == 200
    for loss, kind in (("zero_one", "rr_top_k"), ("squared", "rr_on_bins")):
        p = c.post(
            f"/v1/datasets/{binary}/releases:preview", json={"epsilon": 1.0, "recipient": "p", "loss": loss}
        )
        assert p.status_code == 200 and p.json()["mechanism"]["kind"] == kind, p.text
    assert len(charges(c)) == 1  # previews are free


def test_tenants_never_see_each_other(api: Api) -> None:
    owner = with_recipient(api.tenant("owner"))
    other = with_recipient(api.tenant("other"))
    ds = dataset(owner)
    upload(owner, ds, csv([("a", 1)]))
    rel = release(owner, ds, "x").json()["id"]
    for resp in (
        other.get(f"/v1/datasets/{ds}"),
        upload(other, ds, csv([("a", 2)])),
        upload(other, ds, b"example_id\na\n", what="universe"),
        release(other, ds, "y"),
        other.post(f"/v1/datasets/{ds}/releases:preview", json={"epsilon": 1.0, "recipient": "publisher"}),
        other.get(f"/v1/datasets/{ds}/releases"),
        other.get(f"/v1/datasets/{ds}/budget"),
        other.get(f"/v1/releases/{rel}"),
        other.get(f"/v1/releases/{rel}/noisy-labels"),
    ):
        problem(resp, 404, "not-found")
    assert other.get("/v1/datasets").json()["items"] == []
    assert other.get("/v1/releases").json()["items"] == []
    assert charges(other) == []


def test_ledger_is_paginated(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c)
    upload(c, ds, csv([("a", 1)]))
    for i in range(4):
        assert release(c, ds, f"p{i}", epsilon=1.0).status_code == 201
    page = c.get("/v1/ledger", params={"limit": 2}).json()
    assert [e["kind"] for e in page["items"]] == ["budget_set", "charge"] and page["next_offset"] == 2
    assert page["next"] == "/v1/ledger?limit=2&offset=2"
    rest = c.get("/v1/ledger", params={"limit": 10, "offset": 2}).json()
    assert len(rest["items"]) == 3 and rest["next_offset"] is None and rest["next"] is None
    assert walk(c, "/v1/ledger", 2) == c.get("/v1/ledger").json()["items"]


def walk(c: httpx.Client, path: str, limit: int) -> list[dict[str, Any]]:
    """Every item of a list, following ``next`` links ``limit`` at a time (each page at most that)."""
    items: list[dict[str, Any]] = []
    page = c.get(path, params={"limit": limit}).json()
    while True:
        assert len(page["items"]) <= limit
        items += page["items"]
        if page["next"] is None:
            return items
        assert len(page["items"]) == limit  # only a full page has a next one
        page = c.get(page["next"]).json()


def test_every_list_pages_with_next_links(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "50"))
    assert c.post("/v1/recipients", json={"name": "second"}).status_code == 201
    names = [f"d{i}" for i in range(5)]
    ids = [dataset(c, name) for name in names]
    upload(c, ids[0], csv([("a", 1), ("b", 2)]))
    releases = [release(c, ids[0], f"k{i}", epsilon=1.0).json()["id"] for i in range(3)]
    assert [d["name"] for d in walk(c, "/v1/datasets", 2)] == names  # oldest first, nothing twice
    assert [r["id"] for r in walk(c, f"/v1/datasets/{ids[0]}/releases", 2)] == releases
    upload(c, ids[1], csv([("c", 3)]))
    releases.append(release(c, ids[1], "other-dataset", epsilon=1.0).json()["id"])
    assert [r["id"] for r in walk(c, "/v1/releases", 2)] == releases  # every dataset's, oldest first
    assert [r["name"] for r in walk(c, "/v1/recipients", 1)] == ["publisher", "second"]
    assert walk(c, f"/v1/releases/{releases[0]}/deliveries", 1) == []
    assert c.get("/v1/datasets", params={"offset": 5}).json() == {
        "items": [],
        "next_offset": None,
        "next": None,
    }
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"limit": "x"}):
        r = c.get("/v1/datasets", params=bad)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", bad


@pytest.mark.slow
def test_64_concurrent_releases_when_budget_admits_exactly_10(api: Api) -> None:
    for trial in range(20):
        c = with_recipient(api.tenant(f"t{trial}", "1.0"))
        ds = dataset(c)
        upload(c, ds, csv([(f"e{i}", i % 53) for i in range(50)]))
        results = race(64, lambda i, c=c, ds=ds: release(c, ds, f"k{i}", epsilon=0.1))
        codes = sorted(r.status_code for r in results)
        assert codes.count(201) == 10 and codes.count(409) == 54, codes
        assert len(charges(c)) == 10
        assert c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 0.1}).json()["can_take"] == 0


def test_same_idempotency_key_concurrently_makes_one_release(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    upload(c, ds, csv([(f"e{i}", i % 53) for i in range(50)]))
    results = race(16, lambda i: release(c, ds, "one-key"))
    assert {r.status_code for r in results} <= {200, 201}
    assert len({r.json()["id"] for r in results}) == 1
    assert len(charges(c)) == 1
    assert json.loads(c.get("/v1/ledger").text)["items"][-1]["kind"] == "charge"


def test_previews_can_use_a_released_or_a_public_prior(api: Api) -> None:
    """The default preview optimizes for the exact histogram (and says so); a preview can instead use
    the noisy prior an earlier release published, or a public prior — free either way."""
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c, **WEEKS)
    upload(c, ds, csv([(f"e{i}", (i * 7) % 53) for i in range(3000)]))
    url = f"/v1/datasets/{ds}/releases:preview"
    exact = c.post(url, json={"epsilon": 1.0, "recipient": "publisher"}).json()
    assert exact["prior_source"] == "labels"
    rel = release(c, ds, "r", epsilon=1.0).json()
    released = c.post(
        url, json={"epsilon": 1.0, "recipient": "publisher", "prior_release_id": rel["id"]}
    ).json()
    assert released["prior_source"] == "release"
    assert released["mechanism"]["prior"] == pytest.approx(rel["mechanism"]["prior"], rel=1e-12)
    uniform = [1.0] * 53
    public = c.post(url, json={"epsilon": 1.0, "recipient": "publisher", "public_prior": uniform}).json()
    assert public["prior_source"] == "public" and public["mechanism"]["prior"] == [1 / 53] * 53
    problem(
        c.post(url, json={"epsilon": 1, "recipient": "p", "public_prior": [1.0, 2.0]}), 422, "invalid-prior"
    )
    problem(c.post(url, json={"epsilon": 1, "recipient": "p", "prior_release_id": "nope"}), 404, "not-found")
    other = dataset(c, "other", **WEEKS)
    upload(c, other, csv([("x", 1)]))
    body = {"epsilon": 1, "recipient": "p", "prior_release_id": rel["id"]}
    problem(c.post(f"/v1/datasets/{other}/releases:preview", json=body), 422, "invalid-prior")
    assert len(charges(c)) == 1  # only the release


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


def test_the_budget_states_the_spend_distribution_of_examples_and_users(api: Api) -> None:
    """Two releases over different examples leave two spend levels; the users (two examples each)
    spent twice as much as their examples (group privacy), as counts of examples and of users."""
    c = with_recipient(api.tenant("acme", "5"))
    ds = dataset(c)
    rows = [(f"e{i}", i % 10, f"u{i // 2}") for i in range(10)]
    body = "example_id,label,user_id\n" + "".join(f"{e},{y},{u}\n" for e, y, u in rows)
    assert upload(c, ds, body.encode()).status_code == 200
    assert release(c, ds, "all", epsilon=1.0).status_code == 201
    assert release(c, ds, "some", epsilon=0.5, example_ids=["e0", "e1", "e2", "e3"]).status_code == 201
    budget = c.get(f"/v1/datasets/{ds}/budget", params={"epsilon": 1.0}).json()
    assert budget["spend_distribution"] == [
        {"spent_from": 1.0, "spent_to": 1.0, "count": 6},
        {"spent_from": 1.5, "spent_to": 1.5, "count": 4},
    ]
    assert budget["users"]["spend_distribution"] == [
        {"spent_from": 2.0, "spent_to": 2.0, "count": 3},
        {"spent_from": 3.0, "spent_to": 3.0, "count": 2},
    ]
