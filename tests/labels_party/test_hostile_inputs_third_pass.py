"""Hostile input, third pass, against the labels party's real HTTP API (SQLite and PostgreSQL): lone
surrogates, loose JSON types, a prior that overflows, duplicated columns, recipients that would turn
the service into a port scanner, and what a crash or a failed canary check leaves behind. Each gets a
4xx problem+json before anything is charged, stored or left on disk."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labels_party.config import LabelsSettings
from labels_party.storage.data_dir import DataDir
from tests.support.labels_api import Api, charges, csv, dataset, problem, upload, with_recipient
from tests.support.servers import labels_server_thread, tenant_key

NDJSON = "application/x-ndjson"


def unchanged(c: httpx.Client, ds: str, before: dict[str, Any]) -> None:
    assert c.get(f"/v1/datasets/{ds}").json() == before
    assert charges(c) == []


def test_lone_surrogates_are_refused_in_uploads_and_json_bodies(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    for line in (
        b'{"example_id": "\\ud800", "label": 1}\n',
        b'{"example_id": "a", "label": 1, "user_id": "\\udc00"}\n',
        b'{"example_id": "a", "label": "\\ud83d"}\n',
    ):
        got = problem(upload(c, ds, line, NDJSON), 422, "unparseable-upload")
        assert got["rows"] == [1]
    problem(upload(c, ds, b'{"example_id": "\\udfff"}\n', NDJSON, what="universe"), 422, "unparseable-upload")
    unchanged(c, ds, before)
    # a JSON request body: refused before any route reads it, a pair of halves (an emoji) is fine
    raw = b'{"name": "x\\ud800", "label_type": "count", "lo": 0, "hi": 9}'
    answer = c.post("/v1/datasets", content=raw, headers={"Content-Type": "application/json"})
    problem(answer, 422, "invalid-text")
    release = b'{"epsilon": 1, "recipient": "publisher", "example_ids": ["e\\udc00"]}'
    answer = c.post(
        f"/v1/datasets/{ds}/releases",
        content=release,
        headers={"Content-Type": "application/json", "Idempotency-Key": "k"},
    )
    problem(answer, 422, "invalid-text")
    emoji = b'{"name": "clicks \\ud83d\\ude00", "label_type": "count", "lo": 0, "hi": 9}'
    made = c.post("/v1/datasets", content=emoji, headers={"Content-Type": "application/json"})
    assert made.status_code == 201 and made.json()["name"] == "clicks \U0001f600"
    assert charges(c) == []


@pytest.mark.parametrize(
    "body",
    [
        {"epsilon": "1_0"},
        {"epsilon": "10"},
        {"epsilon": True},
        {"epsilon": 1, "epsilon_prior": "0.5"},
        {"privacy_unit": "user", "epsilon_user": "2", "contribution_bound": 2},
        {"privacy_unit": "user", "epsilon_user": 2, "contribution_bound": True},
        {"privacy_unit": "user", "epsilon_user": 2, "contribution_bound": "3"},
    ],
)
def test_privacy_parameters_are_strict_numbers(api: Api, body: dict[str, Any]) -> None:
    """``"1_0"`` was charged as ε = 10 and ``true`` as 1: text and booleans are not numbers."""
    c = with_recipient(api.tenant("acme", "100"))
    ds = dataset(c)
    assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(40)])).status_code == 200
    answer = c.post(
        f"/v1/datasets/{ds}/releases",
        json={"recipient": "publisher", **body},
        headers={"Idempotency-Key": "k"},
    )
    problem(answer, 422, "invalid-request")
    assert charges(c) == []
    assert (
        c.post(  # an integer is a number
            f"/v1/datasets/{ds}/releases",
            json={"recipient": "publisher", "epsilon": 1},
            headers={"Idempotency-Key": "j"},
        ).status_code
        == 201
    )


@pytest.mark.parametrize(
    "prior",
    [[1e308] * 5, [1e308, 1, 1, 1, 1], [1e-310, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1], [-1, 1, 1, 1, 1]],
)
def test_a_public_prior_that_would_overflow_is_refused(api: Api, prior: list[float]) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c, label_type="count", lo=0, hi=4)
    assert upload(c, ds, csv([(f"e{i}", i % 5) for i in range(50)])).status_code == 200
    answer = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2, "recipient": "publisher", "public_prior": prior},
    )
    problem(answer, 422, "invalid-prior")
    scaled = c.post(  # any scale within the bounds: the same preview as the probabilities
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2, "recipient": "publisher", "public_prior": [1e299, 2e299, 1e299, 1e299, 1e299]},
    )
    plain = c.post(
        f"/v1/datasets/{ds}/releases:preview",
        json={"epsilon": 2, "recipient": "publisher", "public_prior": [1, 2, 1, 1, 1]},
    )
    assert scaled.status_code == plain.status_code == 200
    assert scaled.json()["bin_values"] == plain.json()["bin_values"]


def test_duplicated_columns_are_refused_in_every_format(api: Api) -> None:
    c = api.tenant("acme")
    ds = dataset(c)
    before = c.get(f"/v1/datasets/{ds}").json()
    got = problem(upload(c, ds, b"example_id,label,label\na,1,2\n"), 422, "duplicate-column")
    assert "'label'" in got["detail"]
    problem(upload(c, ds, b"example_id,example_id,label\na,b,1\n"), 422, "duplicate-column")
    problem(upload(c, ds, b'{"example_id": "a", "label": 1, "label": 2}\n', NDJSON), 422, "duplicate-column")
    schema = pa.schema([("example_id", pa.string()), ("label", pa.int64()), ("label", pa.int64())])
    buf = io.BytesIO()
    pq.write_table(pa.table([["a"], [1], [2]], schema=schema), buf)
    problem(upload(c, ds, buf.getvalue(), "application/vnd.apache.parquet"), 422, "duplicate-column")
    problem(upload(c, ds, b"example_id,user_id,user_id\na,u,v\n", what="universe"), 422, "duplicate-column")
    unchanged(c, ds, before)
    assert upload(c, ds, b"example_id,label,note,note\na,1,x,y\n").status_code == 200  # not ours: ignored


@pytest.mark.parametrize(
    ("address", "code"),
    [
        ("10.0.0.1:99999", "invalid-recipient-address"),
        ("10.0.0.1:0", "invalid-recipient-address"),
        ("169.254.169.254:80", "invalid-recipient-address"),
        ("[fe80::1]:8501", "invalid-recipient-address"),
        ("bad_host!:8501", "invalid-recipient-address"),
        ("[zz::1]:8501", "invalid-recipient-address"),
    ],
)
def test_recipient_addresses_are_validated(api: Api, address: str, code: str) -> None:
    c = api.tenant("acme")
    problem(c.post("/v1/recipients", json={"name": "p", "grpc_address": address}), 422, code)
    assert c.get("/v1/recipients").json()["items"] == []
    for fine in ("publisher.example:8501", "10.0.0.1:65535", "[::1]:8501"):
        assert c.post("/v1/recipients", json={"name": fine, "grpc_address": fine}).status_code == 201


def test_an_operator_can_restrict_recipients_and_failures_say_nothing_of_the_network(
    database_url: str, tmp_path: Path
) -> None:
    settings = LabelsSettings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        recipient_hosts="publisher.internal, 127.0.0.0/8",
        allow_plaintext=True,
    )
    _, key = tenant_key(database_url, "acme", "10")
    with labels_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        refused = c.post("/v1/recipients", json={"name": "x", "grpc_address": "10.1.2.3:8501"})
        problem(refused, 422, "recipient-address-not-allowed")
        for name, address in (("named", "publisher.internal:8501"), ("local", "127.0.0.1:1")):
            assert c.post("/v1/recipients", json={"name": name, "grpc_address": address}).status_code == 201
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(30)])).status_code == 200
        made = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 0.5, "recipient": "local"},
            headers={"Idempotency-Key": "r"},
        )
        assert made.status_code == 201, made.text
        failed = problem(c.post(f"/v1/releases/{made.json()['id']}/deliveries"), 502, "delivery-failed")
        detail = failed["detail"].lower()
        assert "could not be reached" in detail
        assert not any(word in detail for word in ("refused", "connect", "ipv4", "tls", "handshake", "127.0"))
        [delivery] = c.get(f"/v1/releases/{made.json()['id']}/deliveries").json()["items"]
        assert "refused" not in delivery["detail"].lower() and "127.0" not in delivery["detail"]


def test_a_dataset_nothing_was_released_from_can_be_deleted(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "10"))
    ds = dataset(c)
    assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(30)])).status_code == 200
    folder = DataDir(api.data_dir).dataset(ds)
    assert any(folder.iterdir())
    assert c.delete(f"/v1/datasets/{ds}").status_code == 204
    assert c.get(f"/v1/datasets/{ds}").status_code == 404 and not folder.exists()
    used = dataset(c, "used")
    assert upload(c, used, csv([(f"e{i}", i % 53) for i in range(30)])).status_code == 200
    rel = c.post(
        f"/v1/datasets/{used}/releases",
        json={"epsilon": 0.5, "recipient": "publisher"},
        headers={"Idempotency-Key": "r"},
    )
    assert rel.status_code == 201
    problem(c.delete(f"/v1/datasets/{used}"), 409, "dataset-in-use")
    assert c.get(f"/v1/datasets/{used}").status_code == 200
    other = api.tenant("other")
    problem(other.delete(f"/v1/datasets/{used}"), 404, "not-found")


def test_superseded_versions_are_collected_after_their_grace_period(
    database_url: str, tmp_path: Path
) -> None:
    settings = LabelsSettings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        superseded_grace_seconds=60,
        release_lease_seconds=0.5,  # recovery (and so collection) every quarter second
    )
    _, key = tenant_key(database_url, "acme", "10")
    with labels_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        ds = dataset(c)
        for version in range(3):
            assert upload(c, ds, csv([(f"e{version}-{i}", i % 53) for i in range(20)])).status_code == 200
        paths = DataDir(settings.data_dir)
        v1, v2, v3 = (paths.labels(ds, v) for v in (1, 2, 3))
        time.sleep(1.0)
        assert v1.exists() and v2.exists() and v3.exists()  # superseded a moment ago: kept
        old = time.time() - 120
        os.utime(v2, (old, old))  # v2 superseded v1 two minutes ago
        deadline = time.monotonic() + 10
        while v1.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not v1.exists() and v2.exists() and v3.exists()  # v2 was superseded only just now
        assert c.get(f"/v1/datasets/{ds}").json()["label_count"] == 60


def test_a_failed_canary_check_leaves_no_dataset(api: Api) -> None:
    """A canary check whose release is refused (here: the recipient does not exist) deletes the
    dataset of canaries it uploaded; one whose release exists keeps it."""
    from labeldp.audit.canaries import canary_audit
    from labeldp.client import ApiError, LabelsClient

    c = api.tenant("acme", "10")
    key = c.headers["Authorization"].removeprefix("Bearer ")
    with LabelsClient(api.base, key) as labels, pytest.raises(ApiError) as refused:
        canary_audit(labels, "nobody", 1.0, canaries=200)
    assert refused.value.code == "unknown-recipient"
    assert c.get("/v1/datasets").json()["items"] == []
    assert not any((DataDir(api.data_dir).root / "datasets").glob("*/labels-v*.parquet"))


def test_json_text_guard_agrees_with_python_on_any_string() -> None:
    """Independent check of the guard's scanner: for strings with and without lone surrogates, escaped
    by Python's own JSON encoder, the guard refuses exactly those Python cannot encode."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from labeldp.common.service import lone_surrogate

    halves_and_backslashes = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\\", "u"])
    alphabet = st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x1FFFF, exclude_categories=()), halves_and_backslashes
    )

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet=alphabet), st.booleans())
    def check(text: str, escape_backslashes: bool) -> None:
        body = json.dumps({"a": text + ("\\" if escape_backslashes else "")}).encode()
        try:
            text.encode()
            expected = False
        except UnicodeEncodeError:
            expected = True
        assert lone_surrogate(body) == expected

    check()


