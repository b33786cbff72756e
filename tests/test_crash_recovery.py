"""SIGKILL the labels-party server at random points while it creates releases; after a restart the
ledger and the releases must agree: no release without its charge, nothing charged twice, no
release left half-done, and retrying a killed request charges nothing new."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
from sqlalchemy import select

from labels_party.budget.ledger import spend_of_tenant
from labels_party.releases.service import release_path
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry, Release, UserSpendShard
from tests.support.servers import LabelsProcess, tenant_key

TRIALS = 20
EXAMPLES = 100_000
EPSILON = 0.01


def test_sigkill_during_release_creation_leaves_a_consistent_ledger(
    database_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    tenant_id, key = tenant_key(database_url, "acme", "100")
    engine = make_engine(database_url)
    server = LabelsProcess(data_dir, database_url)
    server.start()
    headers = {"Authorization": f"Bearer {key}"}
    client = httpx.Client(base_url=server.base_url, headers=headers, timeout=60)
    client.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
    ds = client.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()[
        "id"
    ]
    body = "example_id,label\n" + "".join(f"e{i},{i % 53}\n" for i in range(EXAMPLES))
    client.put(
        f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
    ).raise_for_status()
    start = time.monotonic()
    client.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": EPSILON, "recipient": "publisher"},
        headers={"Idempotency-Key": "warmup"},
    ).raise_for_status()
    duration = time.monotonic() - start
    rng = random.Random(2026)  # test-only: where to kill
    try:
        for trial in range(TRIALS):
            key = f"trial-{trial}"
            if trial % 4 == 3:  # kill right after the charge is acknowledged: certainly mid-work
                answer = httpx.post(
                    f"{server.base_url}/v1/datasets/{ds}/releases",
                    json={"epsilon": EPSILON, "recipient": "publisher"},
                    headers={**headers, "Idempotency-Key": key, "Prefer": "respond-async"},
                    timeout=60,
                )
                server.kill()
                assert answer.status_code in (201, 202), answer.text
            else:

                def fire(key: str = key, url: str = server.base_url) -> None:
                    with contextlib.suppress(httpx.HTTPError):  # the server dies mid-request
                        httpx.post(
                            f"{url}/v1/datasets/{ds}/releases",
                            json={"epsilon": EPSILON, "recipient": "publisher"},
                            headers={**headers, "Idempotency-Key": key},
                            timeout=60,
                        )

                thread = threading.Thread(target=fire)
                thread.start()
                time.sleep(rng.uniform(0.2, 1.0) * duration)
                server.kill()
                thread.join()
            server.start()
            # retrying the killed request never charges again
            retry = httpx.post(
                f"{server.base_url}/v1/datasets/{ds}/releases",
                json={"epsilon": EPSILON, "recipient": "publisher"},
                headers={**headers, "Idempotency-Key": key},
                timeout=60,
            )
            assert retry.status_code in (200, 201), retry.text
    finally:
        server.stop()

    with session_factory(engine)() as s:
        releases = s.execute(select(Release)).scalars().all()
        charges = s.execute(select(LedgerEntry).where(LedgerEntry.kind == "charge")).scalars().all()
        statuses = [r.status for r in releases]
        assert "charged" not in statuses  # nothing left half-done
        charged_ids = [str(c.release_id) for c in charges]
        assert sorted(charged_ids) == sorted(r.id for r in releases)  # one charge per release, both ways
        assert len(set(charged_ids)) == len(charged_ids)
        kept = (
            s.execute(select(LedgerEntry.release_id).where(LedgerEntry.kind == "charge_kept")).scalars().all()
        )
        assert sorted(map(str, kept)) == sorted(
            r.id for r in releases if r.status == "failed"
        )  # the ledger says so
        for r in releases:
            if r.status == "complete":
                assert pq.read_table(release_path(data_dir, r.id)).num_rows == EXAMPLES
        _, spent_micro = spend_of_tenant(s, tenant_id)
        expected = len(charges) * int(EPSILON * 1e6)
        assert spent_micro.size == EXAMPLES
        assert (int(spent_micro.min()), int(spent_micro.max())) == (expected, expected)
        # the per-user ledger moved in the same transactions (no user_id: every example its own user)
        _, user_spent = spend_of_tenant(s, tenant_id, UserSpendShard)
        assert user_spent.size == EXAMPLES
        assert (int(user_spent.min()), int(user_spent.max())) == (expected, expected)
        assert len(releases) == TRIALS + 1
        print("release outcomes after kills:", {st: statuses.count(st) for st in set(statuses)})
        assert statuses.count("failed") >= 1, "no kill interrupted a charged release: the test proved nothing"
    engine.dispose()
    assert np.isfinite(duration)
