"""Terminal output shared by the CLI and the demo: values as people read them, an answer as one line or
as JSON, lists as tables, byte progress bars, errors.

stdout carries the answers (IDs, lines, JSON, tables) so that scripts can parse them; progress bars
and errors go to stderr. rich is imported only when something is drawn, so that ``labeldp --version``
and every ``--help`` start fast.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn
    from rich.table import Table

    from labeldp.client import ApiError

Answer = TypeVar("Answer")


def number(value: float, digits: int = 4, *, grouped: bool = True) -> str:
    """A number as people read it: ``digits`` significant digits yet every digit of the integer part,
    thousands separated (3,474; 11,022,600; 0.3167; 1 — never ``1e+07`` nor ``1.0``); only values below
    0.0001 (a δ) in scientific form. ``grouped=False`` leaves out the separators (for ``cut`` and
    ``awk``)."""
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude < -4:
        return f"{x:.{digits}g}"
    text = f"{x:{',' if grouped else ''}.{max(digits - 1 - magnitude, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def numbers(values: Iterable[float]) -> str:
    """Several numbers, separated so that a thousands separator cannot be read as one: ``3,474; 6,029``."""
    return "; ".join(number(v) for v in values)


def cell(value: object) -> str:
    """A value in a table: numbers as ``number`` writes them; ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, default=str, ensure_ascii=False))  # ε as ε, not \u03b5


def show(answer: object, as_json: bool, line: str) -> None:
    """The server's whole answer as JSON, or the one line that says what matters."""
    if as_json:
        print_json(answer)
    else:
        typer.echo(line)


def save(path: Path, data: bytes) -> None:
    """A downloaded file written where the user asked, and its size said (every ``download``)."""
    path.write_bytes(data)
    typer.echo(f"{path}: {len(data):,} bytes")


def delivered(answer: Mapping[str, object]) -> str:
    """What a delivery's answer says: the bytes sent, the outcome, and that the receipt verified (the
    client refuses an answer whose receipt does not)."""
    return f"delivered {answer['wire_bytes']:,} bytes: {answer['outcome']}, receipt verified"


def _table(
    rows: Sequence[Mapping[str, object]], columns: Sequence[str], headers: Sequence[str] | None
) -> Table:
    from rich.table import Table

    titles = [c.upper() for c in columns] if headers is None else list(headers)
    table = Table(box=None, pad_edge=False, header_style="bold", show_header=any(titles))
    for column, title in zip(columns, titles, strict=True):
        numbers = all(isinstance(r.get(column), int | float | None) for r in rows)  # right-aligned
        table.add_column(title, justify="right" if numbers else "left", overflow="fold")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    return table


def table_lines(
    rows: Sequence[Mapping[str, object]], columns: Sequence[str], headers: Sequence[str] | None = None
) -> list[str]:
    """A table as plain text lines: no styles, no trailing spaces, as wide as it needs (never folded,
    so that IDs can be copied and ``awk`` reads one row per line)."""
    from rich.console import Console

    plain = Console(file=io.StringIO(), width=1 << 16, color_system=None, highlight=False)
    with plain.capture() as captured:
        plain.print(_table(rows, columns, headers))
    return [line.rstrip() for line in captured.get().splitlines()]


def print_table(
    rows: Sequence[Mapping[str, object]],
    columns: Sequence[str],
    as_json: bool = False,
    headers: Sequence[str] | None = None,
) -> None:
    """A list as a table of ``columns`` (headed by ``headers``, default the column names in capitals;
    all empty: no header), numbers right-aligned; or the rows as JSON. In a terminal rich draws it
    with a bold header; piped, it is ``table_lines``."""
    if as_json:
        print_json(list(rows))
        return
    from rich.console import Console

    console = Console()
    if console.is_terminal:  # as wide as the table needs: an ID is never folded or cut
        table = _table(rows, columns, headers)
        needed = console.measure(table, options=console.options.update_width(1 << 16)).maximum
        Console(width=max(console.width, needed)).print(table)
        return
    for line in table_lines(rows, columns, headers):
        typer.echo(line)


def error(message: str) -> None:
    """A failure, for people, on stderr (stdout stays parseable)."""
    typer.echo(f"error: {message}", err=True)


def problem(exc: ApiError, as_json: bool = False, name: Callable[[str], str] = str) -> None:
    """An error answer: for people, on stderr, its status, code and message, then each reason an
    invalid request was refused on its own line, its field as ``name`` calls it (the CLI: the option
    that sent it), then what it points at: the first offending rows (a refused upload's, never their
    values), columns and unknown example IDs; with ``as_json``, the problem itself on stdout too, for
    scripts."""
    from labeldp.client import field_of

    if as_json:  # a problem as the service answered it, or as the client made it (no answer)
        made = {"type": exc.code, "title": exc.title, "status": exc.status, "detail": exc.detail}
        print_json(exc.body if "type" in exc.body else made)
    error(f"{exc.status} {exc.code}: {exc.detail}" if exc.status else f"{exc.code}: {exc.detail}")
    for reason in exc.errors:
        field = field_of(reason)
        typer.echo(f"  {name(field)}: {reason['msg']}" if field else f"  {reason['msg']}", err=True)
    for line in _where(exc.body):
        typer.echo(f"  {line}", err=True)


def _where(body: Mapping[str, object]) -> list[str]:
    """The lines that say where a problem is: its ``rows`` (counted as the service counts them: the
    first data row is 1, a CSV's header is not a row), ``columns`` and unknown ``example_ids``."""
    lines = []
    rows, columns, ids = body.get("rows"), body.get("columns"), body.get("example_ids")
    if isinstance(rows, list) and rows:
        lines.append(f"rows: {', '.join(map(str, rows))} (the first data row is 1, a header not counted)")
    if isinstance(columns, list) and columns:
        lines.append(f"columns: {', '.join(map(str, columns))}")
    if isinstance(ids, list) and ids and body.get("type") == "unknown-example-ids":
        unknown = body.get("unknown")
        more = unknown - len(ids) if isinstance(unknown, int) and unknown > len(ids) else 0
        lines.append(f"example_ids: {', '.join(map(str, ids))}" + (f" and {more:,} more" if more else ""))
    return lines


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def progress(console: Console, *columns: str | ProgressColumn) -> Progress:
    """A progress bar on ``console`` that leaves nothing behind: removed when done, and never drawn
    when the console is not a terminal (a log file, ``docker compose logs``), where it would leave an
    empty line."""
    from rich.progress import Progress

    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def upload_with_progress(
    console: Console, label: str, file: Path, send: Callable[[Path, Callable[[int], None]], Answer]
) -> Answer:
    """Run ``send(file, on_bytes)`` under a byte progress bar."""
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeElapsedColumn

    with progress(console, TextColumn(label), BarColumn(), DownloadColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(label, total=file.stat().st_size)
        return send(file, lambda n: bar.advance(task, n))
