"""What the CLI prints for people: help that reads as written (a paragraph is never broken where its
docstring happened to wrap), and numbers that read one way only (never ``1.10226e+07``, never ``1.0``,
never a thousands separator taken for a list separator)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from labeldp.cli import app
from labeldp.terminal import number, numbers


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def flat(text: str | None) -> str:
    """A paragraph as the terminal should show it: one line, markup quotes gone."""
    return " ".join(inspect.cleandoc(text or "").split()).replace("`", "")


def test_every_help_paragraph_reads_on_one_line() -> None:
    """On a terminal wide enough, every group lists each command's summary on one line, and every
    command shows each paragraph of its help and each option's help on one line."""
    tree = list(commands(typer.main.get_command(app)))
    assert len(tree) > 50
    for path, command in tree:
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, (path, result.output)
        lines = result.output.splitlines()
        if getattr(command, "commands", None):
            wanted = [flat((sub.help or "").split("\n\n")[0]) for sub in command.commands.values()]
        else:
            wanted = [flat(p) for p in inspect.cleandoc(command.help or "").split("\n\n")]
            wanted += [flat(p.help) for p in command.params if getattr(p, "help", None)]
        for text in filter(None, wanted):
            assert any(text in line for line in lines), (path, text)


def test_every_option_name_reads_whole_at_80_columns() -> None:
    """A terminal of 80 columns shows every option's long name whole (rich shortens a cell that does
    not fit with "…": `--contribution-…` could not be typed from the help)."""
    tree = list(commands(typer.main.get_command(app)))
    cut = []
    for path, command in tree:
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (path, result.output)
        assert max(map(len, result.output.splitlines())) <= 80, path
        names = [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
        cut += [
            (" ".join(path), n) for n in names if not re.search(rf"{re.escape(n)}(?![\w-])", result.output)
        ]
    assert not cut, cut


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (11_022_600.4, "11,022,600"),  # every digit of the integer part, no e-notation
        (3474.123, "3,474"),
        (759.43, "759.4"),
        (0.31666, "0.3167"),
        (1.0, "1"),  # ε = 1 wherever it is shown, never 1.0
        (5.5, "5.5"),
        (0.001, "0.001"),
        (1e-6, "1e-06"),  # a δ, as people write it
        (0.0, "0"),
    ],
)
def test_a_number_reads_one_way(value: float, shown: str) -> None:
    assert number(value) == shown


def test_a_list_of_numbers_cannot_be_misread() -> None:
    assert numbers([2413.2, 2765.9]) == "2,413; 2,766"  # not "2,413, 2,766": two numbers, or four?
    assert number(11_022_600.4, 6, grouped=False) == "11022600"  # for cut and awk
