"""What every labeldp HTTP service has: problem+json errors, JSON request logs with request ids, and
``/healthz``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from labeldp import __version__, logs, problems


def service_app(
    title: str,
    description: str,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
    http_logger: str,
) -> FastAPI:
    app = FastAPI(title=title, version=__version__, description=description, lifespan=lifespan)
    problems.install(app)
    app.middleware("http")(logs.request_logger(http_logger))

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
