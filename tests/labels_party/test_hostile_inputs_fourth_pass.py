"""Hostile input, fourth pass, against the labels party's real HTTP API: Parquet uploads whose pages
or dictionaries would decode to far more than their bodies are refused from their headers before
anything is decompressed, and another tenant's work goes on while they are sent."""

from __future__ import annotations

import io
import os
import shlex
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.processes import free_port
from labels_party.api.app import create_app
from labels_party.config import LabelsSettings
from labels_party.datasets.readers import MAX_PAGE_BYTES
from labels_party.storage.db import sqlite_url
from tests.support.features_party import peak_rss_growth
from tests.support.labels_api import csv, dataset, problem, upload
from tests.support.servers import LabelsProcess, serve_in_thread, tenant_key

PARQUET = "application/vnd.apache.parquet"
# what refusing a Parquet bomb may raise the server's peak memory by, beyond 4 × its body: the
# reader's buffers and the one long dictionary value (measured: 4-18 MiB, another tenant's uploads
# running beside it in the same process)
BOMB_PEAK_MIB = 32


def parquet(table: pa.Table, **options: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def one_long_id(size: int) -> bytes:
    """One ``example_id`` of ``size`` bytes, zstd-compressed into a few kilobytes."""
    return parquet(pa.table({"example_id": ["x" * size], "label": [1]}), compression="zstd")


def repeated_long_value(rows: int, size: int) -> bytes:
    """One ``size``-byte ID in the dictionary, every one of ``rows`` rows pointing at it: each page
    small, but a batch of rows decoded as plain text would be rows × size bytes."""
    ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["y" * size]))
    table = pa.table({"example_id": ids, "label": pa.array(np.ones(rows, np.int64))})
    return parquet(table, compression="zstd", dictionary_pagesize_limit=4 * size)


def delta_byte_array_ids(rows: int) -> bytes:
    table = pa.table({"example_id": [f"e{i}" for i in range(rows)], "label": np.ones(rows, np.int64)})
    return parquet(table, use_dictionary=False, column_encoding={"example_id": "DELTA_BYTE_ARRAY"})


@pytest.fixture
def two_tenants(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """A labels party whose file work runs in its own threads (``file_workers=0``), so that this
    process's peak memory is the one that would pay for a bomb; two tenants of it."""
    url = sqlite_url(tmp_path)
    keys = [tenant_key(url, name, "10")[1] for name in ("mallory", "acme")]
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=url, file_workers=0)
    with serve_in_thread(create_app(settings)) as base:
        mallory, acme = (
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {k}"}, timeout=120) for k in keys
        )
        yield mallory, acme


def test_parquet_uploads_that_would_inflate_are_refused_from_their_headers(
    two_tenants: tuple[httpx.Client, httpx.Client],
) -> None:
    """A page that decompresses past ``MAX_PAGE_BYTES`` (one 100 MiB ID in 4 KB: the 1 GiB one of the
    report raised a file-work process by 3 GiB and was refused after 11.6 s), a dictionary value
    longer than any ID that every row repeats, and text in ``DELTA_BYTE_ARRAY`` are refused before
    anything is decoded, nothing stored; the server's peak memory rises by at most 4 × the body plus
    ``BOMB_PEAK_MIB``; and another tenant's uploads land meanwhile."""
    mallory, acme = two_tenants
    target, other = dataset(mallory), dataset(acme)
    bombs = [
        (one_long_id(100 * 2**20), 413, "upload-too-large"),
        (repeated_long_value(200_000, 2**20), 422, "example-id-too-long"),
        (delta_byte_array_ids(1000), 422, "unsupported-encoding"),
    ]
    assert len(bombs[0][0]) < 2**20 < MAX_PAGE_BYTES < 100 * 2**20
    answers: list[int] = []
    stop = threading.Event()

    def other_tenant_uploads() -> None:
        n = 0
        while not stop.is_set():
            rows = csv([(f"a{n}-{i}", i % 53) for i in range(2000)])
            answers.append(upload(acme, other, rows).status_code)
            n += 1

    beside = threading.Thread(target=other_tenant_uploads)
    beside.start()
    try:
        for body, status, code in bombs:
            with peak_rss_growth() as peak:
                problem(upload(mallory, target, body, PARQUET), status, code)
            assert peak.mib <= 4 * len(body) / 2**20 + BOMB_PEAK_MIB, (code, peak)
    finally:
        stop.set()
        beside.join(timeout=120)
    assert answers and set(answers) == {200}
    assert acme.get(f"/v1/datasets/{other}").json()["label_count"] == 2000 * len(answers)
    assert mallory.get(f"/v1/datasets/{target}").json()["label_count"] == 0
    # an honest Parquet upload (dictionary-encoded IDs, several pages) is read as before
    honest = pa.table({"example_id": [f"h{i}" for i in range(300_000)], "label": np.arange(300_000) % 53})
    fine = upload(mallory, target, parquet(honest, data_page_size=2**16), PARQUET)
    assert fine.status_code == 200 and fine.json()["label_count"] == 300_000


