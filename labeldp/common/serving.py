"""``labeldp labels|features serve``: one process, or ``--workers N`` processes on one port.

Several workers share everything through the party's database and data directory, never through
memory: charges, idempotency keys, ownership of unfinished work (each worker is its own ``Instance``,
so a worker that dies has its work failed by the others' recovery, or by its replacement's: uvicorn's
supervisor starts a new one) and signing keys (created once, whoever starts first). Metrics are the one
process-local thing a scrape must see whole: with several workers each writes its series to a shared
directory (prometheus_client's multiprocess mode) and ``GET /metrics`` answers their sum, whichever
worker it reaches.

Workers end with their supervisor. uvicorn stops them when it is stopped, but a supervisor killed with
SIGKILL cannot: its workers kept serving as orphans on the shared ports, and the next ``serve`` failed
with "Address already in use". So the supervisor names itself to its workers (``SUPERVISOR_ENV``) and
each worker watches it (``exit_with_supervisor``): once it is gone the worker stops as uvicorn stops it
(SIGTERM: the requests in flight finish), and exits at once if that takes longer than
``ORPHAN_GRACE_S``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from labeldp.common.lifelines import exit_with

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SUPERVISOR_ENV = "LABELDP_SUPERVISOR_PID"
THREAD_POOL_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
ORPHAN_GRACE_S = 30.0
log = logging.getLogger("labeldp.serving")


def serve(factory: str, host: str, port: int, workers: int, prepare: Callable[[], None]) -> None:
    """Serve the app that ``factory`` (``module:function``) builds from the environment's settings.

    ``prepare`` runs once, before any worker starts (migrations, the signing key), so that a
    configuration that cannot work fails here, once, instead of in a loop of restarted workers."""
    import importlib

    import uvicorn

    options = {"host": host, "port": port, "log_config": None, "access_log": False}
    # the apps install JSON-lines logging and log each request with its id: uvicorn's own stay off
    if workers <= 1:
        module, name = factory.split(":")
        uvicorn.run(getattr(importlib.import_module(module), name)(), **options)  # type: ignore[arg-type]
        return
    prepare()
    os.environ[SUPERVISOR_ENV] = str(os.getpid())  # inherited by the workers uvicorn spawns
    share_cores(workers)
    metrics_dir = _fresh_metrics_dir()
    try:
        uvicorn.run(factory, factory=True, workers=workers, **options)  # type: ignore[arg-type]
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def share_cores(workers: int) -> None:
    """Give each of ``workers`` processes its share of the cores for its native thread pools (OpenMP:
    gradient boosting, PyTorch; BLAS), unless the operator set them. Each worker trains one job at a
    time, and workers that each start a pool per core fight in their spin waits: a 2,000-row
    gradient-boosting fit took 11.5 s instead of 0.23 s beside one other busy process on 2 cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    for name in THREAD_POOL_ENV:
        os.environ.setdefault(name, str(max(1, cores // workers)))  # inherited by the workers


def _fresh_metrics_dir() -> Path | None:
    """The directory the workers' metrics share: the operator's ``PROMETHEUS_MULTIPROC_DIR`` emptied
    of an earlier run's series (which would otherwise be added in), or a new one removed at exit
    (returned)."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        folder = Path(given)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.db"):
            old.unlink(missing_ok=True)
        return None
    made = Path(tempfile.mkdtemp(prefix="labeldp-metrics-"))
    os.environ[MULTIPROC_ENV] = str(made)  # inherited by the workers uvicorn spawns
    return made


def exit_with_supervisor() -> None:
    """In a worker of ``serve --workers N``: stop when the supervisor that started it is gone (the
    module docstring). Does nothing in a process no supervisor started."""
    named = os.environ.get(SUPERVISOR_ENV, "")
    if not named.isdigit() or int(named) == os.getpid():
        return

    def orphaned() -> None:
        log.warning("the supervisor (process %s) is gone; this worker stops", named)
        deadline = threading.Timer(ORPHAN_GRACE_S, os._exit, args=(1,))
        deadline.daemon = True  # a worker that stops in time exits at once
        deadline.start()
        os.kill(os.getpid(), signal.SIGTERM)

    exit_with(int(named), orphaned)
