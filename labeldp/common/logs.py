"""JSON-lines logging shared by both services: one object per line, with a request id.

Only fields named in ``SAFE_FIELDS`` are copied from a record's extras, so an accidental
``extra={"labels": ...}`` can never put a label value into the logs.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from datetime import UTC, datetime

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
    "priors_id",
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
    logging.getLogger("uvicorn.access").disabled = True  # replaced by ``access`` (``service.Observed``)


MAX_REQUEST_ID = 200
REQUEST_ID = re.compile(rf"[!-~]{{1,{MAX_REQUEST_ID}}}")


def request_id(given: str) -> str:
    """A request's id: the caller's ``X-Request-ID`` when it is short printable ASCII; otherwise a fresh
    one (anything else is never logged; a request that sent one is refused: ``service.Observed``)."""
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def access(log: logging.Logger, request_id: str, method: str, path: str, status: int, seconds: float) -> None:
    """One access line a request."""
    log.info(
        "request",
        extra={
            "request_id": request_id,
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(1000 * seconds, 1),
        },
    )
