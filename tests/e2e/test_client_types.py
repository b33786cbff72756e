"""The client's answer types (``labeldp.client.types``) against the OpenAPI documents both servers
publish: every response schema has its ``TypedDict`` with the same keys and JSON types, every client
method is typed by the schema of the route it calls, and an error answer's problem+json fields reach
``ApiError`` — so the hand-written client cannot drift from the servers unnoticed."""

from __future__ import annotations

import contextlib
import inspect
import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import httpx
import pytest

from features_party.config import FeaturesSettings
from labeldp.client import ApiClient, ApiError, FeaturesClient, LabelsClient
from labeldp.client import types as t
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import labels_server_thread, tenant_key

Document = dict[str, Any]

MIRRORS: dict[str, dict[str, Any]] = {
    "labels": {
        "IdentityOut": t.Identity,
        "RecipientOut": t.Recipient,
        "DeliveryOut": t.Delivery,
        "DatasetOut": t.Dataset,
        "UploadOut": t.Upload,
        "ReleaseOut": t.Release,
        "AuditOut": t.Audit,
        "EpsilonLowerBoundOut": t.EpsilonLowerBound,
        "PreviewOut": t.Preview,
        "PriorsVerdictOut": t.PriorsVerdict,
        "UserBudgetOut": t.UserBudget,
        "SpendBucketOut": t.SpendBucket,
        "BudgetOut": t.Budget,
        "LedgerEntryOut": t.LedgerEntry,
        "SemiSensitiveModelOut": t.SemiSensitiveModel,
        "ModelDeliveryOut": t.ModelDelivery,
        "HybridPlanOut": t.HybridPlan,
        "PriorsOut": t.Priors,
        "GroupPriorOut": t.GroupPrior,
        "PriorsDetailOut": t.PriorsDetail,
        "GroupOut": t.ReleaseGroup,
        "GroupAuditOut": t.GroupAudit,
    },
    "features": {
        "IdentityOut": t.FeaturesIdentity,
        "SenderOut": t.Sender,
        "ReceivedReleaseOut": t.ReceivedRelease,
        "FeatureTableOut": t.FeatureTable,
        "JoinOut": t.Join,
        "JobOut": t.Job,
        "ModelOut": t.Model,
        "ReceivedModelOut": t.ReceivedModel,
        "PricingGrantOut": t.PricingGrant,
        "PricingOut": t.Pricing,
    },
}
CLIENTS: dict[str, type[ApiClient]] = {"labels": LabelsClient, "features": FeaturesClient}


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Document]:
    from features_party.api.app import create_app as features_app
    from labels_party.api.app import create_app as labels_app

    tmp = tmp_path_factory.mktemp("openapi")
    return {
        "labels": labels_app(LabelsSettings(data_dir=tmp / "labels")).openapi(),
        "features": features_app(FeaturesSettings(data_dir=tmp / "features")).openapi(),
    }


def schemas(document: Document) -> dict[str, Any]:
    found: dict[str, Any] = document["components"]["schemas"]
    return found


SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def hint_types(hint: Any) -> set[str] | None:
    """The JSON types a Python annotation allows (None: anything)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [hint_types(arg) for arg in get_args(hint)]
        known = [part for part in parts if part is not None]
        return set[str]().union(*known) if len(known) == len(parts) else None
    if origin is Literal:
        return {"string" if isinstance(v, str) else "integer" for v in get_args(hint)}
    if (origin or hint) is list:
        return {"array"}
    if (origin or hint) is dict or is_typeddict(hint):
        return {"object"}
    return {SIMPLE[hint]} if hint in SIMPLE else None


def schema_types(prop: dict[str, Any], components: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema property allows (None: anything)."""
    if "$ref" in prop:
        return schema_types(components[prop["$ref"].rsplit("/", 1)[-1]], components)
    if "anyOf" in prop:
        found: set[str] = set()
        for option in prop["anyOf"]:
            part = schema_types(option, components)
            if part is None:
                return None
            found |= part
        return found
    kind = prop.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


@pytest.mark.parametrize("party", ["labels", "features"])
def test_every_response_schema_has_its_typed_dict_with_the_same_keys_and_types(
    documents: dict[str, Document], party: str
) -> None:
    components = schemas(documents[party])
    answers = {name for name in components if name.endswith("Out")}
    assert answers == set(MIRRORS[party]), "a response schema without its TypedDict (or the reverse)"
    for name, mirror in MIRRORS[party].items():
        schema = components[name]
        hints = get_type_hints(mirror)
        assert set(hints) == set(schema["properties"]), name
        assert set(schema.get("required", [])) <= mirror.__required_keys__, name
        for key, prop in schema["properties"].items():
            expected, declared = schema_types(prop, components), hint_types(hints[key])
            if expected is not None and declared is not None:
                assert declared == expected, (name, key, declared, expected)


