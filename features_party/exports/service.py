"""The exports behind ``GET /v1/releases/{id}/training-set`` and ``…/released-values``: every check a
request must pass before the first byte, then the rows streamed a row group at a time.

A training set is the feature table's rows whose example has a released label, in the table's order,
with ``released_bin`` and ``released_value`` beside the features (a user-level release's capped rows,
which carry no label information, are left out as the service's own training leaves them out). The
released values alone are the release's rows in its order (a capped row's value is null). Both carry the
release's description (``description``) in their schema metadata, and are cut into the row groups
``plan`` fixes in advance, so a cut-off download resumes at a row-group offset. A process streams at
most ``max_concurrent`` exports at once (each holds a partition of the join and one row group);
more answer 429 ``too-many-exports``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from features_party.exports import formats, partitions
from features_party.exports.description import BIN, EXAMPLE_ID, GROUP_COLUMNS, VALUE, describe, row_noise
from features_party.exports.plan import Piece, batches, plan, rows_per_group
from features_party.receiver.store import ReceivedReleases, published_mechanism
from features_party.storage.orm import ReceivedRelease
from features_party.tables.service import FeatureTables
from labeldp.common.errors import DomainError
from labeldp.common.files import open_parquet_for_batches
from labeldp.mechanisms import GroupedNoise
from labeldp_model.release import METADATA_KEY

RETRY_AFTER_S = 30


class TooManyExportsError(DomainError):
    """429: this process streams as many exports as it may; ``retry_after_s`` is a guess."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            "too-many-exports",
            f"this process is streaming {limit} exports already; retry when one has finished",
            status=429,
            retry_after=RETRY_AFTER_S,
        )
        self.retry_after_s = RETRY_AFTER_S


@dataclass
class Export:
    """A checked export, ready to stream: ``chunks`` yields its bytes."""

    media_type: str
    filename: str
    headers: dict[str, str]
    chunks: Generator[bytes, None, None] = field(repr=False)


