"""Locust users for ``benchmarks/bench_load.py``: a tenant reading the labels party (its datasets, one
dataset, its budget, the ledger, the health check) at a set pace (``LOAD_RATE``)
or as fast as answers come."""

from __future__ import annotations

import os

from locust import FastHttpUser, constant, constant_throughput, task

KEY = os.environ.get("LOAD_API_KEY", "")
RATE = float(os.environ.get("LOAD_RATE", "0"))  # requests a second per user; 0: as fast as answers come
DATASET = os.environ.get("LOAD_DATASET", "")


class Reader(FastHttpUser):
    wait_time = constant_throughput(RATE) if RATE else constant(0)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {KEY}"}

    @task(3)
    def datasets(self) -> None:
        self.client.get("/v1/datasets", headers=self.headers, name="/v1/datasets")

    @task(3)
    def dataset(self) -> None:
        self.client.get(f"/v1/datasets/{DATASET}", headers=self.headers, name="/v1/datasets/{id}")

    @task(2)
    def budget(self) -> None:
        self.client.get(
            f"/v1/datasets/{DATASET}/budget", headers=self.headers, name="/v1/datasets/{id}/budget"
        )

    @task(2)
    def ledger(self) -> None:
        self.client.get("/v1/ledger", headers=self.headers, name="/v1/ledger")

    @task(1)
    def health(self) -> None:
        self.client.get("/healthz", name="/healthz")
