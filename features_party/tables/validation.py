"""Parsing and validating a feature-table upload before anything is stored.

Every column but ``example_id`` is numeric (float64) or categorical (dictionary-encoded strings).
Types are inferred (numbers and booleans are numeric; text is categorical) and can be overridden per
column; a column that cannot take its type is rejected with its first offending rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import example_ids, first_rows

FORMATS = {"text/csv": "csv", "application/vnd.apache.parquet": "parquet", "application/x-parquet": "parquet"}
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


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


def read(path: Path, fmt: str) -> pa.Table:
    """Read an upload; Parquet columns of other types (lists, structs, binary, …) are refused from
    the schema, before any data is decoded, and text must be valid UTF-8."""
    try:
        if fmt == "csv":
            table = pacsv.read_csv(
                path, convert_options=pacsv.ConvertOptions(column_types={"example_id": pa.string()})
            )
        else:
            schema = pq.ParquetFile(path).schema_arrow
            bad = [f.name for f in schema if not _supported(f.type)]
            if bad:
                raise table_error(
                    "unparseable-column",
                    f"columns {bad} have types that are not numbers or text",
                    columns=bad,
                )
            table = pq.read_table(path)
        table.column_names  # noqa: B018 - names are decoded lazily; invalid UTF-8 surfaces here
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        raise table_error("unparseable-upload", f"could not parse the {fmt} body: {exc}"[:500]) from exc
    for field in table.schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(
            field.type
        ):  # CSV text that is not UTF-8
            raise table_error(
                "unparseable-upload",
                f"column {field.name!r} holds text that is not valid UTF-8",
                columns=[field.name],
            )
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            try:
                table.column(field.name).validate(full=True)
            except pa.ArrowInvalid as exc:
                raise table_error(
                    "unparseable-column",
                    f"column {field.name!r} holds text that is not valid UTF-8",
                    columns=[field.name],
                ) from exc
    return table


def _as_numeric(name: str, col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if pa.types.is_boolean(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
        return pc.cast(arr, pa.float64(), safe=False)  # uint64 beyond 2^53 rounds, it does not fail
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        ok = np.asarray(
            pc.fill_null(pc.match_substring_regex(arr, _NUMBER), True).to_numpy(zero_copy_only=False),
            dtype=bool,
        )
        if not ok.all():
            raise table_error(
                "unparseable-column", f"column {name!r} is not numeric", first_rows(~ok), columns=[name]
            )
        return pc.cast(pc.utf8_trim_whitespace(arr), pa.float64())
    raise table_error(
        "unparseable-column", f"column {name!r} has unsupported type {arr.type}", columns=[name]
    )


def _as_categorical(col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    return pc.cast(arr, pa.string()).dictionary_encode()


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
    ids = example_ids(table)
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
