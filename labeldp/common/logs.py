"""JSON-lines logging shared by both services: one object per line, with a request id.

Only fields named in ``SAFE_FIELDS`` are copied from a record's extras, so an accidental
``extra={"labels": ...}`` can never put a label value into the logs.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

SAFE_FIELDS = (
    "request_id",
    "method",
    "path",
    "status",
    "duration_ms",
    "tenant_id",
    "release_id",
    "dataset_id",
    "examples",
    "epsilon",
    "releases",
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in SAFE_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(out, default=str)


def configure(level: str = "info") -> None:
    """Send labeldp's and uvicorn's loggers to stderr as JSON lines (uvicorn is started with
    ``log_config=None`` so that it does not install its own text handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("labeldp", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # replaced by ``request_logger``


REQUEST_ID = re.compile(r"[!-~]{1,200}")


def request_logger(
    name: str,
) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    """HTTP middleware: a request id per request (echoed as ``X-Request-ID``) and one access line."""
    log = logging.getLogger(name)

    async def middleware(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        given = request.headers.get("x-request-id", "")
        # a caller's ID is kept when it is short printable ASCII; anything else is replaced, never logged
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        request.state.request_id = request_id
        start = time.perf_counter()
        response = await call_next(request)
        response.headers["X-Request-ID"] = request_id
        log.info(
            "request",
            extra={
                "request_id": request_id,
                "method": request.method,
                "path": request.url.path,
                "status": response.status_code,
                "duration_ms": round(1000 * (time.perf_counter() - start), 1),
            },
        )
        return response

    return middleware
