"""The training queue of one process: bounded per tenant, served round-robin across tenants.

One worker thread runs one job at a time (a job holds a whole table in memory). Waiting jobs are kept
per tenant, first in first out, and the worker takes the next job of the tenant that started one
least recently (a tenant that has not started one yet goes first): a tenant that queues a hundred
jobs delays another tenant's job by at most one job per other waiting tenant, not by a hundred. A
tenant may have at most ``per_tenant`` jobs waiting (the running one aside); one more is refused
before anything is stored (429 ``too-many-jobs`` with ``Retry-After``).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from labeldp.common.errors import DomainError

log = logging.getLogger("labeldp.features.training")

_DEFAULT_JOB_S = 30.0  # the duration Retry-After assumes before any job has finished here


class TooManyJobsError(DomainError):
    """429: the tenant's queue in this process is full; ``retry_after_s`` estimates when a place frees."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(
            "too-many-jobs",
            f"this tenant has {limit} training jobs waiting already; retry when one has started",
            status=429,
            retry_after=retry_after_s,
        )
        self.retry_after_s = retry_after_s


class FairQueue:
    """Waiting jobs per tenant; ``worker`` runs them with ``run(job_id)``, one at a time."""

    def __init__(self, per_tenant: int, run: Callable[[str], None]) -> None:
        self.per_tenant, self._run = per_tenant, run
        self._ready = threading.Condition()
        self._waiting: dict[str, deque[tuple[int, str]]] = {}  # (arrival, job id)
        self._reserved: dict[str, int] = {}
        self._last_start: dict[str, int] = {}
        self._ticks = itertools.count(1)
        self._mean_job_s = _DEFAULT_JOB_S
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="training", daemon=True)
        self._thread.start()

    def reserve(self, tenant: str) -> None:
        """Hold a place for one of ``tenant``'s jobs (``TooManyJobsError`` when it has none left); then
        ``put`` the job, or ``cancel`` the place if it was not stored."""
        with self._ready:
            if len(self._waiting.get(tenant, ())) + self._reserved.get(tenant, 0) >= self.per_tenant:
                active = sum(1 for q in self._waiting.values() if q)
                retry = math.ceil(self._mean_job_s * max(active, 1))
                raise TooManyJobsError(self.per_tenant, min(max(retry, 1), 3600))
            self._reserved[tenant] = self._reserved.get(tenant, 0) + 1

    def cancel(self, tenant: str) -> None:
        with self._ready:
            self._reserved[tenant] -= 1

    def put(self, tenant: str, job_id: str) -> None:
        with self._ready:
            self._reserved[tenant] -= 1
            self._waiting.setdefault(tenant, deque()).append((next(self._ticks), job_id))
            self._ready.notify()

    def waiting(self, tenant: str) -> int:
        with self._ready:
            return len(self._waiting.get(tenant, ()))

    def _next(self) -> str | None:
        """The next job of the tenant that started one least recently (among tenants that never did, the
        one whose job came first); None once closed and drained."""
        with self._ready:
            while True:
                tenants = [t for t, q in self._waiting.items() if q]
                if tenants:
                    tenant = min(tenants, key=lambda t: (self._last_start.get(t, 0), self._waiting[t][0][0]))
                    self._last_start[tenant] = next(self._ticks)
                    return self._waiting[tenant].popleft()[1]
                if self._closed:
                    return None
                self._ready.wait()

    def _work(self) -> None:
        while (job_id := self._next()) is not None:
            started = time.monotonic()
            try:
                self._run(job_id)
            except Exception:  # the job body keeps its own errors; this keeps the worker alive
                log.exception("training job crashed", extra={"release_id": job_id})
            finally:
                self._mean_job_s = 0.8 * self._mean_job_s + 0.2 * (time.monotonic() - started)

    def shutdown(self) -> None:
        """Run what is queued, then stop (as the executor before it did)."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self._thread.join()
