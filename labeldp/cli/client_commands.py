"""The CLI's client commands: what an advertiser or a publisher scripts against a running service.

They only call the REST APIs (``labeldp.client``). Errors print the server's machine-readable code and
its message and exit 1; bad local input (a missing file, an unknown extension) exits 2; progress bars
go to stderr so that stdout stays parseable (IDs, JSON).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from labeldp.client import ApiError, FeaturesClient, LabelsClient, content_type_of

_err = Console(stderr=True)

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
    if not api_key:
        typer.echo(f"error: give --api-key or set {variable}", err=True)
        raise typer.Exit(code=2)
    try:
        yield
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    except ValueError as exc:  # a local mistake, found before anything was sent
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc


@contextmanager
def labels_client(url: str, api_key: str) -> Iterator[LabelsClient]:
    """The labels party's client, with the CLI's error handling (exit 1 or 2) around its use."""
    with exit_on_errors(api_key, "LABELDP_API_KEY"), LabelsClient(url, api_key) as client:
        yield client


@contextmanager
def features_client(url: str, api_key: str) -> Iterator[FeaturesClient]:
    """The features party's client, with the CLI's error handling (exit 1 or 2) around its use."""
    with exit_on_errors(api_key, "LABELDP_FEATURES_API_KEY"), FeaturesClient(url, api_key) as client:
        yield client


def upload_with_progress(
    console: Console, label: str, file: Path, send: Callable[[Path, Callable[[int], None]], dict[str, Any]]
) -> dict[str, Any]:
    """Run ``send(file, on_bytes)`` under a byte progress bar (removed when done)."""
    with Progress(
        TextColumn(label), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task(label, total=file.stat().st_size)
        return send(file, lambda n: bar.advance(task, n))


def _upload(file: Path, send: Callable[[Path, Callable[[int], None]], dict[str, Any]]) -> dict[str, Any]:
    content_type_of(file)  # refuse an unknown extension before connecting
    return upload_with_progress(_err, f"uploading {file.name}", file, send)


def cell(value: Any) -> str:
    """A value as people read it: thousands separated, never ``1e+06``; ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) >= 1 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def show(answer: dict[str, Any], as_json: bool, line: str) -> None:
    typer.echo(json.dumps(answer, indent=2, default=str) if as_json else line)


