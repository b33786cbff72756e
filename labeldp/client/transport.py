"""One service over HTTP: a base URL and a tenant's bearer key; answers parsed, lists followed across
pages, uploads streamed from disk in chunks that report the bytes sent (large files neither sit in
memory nor leave the user staring at a silent terminal)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from labeldp.client.errors import ApiError
from labeldp.client.types import (
    Page,
)

CHUNK = 1 << 20
CONTENT_TYPES = {
    ".csv": "text/csv",
    ".ndjson": "application/x-ndjson",
    ".jsonl": "application/x-ndjson",
    ".parquet": "application/vnd.apache.parquet",
}


def content_type_of(path: Path) -> str:
    """The upload's Content-Type from its extension; ``ValueError`` for any other file."""
    try:
        return CONTENT_TYPES[path.suffix.lower()]
    except KeyError:
        raise ValueError(f"{path}: use a .csv, .ndjson/.jsonl or .parquet file") from None


def _chunks(path: Path, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            if on_bytes is not None:
                on_bytes(len(block))
            yield block


class ApiClient:
    """One service: its base URL and a tenant's bearer key."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 600.0) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
        )
        # whether the last answer was an idempotent replay (``Idempotent-Replayed: true``: the first
        # answer to the same key and request, nothing charged again); per client, last call only
        self.replayed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, raw: bool = False, **kwargs: Any) -> Any:
        """The answer parsed (JSON) or as bytes; ``raw`` keeps even JSON as its exact bytes (a signed
        message: the signature covers the bytes). Each method below states the answer's type."""
        self.replayed = False  # until this call's answer says otherwise (not a previous call's)
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"{self.http.base_url}{path}: {exc}") from exc
        self.replayed = r.headers.get("Idempotent-Replayed", "").lower() == "true"
        if r.status_code >= 400:
            raise ApiError.of(r)
        json_answer = r.headers.get("content-type", "").startswith(
            ("application/json", "application/problem+json")
        )
        return r.json() if json_answer and not raw else r.content

    def items(self, path: str, *, page_size: int = 1000, **params: Any) -> Iterator[Any]:
        """Every item of a paged list, following its ``next`` links."""
        page: Page[Any] = self.call("GET", path, params={**params, "limit": page_size})
        while True:
            yield from page["items"]
            if page["next"] is None:
                return
            page = self.call("GET", page["next"])

    def upload(self, path: str, file: Path, on_bytes: Callable[[int], None] | None = None) -> Any:
        """PUT a file, streamed in 1 MiB chunks (the type follows the file's extension)."""
        headers = {"Content-Type": content_type_of(file), "Content-Length": str(file.stat().st_size)}
        return self.call("PUT", path, content=_chunks(file, on_bytes), headers=headers)
