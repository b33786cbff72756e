"""The request middleware (``labeldp.common.service.Observed``) through the ASGI interface a server
calls: a request is counted, timed and logged before the last byte of its answer leaves, so a client
that has its answer — and then scrapes ``/metrics``, perhaps on another worker — finds it counted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import MutableMapping
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from labeldp.common.metrics import ServiceMetrics
from labeldp.common.service import Observed

LOGGER = "labeldp.test.observed"


def app_with_routes() -> FastAPI:
    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: str) -> dict[str, str]:
        return {"item": item}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"a", b"b", b"c"]))

    @app.get("/fails")
    async def fails() -> None:
        raise RuntimeError("boom")

    return app


def counted(m: ServiceMetrics, route: str, status: str) -> float:
    return (
        m.registry.get_sample_value(
            "labeldp_http_requests_total", {"method": "GET", "route": route, "status": status}
        )
        or 0.0
    )


def call(observed: Observed, path: str, on_message: Any) -> None:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }

    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if requested:  # then only a disconnect, which never comes
            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        on_message(message)

    asyncio.run(observed(scope, receive, send))


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == "request"]


@pytest.mark.parametrize(
    ("path", "route", "status"),
    [("/items/x", "/items/{item}", "200"), ("/stream", "/stream", "200"), ("/fails", "/fails", "500")],
)
def test_a_request_is_counted_and_logged_before_its_last_byte_is_sent(
    path: str, route: str, status: str, caplog: pytest.LogCaptureFixture
) -> None:
    m = ServiceMetrics()
    observed = Observed(app_with_routes(), LOGGER, m)
    seen: list[tuple[str, float, int]] = []  # each message sent: its kind, the count, the access lines

    def on_message(message: MutableMapping[str, Any]) -> None:
        last = message["type"] == "http.response.body" and not message.get("more_body", False)
        kind = "last" if last else message["type"]
        seen.append((kind, counted(m, route, status), len(access_lines(caplog))))

    with caplog.at_level(logging.INFO, logger=LOGGER), contextlib.suppress(RuntimeError):
        call(observed, path, on_message)  # /fails: the 500 is sent, then the error goes on to the server
    assert [kind for kind, _, _ in seen].count("last") == 1, seen
    expected = {kind: (1.0, 1) if kind == "last" else (0.0, 0) for kind, _, _ in seen}
    assert all((count, lines) == expected[kind] for kind, count, lines in seen), seen
    assert counted(m, route, status) == 1.0  # once: not again when the request ends
    [line] = access_lines(caplog)
    fields = {key: line.__dict__[key] for key in ("method", "path", "status")}
    assert fields == {"method": "GET", "path": path, "status": int(status)}
