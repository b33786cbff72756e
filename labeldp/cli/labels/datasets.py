"""``labeldp labels datasets …`` and ``upload``: a dataset's public parameters, then its labels, its
release universe or the non-sensitive rows semi-sensitive models train on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from labeldp.cli.options import LABELS_URL, AsJson, Dataset, LabelsKey, LabelsUrl, Quiet, labels_client
from labeldp.terminal import print_table, show, stderr_console, upload_with_progress

commands = typer.Typer()  # top-level commands, merged into `labeldp labels` (labels/__init__.py)
datasets_group = typer.Typer(help="Datasets: public parameters, labels, universe.", no_args_is_help=True)


@datasets_group.command("create")
def datasets_create(
    name: Annotated[str, typer.Argument(help="Dataset name (unique per tenant).")],
    label_type: Annotated[str, typer.Option(help="real, count, binary or categorical.")],
    lo: Annotated[float | None, typer.Option(help="Public lower bound of the labels.")] = None,
    hi: Annotated[float | None, typer.Option(help="Public upper bound of the labels.")] = None,
    support: Annotated[
        str | None,
        typer.Option(
            help="Grid: integer:STEP, uniform:K, log:K[:zero] or explicit:V1,V2,… (default by type)."
        ),
    ] = None,
    out_of_bounds: Annotated[str | None, typer.Option(help="reject (default) or clip.")] = None,
    default_label: Annotated[
        float | None, typer.Option(help="Label of universe IDs without one (e.g. 0 conversions).")
    ] = None,
    columns: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help='JSON file {"semi_sensitive": [...], "non_sensitive": [...]} declaring feature columns.',
        ),
    ] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Declare a dataset's public parameters (never read off the labels); prints its id."""
    with labels_client(url, api_key) as client:
        spec: dict[str, Any] = {"name": name, "label_type": label_type}
        for key, value in (("lo", lo), ("hi", hi), ("out_of_bounds", out_of_bounds)):
            if value is not None:
                spec[key] = value
        if default_label is not None:
            spec["default_label"] = default_label
        if support is not None:
            spec["support"] = _support(support)
        if columns is not None:
            spec.update(_feature_columns(columns))
        ds = client.create_dataset(spec)
    if quiet:
        typer.echo(ds["id"])
        return
    show(ds, as_json, f"dataset {ds['name']} {ds['id']}: {ds['support_size']} support points")


def _feature_columns(path: Path) -> dict[str, Any]:
    try:
        declared = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from exc
    if not isinstance(declared, dict) or set(declared) - {"semi_sensitive", "non_sensitive"}:
        raise ValueError(f'{path}: expected {{"semi_sensitive": [...], "non_sensitive": [...]}}')
    return declared


def _support(text: str) -> dict[str, Any]:
    kind, _, rest = text.partition(":")
    try:
        if kind == "integer":
            return {"kind": "integer", "step": float(rest or 1)}
        if kind == "uniform":
            return {"kind": "uniform", "k": int(rest)}
        if kind == "log":
            k, _, zero = rest.partition(":")
            return {"kind": "log", "k": int(k), "include_zero": zero == "zero"}
        if kind == "explicit":
            return {"kind": "explicit", "values": [float(v) for v in rest.split(",")]}
    except ValueError:
        pass
    raise ValueError(f"--support {text!r}: use integer:STEP, uniform:K, log:K[:zero] or explicit:V1,V2,…")


@datasets_group.command("list")
def datasets_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """The tenant's datasets, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.datasets()
    columns = ("name", "id", "label_count", "universe_count", "support_size", "created_at")
    print_table(rows, columns, as_json)


@datasets_group.command("show")
def datasets_show(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One dataset: its public parameters and counts."""
    with labels_client(url, api_key) as client:
        ds = client.dataset(dataset)
    spec = ", ".join(f"{k} {v}" for k, v in ds["spec"].items() if v is not None)
    show(ds, as_json, f"dataset {ds['name']} {ds['id']}: {ds['label_count']:,} labels; {spec}")


@datasets_group.command("delete")
def datasets_delete(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """Delete a dataset nothing was released from (its labels, universe and rows; the ledger keeps
    every charge)."""
    with labels_client(url, api_key) as client:
        ds = client.dataset(dataset)
        client.delete_dataset(ds["id"])
    typer.echo(f"deleted dataset {ds['name']} {ds['id']}")


@commands.command("upload")
def upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="CSV, NDJSON or Parquet.")],
    dataset: Dataset,
    url: LabelsUrl = LABELS_URL,
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
    from labeldp.client import content_type_of

    if universe and non_sensitive:
        raise typer.BadParameter("give --universe or --non-sensitive, not both")
    with labels_client(url, api_key) as client:
        content_type_of(file)  # an unknown extension is refused before connecting
        ds = client.dataset_id(dataset)
        send = (
            client.upload_universe
            if universe
            else client.upload_non_sensitive
            if non_sensitive
            else client.upload_labels
        )
        out = upload_with_progress(
            stderr_console(), f"uploading {file.name}", file, lambda f, on_bytes: send(ds, f, on_bytes)
        )
    what = "IDs in the universe" if universe else "non-sensitive rows" if non_sensitive else "labels"
    show(out, as_json, f"{out['rows']:,} {what} stored (dataset {dataset}, version {out['version']})")
