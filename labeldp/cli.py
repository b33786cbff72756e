"""The ``labeldp`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="labeldp: feature-oblivious label differential privacy.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """labeldp command line."""


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Folder for the PNG figures.")] = Path("demo-output"),
    dataset: Annotated[str, typer.Option(help="'weeks' (census) or 'prices' (diamonds).")] = "weeks",
    epsilons: Annotated[str, typer.Option(help="Comma-separated ε values.")] = "0.1,0.5,1,2,4",
) -> None:
    """Mechanism demo on a real dataset: optimal bins and loss beside the Laplace baseline."""
    from labeldp.demo import run_mechanism_demo

    try:
        eps = [float(e) for e in epsilons.split(",") if e.strip()]
        if not eps:
            raise ValueError("give at least one ε")
        run_mechanism_demo(dataset=dataset, epsilons=eps, out=out, echo=typer.echo)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
