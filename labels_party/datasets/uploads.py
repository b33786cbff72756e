"""Parsing and validating label and universe uploads (CSV, NDJSON, Parquet) before anything is stored.

The request body is streamed to a temporary file first (bounded memory), then read column-wise with
pyarrow. Every check runs before storage is touched, and a failed check names the first offending
rows, never their label values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import example_ids, first_rows
from labels_party.budget.keys import example_key
from labels_party.datasets.spec import DatasetSpec

CONTENT_TYPES = {
    "text/csv": "csv",
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


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


def read_table(path: Path, fmt: str, string_columns: tuple[str, ...]) -> pa.Table:
    """Read an uploaded file; the named columns are read as text so that nothing is coerced silently."""
    try:
        if fmt == "csv":
            opts = pacsv.ConvertOptions(
                column_types={c: pa.string() for c in string_columns}, strings_can_be_null=False
            )
            return pacsv.read_csv(path, convert_options=opts)
        if fmt == "ndjson":
            return pajson.read_json(path)
        return pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise upload_error("unparseable-upload", f"could not parse the {fmt} body: {exc}") from exc


def _labels(table: pa.Table) -> np.ndarray:
    if "label" not in table.column_names:
        raise upload_error("missing-column", "the upload needs a label column")
    col = table.column("label").combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        ok = pc.fill_null(pc.match_substring_regex(col, _NUMBER), False)
        ok_np = np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)
        if not ok_np.all():
            raise upload_error("invalid-label", "labels must be finite numbers", first_rows(~ok_np))
        col = pc.cast(pc.utf8_trim_whitespace(col), pa.float64())
    elif pa.types.is_boolean(col.type) or pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        if col.null_count:
            nulls = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool)
            raise upload_error("invalid-label", "labels must not be empty", first_rows(nulls))
        col = pc.cast(col, pa.float64())
    else:
        raise upload_error("invalid-label", f"labels must be numbers, got column type {col.type}")
    values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise upload_error("invalid-label", "labels must be finite numbers", first_rows(bad))
    return values


@dataclass(frozen=True)
class ValidLabels:
    table: pa.Table  # example_id, label (float64), user_id (string, nullable), example_key (int64)
    rows: int
    clipped: int


def validate_labels(table: pa.Table, spec: DatasetSpec) -> ValidLabels:
    ids = example_ids(table)
    values = _labels(table)
    kind = spec.label_type
    if kind != "real":
        wrong = values != np.round(values)
        if kind in ("count", "binary", "categorical"):
            wrong |= values < 0
        if kind == "binary":
            wrong |= ~np.isin(values, (0.0, 1.0))
        if wrong.any():
            raise upload_error("wrong-label-type", f"labels must be valid {kind} values", first_rows(wrong))
    outside = (values < spec.lo) | (values > spec.hi)
    clipped = int(outside.sum())
    if clipped and (spec.out_of_bounds == "reject" or kind in ("binary", "categorical")):
        raise upload_error(
            "out-of-bounds",
            f"{clipped} labels lie outside the public bounds [{spec.lo:g}, {spec.hi:g}]",
            first_rows(outside),
        )
    values = np.clip(values, spec.lo, spec.hi)
    columns = {"example_id": ids, "label": pa.array(values, pa.float64())}
    if "user_id" in table.column_names:
        columns["user_id"] = pc.cast(table.column("user_id").combine_chunks(), pa.string())
    else:
        columns["user_id"] = pa.nulls(len(ids), pa.string())
    columns["example_key"] = pa.array(_keys(ids), pa.int64())
    return ValidLabels(pa.table(columns), len(ids), clipped)


def validate_universe(table: pa.Table) -> pa.Table:
    ids = example_ids(table)
    return pa.table({"example_id": ids, "example_key": pa.array(_keys(ids), pa.int64())})


def _keys(ids: pa.Array, chunk: int = 1_000_000) -> np.ndarray:
    """Ledger keys of the IDs, hashed a chunk at a time (no full list of Python strings)."""
    out = np.empty(len(ids), dtype=np.int64)
    for start in range(0, len(ids), chunk):
        part = ids.slice(start, chunk).to_pylist()
        out[start : start + len(part)] = np.fromiter(
            (example_key(e) for e in part), dtype=np.int64, count=len(part)
        )
    return out