@pytest.mark.processes
def test_a_preview_or_release_of_listed_ids_is_bounded_in_count_and_memory(tmp_path: Path) -> None:
    """``example_ids`` holds at most 100,000 IDs (422 beyond, nothing charged), and a preview of the
    largest list — 100,000 IDs of 256 characters, a 27 MB body — raises the server's peak memory by at
    most 448 MiB (measured: 360–380 MiB above the idle server; the upload before it runs in a
    file-work process and leaves the server's peak where it was)."""
    from labels_party.releases.limits import MAX_LISTED_EXAMPLES
    from labels_party.storage.db import sqlite_url
    from tests.support.servers import LabelsProcess

    data = tmp_path / "data"
    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    server = LabelsProcess(data, url)
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
        with_recipient(c)
        ds = dataset(c)
        ids = [f"{i:08d}".ljust(256, "x") for i in range(MAX_LISTED_EXAMPLES)]
        rows = "example_id,label\n" + "".join(f"{e},{i % 53}\n" for i, e in enumerate(ids))
        assert upload(c, ds, rows.encode()).status_code == 200
        assert server.proc is not None

        def peak_mib() -> float:
            for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():  # type: ignore[union-attr]
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
            raise AssertionError("no VmHWM")

        before = peak_mib()
        preview = c.post(
            f"/v1/datasets/{ds}/releases:preview",
            json={"epsilon": 1, "recipient": "publisher", "example_ids": ids},
        )
        assert preview.status_code == 200 and preview.json()["examples"] == MAX_LISTED_EXAMPLES
        assert peak_mib() - before <= 448, peak_mib() - before
        too_many = c.post(
            f"/v1/datasets/{ds}/releases",
            json={"epsilon": 1, "recipient": "publisher", "example_ids": [*ids[:50], *ids]},
            headers={"Idempotency-Key": "k"},
        )
        problem(too_many, 422, "invalid-request")
        assert charges(c) == []
    finally:
        server.stop()
