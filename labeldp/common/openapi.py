"""The OpenAPI document both services publish, made to say what the servers do, and the pages that
show it without the internet.

FastAPI derives most of the document from the routes; what it cannot know is added here, in one place,
from rules that hold for every route of both parties (so a new route is described correctly without
anyone remembering to):

* every error is RFC 9457 problem+json (``Problem``, or a route's declared extension of it), never
  FastAPI's validation JSON;
* an operation that needs the bearer key can answer 401, one with a path parameter 404, one with a
  JSON body 413 (the body limit), one with parameters or a body 422 (``invalid-request`` names each
  error; domain codes name the problem) — routes declare their own further codes (``errors(...)``);
* a header the server requires is required in the document (``Idempotency-Key``), and the optional
  ``X-Request-ID`` every request may carry (echoed back, logged) is declared on every operation; an
  operation that takes an ``Idempotency-Key`` declares ``Idempotent-Replayed`` on its successes (a
  replay is the job the key created, in its current state: the header says nothing was charged);
* operation IDs are the route functions' names (``list_datasets``), stable and readable for
  generated clients; an operation's summary is the first sentence of its docstring (its description);
* every error answer's schema names the codes it may carry: ``type`` is one of the codes its
  description lists in backticks plus the common ones of that status, so a check of the answers
  against the document (schemathesis's response-schema conformance) notices a code the document
  does not declare;
* a download declares its body (``format: binary``); generic pages are named ``DatasetPage``, not
  ``Page_DatasetOut_``.

Swagger UI and ReDoc load their scripts from assets installed with the service (the fastapi-offline
package's copies), so ``/docs`` works on a machine without internet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from labeldp.common.errors import PROBLEM

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_PATH = "/docs-assets"
REQUIRED_HEADERS = {"Idempotency-Key"}
REQUEST_ID = {
    "name": "X-Request-ID",
    "in": "header",
    "required": False,
    "description": "an ID to trace this request by: echoed back and written to the service's log "
    "(one is generated when absent); 1 to 200 printable ASCII characters, or 422 `invalid-request`",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
}

REPLAYED = "Idempotent-Replayed"  # on every success of an operation that takes an Idempotency-Key
REPLAYED_HEADER = {
    "description": "`true`: this answer replays the first request made with this Idempotency-Key (its "
    "body is that answer's): nothing was charged and no noise drawn now; `false`: the request was "
    "carried out now",
    "schema": {"type": "string", "enum": ["true", "false"]},
}

GENERIC = {
    400: "the request cannot be processed as sent",
    401: "`unauthenticated`: no bearer key, or one that is unknown or revoked",
    404: "`not-found`: no such resource for this tenant (another tenant's look the same)",
    409: "the resource's state forbids it",
    413: "`payload-too-large`: the body is over the limit",
    415: "`unsupported-media-type`: send one of the declared content types",
    422: "`invalid-request` (each validation error listed in its errors member), `invalid-text` (a JSON "
    "body that is not UTF-8, or a string with a lone surrogate escape), or a domain code naming the problem",
}
# the codes any operation may answer with a status, whatever its own declarations say
COMMON_CODES = {
    401: ("unauthenticated",),
    404: ("not-found",),
    413: ("payload-too-large",),
    415: ("unsupported-media-type",),
    422: ("invalid-request", "invalid-text"),
}
CODE = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")  # kebab-case in backticks: `budget-exhausted`
BINARY = {"type": "string", "format": "binary"}


class Problem(BaseModel):
    """An error (RFC 9457): ``type`` is the machine-readable code; further members (``errors``,
    ``rows``, ``columns``, …) depend on it."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="machine-readable code (kebab-case, stable)", examples=["not-found"])
    title: str = Field(description="the code in words", examples=["not found"])
    status: int = Field(description="the HTTP status", examples=[404])
    detail: str = Field(description="what went wrong, for people", examples=["no dataset 7f0c…"])


def errors(**codes: str) -> dict[int | str, dict[str, Any]]:
    """A route's own error answers beyond the common ones, e.g. ``errors(s409="`budget-exhausted`:
    …")``: the keys name the status (``s409``), the values list the codes and what they mean."""
    return {int(k.removeprefix("s")): {"description": v} for k, v in codes.items()}


def upload_body(*content_types: str, description: str) -> dict[str, Any]:
    """``openapi_extra`` for a route that streams its raw body (an upload): its content types."""
    binary = {"schema": {"type": "string", "format": "binary"}}
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {ct: binary for ct in content_types},
        }
    }


def operation_id(route: APIRoute) -> str:
    return route.name