@pytest.mark.parametrize(
    "address",
    [
        "[::ffff:169.254.169.254]:80",  # IPv4-mapped: was registered, and dialled
        "2852039166:80",  # 169.254.169.254 as one decimal number
        "0xa9.0xfe.0xa9.0xfe:80",  # in hex
        "0251.0376.0251.0376:80",  # in octal
        "169.254.43518:80",  # its last two bytes as one number
        "[64:ff9b::a9fe:a9fe]:80",  # NAT64
        "[2002:a9fe:a9fe::1]:80",  # 6to4
    ],
)
def test_link_local_addresses_in_any_spelling_are_refused(
    two_tenants: tuple[httpx.Client, httpx.Client], address: str
) -> None:
    """The link-local rule reads the address that would be dialled, not how it is written."""
    mallory, _ = two_tenants
    problem(
        mallory.post("/v1/recipients", json={"name": "x", "grpc_address": address}),
        422,
        "invalid-recipient-address",
    )
    assert mallory.get("/v1/recipients").json()["items"] == []


@pytest.mark.processes
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare for a private /etc/hosts",
)
def test_a_name_that_resolves_to_a_link_local_address_is_never_dialled(tmp_path: Path) -> None:
    """A DNS name registers (what it resolves to may change), but a delivery resolves it when it dials,
    checks every address and dials those, not the name again: one that resolves to 169.254.169.254
    is refused (422) and nothing is dialled or recorded. The labels party runs with a private
    /etc/hosts (its own mount namespace) in which ``metadata.test`` is 169.254.169.254."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n169.254.169.254 metadata.test\n127.0.0.1 publisher.test\n")

    class PrivateHosts(LabelsProcess):
        def command(self) -> list[str]:
            serve = " ".join(shlex.quote(part) for part in super().command())
            return [
                "unshare",
                "--mount",
                "sh",
                "-c",
                f"mount --bind {shlex.quote(str(hosts))} /etc/hosts && exec {serve}",
            ]

    url = sqlite_url(tmp_path)
    _, key = tenant_key(url, "acme", "10")
    server = PrivateHosts(tmp_path / "data", url, env={"LABELDP_ALLOW_PLAINTEXT": "true"})
    server.start()
    try:
        c = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        port = free_port()
        for name, address in (("metadata", "metadata.test:80"), ("publisher", f"publisher.test:{port}")):
            assert c.post("/v1/recipients", json={"name": name, "grpc_address": address}).status_code == 201
        ds = dataset(c)
        assert upload(c, ds, csv([(f"e{i}", i % 53) for i in range(30)])).status_code == 200
        for name in ("metadata", "publisher"):
            made = c.post(
                f"/v1/datasets/{ds}/releases",
                json={"epsilon": 0.5, "recipient": name},
                headers={"Idempotency-Key": name},
            )
            assert made.status_code == 201, made.text
            sent = c.post(f"/v1/releases/{made.json()['id']}/deliveries")
            if name == "metadata":
                got = problem(sent, 422, "invalid-recipient-address")
                assert "link-local" in got["detail"]
                assert c.get(f"/v1/releases/{made.json()['id']}/deliveries").json()["items"] == []
            else:  # a name that resolves elsewhere is dialled (nobody listens there: unreachable)
                problem(sent, 502, "delivery-failed")
    finally:
        server.stop()


def test_what_every_route_answers_is_what_it_declares(two_tenants: tuple[httpx.Client, httpx.Client]) -> None:
    """The API's own pages cannot be framed; a JSON body that is not UTF-8 is a 422 problem (it was an
    undocumented 400 ``http-error``); a 405 says which methods the path takes (``Allow``); an
    ``X-Request-ID`` that is not what every operation declares (1-200 printable ASCII) is refused."""
    c, _ = two_tenants
    for page in ("/docs", "/redoc"):
        got = c.get(page)
        assert got.status_code == 200 and got.headers["x-frame-options"] == "DENY"
        assert got.headers["content-security-policy"] == "frame-ancestors 'none'"
    for body in (b'{"name": "\xff", "label_type": "count", "lo": 0, "hi": 9}', b"\xfe\xff\x00{"):
        bad = c.post("/v1/datasets", content=body, headers={"Content-Type": "application/json"})
        assert "UTF-8" in problem(bad, 422, "invalid-text")["detail"]
    not_allowed = c.patch("/v1/datasets", json={})
    problem(not_allowed, 405, "method-not-allowed")
    assert not_allowed.headers["allow"] == "GET, POST"
    for request_id in ("x" * 201, "with space", "caf\u00e9"):
        refused = c.get("/v1/datasets", headers={b"X-Request-ID": request_id.encode()})
        said = problem(refused, 422, "invalid-request")
        assert said["errors"][0]["loc"] == ["header", "X-Request-ID"]
        assert refused.headers["x-request-id"] != request_id  # a fresh one, to find the log line by
    kept = c.get("/v1/datasets", headers={"X-Request-ID": "x" * 200})
    assert kept.status_code == 200 and kept.headers["x-request-id"] == "x" * 200
