"""Several server processes behind one port (``serve --workers N``): finding the workers, making
certain which one answers (stop the other: both accept on one shared socket), reading a scrape."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def zombie(pid: int) -> bool:
    """Whether a process has exited (gone, or a zombie its parent has not reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def workers_of(pid: int) -> list[int]:
    """The uvicorn workers (spawned Python processes) of the ``serve`` process ``pid``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in map(int, children):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return sorted(found)


def wait_for_workers(pid: int, n: int, timeout: float = 60.0, besides: int | None = None) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = workers_of(pid)
        if len(found) == n and besides not in found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"expected {n} workers of {pid}, found {workers_of(pid)}")


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def fresh(base: str, key: str) -> httpx.Client:
    """A client whose every request opens its own connection (so a stopped worker holds none)."""
    return httpx.Client(
        base_url=base,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def requests_counted(metrics: str, route: str) -> float:
    pattern = rf'labeldp_http_requests_total{{method="GET",route="{re.escape(route)}",status="200"}} (\S+)'
    found = re.search(pattern, metrics)
    return float(found.group(1)) if found else 0.0
