"""What every labeldp HTTP service has: problem+json errors, JSON request logs with request ids,
``/healthz`` and Prometheus ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from labeldp import __version__
from labeldp.common import errors as problems
from labeldp.common import logs, metrics


def service_app(
    title: str,
    description: str,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
    http_logger: str,
    service_metrics: metrics.ServiceMetrics,
) -> FastAPI:
    app = FastAPI(title=title, version=__version__, description=description, lifespan=lifespan)
    problems.install(app)
    metrics.install(app, service_metrics)
    app.middleware("http")(logs.request_logger(http_logger))  # outermost: sees every response

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
