"""Bounded readers of label, universe and non-sensitive uploads (CSV, NDJSON, Parquet), a batch at a
time: every byte of an upload is hostile until validated, so each format has a reader that bounds
what native code sees.

- **CSV** goes through Arrow's streaming reader with every column read as text (a flat format: no
  nesting to bound); numbers are parsed by the checks (``uploads.py``).
- **NDJSON** never reaches Arrow's JSON reader (a deeply nested value can crash it): each line,
  at most 64 KiB, is parsed by Python's ``json`` (which raises on excessive nesting instead) and
  must be one flat object whose values are scalars.
- **Parquet** has its schema checked before any data page is decoded: ``example_id`` and
  ``user_id`` must be text or integers, ``label`` a number, boolean or text column; only those
  columns are read, in batches. A page is decompressed whole whatever the batch, so the footer and
  the header of every page of those columns are read first (``labeldp.common.parquet_bounds``) and a
  page that would decompress to more than ``MAX_PAGE_BYTES`` is refused before Arrow sees it (a
  33 KB upload holding one 1 GiB ``example_id`` raised a file-work process by 3 GiB before its
  422). Text is read dictionary-encoded, and a dictionary value longer than any accepted value
  (``MAX_TEXT_BYTES``) is refused before a batch is decoded: one long value that every row repeats
  would otherwise decode to a copy per row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from labeldp.common.csv_errors import InvalidRows, delimiter_hint, refusal
from labeldp.common.errors import DomainError
from labeldp.common.example_ids import first_rows
from labeldp.common.files import parquet_batches
from labeldp.common.inputs import MAX_EXAMPLE_ID_BYTES
from labeldp.common.parquet_bounds import DELTA_BYTE_ARRAY, page_sizes, read_footer

CONTENT_TYPES = {
    "text/csv": "csv",
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
BATCH_ROWS = 65_536
CSV_BLOCK_BYTES = 2 * 2**20  # about 90,000 rows of IDs and labels per batch
MAX_NDJSON_LINE_BYTES = 64 * 2**10
# Parquet: what one page may decompress to (writers cut pages at about 1 MiB), how many page headers
# are read first and how long a footer may be; no accepted text value is longer than an ID
MAX_PAGE_BYTES = 64 * 2**20
MAX_PAGES = 1_000_000
MAX_FOOTER_BYTES = 16 * 2**20
MAX_TEXT_BYTES = MAX_EXAMPLE_ID_BYTES


def upload_error(code: str, message: str, rows: list[int] | None = None) -> DomainError:
    """A rejected upload: its code, a message that never contains a label value, and the first
    offending rows (1-based data row numbers, header excluded)."""
    return DomainError(code, message, rows=rows or [])


def upload_format(content_type: str | None) -> str:
    base = (content_type or "").split(";")[0].strip().lower()
    if base not in CONTENT_TYPES:
        raise DomainError(
            "unsupported-media-type",
            f"Content-Type must be one of {', '.join(sorted(CONTENT_TYPES))}; got {content_type!r}",
            status=415,
        )
    return CONTENT_TYPES[base]


# -- bounded readers: each yields record batches with the wanted columns present in the file ------------
def _unparseable(fmt: str, exc: BaseException) -> DomainError:
    return upload_error("unparseable-upload", f"could not parse the {fmt} body: {exc}"[:500])


def _require(present: Iterable[str], wanted: tuple[str, ...], hint: bool = False) -> None:
    """Every wanted column present (``user_id`` is optional), and none of them twice: a reader would
    otherwise keep one of two ``label`` columns silently. ``hint``: a CSV header, which may show
    another delimiter."""
    listed = list(present)
    twice = sorted({n for n in listed if n in wanted and listed.count(n) > 1})
    if twice:
        raise upload_error("duplicate-column", f"the upload has more than one {twice[0]!r} column")
    names = set(listed)
    for required in wanted:
        if required not in names and required != "user_id":  # the one optional column
            needs = f"the upload needs a{'n' if required[0] == 'e' else ''} {required} column"
            raise upload_error("missing-column", needs + (delimiter_hint(listed) if hint else ""))


def _csv_error(exc: Exception, invalid: InvalidRows, header: list[str] | None = None) -> DomainError:
    """A CSV the reader could not parse: its data row, never its values (``csv_errors``)."""
    if isinstance(exc, pa.ArrowInvalid) and "straddl" in str(exc):  # a row longer than a read block
        return upload_error(
            "row-too-long",
            f"a CSV row is longer than {CSV_BLOCK_BYTES // 2**20} MiB; example and user IDs are at most "
            f"{MAX_EXAMPLE_ID_BYTES} bytes",
        )
    found = refusal(exc, invalid, header)
    return upload_error(found.code, found.message, found.rows)


def _csv_batches(path: Path, wanted: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    read = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False)  # no read-ahead: bounded memory
    invalid = InvalidRows()
    try:
        header = pacsv.open_csv(path, read_options=read, parse_options=invalid.options()).schema.names
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        raise _csv_error(exc, invalid) from exc
    _require(header, wanted, hint=True)
    present = [c for c in wanted if c in header]
    convert = pacsv.ConvertOptions(
        column_types={c: pa.string() for c in present}, include_columns=present, strings_can_be_null=False
    )
    try:
        yield from pacsv.open_csv(
            path, read_options=read, parse_options=invalid.options(), convert_options=convert
        )
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        raise _csv_error(exc, invalid, header) from exc


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _encodable(value: object) -> bool:
    """JSON may escape a lone surrogate (``"\\ud800"``): Python decodes it into a string that no
    encoder accepts."""
    if not isinstance(value, str):
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are distinct (``json`` keeps the last of two silently)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key if _encodable(key) else "?")
        out[key] = value
    return out


def _ndjson_batches(path: Path, wanted: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    columns: dict[str, list[object]] = {c: [] for c in wanted}
    seen: set[str] = set()
    row = 0
    with open(path, "rb") as fh:
        while True:
            line = fh.readline(MAX_NDJSON_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_NDJSON_LINE_BYTES and not line.endswith(b"\n"):
                raise upload_error(
                    "unparseable-upload",
                    f"NDJSON lines are limited to {MAX_NDJSON_LINE_BYTES} bytes",
                    [row + 1],
                )
            if not line.strip():
                continue
            row += 1
            try:
                obj = json.loads(line, object_pairs_hook=_object)
            except _DuplicateKeyError as exc:
                raise upload_error(
                    "duplicate-column", f"a line has more than one {exc.key!r}", [row]
                ) from exc
            except (ValueError, RecursionError) as exc:
                raise upload_error("unparseable-upload", "a line is not a JSON object", [row]) from exc
            if not isinstance(obj, dict) or not all(_scalar(v) for v in obj.values()):
                raise upload_error(
                    "unparseable-upload", "each line must be one flat JSON object (no nested values)", [row]
                )
            if not all(_encodable(v) for v in obj.values()):
                raise upload_error(
                    "unparseable-upload", "a value escapes a lone UTF-16 surrogate (not valid text)", [row]
                )
            seen.update(k for k in wanted if k in obj)
            for c in wanted:
                value = obj.get(c)
                columns[c].append(
                    None if value is None else value if isinstance(value, str) else _text(value)
                )
            if row % BATCH_ROWS == 0:
                yield _text_batch(columns, seen)
                columns = {c: [] for c in wanted}
    if row == 0:
        seen = set(wanted)  # an empty upload: no rows, nothing missing
    if columns[wanted[0]] or row == 0:
        yield _text_batch(columns, seen)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan"
    return repr(value) if isinstance(value, float) else str(value)


def _text_batch(columns: dict[str, list[object]], seen: set[str]) -> pa.RecordBatch:
    return pa.record_batch({c: pa.array(v, pa.string()) for c, v in columns.items() if c in seen})


_TEXT_OR_INT = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer)
_LABEL_TYPES = (*_TEXT_OR_INT, pa.types.is_floating, pa.types.is_boolean)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _bounded(path: Path, schema: pa.Schema, present: list[str]) -> list[str]:
    """The footer and every page header of the columns read, before any page is decompressed: within
    ``MAX_FOOTER_BYTES``, ``MAX_PAGES`` and ``MAX_PAGE_BYTES`` a page (413 ``upload-too-large``), no
    text in ``DELTA_BYTE_ARRAY`` (422 ``unsupported-encoding``: its pages do not bound what it decodes
    to). Returns the text columns (read dictionary-encoded)."""
    text = [c for c in present if _is_text(_value_type(schema.field(c).type))]
    footer = read_footer(path, MAX_FOOTER_BYTES, too_large="upload-too-large")
    for group in footer.row_groups:
        for chunk in group.chunks:
            if chunk.path and chunk.path[0] in text and DELTA_BYTE_ARRAY in chunk.encodings:
                raise upload_error(
                    "unsupported-encoding",
                    f"column {chunk.path[0]!r} is DELTA_BYTE_ARRAY-encoded, whose decoded size its pages "
                    "do not bound; write it with dictionary or plain encoding",
                )
    page_sizes(
        path, footer, MAX_PAGES, columns=present, max_page_bytes=MAX_PAGE_BYTES, too_large="upload-too-large"
    )
    return text


def _value_type(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


_TOO_LONG = {
    "example_id": ("example-id-too-long", f"example IDs are limited to {MAX_EXAMPLE_ID_BYTES} bytes"),
    "user_id": (
        "invalid-user-id",
        f"user IDs are at most {MAX_EXAMPLE_ID_BYTES} bytes, without control characters",
    ),
}


def _check_lengths(name: str, column: pa.DictionaryArray, offset: int) -> None:
    too_long = pc.greater(pc.binary_length(column.dictionary), MAX_TEXT_BYTES)
    if not pc.any(too_long).as_py():
        return
    long_ones = pa.array(np.flatnonzero(too_long.to_numpy(zero_copy_only=False)), column.indices.type)
    used = pc.fill_null(pc.is_in(column.indices, value_set=long_ones), False)
    mask = np.asarray(used.to_numpy(zero_copy_only=False), dtype=bool)
    if mask.any():
        code, message = _TOO_LONG.get(
            name, ("value-too-long", f"values of {name!r} are at most {MAX_TEXT_BYTES} bytes")
        )
        raise upload_error(code, message, first_rows(mask, offset))


def _decoded(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    """A batch read dictionary-encoded, decoded once no dictionary value it uses is longer than
    ``MAX_TEXT_BYTES`` (so that a batch decodes to at most that much a row and column)."""
    columns = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_dictionary(column.type):
            _check_lengths(name, column, offset)
            columns.append(column.dictionary_decode())
        else:
            columns.append(column)
    return pa.record_batch(columns, names=batch.schema.names)


def _parquet_batches(path: Path, wanted: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
        schema.names  # noqa: B018 - names are decoded lazily; invalid UTF-8 surfaces here
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unparseable("parquet", exc) from exc
    _require(schema.names, wanted)
    present = [c for c in wanted if c in schema.names]
    for name in present:
        kind = _value_type(schema.field(name).type)
        allowed = _TEXT_OR_INT if name in ("example_id", "user_id") else _LABEL_TYPES
        if not any(check(kind) for check in allowed):
            raise upload_error("wrong-column-type", f"column {name!r} has type {kind}, which is not accepted")
    text = _bounded(path, schema, present)
    offset = 0
    try:
        file = pq.ParquetFile(path, read_dictionary=text)
        for batch in parquet_batches(file, BATCH_ROWS, present):
            yield _decoded(batch, offset)
            offset += batch.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unparseable("parquet", exc) from exc


def batches(path: Path, fmt: str, wanted: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    if fmt == "csv":
        return _csv_batches(path, wanted)
    if fmt == "ndjson":
        return _ndjson_batches(path, wanted)
    return _parquet_batches(path, wanted)
