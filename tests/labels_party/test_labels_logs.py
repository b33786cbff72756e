"""The labels party logs JSON lines with request ids and counts in /metrics, and neither ever shows a
label value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from labels_party.storage.db import sqlite_url
from tests.support.metrics import scrape, value
from tests.support.servers import LabelsProcess, tenant_key

pytestmark = pytest.mark.processes

SECRET_LABELS = ("13579.25", "24680.75")  # values that must never appear in a log line


def test_logs_are_json_with_request_ids_and_no_labels(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = sqlite_url(data)
    _, key = tenant_key(url, "acme", "5")
    log_path = tmp_path / "server.log"
    server = LabelsProcess(data, url, log_path)
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        spec = {
            "name": "v",
            "label_type": "real",
            "lo": 0,
            "hi": 30000,
            "support": {"kind": "uniform", "k": 31},
        }
        ds = c.post("/v1/datasets", json=spec).json()["id"]
        body = "example_id,label\n" + "".join(f"e{i},{SECRET_LABELS[i % 2]}\n" for i in range(20))
        c.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).raise_for_status()
        bad = "example_id,label\na,1\na,2\n"  # a rejected upload is logged too
        assert (
            c.put(f"/v1/datasets/{ds}/labels", content=bad, headers={"Content-Type": "text/csv"}).status_code
            == 422
        )
        r = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1, "recipient": "publisher"},
            headers={"Idempotency-Key": "k", "X-Request-ID": "trace-123"},
        )
        assert r.status_code == 201 and r.headers["X-Request-ID"] == "trace-123"
        audit = c.get(f"/v1/releases/{r.json()['id']}/audit")  # tenant-only numbers from raw labels
        assert audit.status_code == 200
        # numbers with many digits, which cannot turn up in a log line by chance (0.5 can: a duration)
        audit_values = [repr(v) for v in audit.json()["true_distribution"].values() if len(repr(v)) >= 10]
        again = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1, "recipient": "publisher"},
            headers={"Idempotency-Key": "k"},
        )
        assert again.status_code == 200
        too_much = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 4.5, "recipient": "publisher"},
            headers={"Idempotency-Key": "k2"},
        )
        assert too_much.status_code == 409
        for page in ("/docs", "/redoc", "/openapi.json"):
            assert httpx.get(f"{server.base_url}{page}").status_code == 200
        assert httpx.get(f"{server.base_url}/no/such/page").status_code == 404
        long_id = "x" * 300  # a caller's request ID is kept only when short printable ASCII
        echoed = httpx.get(f"{server.base_url}/healthz", headers={"X-Request-ID": long_id})
        assert re.fullmatch(r"[0-9a-f]{32}", echoed.headers["X-Request-ID"])
        m = scrape(server.base_url)
        metrics_text = httpx.get(f"{server.base_url}/metrics").text
    finally:
        server.stop()
    lines = [ln for ln in log_path.read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line is one JSON object, uvicorn's included
    assert any(r["logger"].startswith("uvicorn") for r in records)
    requests = [r for r in records if r["msg"] == "request"]
    assert any(r["request_id"] == "trace-123" and r["status"] == 201 for r in requests)
    assert {r["status"] for r in requests} >= {200, 201, 422}
    assert any(r["msg"] == "release charged" for r in records)
    text = log_path.read_text()
    assert not any(secret in text for secret in SECRET_LABELS)
    assert "x" * 300 not in text
    assert audit_values and not any(v in text for v in audit_values)  # the audit is never logged
    assert not any(secret in metrics_text for secret in SECRET_LABELS)
    # documentation pages are routes like any other; only real misses are "unmatched"
    for page in ("/docs", "/redoc", "/openapi.json"):
        assert value(m, "labeldp_http_requests_total", method="GET", route=page, status="200") == 1, page
    assert value(m, "labeldp_http_requests_total", method="GET", route="unmatched", status="404") == 1
    # the process and the interpreter, from prometheus_client's own collectors
    assert value(m, "process_cpu_seconds_total") > 0 and value(m, "process_resident_memory_bytes") > 0
    assert any(name == "python_info" for name, _ in m)
    assert value(m, "python_gc_collections_total", generation="0") > 0
    assert value(m, "labeldp_releases_total", outcome="created") == 1
    assert value(m, "labeldp_releases_total", outcome="replayed") == 1
    assert value(m, "labeldp_releases_total", outcome="budget_exhausted") == 1
    assert value(m, "labeldp_epsilon_charged_total") == 1.0
    assert value(m, "labeldp_example_epsilon_charged_total") == 20.0
    assert (
        value(
            m,
            "labeldp_http_requests_total",
            method="PUT",
            route="/v1/datasets/{dataset_id}/labels",
            status="422",
        )
        == 1
    )
    assert (
        value(
            m,
            "labeldp_http_request_duration_seconds_count",
            method="PUT",
            route="/v1/datasets/{dataset_id}/labels",
        )
        == 2
    )
