"""``labeldp labels|features serve``: one process, or ``--workers N`` processes on one port.

Several workers share everything through the party's database and data directory, never through
memory: charges, idempotency keys, ownership of unfinished work (each worker is its own ``Instance``,
so a worker that dies has its work failed by the others' recovery, or by its replacement's: uvicorn's
supervisor starts a new one) and signing keys (created once, whoever starts first). Metrics are the one
process-local thing a scrape must see whole: with several workers each writes its series to a shared
directory (prometheus_client's multiprocess mode) and ``GET /metrics`` answers their sum, whichever
worker it reaches.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


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
    metrics_dir = _fresh_metrics_dir()
    try:
        uvicorn.run(factory, factory=True, workers=workers, **options)  # type: ignore[arg-type]
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


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
