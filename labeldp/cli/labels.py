"""``labeldp labels …``: the advertiser's commands against the labels party's REST API.

One command per route, so that a whole exchange needs neither curl nor jq: the identity to hand the
publisher, datasets and their uploads, recipients, the free preview, releases and their deliveries,
the budget and the ledger, and models trained with semi-sensitive features. Each prints a short human
answer (lists as a table) or, with ``--json``, the server's answer; commands that create something
take ``-q`` to print only its ID (for ``$(…)`` in scripts). The operator's ``serve``, ``tenant`` and
``key`` live in ``admin.py``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.cli.options import LABELS_URL, AsJson, LabelsKey, LabelsUrl, Quiet, labels_client, read_identity
from labeldp.terminal import (
    number,
    numbers,
    print_json,
    print_table,
    show,
    stderr_console,
    upload_with_progress,
)

if TYPE_CHECKING:
    from labeldp.client import LabelsClient

app = typer.Typer()  # merged into `labeldp labels` (main.py)
datasets = typer.Typer(help="Datasets: public parameters, labels, universe.", no_args_is_help=True)
recipients = typer.Typer(help="Features parties releases may go to.", no_args_is_help=True)
releases = typer.Typer(help="Releases: list, show, deliver, download.", no_args_is_help=True)
semi_sensitive_models = typer.Typer(
    help="Models trained with semi-sensitive features (label DP, then DP-SGD): create, show, deliver, "
    "download.",
    no_args_is_help=True,
)

Dataset = Annotated[str, typer.Option(help="Dataset name or id.")]
Loss = Annotated[str, typer.Option(help="squared, absolute, poisson or zero_one.")]


@app.command("identity")
def identity(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """This labels party's ID and signing key: give the --json output to the features party."""
    with labels_client(url, api_key) as client:
        me = client.identity()
    show(me, as_json, f"{me['party_id']}: signing key {me['key_id']}")


# --- datasets and uploads -----------------------------------------------------------------------------


@datasets.command("create")
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


@datasets.command("list")
def datasets_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """The tenant's datasets, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.datasets()
    columns = ("name", "id", "label_count", "universe_count", "support_size", "created_at")
    print_table(rows, columns, as_json)


@datasets.command("show")
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


@datasets.command("delete")
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


@app.command("upload")
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


# --- recipients ---------------------------------------------------------------------------------------


@recipients.command("add")
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
        peer = read_identity(identity)
        address = grpc_address or f"{grpc_host}:{peer.get('grpc_port')}"
        pem = ca.read_text() if ca is not None else None
        out = client.register_recipient(peer["party_id"], address, pem, str(peer.get("key_id")))
    tls = "mutual TLS" if pem else "plaintext"
    show(out, as_json, f"recipient {out['name']} at {address} ({tls}), key {peer.get('key_id')}")


@recipients.command("list")
def recipients_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """Registered recipients."""
    with labels_client(url, api_key) as client:
        rows = client.recipients()
    print_table(rows, ("name", "grpc_address", "fingerprint", "created_at"), as_json)


# --- releases -----------------------------------------------------------------------------------------


@app.command("preview")
def preview(
    dataset: Dataset,
    epsilon: Annotated[float, typer.Option(help="ε the release would charge every example.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    loss: Loss = "squared",
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
    mechanism = PublishedMechanism.model_validate(p["mechanism"])
    error = p["expected_loss"]
    rms = f" (root: {number(error**0.5)})" if loss == "squared" else ""
    source = {"labels": "the exact label histogram", "release": "that release's noisy prior"}.get(
        p["prior_source"], "the given prior"
    )
    show(
        p,
        as_json,
        f"ε = {number(p['epsilon'])} (ε₁ = {number(p['epsilon_prior'], 3)}) over {p['examples']:,} "
        f"examples\n{_bins(p['bin_values'])}\n"
        f"expected {loss} error per label under {source}: {number(error, 6)}{rms}\n"
        f"an attacker guessing a label's bin gains at most {mechanism.worst_case_additive_advantage:.3f} "
        f"(any prior); one released bin moves its odds by at most e^{mechanism.implemented_epsilon:.3f}",
    )


def _bins(values: list[float] | None) -> str:
    """``bins (2): 3,474; 6,029`` — the values a release's bins stand for."""
    return f"bins ({len(values or [])}): {numbers(values or []) or 'none yet'}"


