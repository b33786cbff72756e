"""Streaming an HTTP request body to a temporary file: bounded memory, enforced size limit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from starlette.requests import Request

from labeldp.common.errors import DomainError


async def spool_body(request: Request, directory: Path, max_bytes: int, suffix: str) -> Path:
    """Write the body to a new file under ``directory``; 413 (and no file) past ``max_bytes``."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, suffix=suffix)
    path = Path(name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise DomainError(
                        "payload-too-large", f"uploads are limited to {max_bytes} bytes", status=413
                    )
                fh.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path
