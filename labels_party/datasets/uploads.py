"""Validating label, universe and non-sensitive uploads completely before anything is stored.

The rows come from the bounded readers (``readers.py``). Validated rows are written to a temporary
Parquet file as they go, so memory stays bounded by a batch plus 16 bytes per row of key pairs, which
large uploads keep in a memory-mapped temporary file (``key_pairs.py``), whatever the upload's size.
Every check runs before storage is touched, and a failed check names the first offending rows
(1-based data rows, header excluded), never their values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.example_ids import as_text, check_ids, first_rows
from labeldp.common.files import parquet_batches, release_arrow_memory
from labeldp.common.inputs import MAX_EXAMPLE_ID_BYTES
from labels_party.budget.ledger_keys import Keys, key_pairs
from labels_party.datasets.key_pairs import KeyPairSet, matching_rows
from labels_party.datasets.readers import BATCH_ROWS, batches, upload_error
from labels_party.datasets.spec import DatasetSpec, FeatureColumn
from labels_party.datasets.store import UNIVERSE_SCHEMA, writer_options

_NUMBER = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"
_CONTROL = r"[\x00-\x1f\x7f]"


# -- per-batch checks ---------------------------------------------------------------------------------
def _rows(mask: np.ndarray, offset: int) -> list[int]:
    return first_rows(mask, offset)


def _mask(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, True).to_numpy(zero_copy_only=False), dtype=bool)


def _ids(batch: pa.RecordBatch, offset: int) -> pa.Array:
    if "example_id" not in batch.schema.names:
        raise upload_error("missing-column", "the upload needs an example_id column")
    ids = as_text(batch.column("example_id"), "example_id")
    check_ids(ids, offset)
    return ids


def _numbers(
    batch: pa.RecordBatch, offset: int, name: str = "label", code: str = "invalid-label"
) -> np.ndarray:
    """A column of finite numbers (text, boolean, integer or float), or the rows that are not."""
    what = "labels" if name == "label" else f"values of {name!r}"
    if name not in batch.schema.names:
        raise upload_error(
            "missing-column", f"the upload needs a{'n' if name[0] in 'aeiou' else ''} {name} column"
        )
    col = batch.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        ok = _mask(pc.invert(pc.fill_null(pc.match_substring_regex(col, _NUMBER), False)))
        if ok.any():
            raise upload_error(code, f"{what} must be finite numbers", _rows(ok, offset))
        col = pc.cast(pc.utf8_trim_whitespace(col), pa.float64())
    elif pa.types.is_boolean(col.type) or pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        if col.null_count:
            raise upload_error(code, f"{what} must not be empty", _rows(_mask(pc.is_null(col)), offset))
        col = pc.cast(col, pa.float64(), safe=False)  # 2^64 − 1 becomes a (too large) number, not an error
    else:
        raise upload_error(code, f"{what} must be numbers, got column type {col.type}")
    values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise upload_error(code, f"{what} must be finite numbers", _rows(bad, offset))
    return values


def _labels(batch: pa.RecordBatch, offset: int) -> np.ndarray:
    return _numbers(batch, offset)


def _feature(batch: pa.RecordBatch, column: FeatureColumn, offset: int, code: str) -> pa.Array:
    """A declared feature column, checked against its public bounds or categories (rejected whole,
    never clipped: a value outside what was declared is a data error, not a policy)."""
    if column.kind == "number":
        values = _numbers(batch, offset, column.name, code)
        assert column.lo is not None and column.hi is not None  # the spec validated it
        outside = (values < column.lo) | (values > column.hi)
        if outside.any():
            raise upload_error(
                code,
                f"values of {column.name!r} outside [{column.lo:g}, {column.hi:g}]",
                _rows(outside, offset),
            )
        return pa.array(values, pa.float64())
    if column.name not in batch.schema.names:
        raise upload_error("missing-column", f"the upload needs a {column.name} column")
    text = as_text(batch.column(column.name), column.name)
    unknown = _mask(pc.invert(pc.is_in(text, value_set=pa.array(column.categories or [], pa.string()))))
    if unknown.any():
        raise upload_error(
            code, f"values of {column.name!r} must be one of its declared categories", _rows(unknown, offset)
        )
    return text


def _user_ids(batch: pa.RecordBatch, n: int, offset: int) -> pa.Array:
    if "user_id" not in batch.schema.names:
        return pa.nulls(n, pa.string())
    users = as_text(batch.column("user_id"), "user_id")
    bad = _mask(
        pc.or_kleene(
            pc.greater(pc.binary_length(users), MAX_EXAMPLE_ID_BYTES),
            pc.match_substring_regex(users, _CONTROL),
        )
    )
    bad &= np.asarray(pc.is_valid(users).to_numpy(zero_copy_only=False), dtype=bool)
    if bad.any():
        raise upload_error(
            "invalid-user-id",
            f"user IDs are at most {MAX_EXAMPLE_ID_BYTES} bytes, without control characters",
            _rows(bad, offset),
        )
    # an empty user_id (an empty CSV cell) means "no user": the example is its own user
    return pc.if_else(pc.equal(users, ""), pa.scalar(None, pa.string()), users)


def _check_values(values: np.ndarray, spec: DatasetSpec, offset: int) -> tuple[np.ndarray, int]:
    kind = spec.label_type
    if kind != "real":
        wrong = values != np.round(values)
        if kind in ("count", "binary", "categorical"):
            wrong |= values < 0
        if kind == "binary":
            wrong |= ~np.isin(values, (0.0, 1.0))
        if wrong.any():
            raise upload_error(
                "wrong-label-type", f"labels must be valid {kind} values", _rows(wrong, offset)
            )
    outside = (values < spec.lo) | (values > spec.hi)
    clipped = int(outside.sum())
    if clipped and (spec.out_of_bounds == "reject" or kind in ("binary", "categorical")):
        raise upload_error(
            "out-of-bounds",
            f"labels outside the public bounds [{spec.lo:g}, {spec.hi:g}]",
            _rows(outside, offset),
        )
    return np.clip(values, spec.lo, spec.hi), clipped


# -- the whole upload ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ValidUpload:
    path: Path  # validated rows (LABEL_SCHEMA or UNIVERSE_SCHEMA), to be merged or stored
    rows: int
    clipped: int
    key_pairs: KeyPairSet


def validate_upload(
    path: Path, fmt: str, spec: DatasetSpec | None, out: Path, *, non_sensitive: bool = False
) -> ValidUpload:
    """Validate a labels upload (``spec`` given), a universe (``spec`` None) or, with
    ``non_sensitive``, the features party's non-sensitive rows for the dataset's DP-SGD phase,
    completely, writing the validated rows to ``out``. Raises a ``DomainError`` (and leaves nothing
    behind) on any problem."""
    if non_sensitive:
        assert spec is not None
        features, code = spec.non_sensitive, "invalid-non-sensitive"
        wanted: tuple[str, ...] = ("example_id", *(c.name for c in features))
        schema = spec.non_sensitive_schema()
    elif spec is not None:
        features, code = spec.semi_sensitive, "invalid-semi-sensitive"
        wanted = ("example_id", "label", "user_id", *(c.name for c in features))
        schema = spec.label_schema()
    else:
        features, code, wanted, schema = [], "", ("example_id", "user_id"), UNIVERSE_SCHEMA
    labels = spec is not None and not non_sensitive
    universe = spec is None
    rows = clipped = 0
    try:
        with pq.ParquetWriter(out, schema, **writer_options(schema)) as writer:
            for batch in batches(path, fmt, wanted):
                ids = _ids(batch, rows)
                keys, checks = key_pairs(ids)
                columns: dict[str, pa.Array] = {"example_id": ids}
                if labels:
                    assert spec is not None
                    values, clipped_here = _check_values(_labels(batch, rows), spec, rows)
                    clipped += clipped_here
                    columns["label"] = pa.array(values, pa.float64())
                if labels or universe:
                    columns["user_id"] = _user_ids(batch, len(ids), rows)
                columns["example_key"] = pa.array(keys, pa.int64())
                columns["example_check"] = pa.array(checks, pa.int64())
                for column in features:
                    columns[column.name] = _feature(batch, column, rows, code)
                writer.write_table(pa.table(columns, schema=schema))
                rows += len(ids)
                release_arrow_memory()
        found = KeyPairSet.collect(lambda: key_pair_batches(out), out.parent)
        dup_keys, dup_checks = found.duplicates()
        if dup_keys.size:
            raise upload_error(
                "duplicate-example-id",
                f"{dup_keys.size} example IDs appear more than once",
                _duplicate_rows(out, dup_keys, dup_checks),
            )
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return ValidUpload(out, rows, clipped, found)


def key_pair_batches(path: Path) -> Iterable[tuple[Keys, Keys]]:
    """(ledger keys, checks) of a stored or validated file, a batch at a time. Files written before
    checks existed get theirs computed from the IDs."""
    file = pq.ParquetFile(path)
    has_check = "example_check" in file.schema_arrow.names
    columns = ["example_key", "example_check"] if has_check else ["example_id"]
    for batch in parquet_batches(file, BATCH_ROWS * 4, columns):
        release_arrow_memory()
        if has_check:
            yield (
                np.asarray(batch.column(0).to_numpy(), dtype=np.int64),
                np.asarray(batch.column(1).to_numpy(), dtype=np.int64),
            )
        else:
            yield key_pairs(batch.column(0))


def _duplicate_rows(path: Path, keys: Keys, checks: Keys) -> list[int]:
    rows: list[int] = []
    offset = 0
    for k, c in key_pair_batches(path):
        rows += _rows(matching_rows(k, c, keys, checks), offset)
        offset += k.size
        if len(rows) >= 10:
            break
    return rows[:10]
