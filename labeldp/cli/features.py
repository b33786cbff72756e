"""``labeldp features …``: the publisher's commands against the features party's REST API.

One command per route: the identity to hand the advertiser, pinned senders and which model prices their
examples (``pricing``), the releases received,
feature tables and their uploads, joins, training jobs and models, predictions, the models trained
with semi-sensitive features it received, and the non-sensitive rows it exports for them. Output as
in ``labels/``: one line (lists a table) or ``--json``, ``-q`` for the ID alone. The operator's
``serve``, ``tenant`` and ``key`` live in ``admin/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from labeldp.cli.metrics import metric_lines
from labeldp.cli.options import (
    FEATURES_URL,
    AsJson,
    FeaturesKey,
    FeaturesUrl,
    Quiet,
    features_client,
    read_identity,
)
from labeldp.terminal import (
    number,
    print_json,
    print_table,
    progress,
    save,
    show,
    stderr_console,
    upload_with_progress,
)

if TYPE_CHECKING:
    from labeldp.client.types import FeatureTable, Job

app = typer.Typer()  # merged into `labeldp features` (main.py)
senders = typer.Typer(help="Labels parties whose signed releases are accepted.", no_args_is_help=True)
releases = typer.Typer(help="Releases received and verified.", no_args_is_help=True)
tables = typer.Typer(help="Feature tables.", no_args_is_help=True)
models = typer.Typer(help="Trained models: list, show, download.", no_args_is_help=True)
pricing = typer.Typer(
    help="Which model prices a sender's examples (priors for feature-aware releases), and what was priced.",
    no_args_is_help=True,
)
semi_sensitive_models = typer.Typer(
    help="Models trained with semi-sensitive features, received and verified: list, show, download.",
    no_args_is_help=True,
)

ModelId = Annotated[str, typer.Argument(help="Model id.")]


@app.command("identity")
def identity(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """This features party's ID, receiver port and key fingerprint: give the --json output to the
    labels party."""
    with features_client(url, api_key) as client:
        me = client.identity()
    show(me, as_json, f"{me['party_id']}: gRPC receiver on port {me['grpc_port']}, key {me['key_id']}")


# --- senders and the releases they sent ---------------------------------------------------------------


@senders.command("add")
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
        peer = read_identity(identity)
        out = client.pin_sender(peer["party_id"], str(peer.get("public_key_pem")))
    show(out, as_json, f"sender {out['id']} pinned: key {out['key_id']}")


@senders.command("list")
def senders_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """Pinned senders."""
    with features_client(url, api_key) as client:
        rows = client.senders()
    print_table(rows, ("id", "key_id", "created_at"), as_json)


Sender = Annotated[str, typer.Argument(help="A pinned sender's id (the labels party's party_id).")]


@pricing.command("grant")
def pricing_grant(
    sender: Sender,
    model: Annotated[str, typer.Option(help="One of this tenant's complete models.")],
    max_groups: Annotated[int | None, typer.Option(help="The most groups an answer may have.")] = None,
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """Let a model price the sender's examples: it learns each example's group and the groups' priors (a
    coarse view of the model), never a feature. Replaces an earlier grant."""
    with features_client(url, api_key) as client:
        out = client.grant_pricing(sender, model, max_groups)
    cap = f", at most {out['max_groups']} groups" if out["max_groups"] else ""
    show(out, as_json, f"model {out['model_id']} prices {out['sender_id']}'s examples{cap}")


@pricing.command("show")
def pricing_show(
    sender: Sender, url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """The model that prices the sender's examples."""
    with features_client(url, api_key) as client:
        out = client.pricing_grant(sender)
    show(
        out,
        as_json,
        f"model {out['model_id']} prices {out['sender_id']}'s examples (since {out['updated_at']})",
    )


@pricing.command("withdraw")
def pricing_withdraw(sender: Sender, url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "") -> None:
    """Withdraw the grant: the sender's pricing requests are refused from now on."""
    with features_client(url, api_key) as client:
        client.withdraw_pricing(sender)
    typer.echo(f"{sender}'s examples are no longer priced")


