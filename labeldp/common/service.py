"""What every labeldp HTTP service has: one error handler chain, JSON request logs with request ids,
``/healthz`` and Prometheus ``/metrics``.

Errors: a ``DomainError`` becomes problem+json with its status and code; a mechanism's
``ParameterError`` (a bad parameter that reached the library) a 422 ``invalid-parameter``; request
validation a 422 ``invalid-request``; routing errors their 404/405. Anything else is a bug: it is logged
with its traceback and answered as a 500 problem+json ``internal-error`` carrying the request id, so a
client never sees a bare text/plain 500 and an operator can find the log line.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labeldp import __version__
from labeldp.common import logs, metrics, openapi
from labeldp.common.errors import DomainError, as_problem, problem_response
from labeldp.common.serving import exit_with_supervisor
from labeldp.mechanisms.validation import ParameterError


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        return as_problem(exc)

    @app.exception_handler(ParameterError)
    async def _parameter(_: Request, exc: ParameterError) -> JSONResponse:
        return problem_response(422, "invalid-parameter", str(exc), parameter=exc.parameter)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": [str(x) for x in e.get("loc", ())],
                "msg": str(e.get("msg", "")).removeprefix("Value error, "),  # pydantic's, for our own
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        return problem_response(422, "invalid-request", "the request is not valid", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        response = problem_response(exc.status_code, code, str(exc.detail))
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        return response


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the path takes (Starlette's 405 names only the first route's):
    each method is tried against the routes as the request's own."""
    return [
        method
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.routes
        )
    ]


class Observed:
    """Each request's id (echoed as ``X-Request-ID``), its access line and metrics, and the 500
    problem+json of an unexpected error with that id — one pure ASGI middleware. (As three
    ``@app.middleware("http")`` functions, each ran the rest of the app in a task of its own and passed
    the response through memory streams: about a third of a read's CPU, measured with py-spy.)"""

    def __init__(self, app: ASGIApp, logger: str, service_metrics: metrics.ServiceMetrics) -> None:
        self.app, self.log, self.metrics = app, logging.getLogger(logger), service_metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", []) if k == b"x-request-id"), None)
        request_id = logs.request_id("" if given is None else given.decode("latin-1"))
        scope.setdefault("state", {})["request_id"] = request_id
        start = time.perf_counter()
        status = 500
        started = recorded = False

        def record() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                seconds = time.perf_counter() - start
                self.metrics.observe(scope["method"], metrics.route_template(scope), status, seconds)
                logs.access(self.log, request_id, scope["method"], scope["path"], status, seconds)

        async def answer(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
                headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()  # before the last byte leaves: a client that has its answer finds it counted
            await send(message)

        try:
            if given is not None and request_id != given.decode("latin-1"):
                await _bad_request_id(scope, receive, answer)  # as declared: 1-200 printable ASCII
            else:
                await self.app(scope, receive, answer)
        except Exception:
            self.log.exception("unhandled error", extra={"request_id": request_id, "path": scope["path"]})
            if started:
                raise
            response = problem_response(
                500,
                "internal-error",
                "the server failed; the operator can find this request_id in its log",
                request_id=request_id,
            )
            await response(scope, receive, answer)
        finally:
            record()  # an answer cut short (an error after the start, a client gone) counts too


async def _bad_request_id(scope: Scope, receive: Receive, send: Send) -> None:
    """An ``X-Request-ID`` that is not what every operation declares (1 to 200 printable ASCII
    characters) is refused like any other invalid parameter, rather than replaced without a word."""
    response = problem_response(
        422,
        "invalid-request",
        "the request is not valid",
        errors=[
            {
                "loc": ["header", "X-Request-ID"],
                "msg": f"X-Request-ID must be 1 to {logs.MAX_REQUEST_ID} printable ASCII characters",
                "type": "string_pattern_mismatch",
            }
        ],
    )
    await response(scope, receive, send)


MAX_JSON_BODY_BYTES = 64 * 2**20


class BodyLimit:
    """Refuse request bodies over ``MAX_JSON_BODY_BYTES`` (413) before anything parses them. Uploads
    (every ``PUT`` of both APIs) stream to disk under their own, larger limit instead."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "PUT":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            response = problem_response(
                413, "payload-too-large", f"request bodies are limited to {self.max_bytes} bytes"
            )
            await response(scope, receive, send)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise DomainError(
                    "payload-too-large", f"request bodies are limited to {self.max_bytes} bytes", status=413
                )
            return message

        await self.app(scope, bounded, send)


_ESCAPE = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")


def lone_surrogate(body: bytes) -> bool:
    """Whether JSON text escapes a UTF-16 surrogate that is not half of a pair (``"\\ud800"``).

    Python's ``json`` decodes such an escape into a string no encoder accepts, so it would surface as
    a 500 wherever the string is stored or hashed. An escape counts only when the backslashes before
    its ``u`` are odd in number (``\\\\ud800`` is text); a high half must be followed at once by a low
    half, and a low half must follow a high one."""
    pending: int | None = None  # where the low half of a pair must start
    for match in _ESCAPE.finditer(body):
        slashes = match.group(1)
        if len(slashes) % 2 == 0:
            continue
        start = match.start(1) + len(slashes) - 1  # the escaping backslash
        unit = int(match.group(2), 16)
        if unit <= 0xDBFF:  # a high half
            if pending is not None:
                return True
            pending = match.end()
        elif pending != start:  # a low half that follows no high half
            return True
        else:
            pending = None
    return pending is not None


class JsonText:
    """Refuse JSON request bodies that are not UTF-8, or whose strings escape a lone UTF-16 surrogate
    (422 ``invalid-text``), before any route reads them: the parser answered the first with an
    undocumented 400, and the second decodes in Python but cannot be encoded, stored or hashed. JSON
    bodies are bounded by ``BodyLimit`` (outside this one), so buffering them is safe."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", [])) if scope["type"] == "http" else {}
        if b"json" not in headers.get(b"content-type", b"") or scope["method"] == "PUT":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")  # JSON on the network is UTF-8 (RFC 8259); the parser answered 400
        except UnicodeDecodeError:
            response = problem_response(422, "invalid-text", "the JSON body is not valid UTF-8")
            await response(scope, receive, send)
            return
        if lone_surrogate(body):
            response = problem_response(
                422, "invalid-text", "a JSON string escapes a lone UTF-16 surrogate (not valid Unicode text)"
            )
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


