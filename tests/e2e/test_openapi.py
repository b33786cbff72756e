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
    document = httpx.get(f"{base}/openapi.json", timeout=60).json()
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
                assert list(response["content"]) == ["application/problem+json"], (method, path, status)
                schema = response["content"]["application/problem+json"]["schema"]
                built_on = problem_schema(document, schema["allOf"][0])
                assert set(problem["required"]) <= set(built_on["properties"]), (method, path, status)
                codes = schema["allOf"][1]["properties"]["type"]["enum"]
                assert codes and all(
                    f"`{c}`" in response["description"] for c in codes if c != "invalid-text"
                )
                assert response["description"], (method, path, status)
        if (method, path) in UPLOADS:
            body = op["requestBody"]
            assert body["required"] and set(body["content"]) == UPLOADS[(method, path)]
            assert {"413", "415"} <= set(op["responses"])
        for parameter in op.get("parameters", []):
            if parameter["in"] == "header" and parameter["name"] == "Idempotency-Key":
                assert parameter["required"] is True
    assert len(ids) == len(set(ids))
    if "/v1/datasets/{dataset_id}/releases" in document["paths"]:  # (test_releases_api: the 400 without it)
        create = document["paths"]["/v1/datasets/{dataset_id}/releases"]["post"]
        assert create["operationId"] == "create_release"
        assert {"200", "201", "202", "400", "409"} <= set(create["responses"])
        assert any(p["name"] == "Idempotency-Key" for p in create["parameters"])
        # a budget refusal documents what it tells: counts, the budget, and spent / left (typical, worst)
        conflict = create["responses"]["409"]["content"]["application/problem+json"]["schema"]
        refusal = problem_schema(document, conflict["allOf"][0])["properties"]
        assert {"examples_lacking_budget", "per_example_budget", "per_user_budget", "spent", "left"} <= set(
            refusal
        )
        assert "budget-exhausted" in create["responses"]["409"]["description"]


def problem_schema(document: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """The schema an error answer is built on (``Problem`` or a route's extension of it)."""
    ref: str = reference["$ref"]
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


def documents() -> dict[str, dict[str, Any]]:
    """Both parties' documents, from their apps (no server needed to read a document)."""
    import tempfile
    from pathlib import Path

    from features_party.api.app import create_app as features_app
    from labels_party.api.app import create_app as labels_app

    folder = Path(tempfile.mkdtemp(prefix="labeldp-openapi-"))
    labels = labels_app(LabelsSettings(data_dir=folder / "l", database_url=sqlite_url(folder / "l")))
    features = features_app(FeaturesSettings(data_dir=folder / "f", grpc_port=0, allow_plaintext=True))
    return {"labels": labels.openapi(), "features": features.openapi()}


def declared_codes(document: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for _, _, op in operations(document):
        for status, response in op["responses"].items():
            if int(status) >= 400:
                schema = response["content"]["application/problem+json"]["schema"]
                found |= set(schema["allOf"][1]["properties"]["type"]["enum"]) if "allOf" in schema else set()
    return found


# codes answered by every route alike, not by one operation: 405 on an undeclared method, the generic
# answer to an unexpected error (never a detail), and Starlette's other HTTP errors
UNDECLARED_BY_DESIGN = {"method-not-allowed", "internal-error", "http-error"}


def raised_codes(*packages: str) -> set[str]:
    """Every error code a party's code can raise: the kebab-case strings handed to ``DomainError`` (or
    to a subclass's ``super().__init__``) and the module constants that name one."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(
        r'(?:DomainError\(\s*|super\(\)\.__init__\(\s*|^[A-Z_]+ = )"([a-z0-9]+(?:-[a-z0-9]+)+)"', re.M
    )
    found: set[str] = set()
    for package in packages:
        for path in (root / package).rglob("*.py"):
            found |= set(pattern.findall(path.read_text()))
    return found


def test_every_code_the_code_can_raise_is_declared_by_an_operation() -> None:
    docs = documents()
    shared = raised_codes("labeldp/common", "labeldp/mechanisms")
    for party, packages in (("labels", ("labels_party",)), ("features", ("features_party",))):
        missing = (raised_codes(*packages) | shared) - declared_codes(docs[party]) - UNDECLARED_BY_DESIGN
        # a shared code only one party can answer (the other has no route that reaches it)
        missing -= {"invalid-model-message"}  # a gRPC status (the receiver's), answered by no route
        missing -= {"user-id-conflict", "invalid-loss"} if party == "features" else set()
        assert not missing, f"{party} raises codes no operation declares: {sorted(missing)}"


def test_operations_are_named_summarized_and_described() -> None:
    docs = documents()
    seen: dict[str, tuple[str, str]] = {}
    for party, document in docs.items():
        for method, path, op in operations(document):
            assert op.get("description"), f"{party} {method} {path} has no description"
            summary = op["summary"]
            generated = " ".join(w.capitalize() for w in op["operationId"].split("_"))
            assert summary != generated and len(summary) > 10, f"{party} {method} {path}: {summary!r}"
            # an operation ID names one operation in both documents (the same path and method) or one
            if op["operationId"] in seen:
                assert seen[op["operationId"]] == (method, path), f"{op['operationId']} names two operations"
            seen[op["operationId"]] = (method, path)
        assert not [s for s in document["components"]["schemas"] if "_" in s or "[" in s]


def test_headers_and_downloads_declare_their_schemas() -> None:
    for document in documents().values():
        for method, path, op in operations(document):
            for parameter in op.get("parameters", []):
                if parameter.get("required"):
                    assert "anyOf" not in parameter["schema"], (method, path, parameter)
            for status, response in op["responses"].items():
                for media, content in response.get("content", {}).items():
                    assert content.get("schema"), (method, path, status, media)
            if "idempotency" in str(op.get("responses", {})).lower():
                assert "idempotency-key-reused" not in str(op["responses"].get("409", {}))


def test_a_charged_request_declares_how_a_replay_is_told_apart() -> None:
    """Each operation that takes an Idempotency-Key says on every success whether it was a replay
    (``Idempotent-Replayed``: the body of a replay is the first answer's), and that a reused key's
    refusal names the fields that differ."""
    keyed = []
    for document in documents().values():
        for method, path, op in operations(document):
            if not any(p["name"] == "Idempotency-Key" for p in op.get("parameters", [])):
                continue
            keyed.append((method, path))
            for status, response in op["responses"].items():
                if int(status) < 300:
                    header = response["headers"]["Idempotent-Replayed"]
                    assert header["schema"]["enum"] == ["true", "false"], (path, status)
            assert "`fields`" in op["responses"]["422"]["description"], path
    assert keyed == [
        ("post", "/v1/datasets/{dataset_id}/releases"),
        ("post", "/v1/datasets/{dataset_id}/semi-sensitive-models"),
    ]