@pricing.command("log")
def pricing_log(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """Every pricing request answered, oldest first: who asked, which model, examples and groups."""
    with features_client(url, api_key) as client:
        rows = client.pricings()
    print_table(rows, ("id", "sender_id", "model_id", "examples", "priced", "groups", "created_at"), as_json)


@releases.command("list")
def releases_list(
    url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """Releases received and verified, oldest first."""
    with features_client(url, api_key) as client:
        rows = client.received_releases()
    print_table(rows, ("release_id", "sender_id", "example_count", "received_at"), as_json)


@releases.command("show")
def releases_show(
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
        f"ε = {number(float(rel['header'].get('epsilon_total', 0)))}"
    )
    show(rel, as_json, line)


# --- feature tables and joins -------------------------------------------------------------------------


@app.command("upload")
def upload(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="CSV or Parquet with example_id.")
    ],
    table: Annotated[str, typer.Option(help="Feature table name (replaced by a new version).")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    non_sensitive: Annotated[
        str | None,
        typer.Option(help="Comma-separated columns that may be exported for semi-sensitive training."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Upload a feature table, with a progress bar."""
    from labeldp.client import content_type_of

    declared = [c.strip() for c in (non_sensitive or "").split(",") if c.strip()]
    with features_client(url, api_key) as client:
        content_type_of(file)  # an unknown extension is refused before connecting
        out = upload_with_progress(
            stderr_console(),
            f"uploading {file.name}",
            file,
            lambda f, on_bytes: client.upload_table(table, f, on_bytes, declared),
        )
    show(out, as_json, f"feature table {table} v{out['version']}: {out['rows']:,} rows; {_columns(out)}")


def _columns(table: FeatureTable) -> str:
    """``columns carat (numeric), cut (categorical), …``: how the model will read each column."""
    return "columns " + ", ".join(f"{name} ({kind})" for name, kind in table["schema"].items())


@tables.command("list")
def tables_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """The tenant's feature tables."""
    with features_client(url, api_key) as client:
        rows = client.tables()
    print_table(rows, ("name", "version", "rows", "updated_at"), as_json)


@tables.command("show")
def tables_show(
    name: Annotated[str, typer.Argument(help="Feature table name.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    as_json: AsJson = False,
) -> None:
    """One feature table: version, rows and schema."""
    with features_client(url, api_key) as client:
        t = client.table(name)
    show(t, as_json, f"feature table {t['name']} v{t['version']}: {t['rows']:,} rows; {_columns(t)}")


@app.command("join")
def join(
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


@app.command("export")
def export(
    release: Annotated[str, typer.Option(help="A received release id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write.")],
    table: Annotated[
        str | None,
        typer.Option(help="Feature table to join it with (without: the released values alone)."),
    ] = None,
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """The release's training set — the table's rows with a released label, with released_bin and
    released_value — or its released values alone, as Parquet, with the release's description beside
    it (OUT.labeldp.json) for labeldp_model's corrections; a cut connection resumes where it stopped."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    with (
        features_client(url, api_key) as client,
        progress(
            stderr_console(), TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        ) as bar,
    ):
        task = bar.add_task("export", total=None)
        rows = client.download_training_set(
            release,
            out,
            table,
            on_row_groups=lambda done, total: bar.update(task, completed=done, total=total),
        )
    typer.echo(f"{out}: {rows:,} rows; description in {out.name}.labeldp.json (labeldp_model.Release.load)")


# --- training, models, predictions --------------------------------------------------------------------


@app.command("train")
def train(
    release: Annotated[str, typer.Option(help="A received release id.")],
    table: Annotated[str, typer.Option(help="Feature table to join it with.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
    model: Annotated[str, typer.Option(help="hgb (gradient boosting) or linear.")] = "hgb",
    debias: Annotated[str, typer.Option(help="none, affine or unbiased.")] = "affine",
    also: Annotated[
        list[str] | None,
        typer.Option(help="Train on this received release too (repeat; e.g. both stages of a loop)."),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the job, with a progress bar.")] = True,
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Start a training job on a release joined with a feature table; prints the model id."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    with features_client(url, api_key) as client:
        job = client.train(release, table, model, debias, also_release_ids=also or None)
        if not wait:
            show(job, as_json, f"job {job['id']} {job['status']}")
            return
        with progress(
            stderr_console(),
            TextColumn("training"),
            BarColumn(),
            TextColumn("{task.fields[stage]}"),
            TimeElapsedColumn(),
        ) as bar:
            task = bar.add_task("train", total=None, stage="queued")

            def report(state: Job) -> None:
                p = state["progress"]
                total = 200 if model == "hgb" else None
                bar.update(task, total=total, completed=p.get("iterations", 0), stage=p.get("stage", ""))

            client.wait_for_job(job["id"], report)
        trained = client.model(job["id"])
    if quiet:
        typer.echo(trained["id"])
        return
    lines = metric_lines(trained["metrics"], trained["loss"])
    show(trained, as_json, "\n".join([f"model {trained['id']} trained ({trained['loss']} loss):", *lines]))


@models.command("list")
def models_list(url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False) -> None:
    """The tenant's models (training jobs), oldest first."""
    with features_client(url, api_key) as client:
        rows = client.models()
    print_table(rows, ("id", "status", "model", "loss", "debias", "created_at"), as_json)


@models.command("show")
def models_show(
    model: ModelId, url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """One model: status, metrics and provenance (release, ε, feature table, code version)."""
    with features_client(url, api_key) as client:
        m = client.model(model)
    head = f"model {m['id']} {m['status']} ({m['model']}, {m['loss']} loss, debias {m['debias']})"
    show(m, as_json, "\n".join([head, *metric_lines(m["metrics"], m["loss"])]))


@models.command("download")
def models_download(
    model: ModelId,
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write (a skops file).")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """The model as one scikit-learn pipeline (skops): load it with ``skops.io.load`` and its trusted
    types, where labeldp need not be installed (docs/guides/publisher.md#take-a-model-out)."""
    with features_client(url, api_key) as client:
        size = client.download_model(model, out)
    typer.echo(f"{out}: {size:,} bytes (load it: docs/guides/publisher.md#take-a-model-out)")


@app.command("predict")
def predict(
    model: ModelId,
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
        print_json(out)
        return
    names = wanted if wanted is not None else [f"row {i + 1}" for i in range(len(out["predictions"]))]
    for name, value in zip(names, out["predictions"], strict=True):
        typer.echo(f"{name}\t{number(value, 6, grouped=False)}")  # tab-separated: `cut -f2` reads them


# --- models trained with semi-sensitive features, received --------------------------------------------


@semi_sensitive_models.command("list")
def semi_sensitive_models_list(
    url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """Received models and who sent them."""
    with features_client(url, api_key) as client:
        rows = client.received_models()
    print_table(rows, ("model_id", "sender_id", "label_release_id", "received_at"), as_json)


@semi_sensitive_models.command("show")
def semi_sensitive_models_show(
    model: ModelId, url: FeaturesUrl = FEATURES_URL, api_key: FeaturesKey = "", as_json: AsJson = False
) -> None:
    """One received model and its signed guarantee."""
    with features_client(url, api_key) as client:
        m = client.received_model(model)
    g = m["guarantee"]
    line = (
        f"model {m['model_id']} from {m['sender_id']}: "
        + (f"ε₁ = {number(g['epsilon_labels'])} (labels), " if g["label_release_id"] else "no label phase, ")
        + f"ε₂ = {number(g['epsilon_dpsgd'])}, δ = {number(g['delta'])} (DP-SGD), {g['adjacency']}"
    )
    show(m, as_json, line)


@semi_sensitive_models.command("download")
def semi_sensitive_models_download(
    model: ModelId,
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write the signed message to.")],
    url: FeaturesUrl = FEATURES_URL,
    api_key: FeaturesKey = "",
) -> None:
    """The model as one artifact: the signed message exactly as received."""
    with features_client(url, api_key) as client:
        data = client.received_model_artifact(model)
    save(out, data)


@app.command("non-sensitive-rows")
def non_sensitive_rows(
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
    save(out, data)


app.add_typer(senders, name="senders")
app.add_typer(pricing, name="pricing")
app.add_typer(releases, name="releases")
app.add_typer(tables, name="tables")
app.add_typer(models, name="models")
app.add_typer(semi_sensitive_models, name="semi-sensitive-models")