class Exports:
    def __init__(
        self, releases: ReceivedReleases, tables: FeatureTables, spool_dir: Path, max_concurrent: int = 2
    ) -> None:
        self.releases, self.tables, self.spool_dir = releases, tables, spool_dir
        self.max_concurrent = max_concurrent
        self._slots = threading.BoundedSemaphore(max_concurrent)

    # -- the two exports -------------------------------------------------------------------------
    def training_set(
        self,
        tenant_id: str,
        release_id: str,
        table_name: str,
        fmt: str = formats.PARQUET,
        offset: int = 0,
        count: int | None = None,
        version: int | None = None,
    ) -> Export:
        release = self.releases.get(tenant_id, release_id)
        table = self.tables.get(tenant_id, table_name)
        version = table.version if version is None else version
        path = self.tables.path(table, version)
        if not 1 <= version <= table.version or not path.is_file():
            raise DomainError(
                "feature-table-version-gone",
                f"version {version} of feature table {table.name!r} is no longer stored (current: "
                f"{table.version}); start the export again",
                status=409,
                current_version=table.version,
            )
        file = open_parquet_for_batches(path)  # open now: a later upload or collection cannot take it away
        features = [n for n in file.schema_arrow.names if n != EXAMPLE_ID]
        noise = row_noise(release)
        extra = [] if noise is None else GROUP_COLUMNS
        clash = sorted({BIN, VALUE, *(f.name for f in extra)} & set(features))
        if clash:
            raise DomainError(
                "reserved-column",
                f"feature table {table.name!r} has columns named like the export's own: {clash}; "
                "rename them and upload the table again",
                status=409,
                columns=clash,
            )
        group_rows = rows_per_group(len(features) + 3 + len(extra))
        pieces = plan(file, group_rows)
        selected = _window(pieces, offset, count)
        mechanism = published_mechanism(release)
        schema = pa.schema(
            [*file.schema_arrow, pa.field(BIN, pa.uint16()), pa.field(VALUE, pa.float64()), *extra],
            metadata={
                METADATA_KEY: describe(
                    release, table, features, _groups(pieces, offset, selected, group_rows)
                )
            },
        )
        # the feature columns in the table's order, then the release's two
        schema = pa.schema(
            [
                schema.field(EXAMPLE_ID),
                *(schema.field(n) for n in features),
                schema.field(BIN),
                schema.field(VALUE),
                *extra,
            ],
            metadata=schema.metadata,
        )
        done = self._take_slot()
        tables = self._training_rows(release, file, selected, group_rows, schema, mechanism.capped_bin)
        return self._export(
            fmt,
            schema,
            tables,
            done,
            f"training-set-{release.release_id}",
            pieces,
            offset,
            selected,
            {"X-Feature-Table-Version": str(version)},
        )

    def released_values(
        self,
        tenant_id: str,
        release_id: str,
        fmt: str = formats.PARQUET,
        offset: int = 0,
        count: int | None = None,
    ) -> Export:
        release = self.releases.get(tenant_id, release_id)
        file = open_parquet_for_batches(Path(release.path))
        noise = row_noise(release)
        extra = [] if noise is None else GROUP_COLUMNS
        group_rows = rows_per_group(3 + len(extra))
        pieces = plan(file, group_rows)
        selected = _window(pieces, offset, count)
        schema = pa.schema(
            [
                pa.field(EXAMPLE_ID, pa.string()),
                pa.field(BIN, pa.uint16()),
                pa.field(VALUE, pa.float64()),
                *extra,
            ],
            metadata={
                METADATA_KEY: describe(release, None, [], _groups(pieces, offset, selected, group_rows))
            },
        )
        values = np.asarray(published_mechanism(release).bin_values, dtype=np.float64)
        done = self._take_slot()

        def rows() -> Iterator[pa.Table]:
            columns = ["example_id", "bin"] if noise is None else ["example_id", "bin", "group"]
            for batch in batches(file, selected, group_rows, columns):
                bins = batch.column(1).to_numpy()
                if noise is None:
                    capped = bins >= values.size
                    value = pa.array(values[np.minimum(bins, values.size - 1)], mask=capped)
                    yield pa.table([batch.column(0), batch.column(1), value], schema=schema)
                    continue
                groups = np.asarray(batch.column(2).to_numpy(), dtype=np.int64)
                yield pa.table(
                    [batch.column(0), batch.column(1), *_grouped_columns(noise, bins, groups)], schema=schema
                )

        return self._export(
            fmt, schema, rows(), done, f"released-values-{release.release_id}", pieces, offset, selected, {}
        )

    # -- shared ----------------------------------------------------------------------------------
    def _training_rows(
        self,
        release: ReceivedRelease,
        file: pq.ParquetFile,
        selected: list[Piece],
        group_rows: int,
        schema: pa.Schema,
        capped: int | None,
    ) -> Iterator[pa.Table]:
        values = np.asarray(published_mechanism(release).bin_values, dtype=np.float64)
        noise = row_noise(release)
        with ExitStack() as stack:
            rows = sum(p.rows for p in selected)

            def ids() -> Iterator[pa.Array]:
                return (b.column(0) for b in batches(file, selected, group_rows, [EXAMPLE_ID]))

            bins = partitions.released_bins(Path(release.path), ids(), rows, self.spool_dir, stack)
            # a feature-aware release: each row's group + 1 (0: none), by a second join of the same rows
            groups = (
                None
                if noise is None
                else partitions.released_bins(Path(release.path), ids(), rows, self.spool_dir, stack, "group")
            )
            base = selected[0].first_row if selected else 0
            own = {BIN, VALUE, *(f.name for f in GROUP_COLUMNS)}
            names = [n for n in schema.names if n not in own]
            for piece, batch in zip(selected, batches(file, selected, group_rows, names), strict=True):
                window = slice(piece.first_row - base, piece.first_row - base + piece.rows)
                mine = np.asarray(bins[window])
                keep = mine != partitions.MISSING
                row_groups = None if groups is None else np.asarray(groups[window], dtype=np.int64) - 1
                if capped is not None:  # over a user-level bound: the capped code and no group
                    keep &= (mine != capped) if row_groups is None else ((mine != capped) | (row_groups >= 0))
                kept = mine[keep]
                table = pa.Table.from_batches([batch]).filter(pa.array(keep))
                if noise is None or row_groups is None:
                    released = [pa.array(kept, pa.uint16()), pa.array(values[kept])]
                else:
                    released = [pa.array(kept, pa.uint16()), *_grouped_columns(noise, kept, row_groups[keep])]
                yield pa.table([*table.columns, *released], schema=schema)

    def _take_slot(self) -> Callable[[], None]:
        if not self._slots.acquire(blocking=False):
            raise TooManyExportsError(self.max_concurrent)
        lock, freed = threading.Lock(), [False]

        def done() -> None:
            with lock:
                if not freed[0]:
                    freed[0] = True
                    self._slots.release()

        return done

    def _export(
        self,
        fmt: str,
        schema: pa.Schema,
        tables: Iterator[pa.Table],
        done: Callable[[], None],
        stem: str,
        pieces: list[Piece],
        offset: int,
        selected: list[Piece],
        headers: dict[str, str],
    ) -> Export:
        def chunks() -> Generator[bytes, None, None]:
            try:
                yield from formats.encode(fmt, schema, tables)
            finally:
                done()

        stream = chunks()
        weakref.finalize(stream, done)  # a stream never started (the client left first) frees its slot too
        return Export(
            formats.MEDIA_TYPES[fmt],
            stem + formats.SUFFIXES[fmt],
            {
                **headers,
                "X-Row-Groups": str(len(pieces)),
                "X-Row-Group-Offset": str(offset),
                "X-Row-Group-Count": str(len(selected)),
            },
            stream,
        )


def _grouped_columns(noise: GroupedNoise, bins: np.ndarray, groups: np.ndarray) -> list[pa.Array]:
    """A feature-aware release's rows: the released value under each row's own mechanism (null for a
    capped row), its group (-1: the release's own mechanism), its unbiased target under that mechanism
    and its weight (``GroupedNoise.relative_precision``), the last two null for a capped row."""
    codes = np.asarray(bins, dtype=np.int64)
    capped = (groups < 0) & (codes >= noise.noises[-1].m)
    safe = np.where(capped, 0, codes)
    return [
        pa.array(noise.noisy_values(safe, groups), mask=capped),
        pa.array(groups, pa.int16()),
        pa.array(noise.unbiased_targets(safe, groups), mask=capped),
        pa.array(noise.relative_precision(groups), mask=capped),
    ]


def _window(pieces: list[Piece], offset: int, count: int | None) -> list[Piece]:
    if offset > len(pieces):
        raise DomainError(
            "row-group-offset-past-end",
            f"row_group_offset {offset} is past the end: the export has {len(pieces)} row groups",
            row_groups=len(pieces),
        )
    return pieces[offset : len(pieces) if count is None else offset + count]


def _groups(pieces: list[Piece], offset: int, selected: list[Piece], group_rows: int) -> dict[str, int]:
    return {"total": len(pieces), "offset": offset, "count": len(selected), "rows_per_group": group_rows}
