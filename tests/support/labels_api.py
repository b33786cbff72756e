"""Shared test helpers."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.parquet as pq

from tests.support.servers import tenant_key

WEEKS: dict[str, Any] = {"label_type": "count", "lo": 0, "hi": 52}


@dataclass
class Api:
    base: str
    database_url: str
    data_dir: Path

    def tenant(self, name: str, budget: str = "1.0", per_user: str | None = None) -> httpx.Client:
        _, key = tenant_key(self.database_url, name, budget, per_user)
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def problem(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = resp.json()
    assert body["type"] == code and body["status"] == status and body["detail"]
    return body


def csv(rows: list[tuple[str, object]], header: str = "example_id,label") -> bytes:
    return (header + "\n" + "\n".join(f"{a},{b}" for a, b in rows) + "\n").encode()


def dataset(client: httpx.Client, name: str = "weeks", **spec: Any) -> str:
    resp = client.post("/v1/datasets", json={"name": name, **(spec or WEEKS)})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def upload(
    client: httpx.Client, ds: str, body: bytes, ctype: str = "text/csv", what: str = "labels"
) -> httpx.Response:
    return client.put(f"/v1/datasets/{ds}/{what}", content=body, headers={"Content-Type": ctype})


def release(client: httpx.Client, ds: str, key: str, **body: Any) -> httpx.Response:
    payload = {"epsilon": 0.5, "recipient": "publisher", **body}
    return client.post(f"/v1/datasets/{ds}/releases", json=payload, headers={"Idempotency-Key": key})


def with_recipient(client: httpx.Client) -> httpx.Client:
    assert client.post("/v1/recipients", json={"name": "publisher"}).status_code == 201
    return client


def charges(client: httpx.Client) -> list[dict[str, Any]]:
    items = client.get("/v1/ledger", params={"limit": 1000}).json()["items"]
    return [e for e in items if e["kind"] == "charge"]


def race(n: int, fn: Any) -> list[httpx.Response]:
    results: list[httpx.Response] = []
    lock = threading.Lock()
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        resp = fn(i)
        with lock:
            results.append(resp)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def users_csv(rows: list[tuple[str, int, str | None]]) -> bytes:
    lines = ["example_id,label,user_id"] + [f"{e},{y},{u or ''}" for e, y, u in rows]
    return ("\n".join(lines) + "\n").encode()


def heavy_users(users: int = 60, prefix: str = "e") -> list[tuple[str, int, str | None]]:
    """User u<i> has 1 + i % 7 examples; the last five examples have no user_id (their own users)."""
    rows = [(f"{prefix}{u}-{j}", (u + j) % 10, f"u{u}") for u in range(users) for j in range(1 + u % 7)]
    return rows + [(f"{prefix}lone{j}", j, None) for j in range(5)]


def labelled(c: object, n: int = 60_000, hi: int = 9) -> tuple[str, dict[str, int]]:
    """A count dataset 0..hi with n labels spread over the support."""
    ds = dataset(c, "counts", label_type="count", lo=0, hi=hi)  # type: ignore[arg-type]
    truth = {f"e{i}": (i * 7) % (hi + 1) for i in range(n)}
    assert upload(c, ds, csv(list(truth.items()))).status_code == 200  # type: ignore[arg-type]
    return ds, truth


def noisy(c: object, release_id: str) -> tuple[list[str], np.ndarray]:
    data = c.get(f"/v1/releases/{release_id}/noisy-labels").content  # type: ignore[attr-defined]
    table = pq.read_table(io.BytesIO(data))
    return table.column("example_id").to_pylist(), np.asarray(table.column("bin").to_numpy(), dtype=np.int64)
