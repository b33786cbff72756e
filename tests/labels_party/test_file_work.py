"""Uploads are validated and merged in file-work processes (``labeldp.common.offload``), through the
labels party's real HTTP API: the work runs outside the server process, a refusal raised there reaches
the caller whole, and a file-work process that dies fails only its upload — nothing stored, nothing
left behind — while another tenant's upload beside it lands."""

from __future__ import annotations

import contextlib
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
from tests.support.workers import zombie


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def busy_children(idle: dict[int, float], root: int | None = None, threshold: float = 0.3) -> list[int]:
    """The file-work processes (descendants of ``root``, by default this process, in which the server
    runs in a thread) that used more than ``threshold`` s of CPU since ``idle`` was taken (new ones
    count from zero)."""
    found = []
    for pid in descendants(root or os.getpid()):
        try:
            if cpu_seconds(pid) - idle.get(pid, 0.0) > threshold:
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def test_a_file_work_process_that_dies_fails_only_its_upload(tmp_path: Path) -> None:
    """Two tenants upload at once, each in a file-work process of its own; killing one process fails
    that tenant's upload alone (500, nothing stored, nothing left behind) while the other tenant's
    upload lands — and the next upload gets a process of its own again."""
    data = tmp_path / "data"
    url = sqlite_url(tmp_path)
    _, key_a = tenant_key(url, "acme", "10")
    _, key_b = tenant_key(url, "globex", "10")
    app = create_app(LabelsSettings(data_dir=data, database_url=url, file_workers=2))
    offload: Offload = app.state.services.datasets.offload
    with serve_in_thread(app) as base:
        a, b = (
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {k}"}, timeout=120)
            for k in (key_a, key_b)
        )
        ds_a, ds_b = dataset(a), dataset(b)
        assert upload(a, ds_a, csv([(f"e{i}", i % 53) for i in range(100)])).status_code == 200
        worker = offload.run(os.getpid)
        assert worker != os.getpid()  # the file work runs in another process

        big = csv([(f"big-{i}", i % 53) for i in range(1_500_000)])
        answers: dict[str, httpx.Response] = {}
        idle = {p: cpu_seconds(p) for p in descendants(os.getpid())}
        first = threading.Thread(target=lambda: answers.update(a=upload(a, ds_a, big)))
        first.start()
        deadline = time.monotonic() + 60
        while not busy_children(idle):  # acme's upload is being validated
            assert time.monotonic() < deadline and first.is_alive()
            time.sleep(0.02)
        (victim,) = busy_children(idle)
        second = threading.Thread(target=lambda: answers.update(b=upload(b, ds_b, big)))
        second.start()
        while len(busy_children(idle)) < 2:  # and globex's, in another process
            assert time.monotonic() < deadline and second.is_alive()
            time.sleep(0.02)
        os.kill(victim, signal.SIGKILL)
        first.join(timeout=120)
        second.join(timeout=120)

        failed = problem(answers["a"], 500, "internal-error")
        assert failed["request_id"] == answers["a"].headers["X-Request-ID"]  # the line to look for
        assert answers["b"].status_code == 200, answers["b"].text  # the other tenant's upload landed
        assert b.get(f"/v1/datasets/{ds_b}").json()["label_count"] == 1_500_000
        assert a.get(f"/v1/datasets/{ds_a}").json()["label_count"] == 100  # nothing stored
        assert not [p for p in data.rglob("*") if p.is_file() and "staging" in str(p)]
        assert upload(a, ds_a, csv([(f"n{i}", 1) for i in range(10)])).json()["label_count"] == 110
        assert offload.run(os.getpid) not in (worker, victim, os.getpid())  # a process of its own


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
    """``kill -9`` of ``labeldp labels serve`` while a file-work process validates an upload leaves no
    process behind: neither that one (it would finish work nobody waits for) nor the fork server."""
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    server = LabelsProcess(tmp_path / "data", url)
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(100)])).status_code == 200
        assert server.proc is not None
        idle = {p: cpu_seconds(p) for p in descendants(server.proc.pid)}
        big = csv([(f"big-{i}", i % 53) for i in range(1_500_000)])

        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server is killed under it
                upload(c, ds, big)

        sending = threading.Thread(target=send)
        sending.start()
        deadline = time.monotonic() + 60
        while not busy_children(idle, server.proc.pid):
            assert time.monotonic() < deadline and sending.is_alive()
            time.sleep(0.02)
        started = descendants(server.proc.pid)
        assert len(started) >= 2  # the fork server and the file-work process
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while [p for p in started if Path(f"/proc/{p}").exists() and not zombie(p)]:
            assert time.monotonic() < deadline, [p for p in started if Path(f"/proc/{p}").exists()]
            time.sleep(0.1)
        sending.join(timeout=60)
    finally:
        server.stop()


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
    answers: list[httpx.Response] = []
    sending = threading.Thread(
        target=lambda: answers.append(upload(c, ds, csv([(f"b{i}", i % 53) for i in range(1_000_000)])))
    )
    idle = {p: cpu_seconds(p) for p in descendants(server.proc.pid)}
    sending.start()
    deadline = time.monotonic() + 60
    while not busy_children(idle, server.proc.pid):  # a file-work process is validating the upload
        assert time.monotonic() < deadline and sending.is_alive()
        time.sleep(0.02)
    started = descendants(server.proc.pid)  # the fork server and the file-work process
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
