"""``labeldp labels serve --workers 2``: two server processes on one port must behave as one service.
Idempotency and the exact ledger hold when the same requests reach both; a metrics scrape answers for
both whichever one it reaches; a worker killed in the middle of a release has its work failed with the
charge kept (by the other worker or by the replacement uvicorn starts), and the service keeps answering.

Which worker answers is made certain, not left to the kernel: the other one is stopped (SIGSTOP) while
the requests are made on new connections."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from labels_party.budget.segments import SegmentStore
from labels_party.budget.summaries import spend_of_tenant
from labels_party.storage.data_dir import DataDir
from labels_party.storage.db import make_engine, session_factory
from labels_party.storage.orm import LedgerEntry, Release
from tests.support.servers import LabelsProcess, tenant_key
from tests.support.workers import fresh, requests_counted, stopped, wait_for_workers, zombie

pytestmark = pytest.mark.processes

EXAMPLES = 200_000
EPSILON = 0.01


def test_two_workers_are_one_service(database_url: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    tenant_id, key = tenant_key(database_url, "acme", "100")
    server = LabelsProcess(
        data_dir, database_url, env={"LABELDP_WORKERS": "2", "LABELDP_RELEASE_LEASE_SECONDS": "2"}
    )
    server.start()
    engine = make_engine(database_url)
    try:
        first, second = wait_for_workers(server.pid or 0, 2)
        c = fresh(server.base_url, key)
        c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        spec = {"label_type": "count", "lo": 0, "hi": 52}
        ds = c.post("/v1/datasets", json={"name": "w", **spec}).json()["id"]
        body = "example_id,label\n" + "".join(f"e{i},{i % 53}\n" for i in range(EXAMPLES))
        c.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).raise_for_status()

        # the same idempotency key, once on each worker: one release, one charge
        answers: dict[str, list[str]] = {}
        for n in range(3):
            for worker in (first, second):
                with stopped(second if worker == first else first):
                    r = c.post(
                        f"/v1/datasets/{ds}/releases",
                        json={"epsilon": EPSILON, "recipient": "publisher"},
                        headers={"Idempotency-Key": f"k{n}"},
                    )
                assert r.status_code in (200, 201), r.text
                answers.setdefault(f"k{n}", []).append(r.json()["id"])
        assert all(len(set(ids)) == 1 for ids in answers.values()), answers
        # and concurrently on both, with new keys
        statuses: list[int] = []

        def release(n: int) -> None:
            r = fresh(server.base_url, key).post(
                f"/v1/datasets/{ds}/releases",
                json={"epsilon": EPSILON, "recipient": "publisher"},
                headers={"Idempotency-Key": f"c{n % 3}"},
            )
            statuses.append(r.status_code)

        threads = [threading.Thread(target=release, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(set(statuses)) <= [200, 201] and len(statuses) == 6, statuses
        with session_factory(engine)() as s:
            _, spent = spend_of_tenant(s, tenant_id, SegmentStore(DataDir(data_dir).ledger))
            assert spent.size == EXAMPLES
            six = 6 * int(EPSILON * 1e6)
            assert (int(spent.min()), int(spent.max())) == (six, six)  # 3 + 3 keys: 6 charges exactly

        # a scrape reaching one worker counts what the other answered
        with stopped(second):
            before = requests_counted(c.get("/metrics").text, "/v1/datasets")
            for _ in range(7):
                c.get("/v1/datasets").raise_for_status()
        with stopped(first):
            after = requests_counted(c.get("/metrics").text, "/v1/datasets")
        assert after - before == 7

        # a worker killed in a release's work: failed with its charge kept, a new worker started
        for attempt in range(5):
            r = c.post(
                f"/v1/datasets/{ds}/releases",
                json={"epsilon": EPSILON, "recipient": "publisher"},
                headers={"Idempotency-Key": f"kill{attempt}", "Prefer": "respond-async"},
            )
            assert r.status_code == 202, r.text
            release_id = r.json()["id"]
            with session_factory(engine)() as s:
                row = s.get(Release, release_id)
                assert row is not None and row.owner is not None
                status, owner_pid = row.status, int(row.owner.split(".")[2])
            if status != "charged":
                continue  # finished before it could be killed: try again
            os.kill(owner_pid, signal.SIGKILL)
            break
        else:
            pytest.fail("no release was still in its work when its worker was killed")
        deadline = time.monotonic() + 60
        while c.get(f"/v1/releases/{release_id}").json()["status"] == "charged":
            assert time.monotonic() < deadline, "the killed worker's release was never failed"
            time.sleep(0.2)
        assert c.get(f"/v1/releases/{release_id}").json()["status"] == "failed"
        with session_factory(engine)() as s:
            kept = s.execute(
                select(LedgerEntry.release_id).where(LedgerEntry.kind == "charge_kept")
            ).scalars()
            assert release_id in {str(k) for k in kept}
        wait_for_workers(server.pid or 0, 2, besides=owner_pid)
        c.get("/v1/datasets").raise_for_status()
    finally:
        server.stop()
        engine.dispose()


def test_workers_end_with_their_supervisor(tmp_path: Path) -> None:
    """``kill -9`` of the ``serve --workers 2`` supervisor: its workers stop (they kept serving as
    orphans, and the next ``serve`` on the port failed with "Address already in use"), and a new
    ``serve`` on the same port answers."""
    url = f"sqlite:///{tmp_path / 'labels.db'}"
    _, key = tenant_key(url, "acme", "10")
    server = LabelsProcess(tmp_path / "data", url, env={"LABELDP_WORKERS": "2"})
    server.start()
    assert server.proc is not None
    workers = wait_for_workers(server.proc.pid, 2)
    server.kill()
    deadline = time.monotonic() + 30
    while [w for w in workers if Path(f"/proc/{w}").exists() and not zombie(w)]:
        assert time.monotonic() < deadline, "a worker outlived its supervisor"
        time.sleep(0.1)
    again = LabelsProcess(tmp_path / "data", url, env={"LABELDP_WORKERS": "2"})
    again.port = server.port  # the same port: free again
    again.start()
    try:
        assert fresh(again.base_url, key).get("/v1/datasets").status_code == 200
    finally:
        again.stop()
