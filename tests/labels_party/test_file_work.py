"""Uploads are validated and merged in file-work processes (``labeldp.common.offload``), through the
labels party's real HTTP API: the work runs outside the server process, a refusal raised there reaches
the caller whole, and a file-work process that dies fails only its upload — nothing stored, nothing
left behind — while the next upload gets a new one."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from labeldp.common.offload import Offload
from labels_party.api.app import create_app
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.labels_api import csv, dataset, problem, upload
from tests.support.servers import LabelsProcess, descendants, serve_in_thread, tenant_key


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_file_work_process_that_dies_fails_only_its_upload(tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    app = create_app(LabelsSettings(data_dir=data, database_url=url, file_workers=1))
    offload: Offload = app.state.services.datasets.offload
    with serve_in_thread(app) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(100)])).status_code == 200
        worker = offload.run(os.getpid)
        assert worker != os.getpid()  # the file work runs in another process

        big = csv([(f"big-{i}", i % 53) for i in range(1_500_000)])
        answers: list[httpx.Response] = []
        sending = threading.Thread(target=lambda: answers.append(upload(c, ds, big)))
        idle = cpu_seconds(worker)
        sending.start()
        deadline = time.monotonic() + 60
        while cpu_seconds(worker) - idle < 0.3:  # the worker is validating the upload
            assert time.monotonic() < deadline and sending.is_alive()
            time.sleep(0.02)
        os.kill(worker, signal.SIGKILL)
        sending.join(timeout=60)

        failed = problem(answers[0], 500, "internal-error")
        assert failed["request_id"] == answers[0].headers["X-Request-ID"]  # the line to look for
        assert c.get(f"/v1/datasets/{ds}").json()["label_count"] == 100  # nothing stored
        assert not [p for p in data.rglob("*") if p.is_file() and "staging" in str(p)]
        assert upload(c, ds, csv([(f"n{i}", 1) for i in range(10)])).json()["label_count"] == 110
        assert offload.run(os.getpid) not in (worker, os.getpid())  # a new file-work process


@pytest.mark.parametrize("workers", [0, 2])
def test_a_refused_upload_reads_the_same_from_a_file_work_process(tmp_path: Path, workers: int) -> None:
    """The problem+json of a refused upload (code, rows, columns) is the same whether the validation
    ran in the server's thread or in a file-work process."""
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=url, file_workers=workers)
    with serve_in_thread(create_app(settings)) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = dataset(c)
        dup = problem(upload(c, ds, csv([("x", 1), ("y", 2), ("x", 3)])), 422, "duplicate-example-id")
        assert dup["rows"] == [1, 3]
        bad = problem(upload(c, ds, csv([("a", 1), ("b", 99)])), 422, "out-of-bounds")
        assert bad["rows"] == [2]
        universe = upload(c, ds, b"example_id,user_id\na,u1\nb,u2\n", what="universe")
        assert universe.status_code == 200 and universe.json()["rows"] == 2
        conflict = problem(upload(c, ds, b"example_id,label,user_id\na,1,u9\n"), 422, "user-id-conflict")
        assert conflict["rows"] == [1] and conflict["columns"] == ["user_id"]
        assert c.get(f"/v1/datasets/{ds}").json()["label_count"] == 0


@pytest.mark.processes
def test_a_killed_server_takes_its_file_work_processes_with_it(tmp_path: Path) -> None:
    """``kill -9`` of ``labeldp labels serve`` leaves no file-work process (nor the fork server that
    started it) waiting for ever."""
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    server = LabelsProcess(tmp_path / "data", url)
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(100)])).status_code == 200
        assert server.proc is not None
        started = descendants(server.proc.pid)
        assert started  # the fork server and its file-work processes
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while [p for p in started if Path(f"/proc/{p}").exists() and not zombie(p)]:
            assert time.monotonic() < deadline, [p for p in started if Path(f"/proc/{p}").exists()]
            time.sleep(0.1)
    finally:
        server.stop()


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.processes
def test_ctrl_c_finishes_the_upload_in_flight_and_stops_every_process_quietly(tmp_path: Path) -> None:
    """A Ctrl-C reaches the server's whole process group: the upload under way still lands (the
    file-work processes ignore the signal; the server stops them once its requests are done), the
    server exits 0, nothing prints a traceback, and no process is left."""
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    log = tmp_path / "server.log"
    server = LabelsProcess(tmp_path / "data", url, log_path=log)
    server.start()
    assert server.proc is not None
    c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    ds = dataset(c)
    assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(100)])).status_code == 200
    started = descendants(server.proc.pid)  # the fork server and the file-work processes
    answers: list[httpx.Response] = []
    sending = threading.Thread(
        target=lambda: answers.append(upload(c, ds, csv([(f"b{i}", i % 53) for i in range(1_000_000)])))
    )
    idle = {p: cpu_seconds(p) for p in started}
    sending.start()
    deadline = time.monotonic() + 60
    while not any(cpu_seconds(p) - idle[p] > 0.3 for p in started):  # one is validating the upload
        assert time.monotonic() < deadline and sending.is_alive()
        time.sleep(0.02)
    os.killpg(server.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    sending.join(timeout=120)
    assert server.proc.wait(timeout=60) == 0
    assert answers[0].status_code == 200 and answers[0].json()["label_count"] == 1_000_100
    assert "Traceback" not in log.read_text()
    deadline = time.monotonic() + 20
    while [p for p in started if Path(f"/proc/{p}").exists() and not zombie(p)]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    server.proc = None
