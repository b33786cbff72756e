"""Terminal output shared by the CLI and the demo: values as people read them, an answer as one line or
as JSON, lists as tables, byte progress bars, errors.

stdout carries the answers (IDs, lines, JSON, tables) so that scripts can parse them; progress bars
and errors go to stderr. rich is imported only when something is drawn, so that ``labeldp --version``
and every ``--help`` start fast.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from labeldp.client import ApiError

Answer = TypeVar("Answer")


def cell(value: object) -> str:
    """A value as people read it: thousands separated, never ``1e+06``; ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) >= 1 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def show(answer: object, as_json: bool, line: str) -> None:
    """The server's whole answer as JSON, or the one line that says what matters."""
    if as_json:
        print_json(answer)
    else:
        typer.echo(line)


def print_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str], as_json: bool = False) -> None:
    """A list as a table of ``columns`` (or the rows as JSON), numbers right-aligned. In a terminal
    rich draws it with a bold header; piped, it is plain text (no styles, no trailing spaces). Either
    way it is as wide as it needs, never folded, so that IDs can be copied and ``awk`` reads one row
    per line."""
    if as_json:
        print_json(list(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        numbers = all(isinstance(r.get(column), int | float | None) for r in rows)  # right-aligned
        table.add_column(column.upper(), justify="right" if numbers else "left", overflow="fold")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    console = Console()
    if console.is_terminal:  # as wide as the table needs: an ID is never folded or cut
        needed = console.measure(table, options=console.options.update_width(1 << 16)).maximum
        Console(width=max(console.width, needed)).print(table)
        return
    plain = Console(file=io.StringIO(), width=1 << 16, color_system=None, highlight=False)
    with plain.capture() as captured:
        plain.print(table)
    for line in captured.get().splitlines():
        typer.echo(line.rstrip())


def error(message: str) -> None:
    """A failure, for people, on stderr (stdout stays parseable)."""
    typer.echo(f"error: {message}", err=True)


def problem(exc: ApiError, as_json: bool = False, name: Callable[[str], str] = str) -> None:
    """An error answer: for people, on stderr, its status, code and message, then each reason an
    invalid request was refused on its own line, its field as ``name`` calls it (the CLI: the option
    that sent it); with ``as_json``, the problem itself on stdout too, for scripts."""
    from labeldp.client import field_of

    if as_json:  # a problem as the service answered it, or as the client made it (no answer)
        made = {"type": exc.code, "title": exc.title, "status": exc.status, "detail": exc.detail}
        print_json(exc.body if "type" in exc.body else made)
    error(f"{exc.status} {exc.code}: {exc.detail}" if exc.status else f"{exc.code}: {exc.detail}")
    for reason in exc.errors:
        field = field_of(reason)
        typer.echo(f"  {name(field)}: {reason['msg']}" if field else f"  {reason['msg']}", err=True)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def upload_with_progress(
    console: Console, label: str, file: Path, send: Callable[[Path, Callable[[int], None]], Answer]
) -> Answer:
    """Run ``send(file, on_bytes)`` under a byte progress bar (removed when done)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn(label), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task(label, total=file.stat().st_size)
        return send(file, lambda n: bar.advance(task, n))
