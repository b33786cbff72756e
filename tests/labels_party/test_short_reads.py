"""Where a request's reads run (labeldp/common/db.py, ``Sessions.read``): on SQLite, on the event loop —
a hop to the thread pool and back cost the server more than the read (BENCHMARKS.md, "The data path
against the machine"); on PostgreSQL, in the thread pool, where a read is a network round trip the
loop must not wait for; and the budget's histograms, computed after a charge, in the thread pool on
either. Observed through the real server: every statement the database driver runs, with the thread
that ran it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, event

from features_party.config import FeaturesSettings
from tests.support.labels_api import Api, csv, dataset, release, upload, with_recipient
from tests.support.servers import features_server_thread, features_tenant_key

WORKER = "AnyIO worker thread"  # anyio's thread pool, where FastAPI runs plain functions


@contextmanager
def statements() -> Iterator[list[tuple[str, str]]]:
    """(thread name, SQL) of every statement any engine runs meanwhile."""
    seen: list[tuple[str, str]] = []

    def record(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        seen.append((threading.current_thread().name, sql))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def selects_of(client: httpx.Client, reads: list[str]) -> list[tuple[str, str]]:
    """(thread, SQL) of every SELECT the reads ran; each read answers 200 and runs at least two (the
    API key, then what the route reads)."""
    with statements() as seen:
        for path in reads:
            resp = client.get(path)
            assert resp.status_code == 200, (path, resp.text)
    selects = [(thread, sql) for thread, sql in seen if sql.lstrip().upper().startswith("SELECT")]
    assert len(selects) >= 2 * len(reads)
    return selects


def test_short_reads_run_on_the_loop_on_sqlite_and_in_the_pool_elsewhere(api: Api) -> None:
    client = with_recipient(api.tenant("acme", "10"))
    ds = dataset(client)
    assert upload(client, ds, csv([(f"e{i}", i % 53) for i in range(200)])).status_code == 200
    rid = release(client, ds, "r1").json()["id"]
    assert client.get(f"/v1/datasets/{ds}/budget").status_code == 200  # the histograms, computed once
    reads = [
        "/v1/datasets",
        f"/v1/datasets/{ds}",
        f"/v1/datasets/{ds}/budget",
        "/v1/ledger",
        f"/v1/datasets/{ds}/releases",
        "/v1/releases",
        f"/v1/releases/{rid}",
        f"/v1/releases/{rid}/deliveries",
        "/v1/recipients",
        "/v1/priors",
    ]
    selects = selects_of(client, reads)
    on_workers = {thread == WORKER for thread, _ in selects}
    assert on_workers == ({False} if api.database_url.startswith("sqlite") else {True}), selects


def test_the_budget_is_computed_in_the_pool_after_a_charge(api: Api) -> None:
    client = with_recipient(api.tenant("acme", "10"))
    ds = dataset(client)
    assert upload(client, ds, csv([(f"e{i}", i % 53) for i in range(200)])).status_code == 200
    assert release(client, ds, "r1").status_code == 201
    with statements() as seen:
        answer = client.get(f"/v1/datasets/{ds}/budget")  # never asked before: computed now
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["examples"], body["min_spent"], body["max_spent"]) == (200, 0.5, 0.5)
    shards = [thread for thread, sql in seen if "spend_shard" in sql.lower()]
    assert shards and set(shards) == {WORKER}, seen


def test_the_features_partys_short_reads_run_on_the_loop_on_sqlite(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    with features_server_thread(settings) as base:
        key = features_tenant_key(settings, "ml")
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        table = client.put(
            "/v1/feature-tables/users",
            content=b"example_id,age\ne1,30\ne2,41\n",
            headers={"Content-Type": "text/csv"},
        )
        assert table.status_code == 201, table.text
        reads = [
            "/v1/feature-tables",
            "/v1/feature-tables/users",
            "/v1/releases",
            "/v1/models",
            "/v1/senders",
        ]
        selects = selects_of(client, reads)
    assert WORKER not in {thread for thread, _ in selects}, selects
