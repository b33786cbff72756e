"""Reads that never wait for writers, and writers that hold the write lock only for their commit,
through the labels party's real HTTP API on SQLite (PostgreSQL's MVCC readers never waited)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import httpx

from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.labels_api import csv, dataset, upload
from tests.support.servers import labels_server_thread, tenant_key


def test_reads_answer_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    """A writer (here: another connection in ``BEGIN IMMEDIATE``, as a long charge would be) holds
    SQLite's write lock for two seconds; authenticated reads answer at once from a WAL snapshot, and
    a write waits for the lock and then succeeds."""
    data = tmp_path / "data"
    data.mkdir()
    url = sqlite_url(data)
    _, key = tenant_key(url, "acme", "10")
    with labels_server_thread(LabelsSettings(data_dir=data, database_url=url)) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(50)])).status_code == 200
        holder = sqlite3.connect(data / "labels.db", isolation_level=None, timeout=60)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            for path in ("/v1/datasets", f"/v1/datasets/{ds}", "/v1/ledger", f"/v1/datasets/{ds}/budget"):
                assert c.get(path).status_code == 200, path
            assert time.monotonic() - started < 1.0  # none of them queued behind the writer
            written: list[int] = []
            writer = threading.Thread(
                target=lambda: written.append(c.post("/v1/recipients", json={"name": "p"}).status_code)
            )
            writer.start()
            time.sleep(2.0)
            assert written == []  # a write waits for the lock…
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        writer.join(timeout=30)
        assert written == [201]  # …and goes through once it is free


def test_concurrent_uploads_to_one_dataset_all_land(tmp_path: Path) -> None:
    """Eight uploads to one dataset at once: each merges outside the write lock, the one that commits
    second merges again against the first's version, and no row is lost."""
    data = tmp_path / "data"
    data.mkdir()
    url = sqlite_url(data)
    _, key = tenant_key(url, "acme", "10")
    with labels_server_thread(LabelsSettings(data_dir=data, database_url=url)) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        ds = dataset(c)
        gate = threading.Barrier(8)
        codes: list[int] = []

        def send(part: int) -> None:
            body = csv([(f"p{part}-{i}", i % 53) for i in range(2_000)])
            gate.wait()
            codes.append(upload(c, ds, body).status_code)

        threads = [threading.Thread(target=send, args=(p,)) for p in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes) == [200] * 8
        shown = c.get(f"/v1/datasets/{ds}").json()
        assert shown["label_count"] == 16_000
