"""Parsing and validating a feature-table upload before anything is stored.

Every column but ``example_id`` is numeric (float64) or categorical (dictionary-encoded strings).
Types are inferred (numbers and booleans are numeric; text is categorical) and can be overridden per
column; a column that cannot take its type is rejected with its first offending rows.

Every upload is hostile until validated, and a small one can decode into a large table, so its size
is bounded before it is decoded (``Limits``; 413 ``table-too-large``): a Parquet file's columns, rows,
footer, pages and what decompressing its pages and decoding its rows takes (``parquet_bounds``); a
CSV file's columns. Text is read dictionary-encoded and stays so (a repeated long string costs one
copy, not one per row), and after reading, the text a table would decode to — for training, later —
is bounded the same way. A name given to two columns is refused (422 ``duplicate-column``) before
any data is read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from labeldp.common.csv_errors import InvalidRows, delimiter_hint, read_serially, refusal
from labeldp.common.errors import DomainError
from labeldp.common.example_ids import example_ids, first_rows
from labeldp.common.parquet_bounds import DELTA_BYTE_ARRAY, page_sizes, read_footer

FORMATS = {"text/csv": "csv", "application/vnd.apache.parquet": "parquet", "application/x-parquet": "parquet"}
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


MAX_COLUMNS = 4096  # example_id included; a wider table is a matrix, not a feature table
MAX_ROWS = 1_000_000_000  # a table is validated, and trained on, in one process's memory
MAX_PAGES = 1_000_000  # page headers read before decoding (about 5 s)
MAX_FOOTER_BYTES = 16 * 2**20  # a Parquet footer (about 200,000 column chunks)
DECODED_PER_BODY_BYTE = 4  # what a table may decode to, per byte of its body ...
DECODED_ALLOWANCE = 64 * 2**20  # ... plus this much, whatever the body
CSV_HEADER_BLOCK = 4 * 2**20  # the CSV header (and first rows) read to learn the column names


@dataclass(frozen=True)
class Limits:
    """What one upload may cost to decode: ``DECODED_PER_BODY_BYTE`` times its body plus
    ``DECODED_ALLOWANCE`` (``decoded_bytes``) — a CSV decodes to about 4 times its body (a number of 2
    characters becomes 8 bytes), and any table of up to 64 MiB decoded is accepted however well it
    compresses. The bound is the body's, not the upload limit's: a 1.37 MB Parquet body of 300
    constant columns × 1M rows decoded to 2.4 GB (under 4 × the 4 GiB limit) and raised the server by
    2.7 GiB before its 422. The rest are fixed."""

    max_upload_bytes: int
    columns: int = MAX_COLUMNS
    rows: int = MAX_ROWS
    pages: int = MAX_PAGES
    footer_bytes: int = MAX_FOOTER_BYTES

    @classmethod
    def for_uploads_of(cls, max_upload_bytes: int) -> Limits:
        return cls(max_upload_bytes)

    def decoded_bytes(self, body: int) -> int:
        return DECODED_PER_BODY_BYTE * min(body, self.max_upload_bytes) + DECODED_ALLOWANCE


def too_large(message: str) -> DomainError:
    return DomainError("table-too-large", message, status=413)


def table_error(
    code: str, message: str, rows: list[int] | None = None, columns: list[str] | None = None
) -> DomainError:
    """A rejected feature table: its code, a message, the first offending rows and the columns."""
    return DomainError(code, message, rows=rows or [], columns=columns or [])


def table_format(content_type: str | None) -> str:
    base = (content_type or "").split(";")[0].strip().lower()
    if base not in FORMATS:
        raise DomainError(
            "unsupported-media-type", f"Content-Type must be one of {', '.join(sorted(FORMATS))}", status=415
        )
    return FORMATS[base]


def _supported(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return any(
        check(kind)
        for check in (
            pa.types.is_boolean,
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_null,
        )
    )


def _check_names(names: list[str], limits: Limits) -> None:
    """Within the column bound, and no name twice (an Arrow table would keep both, and every later
    lookup by name would fail)."""
    if len(names) > limits.columns:
        raise too_large(f"the table has {len(names)} columns; at most {limits.columns}")
    twice = [name for name, n in Counter(names).items() if n > 1]
    if twice:
        raise table_error(
            "duplicate-column", f"the upload has more than one {twice[0]!r} column", columns=twice[:10]
        )


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _read_parquet(path: Path, limits: Limits) -> pa.Table:
    """The footer and every page header first (``parquet_bounds``): columns, rows, pages and what
    decoding takes within ``limits``; text read dictionary-encoded; only then the data."""
    footer = read_footer(path, limits.footer_bytes)
    file = pq.ParquetFile(path)
    schema = file.schema_arrow
    _check_names(schema.names, limits)
    bad = [f.name for f in schema if not _supported(f.type)]
    if bad:
        raise table_error(
            "unparseable-column", f"columns {bad} have types that are not numbers or text", columns=bad
        )
    rows, leaves = footer.rows, len(schema)
    if rows > limits.rows or rows < 0:
        raise too_large(f"the table has {rows} rows; at most {limits.rows}")
    groups = footer.row_groups
    if any(len(g.chunks) != leaves or g.rows < 0 for g in groups) or sum(g.rows for g in groups) != rows:
        raise table_error("unparseable-upload", "the row groups do not match the file's schema and rows")
    for group in groups:
        for column, chunk in zip(schema, group.chunks, strict=True):
            if _is_text(column.type) and DELTA_BYTE_ARRAY in chunk.encodings:
                raise table_error(
                    "unsupported-encoding",
                    f"column {column.name!r} is DELTA_BYTE_ARRAY-encoded, whose decoded size its pages do "
                    "not bound; write it with dictionary or plain encoding",
                    columns=[column.name],
                )
    pages = page_sizes(path, footer, limits.pages)
    decoded, allowed = pages.uncompressed + 8 * rows * leaves, limits.decoded_bytes(path.stat().st_size)
    if decoded > allowed:
        raise too_large(
            f"the table would decode to about {decoded} bytes; at most {allowed} ({DECODED_PER_BODY_BYTE} "
            f"× its {path.stat().st_size}-byte body + {DECODED_ALLOWANCE // 2**20} MiB): write numbers as "
            "8-byte values without compression, or upload a CSV"
        )
    text = sorted(f.name for f in schema if _is_text(f.type))
    return pq.ParquetFile(path, read_dictionary=text).read()


def _read_csv(path: Path, limits: Limits) -> pa.Table:
    """The whole CSV (threaded); a failure names its data row, never a value (``csv_errors``)."""
    options = pacsv.ConvertOptions(column_types={"example_id": pa.string()})
    invalid, header = InvalidRows(), None
    try:
        with pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=CSV_HEADER_BLOCK, use_threads=False),
            parse_options=invalid.options(),
            convert_options=options,
        ) as head:
            header = head.schema.names
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        found = refusal(exc, invalid)
        raise table_error(found.code, found.message, found.rows, found.columns) from exc
    _check_names(header, limits)
    if "example_id" not in header:
        raise table_error(
            "missing-column",
            "the table needs an example_id column" + delimiter_hint(header),
            columns=["example_id"],
        )
    try:
        return pacsv.read_csv(path, parse_options=invalid.options(), convert_options=options)
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        found = refusal(exc, invalid, header)
        if not found.rows:  # a threaded read does not number its rows: read once more, on one thread
            again, error = read_serially(path, options)
            found = refusal(error, again, header) if error is not None else found
        raise table_error(found.code, found.message, found.rows, found.columns) from exc


def text_bytes(col: pa.ChunkedArray) -> int:
    """What a text column decodes to as plain strings: each row's bytes (a dictionary's values counted
    once per row that uses them) — computed from the indices, without decoding."""
    total = 0
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            lengths = pc.binary_length(chunk.dictionary).fill_null(0).to_numpy(zero_copy_only=False)
            indices = chunk.indices.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
            total += int(np.bincount(indices, minlength=len(lengths)) @ np.asarray(lengths, np.int64))
        else:
            total += int(pc.sum(pc.binary_length(chunk)).as_py() or 0)
        total += 4 * len(chunk)
    return total


def read(path: Path, fmt: str, limits: Limits | None = None) -> pa.Table:
    """Read an upload within ``limits`` (what its body may decode to); Parquet columns of other types
    (lists, structs, binary, …) are refused from the schema, before any data is decoded, and text must
    be valid UTF-8."""
    limits = limits or Limits.for_uploads_of(4 * 2**30)
    try:
        table = _read_csv(path, limits) if fmt == "csv" else _read_parquet(path, limits)
        table.column_names  # noqa: B018 - names are decoded lazily; invalid UTF-8 surfaces here
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        raise table_error("unparseable-upload", f"could not parse the {fmt} body: {exc}"[:500]) from exc
    for index, field in enumerate(table.schema):
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            raise table_error(  # CSV text that is not UTF-8
                "unparseable-upload",
                f"column {field.name!r} holds text that is not valid UTF-8",
                columns=[field.name],
            )
        try:  # every column in full (a dictionary's indices and values too) before anything reads it
            table.column(index).validate(full=True)
        except pa.ArrowInvalid as exc:
            text = _is_text(field.type) and "utf" in str(exc).lower()
            raise table_error(
                "unparseable-column" if text else "unparseable-upload",
                f"column {field.name!r} holds text that is not valid UTF-8"
                if text
                else f"column {field.name!r} is malformed",
                columns=[field.name],
            ) from exc
    decoded = sum(
        text_bytes(table.column(i)) if _is_text(f.type) else 8 * table.num_rows
        for i, f in enumerate(table.schema)
    )
    allowed = limits.decoded_bytes(path.stat().st_size)
    if decoded > allowed:  # what training, which reads text as plain strings, would hold
        raise too_large(
            f"the table's columns decode to {decoded} bytes; at most {allowed} ({DECODED_PER_BODY_BYTE} "
            f"× its body + {DECODED_ALLOWANCE // 2**20} MiB)"
        )
    return table


def _numbers(name: str, arr: pa.Array, rows_of: pa.Array | None = None) -> pa.Array:
    """Text that must read as numbers, as float64; a failure names the first rows holding such text
    (``rows_of``: which of ``arr``'s values each row holds, for a dictionary's values)."""
    ok = np.asarray(
        pc.fill_null(pc.match_substring_regex(arr, _NUMBER), True).to_numpy(zero_copy_only=False), dtype=bool
    )
    if rows_of is not None:
        bad = np.flatnonzero(~ok)
        used = pc.is_in(rows_of, value_set=pa.array(bad, rows_of.type))
        if len(bad) and pc.any(used).as_py():
            mask = np.asarray(pc.fill_null(used, False).to_numpy(zero_copy_only=False), dtype=bool)
            raise table_error(
                "unparseable-column", f"column {name!r} is not numeric", first_rows(mask), columns=[name]
            )
        arr = pc.if_else(pa.array(ok), arr, pa.scalar(None, arr.type))  # values no row holds
    elif not ok.all():
        raise table_error(
            "unparseable-column", f"column {name!r} is not numeric", first_rows(~ok), columns=[name]
        )
    return pc.cast(pc.utf8_trim_whitespace(arr), pa.float64())


def _as_numeric(name: str, col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):  # the dictionary's values converted once, then one per row
        values, kind = arr.dictionary, arr.type.value_type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            converted = _numbers(name, values, arr.indices)
        elif pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
            converted = pc.cast(values, pa.float64(), safe=False)
        else:
            raise table_error(
                "unparseable-column", f"column {name!r} has unsupported type {arr.type}", columns=[name]
            )
        return pc.take(converted, arr.indices)
    if pa.types.is_boolean(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        return pc.cast(arr, pa.float64(), safe=False)  # uint64 beyond 2^53 rounds, it does not fail
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return _numbers(name, arr)
    raise table_error(
        "unparseable-column", f"column {name!r} has unsupported type {arr.type}", columns=[name]
    )


def _as_categorical(col: pa.ChunkedArray) -> pa.Array:
    """Dictionary-encoded text: the distinct values in order of first appearance. A dictionary column
    is re-encoded without decoding its rows (a repeated long value stays one copy)."""
    arr = col.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        return pc.cast(arr, pa.string()).dictionary_encode()
    values = pc.cast(arr.dictionary, pa.string())
    used = pc.unique(arr.indices.drop_null())  # in order of first appearance
    distinct = pc.unique(pc.take(values, used))
    position = pc.cast(pc.index_in(values, value_set=distinct), pa.int32())
    return pa.DictionaryArray.from_arrays(pc.take(position, arr.indices), distinct)


def _repeated_dictionary_ids(col: pa.ChunkedArray) -> pa.Table | None:
    """For a dictionary-encoded ``example_id`` column: its rows' indices checked for repeats first (a
    repeated index is a repeated ID, refused without decoding; with none, decoding costs at most the
    dictionary), then the column alone, under one dictionary, to decode. None for plain text."""
    if not pa.types.is_dictionary(col.type):
        return None
    arr = col.combine_chunks()  # one dictionary for all the rows
    counts = pc.value_counts(arr.indices.drop_null())
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    if len(repeated):
        mask = np.asarray(
            pc.fill_null(pc.is_in(arr.indices, value_set=repeated), False).to_numpy(zero_copy_only=False),
            dtype=bool,
        )
        raise DomainError(
            "duplicate-example-id",
            f"{len(repeated)} example IDs appear more than once",
            rows=first_rows(mask),
            columns=["example_id"],
        )
    return pa.table({"example_id": arr})


def infer_kind(col: pa.ChunkedArray) -> str:
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    numeric = pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
    return "numeric" if numeric and not pa.types.is_dictionary(col.type) else "categorical"


@dataclass(frozen=True)
class ValidTable:
    table: pa.Table
    schema: dict[str, str]


def validate(table: pa.Table, overrides: dict[str, str]) -> ValidTable:
    if "example_id" not in table.column_names:
        raise table_error("missing-column", "the table needs an example_id column", columns=["example_id"])
    unknown = sorted(set(overrides) - set(table.column_names))
    if unknown:
        raise table_error(
            "unknown-column", f"overrides name columns that do not exist: {unknown}", columns=unknown
        )
    encoded = _repeated_dictionary_ids(table.column("example_id"))
    ids = example_ids(table if encoded is None else encoded)
    columns: dict[str, pa.Array] = {"example_id": ids}
    schema: dict[str, str] = {}
    for name in table.column_names:
        if name == "example_id":
            continue
        kind = overrides.get(name) or infer_kind(table.column(name))
        columns[name] = (
            _as_numeric(name, table.column(name))
            if kind == "numeric"
            else _as_categorical(table.column(name))
        )
        schema[name] = kind
    if not schema:
        raise table_error("no-features", "the table has no feature columns besides example_id")
    return ValidTable(pa.table(columns), schema)
