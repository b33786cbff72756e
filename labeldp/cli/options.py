"""What every client command shares: its options (``--url``, ``--api-key``, ``--json``, ``-q``) and
their defaults, the client they open with the CLI's exit codes, and the identity files the parties
hand each other.

Exit codes, everywhere in the CLI: 1 for an error answer (its code and message on stderr), 2 for a
local mistake found before anything was sent (no key, a missing or unreadable file, a wrong mix of
options). ``labeldp.client`` (and with it httpx) is imported when a command runs, not when the CLI
starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.terminal import error

if TYPE_CHECKING:
    from labeldp.client import FeaturesClient, LabelsClient

LABELS_URL = "http://127.0.0.1:8400"
FEATURES_URL = "http://127.0.0.1:8500"

LabelsUrl = Annotated[str, typer.Option("--url", envvar="LABELDP_URL", help="The labels party's REST URL.")]
LabelsKey = Annotated[
    str, typer.Option("--api-key", envvar="LABELDP_API_KEY", help="A labels-party tenant's API key.")
]
FeaturesUrl = Annotated[
    str, typer.Option("--url", envvar="LABELDP_FEATURES_URL", help="The features party's REST URL.")
]
FeaturesKey = Annotated[
    str,
    typer.Option("--api-key", envvar="LABELDP_FEATURES_API_KEY", help="A features-party tenant's API key."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the server's full answer as JSON.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the ID (for scripts).")]


@contextmanager
def exit_on_errors(api_key: str, variable: str) -> Iterator[None]:
    """No key is exit 2; an error answer exit 1; a local ``ValueError`` (found before sending) exit 2."""
    from labeldp.client import ApiError

    if not api_key:
        error(f"give --api-key or set {variable}")
        raise typer.Exit(code=2)
    try:
        yield
    except ApiError as exc:
        error(str(exc))
        raise typer.Exit(code=1) from exc
    except ValueError as exc:
        error(str(exc))
        raise typer.Exit(code=2) from exc


@contextmanager
def labels_client(url: str, api_key: str) -> Iterator[LabelsClient]:
    """The labels party's client, with the CLI's error handling (exit 1 or 2) around its use."""
    from labeldp.client import LabelsClient

    with exit_on_errors(api_key, "LABELDP_API_KEY"), LabelsClient(url, api_key) as client:
        yield client


@contextmanager
def features_client(url: str, api_key: str) -> Iterator[FeaturesClient]:
    """The features party's client, with the CLI's error handling (exit 1 or 2) around its use."""
    from labeldp.client import FeaturesClient

    with exit_on_errors(api_key, "LABELDP_FEATURES_API_KEY"), FeaturesClient(url, api_key) as client:
        yield client


def read_identity(path: Path) -> dict[str, Any]:
    """A party's ``identity --json`` output, shared out of band (``ValueError`` if it is not one)."""
    try:
        identity = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an identity JSON file ({exc})") from exc
    if not isinstance(identity, dict) or "party_id" not in identity:
        raise ValueError(f"{path}: not an identity JSON file (no party_id)")
    return identity
