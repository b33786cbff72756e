"""The CLI's commands for every resource of both REST APIs, so that a whole exchange needs neither
curl nor jq: identities, datasets, recipients and senders, releases, budget and ledger, feature tables,
joins, models and predictions.

Every command prints a short human answer (lists as aligned columns) or, with ``--json``, the server's
answer as JSON; commands that create something take ``-q`` to print only its ID (for ``$(…)`` in
scripts). Exit codes as everywhere in the CLI: 1 for an error answer (its code and message on stderr),
2 for a local mistake.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from labeldp.cli.client_commands import (
    AsJson,
    FeaturesKey,
    FeaturesUrl,
    LabelsKey,
    LabelsUrl,
    Quiet,
    cell,
    features_client,
    labels_client,
    show,
)

Dataset = Annotated[str, typer.Option(help="Dataset name or id.")]
LABELS_URL = "http://127.0.0.1:8400"
FEATURES_URL = "http://127.0.0.1:8500"

labels_datasets = typer.Typer(help="Datasets: public parameters, labels, universe.", no_args_is_help=True)
labels_recipients = typer.Typer(help="Features parties releases may go to.", no_args_is_help=True)
labels_releases = typer.Typer(help="Releases: list, show, deliver, download.", no_args_is_help=True)
features_senders = typer.Typer(
    help="Labels parties whose signed releases are accepted.", no_args_is_help=True
)
features_releases = typer.Typer(help="Releases received and verified.", no_args_is_help=True)
features_tables = typer.Typer(help="Feature tables.", no_args_is_help=True)
features_models = typer.Typer(help="Trained models: list, show, download.", no_args_is_help=True)
features_semi_sensitive_models = typer.Typer(
    help="Models trained with semi-sensitive features, received and verified: list, show, download.",
    no_args_is_help=True,
)
labels_models = typer.Typer(
    help="Models trained with semi-sensitive features (label DP, then DP-SGD): create, show, download.",
    no_args_is_help=True,
)


def _columns(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    """A list as aligned columns (or the items as JSON)."""
    if as_json:
        typer.echo(json.dumps(list(rows), indent=2, default=str))
        return
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    typer.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _created(answer: dict[str, Any], quiet: bool, as_json: bool, line: str) -> None:
    if quiet:
        typer.echo(answer["id"])
    else:
        show(answer, as_json, line)


def _identity_file(path: Path) -> dict[str, Any]:
    """A party's ``identity --json`` output, shared out of band."""
    try:
        identity = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an identity JSON file ({exc})") from exc
    if not isinstance(identity, dict) or "party_id" not in identity:
        raise ValueError(f"{path}: not an identity JSON file (no party_id)")
    return identity


# --- the labels party ---------------------------------------------------------------------------------


def labels_identity(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """This labels party's ID and signing key: give the --json output to the features party."""
    with labels_client(url, api_key) as client:
        me = client.identity()
    show(me, as_json, f"{me['party_id']}: signing key {me['key_id']}")


@labels_datasets.command("create")
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
        line = f"dataset {ds['name']} {ds['id']}: {ds['support_size']} support points"
        _created(ds, quiet, as_json, line)


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


@labels_datasets.command("list")
def datasets_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """The tenant's datasets, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.datasets()
    _columns(rows, ("name", "id", "label_count", "universe_count", "support_size", "created_at"), as_json)


@labels_datasets.command("show")
def datasetsshow(
    dataset: Annotated[str, typer.Argument(help="Dataset name or id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One dataset: its public parameters and counts."""
    with labels_client(url, api_key) as client:
        ds = client.dataset(dataset)
    spec = ", ".join(f"{k} {v}" for k, v in ds["spec"].items() if v is not None)
    line = f"dataset {ds['name']} {ds['id']}: {ds['label_count']:,} labels; {spec}"
    show(ds, as_json, line)


@labels_recipients.command("add")
def recipients_add(
    identity: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="The features party's `identity --json` file.")
    ],
    ca: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="CA (PEM) of its server certificate.")
    ] = None,
    grpc_host: Annotated[str, typer.Option(help="Host of its gRPC receiver (port from the identity).")] = (
        "localhost"
    ),
    grpc_address: Annotated[
        str | None, typer.Option(help="host:port of its gRPC receiver (overrides --grpc-host).")
    ] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Register a features party (its name, receiver, CA and key fingerprint) as a recipient."""
    with labels_client(url, api_key) as client:
        peer = _identity_file(identity)
        address = grpc_address or f"{grpc_host}:{peer.get('grpc_port')}"
        pem = ca.read_text() if ca is not None else None
        out = client.register_recipient(peer["party_id"], address, pem, str(peer.get("key_id")))
    tls = "mutual TLS" if pem else "plaintext"
    show(out, as_json, f"recipient {out['name']} at {address} ({tls}), key {peer.get('key_id')}")


@labels_recipients.command("list")
def recipients_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """Registered recipients."""
    with labels_client(url, api_key) as client:
        rows = client.recipients()
    _columns(rows, ("name", "grpc_address", "fingerprint", "created_at"), as_json)


@labels_releases.command("list")
def releases_list(
    dataset: Dataset, url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False
) -> None:
    """A dataset's releases, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.releases(client.dataset_id(dataset))
    _columns(rows, ("id", "status", "epsilon", "examples", "recipient_id", "created_at"), as_json)


