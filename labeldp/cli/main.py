"""The ``labeldp`` command line: the root, ``--version``, and one group of commands per audience.

``labels/`` is the advertiser's (the labels party's REST API), ``features.py`` the publisher's,
``admin/`` the operator's (``serve``, tenants and API keys over a party's database, signing keys and
development certificates), ``audit.py`` the auditor's, ``demo.py`` the demo. Each registers its
commands on its own typer app; the advertiser's and the operator's meet under ``labeldp labels`` (the
publisher's and the operator's under ``labeldp features``). Every heavy import (the parties, the
mechanism library, pyarrow, httpx) happens inside the command that needs it, so ``--version`` and
``--help`` start fast (tests/e2e/test_cli_startup.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from labeldp.cli import admin, audit, demo, features, labels

app = typer.Typer(
    help="labeldp: feature-oblivious label differential privacy.",
    no_args_is_help=True,
    rich_markup_mode="markdown",  # help paragraphs reflow: a docstring's line breaks are not the terminal's
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from labeldp import __version__

        typer.echo(f"labeldp {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """labeldp command line."""


labels_party = typer.Typer(
    help="The labels party (advertiser): labels, budget, releases.", no_args_is_help=True
)
labels_party.add_typer(labels.app)
labels_party.add_typer(admin.labels_app)
features_party = typer.Typer(
    help="The features party (publisher): receive releases, train, serve.", no_args_is_help=True
)
features_party.add_typer(features.app)
features_party.add_typer(admin.features_app)

app.add_typer(demo.app)
app.add_typer(labels_party, name="labels")
app.add_typer(features_party, name="features")
app.add_typer(admin.keys_app, name="keys")
app.add_typer(audit.app, name="audit")


if __name__ == "__main__":
    app()
