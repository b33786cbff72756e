"""Hostile input, fourth pass, against the features party's real interfaces: a feature table that
would decode to far more than its body is refused for it, and another tenant's work goes on while it
is sent."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from features_party.tables.validation import DECODED_ALLOWANCE, DECODED_PER_BODY_BYTE
from tests.support.features_party import peak_rss_growth
from tests.support.servers import features_server_thread, features_tenant_key

PARQUET = "application/vnd.apache.parquet"
PEAK_MIB = 48  # what refusing a table for its decoded size may raise the peak by, beyond 4 × its body


def constant_columns(columns: int, rows: int) -> bytes:
    """``columns`` boolean columns of ``rows`` zeros (and unique IDs), written a row group at a time:
    a megabyte or two of Parquet that decodes to 8 bytes a value."""
    per_group = 100_000
    fields = [pa.field("example_id", pa.int64()), *(pa.field(f"f{i}", pa.bool_()) for i in range(columns))]
    schema = pa.schema(fields)
    zeros = pa.array(np.zeros(per_group, bool))
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for start in range(0, rows, per_group):
            ids = pa.array(np.arange(start, start + per_group, dtype=np.int64))
            writer.write_table(pa.table([ids, *[zeros] * columns], schema=schema))
    return sink.getvalue()


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    keys = [features_tenant_key(settings, name) for name in ("mallory", "publisher")]
    with features_server_thread(settings) as base:
        mallory, publisher = (
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {k}"}, timeout=120) for k in keys
        )
        yield mallory, publisher


def test_a_table_is_bounded_by_what_its_body_may_decode_to(
    tenants: tuple[httpx.Client, httpx.Client],
) -> None:
    """300 constant columns × 1M rows: 1.4 MB of Parquet, 2.4 GB decoded (under 4 × the 4 GiB upload
    limit, the bound before: it raised the server by 2.7 GiB before a 422). Refused from its footer and
    page headers for decoding to more than 4 × its body + 64 MiB, the peak within 4 × the body +
    ``PEAK_MIB``, while another tenant's tables land."""
    mallory, publisher = tenants
    body = constant_columns(300, 1_000_000)
    assert len(body) < 8 * 2**20
    stop, landed = threading.Event(), []

    def other_tenant() -> None:
        n = 0
        while not stop.is_set():
            table = pa.table({"example_id": [f"p{n}-{i}" for i in range(5000)], "x": np.arange(5000.0)})
            sink = io.BytesIO()
            pq.write_table(table, sink)
            put = publisher.put(
                f"/v1/feature-tables/t{n}", content=sink.getvalue(), headers={"Content-Type": PARQUET}
            )
            landed.append(put.status_code)
            n += 1

    beside = threading.Thread(target=other_tenant)
    beside.start()
    try:
        with peak_rss_growth() as peak:
            refused = mallory.put("/v1/feature-tables/wide", content=body, headers={"Content-Type": PARQUET})
    finally:
        stop.set()
        beside.join(timeout=120)
    assert refused.status_code == 413 and refused.json()["type"] == "table-too-large", refused.text
    allowed = DECODED_PER_BODY_BYTE * len(body) + DECODED_ALLOWANCE
    assert f"at most {allowed}" in refused.json()["detail"]
    assert peak.mib <= 4 * len(body) / 2**20 + PEAK_MIB, peak
    assert mallory.get("/v1/feature-tables").json()["items"] == []
    assert landed and set(landed) == {201}
    # 30 such columns of 100,000 rows decode to 25 MB: within the allowance, however well compressed
    small = mallory.put(
        "/v1/feature-tables/wide", content=constant_columns(30, 100_000), headers={"Content-Type": PARQUET}
    )
    assert small.status_code == 201, small.text