# Python's GIL switch interval stays at its default (5 ms). At 0.5 ms the labels party's read p95 beside
# 1M-row uploads fell from 210 to ~60 ms (BENCHMARKS.md, "Reads under load"), but the faster switching
# surfaced CPython 3.11.7's thread-unsafe AST validation ("AST constructor recursion depth mismatch" from
# numpy's header parsing in a concurrent partitioned charge), so it is not set until the supported
# interpreters all carry the fix.


def service_app(
    title: str,
    description: str,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]],
    http_logger: str,
    service_metrics: metrics.ServiceMetrics,
) -> FastAPI:
    @asynccontextmanager
    async def started(app: FastAPI) -> AsyncIterator[None]:
        # No gc.freeze() of what start-up allocated: measured with Locust at 160 reads/s it raised the
        # median read from 4-8 ms to 36-40 ms (BENCHMARKS.md, "Reads under load").
        # pyarrow.parquet.read_table imports pyarrow.dataset, and with it pandas (0.3-0.7 s), on first
        # use: here, rather than in the first request that reads a file (a budget's first answer).
        importlib.import_module("pyarrow.dataset")
        exit_with_supervisor()  # a worker of `serve --workers N` ends with its supervisor
        async with lifespan(app):
            yield

    app = FastAPI(
        title=title,
        version=__version__,
        description=description,
        lifespan=started,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=openapi.operation_id,
    )
    openapi.install(app)
    install_error_handlers(app)
    metrics.install(app, service_metrics)
    app.add_middleware(Observed, logger=http_logger, service_metrics=service_metrics)  # every response
    app.add_middleware(JsonText)  # no route reads a string that cannot be encoded
    app.add_middleware(BodyLimit)  # outermost: nothing reads an oversized body

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        """The process answers (no authentication; for load balancers and orchestrators)."""
        return {"status": "ok"}

    return app
