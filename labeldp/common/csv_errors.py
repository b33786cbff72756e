"""Arrow's CSV failures as refusals that name data rows, never values — for every CSV either party
reads (labels, universes, non-sensitive rows, feature tables).

Arrow quotes the offending row in a parse error (``Row #10: Expected 2 columns, got 3:
c-8,12.5,extra``: a label is a secret) and counts the header as row 1, where every other check of an
upload counts data rows (the first row after the header is row 1: ``example_ids.first_rows``). So a
CSV read passes ``InvalidRows`` as its invalid-row handler, which sees the row's number and field
counts before Arrow writes its message, and ``refusal`` builds the answer from those alone: a message
of labeldp's own, the data row, no value. A message labeldp does not recognize is answered by the
exception's class alone: Arrow's wording may change, and any of it might quote the row.

A header that lacks ``example_id`` but holds a ``;``, a tab or a ``|`` gets a hint about the delimiter
(``delimiter_hint``): uploads are comma-separated and nothing guesses another delimiter silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}
_CONVERSION = re.compile(r"In CSV column #(\d+): (?:Row #(\d+): )?CSV conversion error to ([\w\[\]]+): (.*)")
_ROW = re.compile(r"Row #(\d+)")


@dataclass
class InvalidRows:
    """Arrow's invalid-row handler: remembers the first row whose field count is not the header's
    (its number as Arrow counts, header included; None when a threaded read does not know it), and
    lets Arrow fail."""

    number: int | None = None
    fields: int = 0
    expected: int = 0
    seen: bool = False

    def __call__(self, row: Any) -> str:
        if not self.seen:
            self.seen, self.number = True, row.number
            self.fields, self.expected = row.actual_columns, row.expected_columns
        return "error"

    def options(self) -> pacsv.ParseOptions:
        return pacsv.ParseOptions(invalid_row_handler=self)


@dataclass(frozen=True)
class CsvRefusal:
    """What to answer for a CSV that could not be read: a code, a message without values, the data
    rows it is about (1-based, header excluded) and the columns."""

    code: str
    message: str
    rows: list[int]
    columns: list[str]


def _data_row(arrow_row: int | None) -> list[int]:
    return [] if arrow_row is None or arrow_row < 2 else [arrow_row - 1]  # Arrow's row 1 is the header


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def refusal(exc: BaseException, invalid: InvalidRows, header: list[str] | None = None) -> CsvRefusal:
    """The refusal for ``exc``, raised while reading a CSV with ``invalid`` as its row handler
    (``header``: the file's column names, when known, to name a column)."""
    if invalid.seen:
        rows = _data_row(invalid.number)
        where = f"data row {rows[0]}" if rows else "a row"
        return CsvRefusal(
            "unparseable-upload",
            f"{where} has {_plural(invalid.fields, 'field')}; the header has {invalid.expected} (a value "
            "holding a comma, a quote or a line break must be quoted)",
            rows,
            [],
        )
    text = str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return CsvRefusal("unparseable-upload", "the CSV header is not valid UTF-8 text", [], [])
    conversion = _CONVERSION.search(text)
    if conversion:
        index, row, kind, reason = conversion.groups()
        names = header or []
        named = names[int(index)] if int(index) < len(names) else None
        column = repr(named) if named is not None else f"#{int(index) + 1}"
        rows = _data_row(int(row)) if row else []
        where = f"data row {rows[0]}" if rows else "a row"
        what = "text that is not valid UTF-8" if "UTF8" in reason else f"a value that is not {kind}"
        return CsvRefusal(
            "unparseable-upload", f"{where}: column {column} holds {what}", rows, [named] if named else []
        )
    if "Empty CSV file" in text:
        return CsvRefusal("unparseable-upload", "the CSV body is empty: it needs a header line", [], [])
    numbered = _ROW.search(text)
    # Arrow's other messages may quote the row: name the exception's class, never its text
    return CsvRefusal(
        "unparseable-upload",
        f"could not parse the CSV body ({type(exc).__name__})",
        _data_row(int(numbered.group(1))) if numbered else [],
        [],
    )


def read_serially(
    path: Path, convert: pacsv.ConvertOptions | None = None
) -> tuple[InvalidRows, BaseException | None]:
    """Read ``path`` once more, a block at a time on one thread, to learn the row a threaded read
    could not number: the handler and the error it ends with (None if it reads cleanly)."""
    invalid = InvalidRows()
    read = pacsv.ReadOptions(use_threads=False)
    try:
        with pacsv.open_csv(
            path, read_options=read, parse_options=invalid.options(), convert_options=convert
        ) as r:
            for _ in r:
                pass
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OSError) as exc:
        return invalid, exc
    return invalid, None


def delimiter_hint(names: Iterable[str]) -> str:
    """For a header without ``example_id``: a hint when its names hold another delimiter (else "")."""
    listed = list(names)
    for delimiter, name in DELIMITERS.items():
        if any(delimiter in n for n in listed):
            columns = _plural(len(listed), "column")
            shown = repr(delimiter).strip("'")
            return (
                f" (the header reads as {columns}, with '{shown}' inside a name: uploads are "
                f"comma-separated, and this file looks separated by {name})"
            )
    return ""
