"""A received release's training set and released values out of the features party, over real HTTP:
what the rows and the description hold (checked against an independent join and the mechanism's own
numbers), both formats, resuming by row-group offset, the bounded-memory join's spill path, and every
bad request — another tenant's release or table, an offset past the end, a reserved column, a client
that leaves mid-stream — answered clearly with nothing left behind."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from features_party.config import FeaturesSettings
from features_party.exports import formats, partitions, plan
from labeldp.common.identity import Identity
from labeldp.mechanisms import BinsNoise, PublishedMechanism
from labeldp_model import Release
from tests.support.features_party import census_release, deliver, pin_sender, put_table
from tests.support.servers import features_server_thread, features_tenant_key

PARQUET = "application/vnd.apache.parquet"


@dataclass
class Party:
    c: httpx.Client
    other: httpx.Client
    release_id: str
    mechanism: PublishedMechanism
    bins: np.ndarray
    ids: list[str]
    features: pa.Table
    data_dir: Path


@pytest.fixture
def party(tmp_path: Path) -> Iterator[Party]:
    settings = FeaturesSettings(
        data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True, max_concurrent_exports=1
    )
    key, other_key = features_tenant_key(settings, "ml"), features_tenant_key(settings, "other")
    sender = Identity.generate()
    rel, features = census_release("squared", n=6_000)
    # the feature table lacks the release's first 500 examples and has 300 of its own
    own = features.slice(0, 300).set_column(
        features.schema.get_field_index("example_id"), "example_id", pa.array([f"x{i}" for i in range(300)])
    )
    table = pa.concat_tables([features.slice(500), own])
    with features_server_thread(settings) as base:
        c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        other = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {other_key}"}, timeout=60)
        pin_sender(c, sender)
        deliver(c, rel, sender)
        assert put_table(c, "census", table).status_code == 201
        yield Party(
            c,
            other,
            rel.release_id,
            rel.mechanism,
            np.asarray(rel.bins),
            rel.example_ids.to_pylist(),
            table,
            settings.data_dir,
        )


def _read(r: httpx.Response) -> pa.Table:
    assert r.status_code == 200, r.text
    if r.headers["content-type"] == PARQUET:
        return pq.read_table(io.BytesIO(r.content))
    return pa.ipc.open_stream(r.content).read_all()


def _same(got: pa.Table, expected: pa.Table) -> bool:
    """Equal values (a dictionary column's index width may differ between the stored table and ours)."""

    def plain(t: pa.Table) -> pa.Table:
        return pa.table(
            {
                n: pc.cast(c, c.type.value_type) if pa.types.is_dictionary(c.type) else c
                for n, c in zip(t.column_names, t.columns, strict=True)
            }
        )

    a = plain(got)
    return a.equals(plain(expected.select(got.column_names)).cast(a.schema))  # stored numbers are doubles


def _expected(p: Party) -> pa.Table:
    """The join done independently: the table's rows in its order, each with its example's bin."""
    bin_of = dict(zip(p.ids, p.bins.tolist(), strict=True))
    kept = [i for i, e in enumerate(p.features.column("example_id").to_pylist()) if e in bin_of]
    rows = p.features.take(pa.array(kept))
    bins = np.array([bin_of[e] for e in rows.column("example_id").to_pylist()])
    return rows.append_column("released_bin", pa.array(bins, pa.uint16())).append_column(
        "released_value", pa.array(np.asarray(p.mechanism.bin_values)[bins])
    )


def test_the_training_set_is_the_join_with_the_released_values_and_the_description(party: Party) -> None:
    r = party.c.get(f"/v1/releases/{party.release_id}/training-set", params={"feature_table": "census"})
    got = _read(r)
    expected = _expected(party)
    names = ["example_id", *[n for n in party.features.column_names if n != "example_id"]]
    assert got.column_names == [*names, "released_bin", "released_value"]
    assert got.num_rows == 5_500 and _same(got, expected)
    assert r.headers["X-Row-Groups"] == r.headers["X-Row-Group-Count"] == "1"
    assert 'filename="training-set-' in r.headers["content-disposition"]
    release = Release.from_metadata(pq.read_schema(io.BytesIO(r.content)).metadata)
    noise = BinsNoise.of_published(party.mechanism)
    assert release.release_id == party.release_id and release.kind == "rr_on_bins"
    assert release.correction.keep == noise.keep and release.correction.move == noise.move
    assert np.array_equal(release.correction.bin_values, noise.bin_values)
    assert release.description["feature_table"] == {"name": "census", "version": 1}
    assert release.description["mechanism"] == party.mechanism.model_dump(mode="json")
    arrow = party.c.get(
        f"/v1/releases/{party.release_id}/training-set", params={"feature_table": "census", "format": "arrow"}
    )
    assert arrow.headers["content-type"] == "application/vnd.apache.arrow.stream"
    assert _read(arrow).equals(got)
    assert (
        Release.from_metadata(pa.ipc.open_stream(arrow.content).schema.metadata).release_id
        == party.release_id
    )


def test_the_released_values_alone_are_every_example_in_the_release_s_order(party: Party) -> None:
    got = _read(party.c.get(f"/v1/releases/{party.release_id}/released-values"))
    assert got.column("example_id").to_pylist() == party.ids
    assert got.column("released_bin").to_numpy().tolist() == party.bins.tolist()
    assert np.array_equal(
        got.column("released_value").to_numpy(), np.asarray(party.mechanism.bin_values)[party.bins]
    )
    release = Release.from_metadata(got.schema.metadata)
    assert release.description["export"] == "released-values" and release.description["feature_table"] is None


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_an_export_resumes_at_any_row_group_offset(
    party: Party, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups of 700 rows (20 in all here, the last one short): any offset and count give exactly
    those groups of the whole export, and the groups put together are the whole."""
    monkeypatch.setattr(plan, "MAX_GROUP_ROWS", 700)
    monkeypatch.setattr(plan, "MIN_GROUP_ROWS", 100)
    url = f"/v1/releases/{party.release_id}/training-set"
    params = {"feature_table": "census", "format": fmt}
    whole = party.c.get(url, params=params)
    assert whole.headers["X-Row-Groups"] == "9"  # 5,800 table rows in groups of 700
    if fmt == "parquet":
        sizes = pq.ParquetFile(io.BytesIO(whole.content)).metadata
        assert sizes.num_row_groups == 9
    pieces = [party.c.get(url, params={**params, "row_group_offset": k, "row_groups": 4}) for k in (0, 4, 8)]
    assert [p.headers["X-Row-Group-Count"] for p in pieces] == ["4", "4", "1"]
    assert pa.concat_tables([_read(p) for p in pieces]).equals(_read(whole))
    rest = party.c.get(url, params={**params, "row_group_offset": 9})  # a client that had it all
    assert rest.status_code == 200 and _read(rest).num_rows == 0
    past = party.c.get(url, params={**params, "row_group_offset": 10})
    assert past.status_code == 422 and past.headers["content-type"] == "application/problem+json"
    assert past.json()["type"] == "row-group-offset-past-end" and past.json()["row_groups"] == 9


def test_the_join_spills_partitions_and_finds_the_same_rows(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forced onto the partitioned path (7 partitions spilled to unnamed files, bins memory-mapped): the
    same export as the in-memory join, and no file left in the data directory."""
    monkeypatch.setattr(partitions, "IN_MEMORY_UP_TO", 10)
    monkeypatch.setattr(partitions, "PARTITION_ROWS", 900)
    monkeypatch.setattr(partitions, "SPILL_BINS_FROM", 100)
    before = sorted(p for p in party.data_dir.rglob("*") if p.is_file())
    got = _read(
        party.c.get(f"/v1/releases/{party.release_id}/training-set", params={"feature_table": "census"})
    )
    assert _same(got, _expected(party))
    assert sorted(p for p in party.data_dir.rglob("*") if p.is_file() and "features.db" not in p.name) == [
        p for p in before if "features.db" not in p.name
    ]


def test_the_partition_hash_spreads_ids_and_depends_only_on_them() -> None:
    ids = pa.array([f"click-{i:09d}" for i in range(200_000)])
    h = partitions.IdHash()
    parts = h.partition(ids, 16)
    counts = np.bincount(parts, minlength=16)
    assert counts.min() > 11_000 and counts.max() < 14_000  # 12,500 each; chi-square far from this
    assert np.array_equal(h.partition(ids.slice(1000, 5), 16), parts[1000:1005])
    assert np.array_equal(h(pa.array(["é", "e", "ab", "ba"])), h(pa.array(["é", "e", "ab", "ba"])))
    assert len(set(h(pa.array(["é", "e", "ab", "ba", "a", "b"])).tolist())) == 6


@pytest.mark.parametrize("fmt", [formats.PARQUET, formats.ARROW])
def test_a_group_leaves_in_bounded_blocks_that_read_back_as_the_groups(fmt: str) -> None:
    """A group of 131,072 rows × 20 columns (about 21 MB encoded) goes out in blocks of a few MB, not
    as one block: the HTTP layer copies every block it is handed, and the C allocator keeps what it
    freed. Joined, the blocks are one file with the same groups and rows."""
    rng = np.random.default_rng(7)
    tables = [pa.table({f"x{c}": rng.random(n) for c in range(20)}) for n in (131_072, 0, 5_000)]
    blocks = list(formats.encode(fmt, tables[0].schema, tables))
    assert len(blocks) > 10 and max(len(b) for b in blocks) < 3 * formats.BLOCK_BYTES
    data = io.BytesIO(b"".join(blocks))
    if fmt == formats.PARQUET:
        file = pq.ParquetFile(data)
        assert [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)] == [
            131_072,
            0,
            5_000,
        ]
        read = file.read()
    else:
        batches = list(pa.ipc.open_stream(data))
        assert [b.num_rows for b in batches] == [131_072, 0, 5_000]
        read = pa.Table.from_batches(batches)
    assert read.equals(pa.concat_tables(tables))


def test_bad_requests_answer_clearly(party: Party, tmp_path: Path) -> None:
    url = f"/v1/releases/{party.release_id}/training-set"
    # another tenant's release and table look missing; so does a table never stored
    for client, params, what in (
        (party.other, {"feature_table": "census"}, "release"),
        (party.c, {"feature_table": "nope"}, "feature table"),
    ):
        r = client.get(url, params=params)
        assert r.status_code == 404 and r.json()["type"] == "not-found" and what in r.json()["detail"]
    assert put_table(party.other, "census", party.features).status_code == 201  # the other tenant's own
    assert (
        party.other.get(url, params={"feature_table": "census"}).status_code == 404
    )  # still not its release
    no_ids = party.features.drop_columns(["example_id"])
    refused = put_table(party.c, "no-ids", no_ids)
    assert refused.status_code == 422 and refused.json()["type"] == "missing-column"
    assert "example_id" in refused.json()["detail"]
    assert party.c.get(url, params={"feature_table": "no-ids"}).status_code == 404
    clash = party.features.append_column("released_value", pa.array(np.zeros(party.features.num_rows)))
    assert put_table(party.c, "clash", clash).status_code == 201
    r = party.c.get(url, params={"feature_table": "clash"})
    assert r.status_code == 409 and r.json()["type"] == "reserved-column"
    assert r.json()["columns"] == ["released_value"]
    gone = party.c.get(url, params={"feature_table": "census", "feature_table_version": 2})
    assert gone.status_code == 409 and gone.json()["type"] == "feature-table-version-gone"
    assert party.c.get(url, params={"feature_table": "census", "format": "csv"}).status_code == 422
    assert party.c.get(f"/v1/releases/{'0' * 8}/released-values").status_code == 404


def test_a_client_that_leaves_mid_stream_leaves_nothing_behind(
    party: Party, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one export allowed at a time: a second one while the first streams is 429 with Retry-After;
    once the first client hangs up after the first bytes, the slot is free again and no file of the
    export (its spilled partitions) remains. The first export is held after its header until the
    client has left, so that the order is certain."""
    monkeypatch.setattr(partitions, "IN_MEMORY_UP_TO", 10)
    monkeypatch.setattr(partitions, "PARTITION_ROWS", 900)
    gate, real = threading.Event(), formats.encode

    def held(fmt: str, schema: pa.Schema, tables: Iterator[pa.Table]) -> Iterator[bytes]:
        chunks = real(fmt, schema, tables)
        for chunk in chunks:
            yield chunk
            if chunk:
                break
        gate.wait(30)
        yield from chunks

    monkeypatch.setattr(formats, "encode", held)
    url = f"/v1/releases/{party.release_id}/training-set"
    with party.c.stream("GET", url, params={"feature_table": "census", "format": "arrow"}) as r:
        assert r.status_code == 200
        assert next(r.iter_bytes(64))
        busy = party.c.get(url, params={"feature_table": "census"})
        assert busy.status_code == 429 and busy.json()["type"] == "too-many-exports"
        assert int(busy.headers["Retry-After"]) > 0
    gate.set()  # the client has left; the export's thread finishes its chunk and is closed
    for _ in range(100):
        again = party.c.get(f"/v1/releases/{party.release_id}/released-values")
        if again.status_code == 200:
            break
        time.sleep(0.1)
    assert again.status_code == 200
    assert not list(party.data_dir.rglob(".export-*"))


def test_the_client_and_the_command_write_the_export_and_its_description(
    party: Party, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``FeaturesClient.download_training_set`` resumes a stream cut after its first blocks at the
    first row group it had not written, and writes one Parquet file with the description beside it;
    ``labeldp features export`` does the same from the command line."""
    from typer.testing import CliRunner

    from labeldp.cli import app
    from labeldp.client import FeaturesClient

    monkeypatch.setattr(plan, "MAX_GROUP_ROWS", 500)
    monkeypatch.setattr(plan, "MIN_GROUP_ROWS", 100)
    real = httpx.Response.iter_bytes
    cuts = {"left": 2}

    def cut(self: httpx.Response, chunk_size: int | None = None) -> Iterator[bytes]:
        for i, block in enumerate(real(self, 4096)):
            if i == 5 and cuts["left"]:
                cuts["left"] -= 1
                raise httpx.RemoteProtocolError("peer closed connection")
            yield block

    monkeypatch.setattr(httpx.Response, "iter_bytes", cut)
    key = party.c.headers["Authorization"].removeprefix("Bearer ")
    out = tmp_path / "train.parquet"
    with FeaturesClient(str(party.c.base_url), key) as client:
        rows = client.download_training_set(party.release_id, out, "census", row_groups_per_request=3)
    assert cuts["left"] == 0 and rows == 5_500
    assert _same(pq.read_table(out), _expected(party))
    assert Release.load(out).release_id == party.release_id
    assert not list(tmp_path.glob("*.partial"))
    monkeypatch.setattr(httpx.Response, "iter_bytes", real)
    values = tmp_path / "values.parquet"
    done = CliRunner().invoke(
        app,
        ["features", "export", "--release", party.release_id, "-o", str(values)],
        env={"LABELDP_FEATURES_URL": str(party.c.base_url), "LABELDP_FEATURES_API_KEY": key},
    )
    assert done.exit_code == 0, done.output
    assert "6,000 rows" in done.output and pq.read_table(values).num_rows == 6_000
    assert Release.load(values).description["export"] == "released-values"