def _complete(document: dict[str, Any]) -> dict[str, Any]:
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for path, operations in document.get("paths", {}).items():
        for method, op in operations.items():
            if op.get("description"):
                op["summary"] = _first_sentence(op["description"])
            responses = op.setdefault("responses", {})
            implied = set()
            if op.get("security"):
                implied.add(401)
            if "{" in path:
                implied.add(404)
            if op.get("parameters") or op.get("requestBody"):
                implied.add(422)
            if "requestBody" in op and method != "put":
                implied.add(413)
            for status in implied:
                responses.setdefault(str(status), {"description": GENERIC[status]})
            for status, response in responses.items():
                if int(status) >= 400:
                    own = response.get("description")
                    if own in ("Validation Error", "", None):
                        response["description"] = GENERIC.get(int(status), "error")
                    elif int(status) in COMMON_CODES and not set(CODE.findall(own)) & set(
                        COMMON_CODES[int(status)]
                    ):
                        response["description"] = f"{own}; or {GENERIC[int(status)]}"
                    response["content"] = {PROBLEM: {"schema": _problem_schema(int(status), response)}}
                for content in response.get("content", {}).values():
                    if not content.get("schema"):
                        content["schema"] = dict(BINARY)
            for parameter in op.get("parameters", []):
                if parameter.get("in") == "header" and parameter.get("name") in REQUIRED_HEADERS:
                    parameter["required"] = True
                    parameter["schema"] = _not_null(parameter["schema"])
                if parameter.get("in") == "header" and parameter.get("name") == "Idempotency-Key":
                    for status, response in responses.items():
                        if int(status) < 300:
                            response.setdefault("headers", {})[REPLAYED] = dict(REPLAYED_HEADER)
            if path.startswith("/v1/"):
                op.setdefault("parameters", []).append(dict(REQUEST_ID))
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return _rename_pages(document)


def _first_sentence(text: str) -> str:
    first = " ".join(text.split("\n\n", maxsplit=1)[0].split())
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", first)
    return (first[: end.start()] if end else first).strip()


def _problem_schema(status: int, response: dict[str, Any]) -> dict[str, Any]:
    """The problem schema a route declared (a ``Problem`` with further members, e.g.
    ``responses={409: {"model": BudgetRefusal}}``), else ``Problem``; its ``type`` limited to the codes
    this answer may carry."""
    codes = set(COMMON_CODES.get(status, ())) | set(CODE.findall(response.get("description", "")))
    declared = response.get("content", {}).get("application/json", {}).get("schema", {})
    own = declared.get("$ref", "")
    if not own or own.endswith("/HTTPValidationError"):
        own = "#/components/schemas/Problem"
    ref = {"$ref": own}
    if not codes:
        return ref
    return {"allOf": [ref, {"properties": {"type": {"enum": sorted(codes)}}}]}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A required header's schema without FastAPI's ``anyOf [..., null]`` (it is never absent)."""
    options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
    if len(options) != 1:
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**rest, **options[0]}


def _rename_pages(document: dict[str, Any]) -> dict[str, Any]:
    """``Page_DatasetOut_`` (pydantic's name for ``Page[DatasetOut]``) → ``DatasetPage``, refs too."""
    schemas = document["components"]["schemas"]
    renames = {
        name: re.sub(r"(Out)?$", "", name[len("Page_") : -1]) + "Page"
        for name in schemas
        if name.startswith("Page_") and name.endswith("_")
    }
    if not renames:
        return document
    for old, new in renames.items():
        schemas[new] = schemas.pop(old)
        schemas[new]["title"] = new
    text = json.dumps(document)
    for old, new in renames.items():
        text = text.replace(f'"#/components/schemas/{old}"', f'"#/components/schemas/{new}"')
    renamed: dict[str, Any] = json.loads(text)
    return renamed


def install(app: FastAPI) -> None:
    """The completed document at ``/openapi.json``, Swagger UI at ``/docs`` and ReDoc at ``/redoc``
    (the app is created with ``docs_url=None, redoc_url=None`` and ``operation_id``)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
            )
            app.openapi_schema = _complete(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return unframed(
            get_swagger_ui_html(
                openapi_url="/openapi.json",
                title=f"{app.title} — Swagger UI",
                swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
                swagger_ui_parameters={"persistAuthorization": True},
            )
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return unframed(
            get_redoc_html(
                openapi_url="/openapi.json",
                title=f"{app.title} — ReDoc",
                redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
                redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
                with_google_fonts=False,
            )
        )


def unframed(page: HTMLResponse) -> HTMLResponse:
    """A page no other site may frame (clickjacking: the documentation pages hold a bearer key once
    someone authorizes in them), in both the current and the older header."""
    page.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
    page.headers["X-Frame-Options"] = "DENY"
    return page
