"""Shared set-up of the semi-sensitive model tests: a labels party over HTTP with its tenant, a
synthetic dataset whose labels depend mostly on the semi-sensitive columns, requests, and a spy on
the CSPRNG."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from labeldp.mechanisms import rng
from labels_party.budget.epsilon import to_atto_floor, to_micro_floor
from labels_party.budget.ledger import set_delta_budget, set_user_budget
from labels_party.config import LabelsSettings
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry
from tests.support.servers import labels_server_thread, tenant_key

N = 1200
SPEC: dict[str, Any] = {
    "name": "purchases",
    "label_type": "binary",
    "lo": 0,
    "hi": 1,
    "semi_sensitive": [
        {"name": "cart_adds", "kind": "number", "lo": 0, "hi": 10},
        {"name": "remarketing", "kind": "category", "categories": ["none", "shoes"]},
    ],
    "non_sensitive": [
        {"name": "hour", "kind": "number", "lo": 0, "hi": 24},
        {"name": "device", "kind": "category", "categories": ["mobile", "desktop"]},
    ],
}


class Party:
    """One tenant of a labels party over HTTP (``acme`` by default, ε = 10 per example)."""

    def __init__(self, base: str, database_url: str, data_dir: Path, tenant: str = "acme") -> None:
        self.base, self.database_url, self.data_dir = base, database_url, data_dir
        self.tenant_id, key = tenant_key(database_url, tenant, "10")
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=300)

    def tenant(self, name: str) -> Party:
        """Another tenant of the same labels party."""
        return Party(self.base, self.database_url, self.data_dir, name)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction on the party's database, behind its API's back (budgets, rows to inspect)."""
        engine = make_engine(self.database_url)
        try:
            with session_factory(engine).begin() as s:
                yield s
        finally:
            engine.dispose()

    def set_delta(self, delta: str) -> None:
        with self.session() as s:
            set_delta_budget(s, self.tenant_id, to_atto_floor(delta), api_key_id=None, note="test")

    def set_user_budget(self, budget: str) -> None:
        with self.session() as s:
            set_user_budget(s, self.tenant_id, to_micro_floor(budget), api_key_id=None, note="test")

    def rows(self, model: type[Any]) -> list[Any]:
        with self.session() as s:
            return list(s.execute(select(model)).scalars())


def synthetic() -> tuple[pa.Table, pa.Table]:
    """Labels that depend mostly on the semi-sensitive columns (what phase 2 is for)."""
    g = np.random.default_rng(3)
    cart = g.integers(0, 11, N)
    shoes = g.integers(0, 2, N)
    hour = g.integers(0, 24, N)
    mobile = g.integers(0, 2, N)
    score = 0.6 * cart - 3 + 1.5 * shoes + 0.3 * mobile + g.logistic(size=N)
    ids = [f"click-{i}" for i in range(N)]
    labels = pa.table(
        {
            "example_id": ids,
            "label": (score > 0).astype(np.int64),
            "cart_adds": cart,
            "remarketing": np.where(shoes == 1, "shoes", "none"),
        }
    )
    features = pa.table(
        {"example_id": ids, "hour": hour, "device": np.where(mobile == 1, "mobile", "desktop")}
    )
    return labels, features


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def prepared(p: Party, upload_features: bool = True) -> tuple[str, str]:
    """A dataset with labels, semi-sensitive and (optionally) non-sensitive rows, and a label release."""
    ds = prepared_dataset(p, upload_features)
    made = p.client.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 3.0, "recipient": "publisher"},
        headers={"Idempotency-Key": "phase-1"},
    )
    assert made.status_code == 201, made.text
    return ds, made.json()["id"]


def prepared_dataset(p: Party, upload_features: bool = True) -> str:
    """A dataset with labels, semi-sensitive and (optionally) non-sensitive rows; no release yet."""
    c = p.client
    labels, features = synthetic()
    assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json=SPEC).json()["id"]
    put = c.put(
        f"/v1/datasets/{ds}/labels",
        content=parquet(labels),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
    assert put.status_code == 200, put.text
    if upload_features:
        put = c.put(
            f"/v1/datasets/{ds}/non-sensitive-features",
            content=parquet(features),
            headers={"Content-Type": "application/vnd.apache.parquet"},
        )
        assert put.status_code == 200 and put.json()["rows"] == N, put.text
    return str(ds)


def body(release_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "label_release_id": release_id,
        "epsilon_dpsgd": 2.0,
        "delta": 1e-7,
        "epochs": 2,
        "batch_size": 200,
        **extra,
    }


class DrawSpy:
    """Records, for every CSPRNG stream the service opens, whether the DP-SGD charge had already been
    committed (a real SecureRandom runs; the spy only looks at the ledger when one is created)."""

    def __init__(self, p: Party, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[bool] = []
        original = rng.SecureRandom.__init__
        spy = self

        def init(self_: rng.SecureRandom) -> None:
            if threading.current_thread() is not threading.main_thread():  # the server's threads
                entries = p.rows(LedgerEntry)
                spy.seen.append(any(e.delta_atto and e.kind == "charge" for e in entries))
            original(self_)

        monkeypatch.setattr(rng.SecureRandom, "__init__", init)


def users_dataset(p: Party, clicks_per_user: int, key: str, **release: Any) -> tuple[str, str]:
    """Labels (with the non-sensitive rows) whose users have ``clicks_per_user`` clicks each, and a
    label release of them (example level unless ``release`` says otherwise)."""
    c = p.client
    labels, features = synthetic()
    users = pa.array([f"user-{i // clicks_per_user}" for i in range(N)])
    labels = labels.add_column(2, "user_id", users)
    if c.get("/v1/recipients").json()["items"] == []:
        assert c.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    ds = c.post("/v1/datasets", json={**SPEC, "name": f"purchases-{key}"}).json()["id"]
    ptype = {"Content-Type": "application/vnd.apache.parquet"}
    assert c.put(f"/v1/datasets/{ds}/labels", content=parquet(labels), headers=ptype).status_code == 200
    put = c.put(f"/v1/datasets/{ds}/non-sensitive-features", content=parquet(features), headers=ptype)
    assert put.status_code == 200
    made = c.post(
        f"/v1/datasets/{ds}/releases",
        headers={"Idempotency-Key": f"release-{key}"},
        json={"recipient": "publisher", **(release or {"epsilon": 1.0})},
    )
    assert made.status_code == 201, made.text
    return ds, made.json()["id"]


@contextmanager
def labels_party_at(database_url: str, tmp_path: Path) -> Iterator[Party]:
    """A labels party in a thread with the tenant ``acme`` (ε = 10 per example)."""
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=database_url)
    with labels_server_thread(settings) as base:
        yield Party(base, database_url, settings.data_dir)