@pytest.mark.parametrize("party", ["labels", "features"])
def test_pages_and_problems_have_the_servers_members(documents: dict[str, Document], party: str) -> None:
    components = schemas(documents[party])
    pages = [name for name in components if name.endswith("Page")]
    assert pages
    for name in pages:
        assert set(get_type_hints(t.Page)) == set(components[name]["properties"]), name
    problem = components["Problem"]
    assert t.Problem.__required_keys__ == set(problem["properties"]) == set(problem["required"])


def _route_schema(document: Document, method: str, path: str) -> str:
    """The name of the schema a route answers with (its 2xx JSON body)."""
    for template, operations in document["paths"].items():
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path) and method in operations:
            for status, response in operations[method]["responses"].items():
                if status.startswith("2"):
                    ref: str = response["content"]["application/json"]["schema"].get("$ref", "")
                    return ref.rsplit("/", 1)[-1]
    raise AssertionError(f"no route {method.upper()} {path}")


@pytest.mark.parametrize("party", ["labels", "features"])
def test_every_client_method_is_typed_by_the_schema_of_its_route(
    documents: dict[str, Document], party: str, tmp_path: Path
) -> None:
    """Each method is called against a recording transport; the route it calls must answer with the
    schema its return type mirrors (``list[X]``: a page of X's; a lookup by name may read the list)."""
    upload = tmp_path / "file.csv"
    upload.write_text("example_id\n")
    given = {str: "x1", float: 1.0, Path: upload, dict: {}}
    names = {mirror: name for name, mirror in MIRRORS[party].items()}
    seen: set[Any] = set()
    for method_name, method in inspect.getmembers(CLIENTS[party], inspect.isfunction):
        hints = get_type_hints(method)
        answer = hints.get("return")
        item = get_args(answer)[0] if get_origin(answer) is list else answer
        if method_name.startswith("_") or item not in names:
            continue
        calls: list[tuple[str, str]] = []

        def record(request: httpx.Request, calls: list[tuple[str, str]] = calls) -> httpx.Response:
            calls.append((request.method.lower(), request.url.path))
            return httpx.Response(200, json={"items": [], "next": None, "next_offset": None})

        client = CLIENTS[party]("http://test", "key")
        client.http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(record))
        parameters = list(inspect.signature(method).parameters.values())[1:]
        args = [
            None
            if get_origin(hints[p.name]) is types.UnionType
            else given[get_origin(hints[p.name]) or hints[p.name]]
            for p in parameters
            if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        with contextlib.suppress(ApiError, KeyError):  # the answer recorded is empty: only the request counts
            getattr(client, method_name)(*args)
        assert calls, method_name
        route = _route_schema(documents[party], *calls[0])
        page = re.sub(r"(Out)?$", "", names[item]) + "Page"
        allowed = {page} if item is not answer else {names[item], page}
        assert route in allowed, (method_name, calls[0], route, answer)
        seen.add(item)
    # only ever parts of another answer: a UserBudget and its SpendBuckets of a Budget, the bound of an
    # Audit and its GroupAudits, a GroupPrior of a PriorsDetail, the PriorsVerdict of a Preview
    parts = {t.UserBudget, t.SpendBucket, t.EpsilonLowerBound, t.GroupPrior, t.GroupAudit, t.PriorsVerdict}
    assert set(names) - seen <= parts


def test_an_error_answer_carries_the_problem_fields(tmp_path: Path) -> None:
    data = tmp_path / "labels"
    data.mkdir()
    _, key = tenant_key(sqlite_url(data), "acme")
    with labels_server_thread(LabelsSettings(data_dir=data, database_url=sqlite_url(data))) as base:
        with LabelsClient(base, key) as client:
            with pytest.raises(ApiError) as invalid:
                client.create_dataset({"name": "prices", "label_type": "nope"})
            with pytest.raises(ApiError) as missing:
                client.get_release("nope")
        with LabelsClient(base, "ldp_wrong") as stranger, pytest.raises(ApiError) as refused:
            stranger.datasets()
    e = invalid.value
    assert (e.status, e.code, e.title) == (422, "invalid-request", "invalid request")
    assert e.errors and any("label_type" in reason["loc"] for reason in e.errors)
    assert e.body["errors"] == e.errors and "label_type" in str(e)  # the reasons are in the message
    e = missing.value
    assert (e.status, e.code, e.errors) == (404, "not-found", []) and "nope" in e.detail
    assert refused.value.status == 401
    with LabelsClient("http://127.0.0.1:9", key) as nowhere, pytest.raises(ApiError) as unreachable:
        nowhere.identity()
    assert (unreachable.value.status, unreachable.value.code) == (0, "unreachable")
