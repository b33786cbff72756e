"""Several labels-party processes on one PostgreSQL database (and one data directory): a process that
starts while another is privatizing a release leaves it alone; a release whose owner died is failed,
keeping its charge, once the owner's lease expires.

Process A releases on a one-worker Dask cluster whose worker holds every ``count_partition`` task —
the first step after a release's charge — while a gate file exists, so its releases stay in their work
for as long as the test needs (the optimizer alone is too fast now), and their charges, which run on
the cluster too, are not held."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from distributed import Client, LocalCluster, WorkerPlugin

from tests.support import postgres
from tests.support.servers import LabelsProcess, tenant_key

pytestmark = [pytest.mark.cluster, pytest.mark.processes, pytest.mark.postgresql]

LEASE_S = 3.0


@pytest.fixture
def shared(postgres_server: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    url = postgres.create_database(postgres_server, "multi")
    yield url, tmp_path / "data"
    postgres.drop_database(postgres_server, url)


class Gate(WorkerPlugin):
    """Holds each ``count_partition`` task on the worker, before it starts, while ``path`` exists."""

    name = "gate"

    def __init__(self, path: str) -> None:
        self.path = path

    def transition(self, key: object, start: str, finish: str, *args: object, **kwargs: object) -> None:
        if finish == "executing" and str(key).startswith("count_partition"):
            while os.path.exists(self.path):
                time.sleep(0.05)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Client, Path]]:
    """A one-worker cluster and the gate file that holds back every release's work there."""
    gate = tmp_path / "gate"
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, Client(cluster) as client:
        client.register_plugin(Gate(str(gate)))
        yield client, gate


def process(data: Path, url: str, name: str, scheduler: str | None = None) -> LabelsProcess:
    env = {"LABELDP_INSTANCE_NAME": name, "LABELDP_RELEASE_LEASE_SECONDS": str(LEASE_S)}
    if scheduler:
        env["LABELDP_DASK_SCHEDULER"] = scheduler
    return LabelsProcess(data, url, log_path=data.parent / f"{name}.log", env=env)


def slow_release(c: httpx.Client, ds: str, key: str) -> dict[str, Any]:
    """An asynchronous release (its work waits for the busy cluster)."""
    r = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"epsilon": 0.05, "recipient": "publisher", "loss": "absolute"},
        headers={"Idempotency-Key": key, "Prefer": "respond-async"},
    )
    assert r.status_code == 202, r.text
    body: dict[str, Any] = r.json()
    return body


def status(c: httpx.Client, release_id: str) -> str:
    return str(c.get(f"/v1/releases/{release_id}").json()["status"])


def wait_for(c: httpx.Client, release_id: str, wanted: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while status(c, release_id) != wanted:
        assert time.monotonic() < deadline, f"release {release_id} never became {wanted}"
        time.sleep(0.1)


def test_a_second_process_leaves_live_work_alone_and_recovers_dead_work(
    shared: tuple[str, Path], gated: tuple[Client, Path]
) -> None:
    url, data = shared
    busy, gate = gated
    data.mkdir(parents=True)
    _, key = tenant_key(url, "acme", "100")
    a = process(data, url, "host-a", busy.scheduler_info()["address"])
    a.start()
    b = process(data, url, "host-b")
    try:
        c = httpx.Client(base_url=a.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        spec = {
            "name": "prices",
            "label_type": "real",
            "lo": 0,
            "hi": 20000,
            "support": {"kind": "uniform", "k": 10000},
        }
        ds = c.post("/v1/datasets", json=spec).json()["id"]
        prices = np.random.default_rng(1).gamma(2.0, 2000.0, 20_000).round(2)  # test-only labels
        body = "example_id,label\n" + "".join(f"e{i},{min(p, 20000)}\n" for i, p in enumerate(prices))
        c.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).raise_for_status()

        gate.touch()
        live = slow_release(c, ds, "live")
        b.start()  # its start-up recovery runs while A is still privatizing
        state = status(c, live["id"])
        assert state != "failed", "B's start-up recovery failed a release that A was still working on"
        assert state == "charged", "A finished before B started: the race was not exercised"
        time.sleep(2 * LEASE_S)  # A's heartbeat keeps extending its lease; B's periodic recovery runs
        assert status(c, live["id"]) == "charged"
        gate.unlink()
        wait_for(c, live["id"], "complete")
        kinds = [e["kind"] for e in c.get("/v1/ledger").json()["items"] if e["release_id"] == live["id"]]
        assert kinds == ["charge"]  # nobody recorded a kept charge for live work

        gate.touch()
        dead = slow_release(c, ds, "dead")
        a.kill()  # the owner dies mid-work, on "another host" as far as B can tell
        other = httpx.Client(base_url=b.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        killed_at = time.monotonic()
        wait_for(other, dead["id"], "failed", timeout=10 * LEASE_S)
        assert time.monotonic() - killed_at >= 0.5 * LEASE_S  # only once the lease could have expired
        kinds = [e["kind"] for e in other.get("/v1/ledger").json()["items"] if e["release_id"] == dead["id"]]
        assert kinds == ["charge", "charge_kept"]
        assert not (data / "releases" / f"{dead['id']}.parquet").exists()
    finally:
        gate.unlink(missing_ok=True)
        b.stop()
        a.stop()
