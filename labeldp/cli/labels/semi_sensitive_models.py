"""``labeldp labels semi-sensitive-models …``: models trained with semi-sensitive features — the label
phase on a release's noisy labels, then DP-SGD on every column — charged, shown, delivered, downloaded."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

import typer

from labeldp.cli.options import LABELS_URL, AsJson, Dataset, LabelsKey, LabelsUrl, Quiet, labels_client
from labeldp.terminal import delivered, number, save, show

models_group = typer.Typer(
    help="Models trained with semi-sensitive features (label DP, then DP-SGD): create, show, deliver, "
    "download.",
    no_args_is_help=True,
)


@models_group.command("create")
def semi_sensitive_models_create(
    dataset: Dataset,
    epsilon_dpsgd: Annotated[float, typer.Option(help="ε₂ of the DP-SGD phase, charged per example.")],
    delta: Annotated[float, typer.Option(help="δ of the DP-SGD phase (from the tenant's δ budget).")],
    release: Annotated[
        str | None, typer.Option(help="The label release (phase 1) to start from; omit for DP-SGD alone.")
    ] = None,
    recipient: Annotated[
        str | None, typer.Option(help="Without --release: the recipient the model is addressed to.")
    ] = None,
    epochs: Annotated[float, typer.Option(help="DP-SGD epochs.")] = 3.0,
    batch_size: Annotated[int, typer.Option(help="Expected batch size (Poisson sampling).")] = 1024,
    clip_norm: Annotated[float, typer.Option(help="Per-example gradient norm bound.")] = 1.0,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Retry-safe key (default: a fresh one; reuse it to retry).")
    ] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Charge (ε₂, δ) to every example of the release, then train: the label phase on the release's
    noisy labels, DP-SGD on every column; prints the model id. Without a release: DP-SGD alone on every
    labelled example (what the public plan picks where the label phase does not pay)."""
    source = {"label_release_id": release} if release is not None else {"recipient": recipient}
    body = {
        **source,
        "epsilon_dpsgd": epsilon_dpsgd,
        "delta": delta,
        "epochs": epochs,
        "batch_size": batch_size,
        "clip_norm": clip_norm,
    }
    with labels_client(url, api_key) as client:
        model = client.create_model(client.dataset_id(dataset), body, idempotency_key or str(uuid.uuid4()))
    if quiet:
        typer.echo(model["id"])
        return
    line = (
        f"model {model['id']} {model['status']}: {model['examples']:,} examples, "
        f"ε₂ = {number(model['epsilon_dpsgd'])}, δ = {number(model['delta'])}, "
        f"σ = {model['noise_multiplier']:.3f}, {model['steps']} steps"
    )
    show(model, as_json, line)


@models_group.command("show")
def semi_sensitive_models_show(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One model: status, DP-SGD parameters, the SHA-256 of its signed message."""
    with labels_client(url, api_key) as client:
        m = client.model(model)
    line = f"model {m['id']} {m['status']}: ε₂ = {number(m['epsilon_dpsgd'])}, δ = {number(m['delta'])}"
    show(m, as_json, line)


@models_group.command("deliver")
def semi_sensitive_models_deliver(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Send the signed model message to the label release's recipient over gRPC (nothing spent)."""
    with labels_client(url, api_key) as client:
        out = client.deliver_model(model)
    show(out, as_json, delivered(out))


@models_group.command("download")
def semi_sensitive_models_download(
    model: Annotated[str, typer.Argument(help="Model id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write the signed message to.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """The signed model message (weights, columns, guarantee), byte for byte."""
    with labels_client(url, api_key) as client:
        data = client.model_message(model)
    save(out, data)
