"""``labeldp features serve --workers 2``: two processes, each with the REST API and a gRPC receiver on
the shared ports, behave as one features party. A release delivered to either is stored once and
readable from both; the same release delivered to both at once is stored once; a scrape counts both
workers' deliveries; a worker killed while it trains has its job failed (by the other worker or by the
replacement uvicorn starts) and the service keeps answering.

Which worker answers REST is made certain by stopping the other (SIGSTOP): both accept on one shared
socket. gRPC connections are spread by the kernel (SO_REUSEPORT), so deliveries use a new channel
each."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.storage.db import make_engine, session_factory
from features_party.storage.orm import TrainingJob
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.serving import THREAD_POOL_ENV
from labeldp.common.wire.sender import ReleaseMessage, build_frames
from labeldp.processes import FeaturesProcess, free_port
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER, release
from tests.support.workers import fresh, requests_counted, stopped, wait_for_workers, zombie

pytestmark = pytest.mark.processes

ROWS = 300_000


def deliver(port: int, message: ReleaseMessage, sender: Identity) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            stub = pb_grpc.FeaturesPartyStub(channel)  # type: ignore[no-untyped-call]
            stub.DeliverRelease(iter(build_frames(message, sender)), timeout=60)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
    return grpc.StatusCode.OK


def test_two_workers_are_one_features_party(tmp_path: Path) -> None:
    data = tmp_path / "features"
    grpc_port = free_port()
    env = {
        "LABELDP_FEATURES_DATA_DIR": str(data),
        "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
        "LABELDP_FEATURES_ALLOW_PLAINTEXT": "true",
        "LABELDP_FEATURES_WORKERS": "2",
        "LABELDP_FEATURES_TRAINING_LEASE_SECONDS": "2",
        "LABELDP_FEATURES_LOG_LEVEL": "warning",
    }
    server = FeaturesProcess(env)
    for name in THREAD_POOL_ENV:  # as an operator who set none (the test run sets one each)
        server.env.pop(name, None)
    key = tenant(server.env, tmp_path)
    server.start()
    engine = make_engine(f"sqlite:///{data / 'features.db'}")
    try:
        first, second = wait_for_workers(server.pid or 0, 2)
        # each worker's native thread pools get its share of the cores, not every core each
        share = str(max(1, len(os.sched_getaffinity(0)) // 2))
        for worker in (first, second):
            environ = dict(
                v.split(b"=", 1)
                for v in Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
                if b"=" in v
            )
            assert all(environ.get(name.encode()) == share.encode() for name in THREAD_POOL_ENV), environ
        c = fresh(server.base_url, key)
        sender = Identity.generate()
        c.post(
            "/v1/senders", json={"id": SENDER, "public_key_pem": public_key_pem(sender.public_key)}
        ).raise_for_status()

        # deliveries spread over both receivers, each stored once and visible from either worker
        ids = [f"e{i}" for i in range(ROWS)]
        messages = [release(ids[:2000], num_bins=4, seed=n) for n in range(6)]
        assert [deliver(grpc_port, m, sender) for m in messages] == [grpc.StatusCode.OK] * 6
        for worker in (first, second):
            with stopped(second if worker == first else first):
                listed = {r["release_id"] for r in c.get("/v1/releases").json()["items"]}
            assert listed == {m.release_id for m in messages}

        # one release sent to the party twice at once: stored once
        twice = release(ids, num_bins=4, seed=99)
        codes: list[grpc.StatusCode] = []
        threads = [
            threading.Thread(target=lambda: codes.append(deliver(grpc_port, twice, sender))) for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes, key=str).count(grpc.StatusCode.OK) >= 1, codes
        assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS}, codes
        received = [r["release_id"] for r in c.get("/v1/releases").json()["items"]]
        assert received.count(twice.release_id) == 1
        assert c.get(f"/v1/releases/{twice.release_id}").json()["example_count"] == ROWS

        # a scrape reaching one worker counts the deliveries both received (6 + the first of the 4)
        with stopped(second):
            metrics = c.get("/metrics").text
        with stopped(first):
            assert c.get("/metrics").text.count("labeldp_received_releases_total") == metrics.count(
                "labeldp_received_releases_total"
            )
        assert 'labeldp_received_releases_total{outcome="stored"} 7.0' in metrics, metrics
        before = requests_counted(metrics, "/v1/releases")
        with stopped(first):
            c.get("/v1/releases").raise_for_status()
        with stopped(second):
            assert requests_counted(c.get("/metrics").text, "/v1/releases") == before + 1

        # a worker killed while it trains: the job is failed, a new worker answers
        rng = np.random.default_rng(0)  # test data only
        table = io.BytesIO()
        pq.write_table(
            pa.table({"example_id": ids, "x": rng.normal(size=ROWS), "y": rng.normal(size=ROWS)}), table
        )
        c.put(
            "/v1/feature-tables/t",
            content=table.getvalue(),
            headers={"Content-Type": "application/vnd.apache.parquet"},
        ).raise_for_status()
        job = c.post("/v1/models", json={"release_id": twice.release_id, "feature_table": "t"}).json()["id"]
        deadline = time.monotonic() + 120
        while True:
            with session_factory(engine)() as s:
                row = s.get(TrainingJob, job)
                assert row is not None
                if row.status == "running" and row.owner:
                    owner_pid = int(row.owner.split(".")[2])
                    break
                assert row.status == "queued", f"the job ended before it could be killed: {row.status}"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(owner_pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while c.get(f"/v1/jobs/{job}").json()["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the killed worker's job was never failed"
            time.sleep(0.2)
        assert c.get(f"/v1/jobs/{job}").json()["status"] == "failed"
        wait_for_workers(server.pid or 0, 2, besides=owner_pid)
        c.get("/v1/releases").raise_for_status()
    finally:
        server.stop()
        engine.dispose()


def tenant(env: dict[str, str], folder: Path) -> str:
    """A tenant created by the CLI over the party's database (what an operator does)."""
    key_file = folder / "key"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "labeldp.cli",
            "features",
            "tenant",
            "create",
            "t",
            "--key-file",
            str(key_file),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return key_file.read_text().strip()


