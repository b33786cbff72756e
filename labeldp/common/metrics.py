"""Prometheus metrics shared by both services (``GET /metrics``).

Every app gets its own registry, so several apps can live in one process (the tests run many). Label
values are limited to closed sets — HTTP method, the route *template* (never a concrete path with IDs),
status code, outcome — so no metric can carry an example ID, a tenant or a label value.

Under ``serve --workers N`` (``PROMETHEUS_MULTIPROC_DIR`` set, see ``labeldp.common.serving``) every
series is written to that shared directory and a scrape answers the sum over the workers, live and
exited (gauges: over live workers); the per-process collectors (CPU, memory, GC) are then left out, as
prometheus_client's multiprocess mode requires.
"""

from __future__ import annotations

import atexit
import os

from fastapi import FastAPI
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

from labeldp.common.serving import MULTIPROC_ENV


class ServiceMetrics:
    """HTTP request counts and latencies, plus a registry for a party's own domain metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # the process (CPU, memory, open files, start time), the interpreter and its garbage collector:
        # prometheus_client's own collectors, shared by every registry of the process
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.requests = Counter(
            "labeldp_http_requests_total",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "labeldp_http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180),
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, doc, list(labels), registry=self.registry)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, registry=self.registry, multiprocess_mode="livesum")

    def exposition(self) -> bytes:
        """What ``GET /metrics`` answers: this registry, or every worker's series summed."""
        if not os.environ.get(MULTIPROC_ENV):
            return generate_latest(self.registry)
        workers = CollectorRegistry()
        multiprocess.MultiProcessCollector(workers)  # type: ignore[no-untyped-call]
        return generate_latest(workers)


def _leave_workers() -> None:
    """A worker that exits stops counting in the live gauges' sum."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


atexit.register(_leave_workers)


def route_template(scope: Scope) -> str:
    """The matched route's template, or one series for all misses. API routes leave themselves in the
    scope; plain Starlette routes (the documentation pages, the OpenAPI document, static assets) do
    not, so those are matched again here (only for requests without a route: cheap)."""
    route = scope.get("route")
    if route is None:
        app = scope.get("app")
        routes = getattr(getattr(app, "router", None), "routes", [])
        route = next((r for r in routes if r.matches(scope)[0] == Match.FULL), None)
    return str(getattr(route, "path", "unmatched"))


def install(app: FastAPI, metrics: ServiceMetrics) -> None:
    """Serve the registry at ``GET /metrics`` (no auth, like ``/healthz``: bind the services to a private
    network or put the scrape behind a proxy); requests are counted and timed by ``service.Observed``."""
    app.state.metrics = metrics

    @app.get("/metrics", tags=["operations"], include_in_schema=False)
    def serve_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