@labels_releases.command("show")
def releasesshow(
    release: Annotated[str, typer.Argument(help="Release id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One release: its status, ε, mechanism and deliveries."""
    with labels_client(url, api_key) as client:
        rel = client.get_release(release)
        rel["deliveries"] = client.deliveries(release)
    sent = ", ".join(f"{d['outcome']} {d['started_at']}" for d in rel["deliveries"]) or "none"
    line = (
        f"release {rel['id']} {rel['status']}: {rel['examples']:,} examples at ε = {rel['epsilon']:g} "
        f"to {rel['recipient_id']}; {len(rel['bins'] or [])} bins; deliveries: {sent}"
    )
    show(rel, as_json, line)


@labels_releases.command("deliver")
def releases_deliver(
    release: Annotated[str, typer.Argument(help="Release id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Send the stored signed message to the recipient (again: same bytes, nothing spent)."""
    with labels_client(url, api_key) as client:
        out = client.deliver(release)
    show(out, as_json, f"delivered {out['wire_bytes']:,} bytes: {out['outcome']}, receipt verified")


@labels_releases.command("download")
def releases_download(
    release: Annotated[str, typer.Argument(help="Release id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write (example_id, bin).")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """The release's stored output, exactly as delivered (reading it is free)."""
    with labels_client(url, api_key) as client:
        data = client.noisy_labels(release)
    out.write_bytes(data)
    typer.echo(f"{out}: {len(data):,} bytes")


@labels_models.command("create")
def models_create(
    dataset: Dataset,
    release: Annotated[str, typer.Option(help="The label release (phase 1) to start from.")],
    epsilon_dpsgd: Annotated[float, typer.Option(help="ε₂ of the DP-SGD phase, charged per example.")],
    delta: Annotated[float, typer.Option(help="δ of the DP-SGD phase (from the tenant's δ budget).")],
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
    noisy labels, DP-SGD on every column; prints the model id."""
    import uuid

    body = {
        "label_release_id": release,
        "epsilon_dpsgd": epsilon_dpsgd,
        "delta": delta,
        "epochs": epochs,
        "batch_size": batch_size,
        "clip_norm": clip_norm,
    }
    with labels_client(url, api_key) as client:
        model = client.create_model(client.dataset_id(dataset), body, idempotency_key or str(uuid.uuid4()))
    line = (
        f"model {model['id']} {model['status']}: {model['examples']:,} examples, "
        f"ε₂ = {model['epsilon_dpsgd']:g}, δ = {model['delta']:g}, "
        f"σ = {model['noise_multiplier']:.3f}, {model['steps']} steps"
    )
    _created(model, quiet, as_json, line)


@labels_models.command("show")
def labels_models_show(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One model: status, DP-SGD parameters, the SHA-256 of its signed message."""
    with labels_client(url, api_key) as client:
        m = client.model(model)
    show(m, as_json, f"model {m['id']} {m['status']}: ε₂ = {m['epsilon_dpsgd']:g}, δ = {m['delta']:g}")


@labels_models.command("deliver")
def labels_models_deliver(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Send the signed model message to the label release's recipient over gRPC (nothing spent)."""
    with labels_client(url, api_key) as client:
        out = client.deliver_model(model)
    show(out, as_json, f"delivered {out['wire_bytes']:,} bytes: {out['outcome']}, receipt verified")


@labels_models.command("download")
def labels_models_download(
    model: Annotated[str, typer.Argument(help="Model id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write the signed message to.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """The signed model message (weights, columns, guarantee), byte for byte."""
    with labels_client(url, api_key) as client:
        data = client.model_message(model)
    out.write_bytes(data)
    typer.echo(f"{out}: {len(data):,} bytes")


def labels_budget(
    dataset: Dataset,
    epsilon: Annotated[float, typer.Option(help="How many examples could still take this ε.")] = 1.0,
    epsilon_user: Annotated[float | None, typer.Option(help="… and how many users this ε.")] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """What the dataset's examples (and users) have spent, and what they could still take."""
    with labels_client(url, api_key) as client:
        b = client.budget(client.dataset_id(dataset), epsilon, epsilon_user)
    line = (
        f"budget ε = {b['per_example_budget']:g} per example; most spent {b['max_spent']:g}; "
        f"{b['can_take']:,} of {b['examples']:,} examples can take ε = {epsilon:g} more"
    )
    show(b, as_json, line)


def labels_ledger(
    limit: Annotated[int | None, typer.Option(help="Only the first N entries.")] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """The tenant's append-only ledger: budget changes and charges, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.ledger(limit)
    _columns(rows, ("created_at", "kind", "epsilon", "examples", "release_id", "note"), as_json)


# --- the features party -------------------------------------------------------------------------------


def features_identity(
    url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """This features party's ID, receiver port and key fingerprint: give the --json output to the
    labels party."""
    with features_client(url, api_key) as client:
        me = client.identity()
    show(me, as_json, f"{me['party_id']}: gRPC receiver on port {me['grpc_port']}, key {me['key_id']}")


@features_senders.command("add")
def senders_add(
    identity: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="The labels party's `identity --json` file.")
    ],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """Pin a labels party's signing key: only messages it signed with that key are accepted."""
    with features_client(url, api_key) as client:
        peer = _identity_file(identity)
        out = client.pin_sender(peer["party_id"], str(peer.get("public_key_pem")))
    show(out, as_json, f"sender {out['id']} pinned: key {out['key_id']}")


@features_senders.command("list")
def senders_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """Pinned senders."""
    with features_client(url, api_key) as client:
        rows = client.senders()
    _columns(rows, ("id", "key_id", "created_at"), as_json)


@features_releases.command("list")
def received_list(
    url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """Releases received and verified, oldest first."""
    with features_client(url, api_key) as client:
        rows = client.received_releases()
    _columns(rows, ("release_id", "sender_id", "example_count", "received_at"), as_json)


@features_releases.command("show")
def receivedshow(
    release: Annotated[str, typer.Argument(help="Release id.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """One received release: its signed metadata and mechanism."""
    with features_client(url, api_key) as client:
        rel = client.received_release(release)
    line = (
        f"release {rel['release_id']} from {rel['sender_id']}: {rel['example_count']:,} examples at "
        f"ε = {rel['header'].get('epsilon_total')}"
    )
    show(rel, as_json, line)


@features_tables.command("list")
def tables_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """The tenant's feature tables."""
    with features_client(url, api_key) as client:
        rows = client.tables()
    _columns(rows, ("name", "version", "rows", "updated_at"), as_json)


@features_tables.command("show")
def tablesshow(
    name: Annotated[str, typer.Argument(help="Feature table name.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """One feature table: version, rows and schema."""
    with features_client(url, api_key) as client:
        t = client.table(name)
    show(t, as_json, f"feature table {t['name']} v{t['version']}: {t['rows']:,} rows, schema {t['schema']}")


def features_join(
    release: Annotated[str, typer.Option(help="A received release id.")],
    table: Annotated[str, typer.Option(help="Feature table name.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """How a received release and a feature table match by example ID."""
    with features_client(url, api_key) as client:
        j = client.join(release, table)
    line = (
        f"{j['in_both']:,} examples in both; {j['only_in_release']:,} only in the release, "
        f"{j['only_in_features']:,} only in the features"
    )
    show(j, as_json, line)


@features_models.command("list")
def models_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """The tenant's models (training jobs), oldest first."""
    with features_client(url, api_key) as client:
        rows = client.models()
    _columns(rows, ("id", "status", "model", "loss", "debias", "created_at"), as_json)


@features_models.command("show")
def modelsshow(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """One model: status, metrics and provenance (release, ε, feature table, code version)."""
    with features_client(url, api_key) as client:
        m = client.model(model)
    metrics = ", ".join(f"{k} {cell(v)}" for k, v in m["metrics"].items())
    line = f"model {m['id']} {m['status']} ({m['model']}, {m['loss']}, debias {m['debias']}): {metrics}"
    show(m, as_json, line)


@features_models.command("download")
def models_download(
    model: Annotated[str, typer.Argument(help="Model id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write (a skops file).")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """The model as one scikit-learn pipeline (skops): load it with ``skops.io.load``."""
    with features_client(url, api_key) as client:
        size = client.download_model(model, out)
    typer.echo(f"{out}: {size:,} bytes (skops.io.load it; README: Take a model out)")


def features_predict(
    model: Annotated[str, typer.Argument(help="Model id.")],
    ids: Annotated[str | None, typer.Option(help="Comma-separated example IDs of a feature table.")] = None,
    rows: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSON list of feature rows ({column: value})."),
    ] = None,
    table: Annotated[str | None, typer.Option(help="Feature table of --ids (default: the model's).")] = None,
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """Predictions for example IDs of a feature table, or for feature rows (one per line)."""
    with features_client(url, api_key) as client:
        if (ids is None) == (rows is None):
            raise ValueError("give --ids or --rows")
        given = json.loads(rows.read_text()) if rows is not None else None
        if given is not None and not isinstance(given, list):
            raise ValueError(f"{rows}: a JSON list of rows")
        wanted = [i for i in ids.split(",") if i] if ids is not None else None
        out = client.predictions(model, example_ids=wanted, rows=given, feature_table=table)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    names = wanted if wanted is not None else [f"row {i + 1}" for i in range(len(out["predictions"]))]
    for name, value in zip(names, out["predictions"], strict=True):
        typer.echo(f"{name}\t{value:.6g}")


@features_semi_sensitive_models.command("list")
def semi_sensitive_models_list(
    url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """Received models and who sent them."""
    with features_client(url, api_key) as client:
        rows = client.received_models()
    _columns(rows, ("model_id", "sender_id", "label_release_id", "received_at"), as_json)


@features_semi_sensitive_models.command("show")
def semi_sensitive_models_show(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """One received model and its signed guarantee."""
    with features_client(url, api_key) as client:
        m = client.received_model(model)
    g = m["guarantee"]
    line = (
        f"model {m['model_id']} from {m['sender_id']}: ε₁ = {g['epsilon_labels']:g} (labels), "
        f"ε₂ = {g['epsilon_dpsgd']:g}, δ = {g['delta']:g} (DP-SGD), {g['adjacency']}"
    )
    show(m, as_json, line)


@features_semi_sensitive_models.command("download")
def semi_sensitive_models_download(
    model: Annotated[str, typer.Argument(help="Model id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write the signed message to.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """The model as one artifact: the signed message exactly as received."""
    with features_client(url, api_key) as client:
        data = client.received_model_artifact(model)
    out.write_bytes(data)
    typer.echo(f"{out}: {len(data):,} bytes")


def features_non_sensitive_rows(
    table: Annotated[str, typer.Option(help="Feature table with declared non-sensitive columns.")],
    release: Annotated[str, typer.Option(help="The received label release whose examples to export.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """Export the declared non-sensitive columns of a release's examples, to hand to the labels party
    (`labeldp labels upload FILE --non-sensitive`); no other column leaves."""
    with features_client(url, api_key) as client:
        data = client.non_sensitive_rows(table, release)
    out.write_bytes(data)
    typer.echo(f"{out}: {len(data):,} bytes")