@app.command("release")
def release(
    dataset: Dataset,
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
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    loss: Loss = "squared",
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
        delivery = client.deliver(rel["id"]) if deliver else None
    if quiet:
        typer.echo(rel["id"])
        return
    line = (
        f"release {rel['id']}: {rel['examples']:,} examples at ε = {number(rel['epsilon'])} "
        f"(ε₁ = {number(rel['epsilon_prior'], 3)}), idempotency key {key}\n{_bins(rel['bins'])}"
    )
    if rel["privacy_unit"] == "user":
        mechanism = rel["mechanism"] or {}
        line += (
            f"\nuser-level: ε = {number(rel['epsilon_user'] or 0)} per user over {rel['users']:,} users, "
            f"τ = {mechanism.get('contribution_bound')} ({rel['contribution_bound']}), "
            f"{rel['examples_capped'] or 0:,} examples over the bound carry no label information"
        )
    answer: dict[str, Any] = {"release": rel}
    if delivery is not None:
        answer["delivery"] = delivery
        line += f"\ndelivered to {recipient}: {delivery['wire_bytes']:,} bytes, receipt verified"
    show(answer, as_json, line)


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


@releases.command("list")
def releases_list(
    dataset: Dataset, url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False
) -> None:
    """A dataset's releases, oldest first: status, ε, examples, recipient and bins."""
    with labels_client(url, api_key) as client:
        rows = client.releases(client.dataset_id(dataset))
        names = _recipient_names(client) if rows and not as_json else {}
    if as_json:
        print_json(rows)
        return
    shown = [
        {**r, "recipient": names.get(r["recipient_id"], r["recipient_id"]), "bins": numbers(r["bins"] or [])}
        for r in rows
    ]
    print_table(shown, ("id", "status", "epsilon", "examples", "recipient", "bins", "created_at"))


def _recipient_names(client: LabelsClient) -> dict[str, str]:
    """Recipients' names by id: a release names its recipient by id, people by name."""
    return {r["id"]: r["name"] for r in client.recipients()}


@releases.command("show")
def releases_show(
    release: Annotated[str, typer.Argument(help="Release id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """One release: its status, ε, recipient, bins and deliveries."""
    with labels_client(url, api_key) as client:
        rel = client.get_release(release)
        deliveries = client.deliveries(release)
        recipient = _recipient_names(client).get(rel["recipient_id"], rel["recipient_id"])
    sent = ", ".join(f"{d['outcome']} {d['started_at']}" for d in deliveries) or "none"
    line = (
        f"release {rel['id']} {rel['status']}: {rel['examples']:,} examples at "
        f"ε = {number(rel['epsilon'])} (ε₁ = {number(rel['epsilon_prior'], 3)}) to {recipient}\n"
        f"{_bins(rel['bins'])}\ndeliveries: {sent}"
    )
    show({**rel, "deliveries": deliveries}, as_json, line)


@releases.command("deliver")
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


@releases.command("download")
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


# --- budget and ledger --------------------------------------------------------------------------------


@app.command("budget")
def budget(
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
        f"budget ε = {number(b['per_example_budget'])} per example; most spent {number(b['max_spent'])}; "
        f"{b['can_take']:,} of {b['examples']:,} examples can take ε = {number(epsilon)} more"
    )
    show(b, as_json, line)


@app.command("ledger")
def ledger(
    limit: Annotated[int | None, typer.Option(help="Only the first N entries.")] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """The tenant's append-only ledger: budget changes and charges, oldest first."""
    with labels_client(url, api_key) as client:
        rows = client.ledger(limit)
    print_table(rows, ("created_at", "kind", "epsilon", "examples", "release_id", "note"), as_json)


# --- models trained with semi-sensitive features ------------------------------------------------------


@semi_sensitive_models.command("create")
def semi_sensitive_models_create(
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
    if quiet:
        typer.echo(model["id"])
        return
    line = (
        f"model {model['id']} {model['status']}: {model['examples']:,} examples, "
        f"ε₂ = {number(model['epsilon_dpsgd'])}, δ = {number(model['delta'])}, "
        f"σ = {model['noise_multiplier']:.3f}, {model['steps']} steps"
    )
    show(model, as_json, line)


@semi_sensitive_models.command("show")
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


@semi_sensitive_models.command("deliver")
def semi_sensitive_models_deliver(
    model: Annotated[str, typer.Argument(help="Model id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Send the signed model message to the label release's recipient over gRPC (nothing spent)."""
    with labels_client(url, api_key) as client:
        out = client.deliver_model(model)
    show(out, as_json, f"delivered {out['wire_bytes']:,} bytes: {out['outcome']}, receipt verified")


@semi_sensitive_models.command("download")
def semi_sensitive_models_download(
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


app.add_typer(datasets, name="datasets")
app.add_typer(recipients, name="recipients")
app.add_typer(releases, name="releases")
app.add_typer(semi_sensitive_models, name="semi-sensitive-models")
