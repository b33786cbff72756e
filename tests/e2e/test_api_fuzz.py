"""Schemathesis against both live APIs (real HTTP, a tenant with data): no request, however hostile,
gets a 5xx, every error is problem+json with a machine-readable type, and every answer is one the
OpenAPI document declares (status, content type, body schema).

Half of the generated path parameters are replaced by IDs that exist (a dataset with labels, a
complete release, a feature table, a trained model), and half of the release bodies name the
registered recipient, so the fuzzer reaches the code behind the lookups, not only the 404s.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import CHECKS, load_all_checks

from features_party.config import FeaturesSettings
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.wire.sender import build_frames
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.messages import SENDER, release
from tests.support.servers import (
    features_server_thread,
    features_tenant_key,
    labels_server_thread,
    tenant_key,
)

EXAMPLES = int(os.environ.get("LABELDP_FUZZ_EXAMPLES", "60"))  # per operation; each is real HTTP


@dataclass
class LiveApi:
    base: str
    headers: dict[str, str]
    ids: dict[str, str]  # path parameter name -> an ID that exists for this tenant


def _swap_in_real_ids(schema: Any, api: LiveApi) -> None:
    @schema.hook  # type: ignore[untyped-decorator]
    def flatmap_path_parameters(_: Any, params: dict[str, Any] | None) -> Any:
        if not params:
            return st.just(params)
        real = {k: api.ids.get(k, v) for k, v in params.items()}
        return st.sampled_from([params, real])

    @schema.hook  # type: ignore[untyped-decorator]
    def flatmap_body(_: Any, body: Any) -> Any:
        if isinstance(body, dict) and "recipient" in body:
            return st.sampled_from([body, {**body, "recipient": "publisher"}])
        if isinstance(body, dict) and "release_id" in body:
            return st.sampled_from(
                [body, {**body, "release_id": api.ids["release_id"], "feature_table": "t"}]
            )
        return st.just(body)


@pytest.fixture(scope="module")
def labels_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    data = tmp_path_factory.mktemp("labels")
    settings_ = LabelsSettings(data_dir=data, database_url=sqlite_url(data), allow_plaintext=True)
    with labels_server_thread(settings_) as base:
        _, key = tenant_key(settings_.resolved_database_url(), "fuzz", "1000000")
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        c.post("/v1/recipients", json={"name": "publisher"}).raise_for_status()
        ds = c.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
        body = "example_id,label\n" + "".join(f"e{i},{i % 53}\n" for i in range(300))
        c.put(
            f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}
        ).raise_for_status()
        rel = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1, "recipient": "publisher"},
            headers={"Idempotency-Key": "seed"},
        ).json()["id"]
        yield LiveApi(base, {"Authorization": f"Bearer {key}"}, {"dataset_id": ds, "release_id": rel})


@pytest.fixture(scope="module")
def features_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    data = tmp_path_factory.mktemp("features")
    settings_ = FeaturesSettings(data_dir=data, grpc_port=0, allow_plaintext=True)
    key = features_tenant_key(settings_, "fuzz")
    with features_server_thread(settings_) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        sender = Identity.generate()
        c.post(
            "/v1/senders", json={"id": SENDER, "public_key_pem": public_key_pem(sender.public_key)}
        ).raise_for_status()
        ids = [f"e{i}" for i in range(400)]
        message = release(ids, num_bins=4)
        port = c.get("/v1/identity").json()["grpc_port"]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            pb_grpc.FeaturesPartyStub(channel).DeliverRelease(iter(build_frames(message, sender)))  # type: ignore[no-untyped-call]
        buf = io.BytesIO()
        pq.write_table(
            pa.table({"example_id": ids, "x": np.arange(400.0), "c": [str(i % 3) for i in range(400)]}), buf
        )
        c.put(
            "/v1/feature-tables/t",
            content=buf.getvalue(),
            headers={"Content-Type": "application/vnd.apache.parquet"},
        ).raise_for_status()
        job = c.post("/v1/models", json={"release_id": message.release_id, "feature_table": "t"}).json()["id"]
        deadline = time.monotonic() + 120
        while (
            c.get(f"/v1/jobs/{job}").json()["status"] not in ("succeeded", "failed")
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        yield LiveApi(
            base,
            {"Authorization": f"Bearer {key}"},
            {"release_id": message.release_id, "name": "t", "model_id": job, "job_id": job},
        )


# every check schemathesis has (its CLI's `--checks all`): no server error; every answer one the document
# declares (status, content type, headers, a body that validates — problem+json for every error, its
# `type` one of the codes the document lists for that status); data the schema forbids is refused and
# data it allows is not refused for its shape; a missing required header, an unsupported method or a
# missing key is refused; a deleted resource is gone. Data the schema allows may still be refused for what
# it means (below), not for its shape.
load_all_checks()


@schemathesis.check
def schema_valid_data_passes_validation(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance`` for an API whose checks go past its schema: data the schema allows
    may be refused for what it means (a 4xx with a domain code: a certificate that does not parse, a
    host that is not allowed; or a rule across fields, ``lo < hi``, which a schema cannot state: a
    validator's ``value_error``), never because a field breaks a constraint the document states
    (``invalid-request`` with a type, range or format error: then the document and the server's
    validation disagree)."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 422:
        return None
    problem = response.json()
    fields = [e for e in problem.get("errors", []) if e["type"] != "value_error"]  # rules across fields
    if problem.get("type") == "invalid-request" and fields:
        raise AssertionError(f"schema-valid data refused as malformed: {response.content[:500]!r}")
    return None


ALL_CHECKS = [c for c in CHECKS.get_all() if c.__name__ != "positive_data_acceptance"]


def check(case: Any, api: LiveApi) -> None:
    response = case.call(headers=api.headers, timeout=120)
    where = f"{case.method} {case.formatted_path} → {response.status_code}: {response.content[:500]!r}"
    assert response.status_code < 500, where
    case.validate_response(response, checks=ALL_CHECKS, headers=api.headers)
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/problem+json"), where
        assert response.json()["type"], where


def fuzz(api: LiveApi) -> int:
    """Every operation of the live API's OpenAPI document, EXAMPLES generated requests each."""
    schema = schemathesis.openapi.from_url(f"{api.base}/openapi.json")
    _swap_in_real_ids(schema, api)
    operations = 0
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an invalid document fails here loudly

        @settings(
            max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy())
        def run(case: Any) -> None:
            check(case, api)

        if os.environ.get("LABELDP_FUZZ_SURVEY"):  # development: every operation's failures, then fail
            try:
                run()
            except BaseException as exc:
                print(f"\n### {operation.label}\n{str(exc)[:1500]}", flush=True)
                failures.append(operation.label)
        else:
            run()
        operations += 1
    assert not failures, failures
    return operations


@pytest.mark.slow  # 60 generated requests an operation, 20-30 s a party: make test, not make check
def test_labels_api_answers_every_request_without_a_server_error(labels_api: LiveApi) -> None:
    assert fuzz(labels_api) >= 15


@pytest.mark.slow
def test_features_api_answers_every_request_without_a_server_error(features_api: LiveApi) -> None:
    assert fuzz(features_api) >= 12


def test_the_fuzzed_data_exists(labels_api: LiveApi, features_api: LiveApi, tmp_path: Path) -> None:
    """The IDs swapped in are real: the fuzzing above reached past the lookups."""
    a = httpx.Client(base_url=labels_api.base, headers=labels_api.headers)
    assert a.get(f"/v1/releases/{labels_api.ids['release_id']}").json()["status"] == "complete"
    f = httpx.Client(base_url=features_api.base, headers=features_api.headers)
    assert f.get(f"/v1/models/{features_api.ids['model_id']}").json()["status"] == "succeeded"
