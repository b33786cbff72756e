"""The ``example_id`` column of any upload (labels, universes, feature tables): present, text, non-empty,
at most 256 bytes, no control characters, unique. One set of rules for both parties; failures name the
first offending data rows (never the IDs)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.common.errors import DomainError
from labeldp.common.inputs import MAX_EXAMPLE_ID_BYTES

MAX_REPORTED_ROWS = 10
MAX_NAMED_IDS = 10  # unknown IDs a caller sent, named back (its own input: never another's)
_CONTROL = r"[\x00-\x1f\x7f]"


def first_rows(mask: np.ndarray, offset: int = 0) -> list[int]:
    """1-based data row numbers (header excluded) of the first offending rows."""
    return [int(i) + 1 + offset for i in np.flatnonzero(mask)[:MAX_REPORTED_ROWS]]


def _mask(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(array, True).to_numpy(zero_copy_only=False), dtype=bool)


def as_text(col: pa.Array | pa.ChunkedArray, name: str) -> pa.Array:
    """A text or integer column as valid UTF-8 strings (Parquet text is not checked on read)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (
        pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_integer(arr.type)
    ):
        raise DomainError(
            "wrong-column-type", f"column {name!r} has type {arr.type}; it must be text", columns=[name]
        )
    arr = pc.cast(arr, pa.string())
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise DomainError(
            "unparseable-upload", f"column {name!r} holds text that is not valid UTF-8", columns=[name]
        ) from exc
    return arr


def _bytes(ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The IDs' UTF-8 bytes and each ID's offsets into them (views of the array's buffers)."""
    _, offsets_buf, data_buf = ids.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(ids) + 1, offset=4 * ids.offset)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data[offsets[0] : offsets[-1]], offsets - offsets[0]


def _plainly_present(ids: pa.Array) -> bool:
    """Whether every ID is non-null and starts with a printable ASCII character other than a space:
    then none is empty after trimming whitespace (the usual case, one pass over the first bytes; an
    ID starting otherwise is checked exactly by trimming)."""
    if ids.null_count or not pa.types.is_string(ids.type):
        return False
    data, offsets = _bytes(ids)
    if np.any(offsets[1:] == offsets[:-1]):
        return False
    first = data[offsets[:-1]]
    return bool(np.all((first > 0x20) & (first < 0x7F)))


def _control_characters(ids: pa.Array) -> np.ndarray:
    """Which IDs hold a control character (U+0000–U+001F, U+007F). In UTF-8 those bytes stand only for
    themselves, so one pass over the bytes finds them; the IDs they fall in by their offsets."""
    if not pa.types.is_string(ids.type):
        return _mask(pc.match_substring_regex(ids, _CONTROL))
    data, offsets = _bytes(ids)
    at = np.flatnonzero((data < 0x20) | (data == 0x7F))
    bad = np.zeros(len(ids), dtype=bool)
    bad[np.searchsorted(offsets, at, side="right") - 1] = True
    return bad


def check_ids(ids: pa.Array, offset: int = 0) -> None:
    """Every ID present and non-empty, at most 256 bytes, without control characters."""
    empty = (
        np.zeros(len(ids), dtype=bool)
        if _plainly_present(ids)
        else _mask(pc.or_kleene(pc.is_null(ids), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(ids)), 0)))
    )
    if empty.any():
        raise DomainError(
            "missing-example-id",
            "example_id must not be empty",
            rows=first_rows(empty, offset),
            columns=["example_id"],
        )
    too_long = _mask(pc.greater(pc.binary_length(ids), MAX_EXAMPLE_ID_BYTES))
    if too_long.any():
        raise DomainError(
            "example-id-too-long",
            f"example IDs are limited to {MAX_EXAMPLE_ID_BYTES} bytes",
            rows=first_rows(too_long, offset),
            columns=["example_id"],
        )
    control = _control_characters(ids)
    if control.any():
        raise DomainError(
            "invalid-example-id",
            "example IDs must not contain control characters",
            rows=first_rows(control, offset),
            columns=["example_id"],
        )


def example_ids(table: pa.Table) -> pa.Array:
    """The validated, unique ``example_id`` column of a whole (in-memory) table."""
    if "example_id" not in table.column_names:
        raise DomainError(
            "missing-column", "the upload needs an example_id column", rows=[], columns=["example_id"]
        )
    ids = as_text(table.column("example_id"), "example_id")
    check_ids(ids)
    counts = pa.table({"example_id": ids}).group_by("example_id").aggregate([("example_id", "count")])
    duplicated = counts.filter(pc.greater(counts.column("example_id_count"), 1)).column("example_id")
    if len(duplicated):
        mask = np.asarray(pc.is_in(ids, value_set=duplicated).to_numpy(zero_copy_only=False), dtype=bool)
        raise DomainError(
            "duplicate-example-id",
            f"{len(duplicated)} example IDs appear more than once",
            rows=first_rows(mask),
            columns=["example_id"],
        )
    return ids


def unknown_ids(wanted: pa.Array, known: pa.Array | pa.ChunkedArray, where: str) -> None:
    """422 ``unknown-example-ids`` when some IDs a caller sent are not in ``known``: how many, and the
    first ``MAX_NAMED_IDS`` of them in ``example_ids`` (the first three in the detail too) — the
    caller's own input, in the order sent, so it can find and fix them."""
    missing = wanted.filter(pc.invert(pc.is_in(wanted, value_set=known)))
    if not len(missing):
        return
    named = missing.slice(0, MAX_NAMED_IDS).to_pylist()
    shown = ", ".join(repr(i) for i in named[:3]) + (", …" if len(missing) > 3 else "")
    raise DomainError(
        "unknown-example-ids",
        f"{len(missing)} example_ids are not in {where}: {shown}",
        example_ids=named,
        unknown=len(missing),
    )
