"""Both services' OpenAPI documents say what the servers do (schemathesis checks the answers against
them in test_api_fuzz.py; a client generated from them runs the flow in test_generated_clients.py),
and their documentation pages work without the internet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from features_party.config import FeaturesSettings
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import features_server_thread, labels_server_thread

UPLOADS = {
    ("put", "/v1/datasets/{dataset_id}/labels"): {
        "text/csv",
        "application/x-ndjson",
        "application/vnd.apache.parquet",
    },
    ("put", "/v1/datasets/{dataset_id}/universe"): {
        "text/csv",
        "application/x-ndjson",
        "application/vnd.apache.parquet",
    },
    ("put", "/v1/feature-tables/{name}"): {"text/csv", "application/vnd.apache.parquet"},
}


@pytest.fixture(scope="module", params=["labels", "features"])
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp(request.param)
    if request.param == "labels":
        server = labels_server_thread(
            LabelsSettings(data_dir=data, database_url=sqlite_url(data), allow_plaintext=True)
        )
    else:
        server = features_server_thread(FeaturesSettings(data_dir=data, grpc_port=0, allow_plaintext=True))
    with server as url:
        yield url


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            yield method, path, op


def test_the_document_declares_auth_errors_bodies_and_headers(base: str) -> None:
    document = httpx.get(f"{base}/openapi.json").json()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert "HTTPValidationError" not in document["components"]["schemas"]
    problem = document["components"]["schemas"]["Problem"]
    ids = []
    for method, path, op in operations(document):
        ids.append(op["operationId"])
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", op["operationId"]), op["operationId"]  # readable, stable
        assert op.get("tags"), (method, path)
        if path.startswith("/v1/"):
            assert op["security"] == [{"bearer": []}], (method, path)
            assert "401" in op["responses"], (method, path)
        if "{" in path:
            assert "404" in op["responses"], (method, path)
        for status, response in op["responses"].items():
            if int(status) >= 400:  # every error is problem+json (or an extension of it), codes described
                assert set(response["content"]) == {"application/problem+json"}, (method, path, status)
                schema = problem_schema(document, response)
                assert set(problem["required"]) <= set(schema["properties"]), (method, path, status)
                assert response["description"], (method, path, status)
        if (method, path) in UPLOADS:
            body = op["requestBody"]
            assert body["required"] and set(body["content"]) == UPLOADS[(method, path)]
            assert {"413", "415"} <= set(op["responses"])
        for parameter in op.get("parameters", []):
            if parameter["in"] == "header" and parameter["name"] == "Idempotency-Key":
                assert parameter["required"] is True
    assert len(ids) == len(set(ids))
    if "/v1/datasets/{dataset_id}/releases" in document["paths"]:  # (test_labels_api: the 400 without it)
        create = document["paths"]["/v1/datasets/{dataset_id}/releases"]["post"]
        assert create["operationId"] == "create_release"
        assert {"200", "201", "202", "400", "409"} <= set(create["responses"])
        assert any(p["name"] == "Idempotency-Key" for p in create["parameters"])
        # a budget refusal documents what it tells: counts, the budget, and spent / left (typical, worst)
        refusal = problem_schema(document, create["responses"]["409"])["properties"]
        assert {"examples_lacking_budget", "per_example_budget", "per_user_budget", "spent", "left"} <= set(
            refusal
        )
        assert "budget-exhausted" in create["responses"]["409"]["description"]


def problem_schema(document: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The schema an error answer is documented with (``Problem`` or a route's extension of it)."""
    ref: str = response["content"]["application/problem+json"]["schema"]["$ref"]
    schema: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return schema


def test_swagger_ui_and_redoc_load_only_local_assets(base: str) -> None:
    for page in ("/docs", "/redoc"):
        html = httpx.get(f"{base}{page}").text
        assert "https://" not in html and "http://" not in html, page  # no CDN, no web fonts
        assets = re.findall(r"""(?:src|href)=["']?(/docs-assets/[^"' >]+)""", html)
        assert assets, page
        for asset in assets:
            r = httpx.get(f"{base}{asset}")
            assert r.status_code == 200 and len(r.content) > 1000, asset
    assert "SwaggerUIBundle" in httpx.get(f"{base}/docs").text
    assert httpx.get(f"{base}/docs-assets/../openapi.json").status_code in (200, 404)  # never a file outside
