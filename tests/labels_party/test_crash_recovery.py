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
import pytest
from sqlalchemy import select

from labels_party.budget.epsilon import to_atto_floor
from labels_party.budget.ledger import set_delta_budget
from labels_party.budget.segments import SegmentStore
from labels_party.budget.summaries import spend_of_tenant
from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry, Release, SemiSensitiveModel, UserSpendShard
from tests.support.servers import LabelsProcess, tenant_key

pytestmark = pytest.mark.processes

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
                assert pq.read_table(DataDir(data_dir).release(r.id)).num_rows == EXAMPLES
        _, spent_micro = spend_of_tenant(s, tenant_id, SegmentStore(DataDir(data_dir).ledger))
        expected = len(charges) * int(EPSILON * 1e6)
        assert spent_micro.size == EXAMPLES
        assert (int(spent_micro.min()), int(spent_micro.max())) == (expected, expected)
        # the per-user ledger moved in the same transactions (no user_id: every example its own user)
        _, user_spent = spend_of_tenant(s, tenant_id, SegmentStore(DataDir(data_dir).ledger), UserSpendShard)
        assert user_spent.size == EXAMPLES
        assert (int(user_spent.min()), int(user_spent.max())) == (expected, expected)
        assert len(releases) == TRIALS + 1
        print("release outcomes after kills:", {st: statuses.count(st) for st in set(statuses)})
        assert statuses.count("failed") >= 1, "no kill interrupted a charged release: the test proved nothing"
    engine.dispose()
    assert np.isfinite(duration)


def test_sigkill_during_dpsgd_leaves_the_model_failed_with_its_charge_kept(
    database_url: str, tmp_path: Path
) -> None:
    """A semi-sensitive model is charged, then its process dies in DP-SGD. The next process's recovery
    (its owner is certainly gone) marks it failed once and records the kept charge; a retry with the
    same key returns that model and charges nothing; its delivery is refused (409), not stuck."""
    pytest.importorskip("torch")
    from tests.support.semi_sensitive_models import SPEC, parquet, synthetic

    data_dir = tmp_path / "data"
    tenant_id, key = tenant_key(database_url, "acme", "100")
    engine = make_engine(database_url)
    with session_factory(engine).begin() as s:
        set_delta_budget(s, tenant_id, to_atto_floor("1e-3"), api_key_id=None, note="test")
    server = LabelsProcess(data_dir, database_url)
    server.start()
    headers = {"Authorization": f"Bearer {key}"}
    client = httpx.Client(base_url=server.base_url, headers=headers, timeout=120)
    ptype = {"Content-Type": "application/vnd.apache.parquet"}
    try:
        client.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        ds = client.post("/v1/datasets", json=SPEC).json()["id"]
        labels, features = synthetic()
        client.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).raise_for_status()
        client.put(
            f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype
        ).raise_for_status()
        rid = client.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1.0, "recipient": "publisher"},
            headers={"Idempotency-Key": "r"},
        ).json()["id"]
        request = {
            "label_release_id": rid,
            "epsilon_dpsgd": 1.0,
            "delta": 1e-6,
            "epochs": 50,
            "batch_size": 100,
        }

        def fire() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server dies mid-request
                httpx.post(
                    f"{server.base_url}/v1/datasets/{ds}/semi-sensitive-models",
                    json=request,
                    headers={**headers, "Idempotency-Key": "m"},
                    timeout=600,
                )

        thread = threading.Thread(target=fire)
        thread.start()
        deadline = time.monotonic() + 300
        charged = None
        while charged is None and time.monotonic() < deadline:  # charged, and training (600 steps)
            with session_factory(engine)() as s:
                charged = s.execute(
                    select(SemiSensitiveModel).where(SemiSensitiveModel.status == "charged")
                ).scalar()
            time.sleep(0.05)
        assert charged is not None, "the model was never charged"
        time.sleep(1.0)  # well inside DP-SGD
        server.kill()
        thread.join()
        with session_factory(engine)() as s:
            stuck = s.get(SemiSensitiveModel, charged.id)
            assert stuck is not None and stuck.status == "charged"  # until recovery
        server.start()  # recovery at start-up: this host's owner pid is gone
        retry = client.post(
            f"/v1/datasets/{ds}/semi-sensitive-models", json=request, headers={"Idempotency-Key": "m"}
        )
        assert retry.status_code == 200 and retry.json()["id"] == charged.id, retry.text
        assert retry.json()["status"] == "failed" and "interrupted" in retry.json()["error"]
        sent = client.post(f"/v1/semi-sensitive-models/{charged.id}/deliveries")
        assert sent.status_code == 409 and sent.json()["type"] == "model-not-complete"
    finally:
        server.stop()
    with session_factory(engine)() as s:
        entries = s.execute(select(LedgerEntry).where(LedgerEntry.release_id == charged.id)).scalars().all()
        assert sorted(e.kind for e in entries) == ["charge", "charge_kept"]  # charged once, kept once
        kept = next(e for e in entries if e.kind == "charge_kept")
        assert kept.epsilon_micro == 1_000_000 and kept.examples == 1200
        ended = s.get(SemiSensitiveModel, charged.id)
        assert ended is not None and ended.status == "failed"
    assert not DataDir(data_dir).model_message(charged.id).exists()
    engine.dispose()
