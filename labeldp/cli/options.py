"""What every client command shares: its options (``--url``, ``--api-key``, ``--json``, ``-q``) and
their defaults, the client they open with the CLI's exit codes, and the identity files the parties
hand each other.

Exit codes, everywhere in the CLI: 2 for a caller's mistake — found here before anything was sent (no
key, a missing or unreadable file, a wrong mix of options) or answered by the service (400, 413, 415,
422: the request must change); 3 when the service failed (5xx) or could not be reached (the same
command may succeed later); 1 when the service refused the request as things stand (409 budget
exhausted, 404, 401, …). An error answer prints its status, code and message on stderr, each reason an
invalid request was refused on its own line named by the option that sent the field (``--epsilon:
Input should be greater than or equal to 0.001``), and with ``--json`` the problem itself on stdout.
``labeldp.client`` (and with it httpx) is imported when a command runs, not when the CLI starts.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.terminal import error, problem

if TYPE_CHECKING:
    from labeldp.client import ApiError, FeaturesClient, LabelsClient

REFUSED, MISTAKE, UNAVAILABLE = 1, 2, 3  # exit codes

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
Dataset = Annotated[str, typer.Option(help="Dataset name or id.")]  # labels party: a name or an id
ExampleIdsFile = Annotated[
    Path | None,
    typer.Option(
        exists=True, dir_okay=False, help="Only these examples: a file of example IDs, one per line."
    ),
]


def read_example_ids(path: Path | None) -> list[str] | None:
    """The IDs of an ``--example-ids`` file (blank lines skipped; the service checks each ID)."""
    if path is None:
        return None
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def exit_code(exc: ApiError) -> int:
    """The exit code of an error answer (or of no answer)."""
    return MISTAKE if exc.caller_mistake else UNAVAILABLE if exc.unavailable else REFUSED


def running_command() -> Any:
    """The running command's click context (None outside one). Recent typer runs on its own copy of
    click (``typer._click``), whose context stack is not ``click``'s; older typer runs on click."""
    for stack in ("typer._click.globals", "click"):
        with contextlib.suppress(ImportError):
            return importlib.import_module(stack).get_current_context(silent=True)
    return None


def sent_by(field: str) -> str:
    """How the running command sends a request field: its option or argument (``epsilon_user`` →
    ``--epsilon-user``; ``support.k`` → ``--support (support.k)``), else the field's own name."""
    ctx = running_command()
    head, _, rest = field.partition(".")
    for param in ctx.command.params if ctx is not None else []:
        if param.name == head:
            option = param.param_type_name == "option"
            name = max(param.opts, key=len) if option else param.human_readable_name
            return f"{name} ({field})" if rest else str(name)
    return field


@contextmanager
def exit_on_errors(api_key: str, variable: str) -> Iterator[None]:
    """No key, or a local ``ValueError`` (found before sending): exit 2; an error answer: its exit code
    (``exit_code``), told as ``problem`` tells it."""
    from labeldp.client import ApiError

    if not api_key:
        error(f"give --api-key or set {variable}")
        raise typer.Exit(code=MISTAKE)
    try:
        yield
    except ApiError as exc:
        ctx = running_command()
        problem(exc, as_json=bool(ctx is not None and ctx.params.get("as_json")), name=sent_by)
        raise typer.Exit(code=exit_code(exc)) from exc
    except ValueError as exc:
        error(str(exc))
        raise typer.Exit(code=MISTAKE) from exc


@contextmanager
def labels_client(url: str, api_key: str) -> Iterator[LabelsClient]:
    """The labels party's client, with the CLI's error handling (its exit codes) around its use."""
    from labeldp.client import LabelsClient

    with exit_on_errors(api_key, "LABELDP_API_KEY"), LabelsClient(url, api_key) as client:
        yield client


@contextmanager
def features_client(url: str, api_key: str) -> Iterator[FeaturesClient]:
    """The features party's client, with the CLI's error handling (its exit codes) around its use."""
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