def labels_upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="CSV, NDJSON or Parquet.")],
    dataset: Annotated[str, typer.Option(help="Dataset name or id.")],
    url: LabelsUrl = "http://127.0.0.1:8400",
    api_key: LabelsKey = "",
    universe: Annotated[
        bool,
        typer.Option("--universe", help="FILE lists the release universe (example_id) instead of labels."),
    ] = False,
    non_sensitive: Annotated[
        bool,
        typer.Option(
            "--non-sensitive",
            help="FILE holds the features party's non-sensitive rows (semi-sensitive models).",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Upload labels (example_id,label[,semi-sensitive columns]), the ID universe or the non-sensitive
    rows to a dataset, with a progress bar."""
    if universe and non_sensitive:
        raise typer.BadParameter("give --universe or --non-sensitive, not both")
    with labels_client(url, api_key) as client:
        ds = client.dataset_id(dataset)
        send = (
            client.upload_universe
            if universe
            else client.upload_non_sensitive
            if non_sensitive
            else client.upload_labels
        )
        out = _upload(file, lambda f, cb: send(ds, f, cb))
        what = "IDs in the universe" if universe else "non-sensitive rows" if non_sensitive else "labels"
        show(out, as_json, f"{out['rows']:,} {what} stored (dataset {dataset}, version {out['version']})")


def labels_release(
    dataset: Annotated[str, typer.Option(help="Dataset name or id.")],
    recipient: Annotated[str, typer.Option(help="A registered recipient (features party) name.")],
    epsilon: Annotated[
        float | None, typer.Option(help="Example-level: ε charged to every released example.")
    ] = None,
    privacy_unit: Annotated[
        str, typer.Option(help="example (default) or user: protect all of a user's labels together.")
    ] = "example",
    epsilon_user: Annotated[
        float | None, typer.Option(help="User-level: ε charged to every user in the release.")
    ] = None,
    contribution_bound: Annotated[
        str | None, typer.Option(help="User-level: τ (examples per user that count), auto or private.")
    ] = None,
    url: LabelsUrl = "http://127.0.0.1:8400",
    api_key: LabelsKey = "",
    loss: Annotated[str, typer.Option(help="squared, absolute, poisson or zero_one.")] = "squared",
    epsilon_prior: Annotated[
        float | None, typer.Option(help="Part of ε for the private prior (default √(k/n)).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Retry-safe key: the same key returns the same release and charges nothing."),
    ] = None,
    deliver: Annotated[
        bool, typer.Option(help="Also deliver the release to its recipient over gRPC.")
    ] = False,
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Create a release (charges the budget first), optionally deliver it; prints the release id."""
    key = idempotency_key or str(uuid.uuid4())
    with labels_client(url, api_key) as client:
        amount, bound = _privacy_unit(privacy_unit, epsilon, epsilon_user, contribution_bound)
        rel = client.release(
            client.dataset_id(dataset),
            amount,
            recipient,
            loss,
            key,
            epsilon_prior,
            privacy_unit=privacy_unit,
            contribution_bound=bound,
        )
        answer: dict[str, Any] = {"release": rel}
        if deliver:
            answer["delivery"] = client.deliver(rel["id"])
        bins = ", ".join(f"{b:g}" for b in rel["bins"] or [])
        line = (
            f"release {rel['id']}: {rel['examples']:,} examples at ε = {rel['epsilon']:g} "
            f"(ε₁ = {rel['epsilon_prior']:.3g}), bins [{bins}] (idempotency key {key})"
        )
        if rel.get("privacy_unit") == "user":
            mech = rel.get("mechanism") or {}
            line += (
                f"\nuser-level: ε = {rel['epsilon_user']:g} per user over {rel['users']:,} users, "
                f"τ = {mech.get('contribution_bound')} ({rel['contribution_bound']}), "
                f"{rel['examples_capped'] or 0:,} examples over the bound carry no label information"
            )
        if deliver:
            line += (
                f"\ndelivered to {recipient}: {answer['delivery']['wire_bytes']:,} bytes, receipt verified"
            )
        if quiet:
            typer.echo(rel["id"])
            return
        show(answer, as_json, line)


def labels_preview(
    dataset: Annotated[str, typer.Option(help="Dataset name or id.")],
    epsilon: Annotated[float, typer.Option(help="ε the release would charge every example.")],
    url: LabelsUrl = "http://127.0.0.1:8400",
    api_key: LabelsKey = "",
    loss: Annotated[str, typer.Option(help="squared, absolute, poisson or zero_one.")] = "squared",
    epsilon_prior: Annotated[float | None, typer.Option(help="Part of ε for the private prior.")] = None,
    prior_release: Annotated[
        str | None,
        typer.Option(
            help="Use this earlier release's noisy prior (post-processing) instead of the raw labels."
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Free, tenant-only: the bins, the expected error and what an attacker could learn from a release
    at this ε — before spending anything."""
    from labeldp.mechanisms import PublishedMechanism

    with labels_client(url, api_key) as client:
        p = client.preview(client.dataset_id(dataset), epsilon, loss, epsilon_prior, prior_release)
    mech = PublishedMechanism.model_validate(p["mechanism"])
    error = p["expected_loss"]
    rms = f" (root: {error**0.5:,.4g})" if loss == "squared" else ""
    bins = ", ".join(f"{v:,.4g}" for v in p["bin_values"])
    source = {"labels": "the exact label histogram", "release": "that release's noisy prior"}.get(
        p["prior_source"], "the given prior"
    )
    show(
        p,
        as_json,
        f"ε = {p['epsilon']:g} (ε₁ = {p['epsilon_prior']:.3g}) over {p['examples']:,} examples: "
        f"{p['m']} bins [{bins}]\n"
        f"expected {loss} error per label under {source}: {error:,.6g}{rms}\n"
        f"an attacker guessing a label's bin gains at most {mech.worst_case_additive_advantage:.3f} "
        f"(any prior); one released bin moves its odds by at most e^{mech.implemented_epsilon:.3f}",
    )


def _privacy_unit(
    unit: str, epsilon: float | None, epsilon_user: float | None, bound: str | None
) -> tuple[float, int | str | None]:
    """The ε to send and the contribution bound, checked locally (a wrong mix is exit 2)."""
    if unit == "example":
        if epsilon is None or epsilon_user is not None or bound is not None:
            raise ValueError("an example-level release takes --epsilon (not --epsilon-user or a bound)")
        return epsilon, None
    if unit != "user":
        raise ValueError("--privacy-unit is example or user")
    if epsilon_user is None or bound is None or epsilon is not None:
        raise ValueError("a user-level release takes --epsilon-user and --contribution-bound (not --epsilon)")
    return epsilon_user, bound if bound in ("auto", "private") else _positive_int(bound)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError("--contribution-bound is a positive integer, auto or private")
    return int(text)


def features_upload(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="CSV or Parquet with example_id.")
    ],
    table: Annotated[str, typer.Option(help="Feature table name (replaced by a new version).")],
    url: FeaturesUrl = "http://127.0.0.1:8500",
    api_key: FeaturesKey = "",
    non_sensitive: Annotated[
        str | None,
        typer.Option(help="Comma-separated columns that may be exported for semi-sensitive training."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Upload a feature table, with a progress bar."""
    declared = [c.strip() for c in (non_sensitive or "").split(",") if c.strip()]
    with features_client(url, api_key) as client:
        out = _upload(file, lambda f, cb: client.upload_table(table, f, cb, declared))
        show(
            out,
            as_json,
            f"feature table {table} v{out['version']}: {out['rows']:,} rows, schema {out['schema']}",
        )


def features_train(
    release: Annotated[str, typer.Option(help="A received release id.")],
    table: Annotated[str, typer.Option(help="Feature table to join it with.")],
    url: FeaturesUrl = "http://127.0.0.1:8500",
    api_key: FeaturesKey = "",
    model: Annotated[str, typer.Option(help="hgb (gradient boosting) or linear.")] = "hgb",
    debias: Annotated[str, typer.Option(help="none, affine or unbiased.")] = "affine",
    wait: Annotated[bool, typer.Option(help="Wait for the job, with a progress bar.")] = True,
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Start a training job on a release joined with a feature table; prints the model id."""
    with features_client(url, api_key) as client:
        job = client.train(release, table, model, debias)
        if not wait:
            show(job, as_json, f"job {job['id']} {job['state']}")
            return
        with Progress(
            TextColumn("training"),
            BarColumn(),
            TextColumn("{task.fields[stage]}"),
            TimeElapsedColumn(),
            console=_err,
            transient=True,
        ) as bar:
            task = bar.add_task("train", total=None, stage="queued")

            def report(state: dict[str, Any]) -> None:
                p = state["progress"]
                total = 200 if model == "hgb" else None
                bar.update(task, total=total, completed=p.get("iterations", 0), stage=p.get("stage", ""))

            client.wait_for_job(job["id"], report)
        trained = client.model(job["id"])
        if quiet:
            typer.echo(trained["id"])
            return
        metrics = ", ".join(f"{k} {cell(v)}" for k, v in trained["metrics"].items())
        show(trained, as_json, f"model {trained['id']} trained: {metrics}")
