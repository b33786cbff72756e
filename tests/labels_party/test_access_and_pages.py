"""Who sees what over the labels party's REST API (real HTTP, SQLite and PostgreSQL): every route needs
a valid bearer key, tenants never see each other, and every list pages with next links."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.labels_api import (
    Api,
    charges,
    csv,
    dataset,
    problem,
    release,
    upload,
    with_recipient,
)


def test_every_route_needs_a_valid_bearer_key(api: Api) -> None:
    anonymous = httpx.Client(base_url=api.base)
    for method, path in (("GET", "/v1/datasets"), ("POST", "/v1/datasets"), ("GET", "/v1/ledger")):
        problem(anonymous.request(method, path), 401, "unauthenticated")
    bad = httpx.Client(base_url=api.base, headers={"Authorization": "Bearer ldp_not-a-key"})
    problem(bad.get("/v1/datasets"), 401, "unauthenticated")
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    assert anonymous.get("/openapi.json").json()["info"]["title"] == "labeldp labels party"


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
