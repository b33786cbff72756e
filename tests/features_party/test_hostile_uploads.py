"""Hostile feature-table uploads over real HTTP: duplicated column names and decompression bombs are
refused with a 4xx problem before their cost is paid — nothing stored, nothing left on disk, the
service up — and the process's peak memory stays within a stated bound while they are refused."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from tests.support.features_party import peak_rss_growth
from tests.support.servers import features_server_thread, features_tenant_key

PARQUET = "application/vnd.apache.parquet"
UPLOAD_LIMIT = 16 * 2**20  # a table may decode to 4 × its body + 64 MiB (at most 128 MiB here)
PEAK_MIB = 48  # what refusing any bomb below may raise this process's peak memory by


@dataclass
class Party:
    settings: FeaturesSettings
    base: str
    client: httpx.Client

    def put(self, name: str, body: bytes, ctype: str = PARQUET) -> httpx.Response:
        return self.client.put(f"/v1/feature-tables/{name}", content=body, headers={"Content-Type": ctype})

    def nothing_stored(self) -> bool:
        """No table, no version file, no spooled upload or temporary file left."""
        data = self.settings.data_dir
        leftovers = [
            p
            for p in data.rglob("*")
            if p.is_file() and (p.relative_to(data).parts[0] == "tmp" or p.suffix == ".tmp")
        ]
        return (
            self.client.get("/v1/feature-tables").json()["items"] == []
            and not list((data / "feature-tables").rglob("*.parquet"))
            and leftovers == []
        )

    def up(self) -> bool:
        return httpx.get(f"{self.base}/healthz").status_code == 200


@pytest.fixture
def party(tmp_path: Path) -> Iterator[Party]:
    settings = FeaturesSettings(
        data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True, max_upload_bytes=UPLOAD_LIMIT
    )
    key = features_tenant_key(settings, "ml")
    with features_server_thread(settings) as base:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        yield Party(settings, base, client)


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["type"] == code, body
    return body


def parquet(table: pa.Table, **options: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def test_a_duplicated_column_is_refused_and_named(party: Party) -> None:
    """CSV (Arrow would keep both columns and every lookup by name would fail: a 500 before) and
    Parquet alike."""
    duplicated = pa.Table.from_arrays(
        [pa.array(["e1", "e2"]), pa.array([1.0, 2.0]), pa.array([3.0, 4.0])], names=["example_id", "a", "a"]
    )
    for body, ctype in (
        (b"example_id,a,a\ne1,1,2\ne2,3,4\n", "text/csv"),
        (b"example_id,a,b,example_id\ne1,1,2,e1\n", "text/csv"),
        (parquet(duplicated), PARQUET),
    ):
        got = problem(party.put("t", body, ctype), 422, "duplicate-column")
        assert got["columns"] in (["a"], ["example_id"]) and repr(got["columns"][0]) in got["detail"]
        assert party.nothing_stored() and party.up()
    assert party.put("t", b"example_id,a,b\ne1,1,2\n", "text/csv").status_code == 201


def test_a_dictionary_bomb_costs_one_copy_and_is_refused_by_what_it_decodes_to(party: Party) -> None:
    """1M distinct IDs and a 1,000-byte category on every row: about 2 MB of Parquet that decoded as
    plain text (what reading it did before, and what training does) is a gigabyte. Text is read
    dictionary-encoded, so reading it costs one copy of the category, and the gigabyte it would
    decode to is refused before anything is stored."""
    n = 1_000_000
    ids = pa.array([f"e{i}" for i in range(n)])
    category = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["x" * 1000]))
    body = parquet(pa.table({"example_id": ids, "c": category}), compression="zstd")
    assert len(body) < UPLOAD_LIMIT
    with peak_rss_growth() as peak:
        got = problem(party.put("bomb", body), 413, "table-too-large")
    assert "decode to" in got["detail"] and party.nothing_stored() and party.up()
    assert peak.mib < 160, peak  # the IDs (about 40 MB as Arrow, twice), not the decoded gigabyte


def test_rows_of_nothing_are_refused_from_the_footer(party: Party) -> None:
    """30M rows of zeros compress to almost nothing; 8 bytes a row they would not: refused from the
    footer, before a page is read."""
    schema = pa.schema([("example_id", pa.int64()), ("x", pa.float64())])
    part = pa.table({"example_id": np.zeros(1_000_000, np.int64), "x": np.zeros(1_000_000)}, schema=schema)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, schema, compression="zstd") as writer:
        for _ in range(30):
            writer.write_table(part)
    body = buf.getvalue()
    del part
    assert len(body) < 2**20
    with peak_rss_growth() as peak:
        got = problem(party.put("zeros", body), 413, "table-too-large")
    assert "decode to" in got["detail"] and party.nothing_stored() and party.up()
    assert peak.mib < PEAK_MIB, peak


def _varint(value: int, length: int) -> bytes:
    """``value`` as a Thrift compact varint of exactly ``length`` bytes (continuation bits as padding)."""
    return bytes(((value >> (7 * i)) & 0x7F) | (0x80 if i < length - 1 else 0) for i in range(length))


def _understate(body: bytes, true_size: int) -> bytes:
    """The same file with the footer field that states ``true_size`` (a column chunk's uncompressed
    bytes, a zigzag varint) rewritten, in the same number of bytes, to state 100."""
    footer_length = int.from_bytes(body[-8:-4], "little")
    start = len(body) - 8 - footer_length
    length = (max((true_size << 1).bit_length(), 1) + 6) // 7
    honest, lying = _varint(true_size << 1, length), _varint(100 << 1, length)
    footer = body[start : len(body) - 8]
    assert footer.count(honest) == 1
    return body[:start] + footer.replace(honest, lying) + body[-8:]


def test_a_footer_that_understates_its_pages_is_caught_by_the_page_headers(party: Party) -> None:
    """One 150 MB value compresses to a few kilobytes; an honest footer states its size (and is
    refused for it), so a hostile one states 100 bytes instead. The page headers — what the reader
    decompresses into — still say 150 MB, and the upload is refused before any page is decompressed."""
    table = pa.table({"example_id": ["e1"], "note": ["y" * 150_000_000]})
    honest = parquet(table, compression="zstd", use_dictionary=False)
    del table
    meta = pq.ParquetFile(io.BytesIO(honest)).metadata
    column = meta.row_group(0).column(1)
    lying = _understate(honest, column.total_uncompressed_size)
    stated = pq.ParquetFile(io.BytesIO(lying)).metadata.row_group(0).column(1).total_uncompressed_size
    assert stated == 100 and len(lying) < 2**20
    for body in (honest, lying):
        with peak_rss_growth() as peak:
            got = problem(party.put("note", body), 413, "table-too-large")
        assert "decode to" in got["detail"] and party.nothing_stored() and party.up()
        assert peak.mib < PEAK_MIB, peak


def test_too_many_columns_are_refused_before_reading(party: Party) -> None:
    names = ["example_id", *(f"f{i}" for i in range(5000))]
    body = (",".join(names) + "\n" + ",".join(["e1", *["1"] * 5000]) + "\n").encode()
    got = problem(party.put("wide", body, "text/csv"), 413, "table-too-large")
    assert "5001 columns" in got["detail"] and party.nothing_stored() and party.up()
    wide = pa.table({n: pa.array([1.0]) for n in names[1:]}).append_column("example_id", pa.array(["e1"]))
    problem(party.put("wide", parquet(wide)), 413, "table-too-large")
    assert party.nothing_stored()


def test_a_delta_byte_array_text_column_is_refused(party: Party) -> None:
    """Each value a prefix of the one before plus a suffix: its decoded size is not bounded by its pages."""
    table = pa.table({"example_id": ["e1", "e2"], "c": ["a" * 100, "a" * 100]})
    body = parquet(table, use_dictionary=False, column_encoding={"c": "DELTA_BYTE_ARRAY"})
    got = problem(party.put("delta", body), 422, "unsupported-encoding")
    assert got["columns"] == ["c"] and party.nothing_stored()


def test_honest_dictionary_tables_are_read_as_before(party: Party) -> None:
    """Dictionary-encoded text (as pandas or Spark write it) in several row groups: categories and
    numbers as before, IDs checked for repeats without decoding them, and an invalid UTF-8 value of a
    dictionary refused."""
    n = 50_000
    table = pa.table(
        {
            "example_id": pa.array([f"id-{i}" for i in range(n)]).dictionary_encode(),
            "city": pa.array([f"c{i % 7}" for i in range(n)]).dictionary_encode(),
            "score": pa.array([str(i % 5) for i in range(n)]).dictionary_encode(),
        }
    )
    r = party.client.put(
        "/v1/feature-tables/ok",
        params={"numeric": "score"},
        content=parquet(table, row_group_size=8_000),
        headers={"Content-Type": PARQUET},
    )
    assert r.status_code == 201, r.text
    assert r.json()["schema"] == {"city": "categorical", "score": "numeric"} and r.json()["rows"] == n
    stored = pq.read_table(next((party.settings.data_dir / "feature-tables").rglob("v1.parquet")))
    assert stored.column("example_id").to_pylist() == [f"id-{i}" for i in range(n)]
    assert stored.column("score").to_pylist() == [float(i % 5) for i in range(n)]
    assert stored.column("city").combine_chunks().dictionary.to_pylist() == [f"c{i}" for i in range(7)]
    repeated = table.set_column(
        0, "example_id", pa.array([f"id-{i % 1000}" for i in range(n)]).dictionary_encode()
    )
    got = problem(party.put("rep", parquet(repeated, row_group_size=8_000)), 422, "duplicate-example-id")
    assert got["rows"][:2] == [1, 2] and got["columns"] == ["example_id"]
    wrong = table.set_column(2, "score", pa.array([f"x{i % 5}" for i in range(n)]).dictionary_encode())
    got = problem(
        party.client.put(
            "/v1/feature-tables/wrong",
            params={"numeric": "score"},
            content=parquet(wrong),
            headers={"Content-Type": PARQUET},
        ),
        422,
        "unparseable-column",
    )
    assert got["rows"][:2] == [1, 2] and got["columns"] == ["score"]
    invalid = pa.DictionaryArray.from_arrays(
        pa.array([0, 1] * (n // 2), pa.int32()),
        pa.array([b"ok", b"\xff"], pa.binary()).cast(pa.string(), safe=False),
    )
    problem(party.put("bad", parquet(table.set_column(1, "city", invalid))), 422, "unparseable-column")
    assert [t["name"] for t in party.client.get("/v1/feature-tables").json()["items"]] == ["ok"]


def test_mutated_parquet_uploads_are_refused_as_problems_never_crashes(tmp_path: Path) -> None:
    """2,000 Parquet files with bytes of their footer or anywhere changed, through the upload's reader
    and checks: each is stored-or-refused with a ``DomainError`` — never another exception, never a
    crash of the process (pyarrow's footer metadata objects abort on some of these, so the bounds are
    read from the footer without them; every decoded column is validated in full before use)."""
    from features_party.tables.validation import Limits, read, validate
    from labeldp.common.errors import DomainError

    n = 500
    rng = np.random.default_rng(11)
    table = pa.table(
        {
            "example_id": [f"e{i}" for i in range(n)],
            "c": pa.array([f"c{i % 5}" for i in range(n)]),
            "x": rng.normal(size=n),
        }
    )
    blob = parquet(table, row_group_size=200)
    path = tmp_path / "upload.parquet"
    outcomes: dict[str, int] = {}
    for trial in range(2000):
        mutated = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            at = (
                int(rng.integers(0, len(mutated)))
                if trial % 2
                else len(mutated) - 8 - int(rng.integers(1, 600))
            )
            mutated[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(mutated))
        try:
            validate(read(path, "parquet", Limits.for_uploads_of(2**20)), {})
            outcome = "valid"
        except DomainError as exc:
            outcome = exc.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes["unparseable-upload"] > 1000, outcomes