def test_a_lone_process_does_not_share_its_receiver_port(tmp_path: Path) -> None:
    """Without --workers the gRPC port is not shared: a second party started on the same port fails
    loudly instead of silently taking half of the first one's deliveries."""
    grpc_port = free_port()

    def party(name: str) -> FeaturesProcess:
        return FeaturesProcess(
            {
                "LABELDP_FEATURES_DATA_DIR": str(tmp_path / name),
                "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
                "LABELDP_FEATURES_ALLOW_PLAINTEXT": "true",
                "LABELDP_FEATURES_LOG_LEVEL": "warning",
            }
        )

    first, second = party("a"), party("b")
    first.start()
    try:
        with pytest.raises(RuntimeError, match="exited"):
            second.start()
    finally:
        second.stop()
        first.stop()


def test_workers_end_with_their_supervisor(tmp_path: Path) -> None:
    """``kill -9`` of the supervisor of ``features serve --workers 2``: both workers stop, so the REST
    and gRPC ports are free for the next ``serve`` (orphans kept them: "Address already in use")."""
    grpc_port = free_port()
    env = {
        "LABELDP_FEATURES_DATA_DIR": str(tmp_path / "features"),
        "LABELDP_FEATURES_GRPC_PORT": str(grpc_port),
        "LABELDP_FEATURES_ALLOW_PLAINTEXT": "true",
        "LABELDP_FEATURES_WORKERS": "2",
        "LABELDP_FEATURES_LOG_LEVEL": "warning",
    }
    server = FeaturesProcess(env)
    server.start()
    workers = wait_for_workers(server.pid or 0, 2)
    server.kill()
    deadline = time.monotonic() + 30
    while [w for w in workers if Path(f"/proc/{w}").exists() and not zombie(w)]:
        assert time.monotonic() < deadline, "a worker outlived its supervisor"
        time.sleep(0.1)
    again = FeaturesProcess(env)
    again.port = server.port
    again.start()  # binds both ports again
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
    finally:
        again.stop()
