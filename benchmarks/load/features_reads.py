"""Locust users for ``benchmarks/bench_load.py``: a publisher reading the features party (its feature
tables, received releases, models, the health check) at a set pace (``LOAD_RATE``)
or as fast as answers come."""

from __future__ import annotations

import os

from locust import FastHttpUser, constant, constant_throughput, task

KEY = os.environ.get("LOAD_API_KEY", "")
RATE = float(os.environ.get("LOAD_RATE", "0"))  # requests a second per user; 0: as fast as answers come
TABLE = os.environ.get("LOAD_TABLE", "")


class Reader(FastHttpUser):
    wait_time = constant_throughput(RATE) if RATE else constant(0)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {KEY}"}

    @task(3)
    def tables(self) -> None:
        self.client.get("/v1/feature-tables", headers=self.headers, name="/v1/feature-tables")

    @task(3)
    def table(self) -> None:
        self.client.get(f"/v1/feature-tables/{TABLE}", headers=self.headers, name="/v1/feature-tables/{name}")

    @task(2)
    def releases(self) -> None:
        self.client.get("/v1/releases", headers=self.headers, name="/v1/releases")

    @task(2)
    def models(self) -> None:
        self.client.get("/v1/models", headers=self.headers, name="/v1/models")

    @task(1)
    def health(self) -> None:
        self.client.get("/healthz", name="/healthz")
