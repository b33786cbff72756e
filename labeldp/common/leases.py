"""Work that outlives a request, owned by one process: who may give up on it, and the heartbeat that
says its owner is still there.

A job row records its owner (``Instance.token``) and until when its lease runs. The owner's heartbeat
extends the lease every third of its length. Another process gives up on a job — fails it — only
when its owner is certainly gone (same host, process no longer running) or its lease expired; a job
owned by a live process is never touched, however long it takes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from labeldp.common.instance import Instance

log = logging.getLogger("labeldp.leases")


def abandoned(
    owner: str | None, lease_expires_at: datetime | None, instance: Instance, now: datetime
) -> bool:
    """Whether another process may fail a job with this owner and lease (never this process's own)."""
    if owner == instance.token:
        return False
    return lease_expires_at is None or lease_expires_at < now or instance.owner_is_gone(owner)


@contextmanager
def heartbeat(period_seconds: float, beat: Callable[[], None], name: str) -> Iterator[None]:
    """Call ``beat`` every ``period_seconds`` while the block runs (a failed beat is logged: it only
    shortens the lease, and the next one retries)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period_seconds):
            try:
                beat()
            except Exception:
                log.exception("lease heartbeat failed")

    thread = threading.Thread(target=loop, daemon=True, name=name)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
