"""``labeldp labels recipients|preview|release|releases|budget|ledger``: where releases go, what one
would cost and give before spending (``preview``), the charged release and its deliveries, and what the
examples have spent."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.cli.options import (
    LABELS_URL,
    AsJson,
    Dataset,
    ExampleIdsFile,
    LabelsKey,
    LabelsUrl,
    Quiet,
    labels_client,
    read_example_ids,
    read_identity,
)
from labeldp.terminal import delivered, number, numbers, print_json, print_table, save, show

if TYPE_CHECKING:
    from labeldp.client import LabelsClient
    from labeldp.client.types import Preview, Release

commands = typer.Typer()  # top-level commands, merged into `labeldp labels` (labels/__init__.py)
recipients_group = typer.Typer(help="Features parties releases may go to.", no_args_is_help=True)
releases_group = typer.Typer(help="Releases: list, show, deliver, download.", no_args_is_help=True)

Loss = Annotated[str, typer.Option(help="squared, absolute, poisson or zero_one.")]
Mechanism = Annotated[
    str | None,
    typer.Option(
        "--mechanism",
        help="rr_on_bins, rr_top_k or unbiased (squared and poisson loss: outputs whose mean is the "
        "label); default: the service's public rule (docs/concepts/mechanism.md).",
    ),
]


@recipients_group.command("add")
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
    """Register a features party (its name, receiver, CA and key fingerprint, and the tenant that
    gave its identity: every message names it) as a recipient."""
    with labels_client(url, api_key) as client:
        peer = read_identity(identity)
        address = grpc_address or f"{grpc_host}:{peer.get('grpc_port')}"
        pem = ca.read_text() if ca is not None else None
        tenant = peer.get("tenant_id")
        out = client.register_recipient(
            peer["party_id"], address, pem, str(peer.get("key_id")), str(tenant) if tenant else None
        )
    tls = "mutual TLS" if pem else "plaintext"
    show(out, as_json, f"recipient {out['name']} at {address} ({tls}), key {peer.get('key_id')}")


@recipients_group.command("list")
def recipients_list(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """Registered recipients."""
    with labels_client(url, api_key) as client:
        rows = client.recipients()
    print_table(rows, ("name", "grpc_address", "fingerprint", "created_at"), as_json)


# --- releases -----------------------------------------------------------------------------------------


@commands.command("preview")
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
    mechanism: Mechanism = None,
    priors: Annotated[
        str | None, typer.Option(help="Feature-aware: the stored priors (labels priors fetch) to release on.")
    ] = None,
    example_ids: ExampleIdsFile = None,
    as_json: AsJson = False,
) -> None:
    """Free, tenant-only: the bins, the expected error and what an attacker could learn from a release
    at this ε — before spending anything; for the squared and Poisson losses, RR-on-Bins's expected
    loss beside the unbiased randomizer's expected variance."""
    from labeldp.mechanisms import PublishedMechanism

    with labels_client(url, api_key) as client:
        p = client.preview(
            client.dataset_id(dataset),
            epsilon,
            loss,
            epsilon_prior,
            prior_release,
            mechanism=mechanism,
            example_ids=read_example_ids(example_ids),
            priors_id=priors,
        )
    published = PublishedMechanism.model_validate(p["mechanism"])
    error = p["expected_loss"]
    unbiased = published.kind == "unbiased"
    rms = f" (root: {number(error**0.5)})" if loss == "squared" or unbiased else ""
    source = {"labels": "the exact label histogram", "release": "that release's noisy prior"}.get(
        p["prior_source"], "the given prior"
    )
    what = "expected variance (squared error)" if unbiased else f"expected {loss} error"
    side = ""
    rr_loss, variance = p.get("rr_on_bins_expected_loss"), p.get("unbiased_expected_variance")
    if rr_loss is not None and variance is not None:
        side = (
            f"\nside by side: RR-on-Bins's expected {loss} loss {number(rr_loss, 6)}, "
            f"the unbiased randomizer's expected variance {number(variance, 6)}"
        )
    outputs = (
        f"{published.m} outputs from {number(published.bin_values[0])} to {number(published.bin_values[-1])}"
        if unbiased
        else _bins(p["bin_values"])
    )
    show(
        p,
        as_json,
        f"{'unbiased: ' if unbiased else ''}ε = {number(p['epsilon'])} "
        f"(ε₁ = {number(p['epsilon_prior'], 3)}) over "
        f"{p['examples']:,} examples\n{outputs}\n"
        f"{what} per label under {source}: {number(error, 6)}{rms}{side}\n"
        f"an attacker guessing a label's {'value' if unbiased else 'bin'} gains at most "
        f"{published.worst_case_additive_advantage:.3f} (any prior); one released "
        f"{'output' if unbiased else 'bin'} moves its odds by at most e^{published.implemented_epsilon:.3f}"
        + _with_priors(p, loss),
    )


def _with_priors(p: Preview, loss: str) -> str:
    """What a feature-aware preview adds: the groups and the error without the priors."""
    if p.get("groups") is None:
        return ""
    without = p.get("expected_loss_without_priors") or 0.0
    verdict = p.get("priors_verdict")
    advice = ""
    if verdict is not None:
        kind = verdict["mechanism_without"].replace("_", "-")
        advice = (
            f"\na model's expected error on them: {number(verdict['with_priors'], 6)} with the priors, "
            f"{number(verdict['without_priors'], 6)} without ({kind}): "
            + ("release on the priors" if verdict["pays"] else "they do not pay: release without --priors")
        )
    return (
        f"\nwith priors: {p.get('examples_with_group') or 0:,} examples in {p['groups']} groups, each by its "
        f"group's mechanism at the whole ε (the bins above: the others'); without the priors the expected "
        f"{loss} error would be {number(without, 6)}" + advice
    )


def _outputs(rel: Release) -> str:
    """The bins, or the unbiased randomizer's range of outputs (hundreds of them, beyond [lo, hi])."""
    values = rel["bins"] or []
    if (rel["mechanism"] or {}).get("kind") == "unbiased":
        return f"unbiased: {len(values)} outputs from {number(values[0])} to {number(values[-1])}"
    return _bins(values)


def _bins(values: list[float] | None) -> str:
    """``bins (2): 3,474; 6,029`` — the values a release's bins stand for."""
    return f"bins ({len(values or [])}): {numbers(values or []) or 'none yet'}"


@commands.command("release")
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
    mechanism: Mechanism = None,
    priors: Annotated[
        str | None,
        typer.Option(help="Feature-aware: the stored priors (labels priors fetch) whose groups to use."),
    ] = None,
    example_ids: ExampleIdsFile = None,
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
            mechanism=mechanism,
            example_ids=read_example_ids(example_ids),
            priors_id=priors,
        )
        replayed = client.replayed
        delivery = client.deliver(rel["id"]) if deliver else None
    if quiet:
        typer.echo(rel["id"])
        return
    line = (
        f"release {rel['id']}: {rel['examples']:,} examples at ε = {number(rel['epsilon'])} "
        f"(ε₁ = {number(rel['epsilon_prior'], 3)}), idempotency key {key}\n{_outputs(rel)}"
    )
    if replayed:
        line += f"\nreplayed: key {key} already made this release; nothing was charged again"
    if rel["privacy_unit"] == "user":
        stated = rel["mechanism"] or {}
        line += (
            f"\nuser-level: ε = {number(rel['epsilon_user'] or 0)} per user over {rel['users']:,} users, "
            f"τ = {stated.get('contribution_bound')} ({rel['contribution_bound']}), "
            f"{rel['examples_capped'] or 0:,} examples over the bound carry no label information"
        )
    if rel["priors_id"]:
        line += f"\nfeature-aware on priors {rel['priors_id']}: `labeldp labels releases show {rel['id']}`"
    answer: dict[str, Any] = {"release": rel, "replayed": replayed}
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


@releases_group.command("list")
def releases_list(
    dataset: Annotated[
        str | None, typer.Option(help="Dataset name or id (default: every dataset's releases).")
    ] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Releases, oldest first: status, ε, examples, recipient and bins — one dataset's, or every
    dataset's (then with the dataset's name), as ``GET /v1/releases`` lists them."""
    with labels_client(url, api_key) as client:
        rows = client.releases(client.dataset_id(dataset) if dataset else None)
        names = _recipient_names(client) if rows and not as_json else {}
        datasets = (
            {d["id"]: d["name"] for d in client.datasets()} if rows and not as_json and not dataset else {}
        )
    if as_json:
        print_json(rows)
        return
    shown = [
        {
            **r,
            "dataset": datasets.get(r["dataset_id"], r["dataset_id"]),
            "recipient": names.get(r["recipient_id"], r["recipient_id"]),
            "bins": numbers(r["bins"] or []),
        }
        for r in rows
    ]
    columns = ("id", "status", "epsilon", "examples", "recipient", "bins", "created_at")
    print_table(shown, columns if dataset else ("id", "dataset", *columns[1:]))


def _recipient_names(client: LabelsClient) -> dict[str, str]:
    """Recipients' names by id: a release names its recipient by id, people by name."""
    return {r["id"]: r["name"] for r in client.recipients()}


@releases_group.command("show")
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
        grouped = rel["priors_id"] is not None and rel["status"] == "complete"
        groups = client.release_groups(release) if grouped else []
    sent = ", ".join(f"{d['outcome']} {d['started_at']}" for d in deliveries) or "none"
    line = (
        f"release {rel['id']} {rel['status']}: {rel['examples']:,} examples at "
        f"ε = {number(rel['epsilon'])} (ε₁ = {number(rel['epsilon_prior'], 3)}) to {recipient}\n"
        f"{_bins(rel['bins'])}\ndeliveries: {sent}"
    )
    if groups:
        used = [g for g in groups if g["examples"]]
        line += (
            f"\nfeature-aware (priors {rel['priors_id']}): {sum(g['examples'] for g in groups):,} examples "
            f"in {len(used)} of {len(groups)} groups, each by its group's mechanism; the bins above are "
            "the others'\n"
            + "\n".join(
                f"  group {g['group']}: {g['examples']:,} examples, {_bins(g['mechanism']['bin_values'])}"
                for g in used[:10]
            )
            + (f"\n  … {len(used) - 10} more (--json shows all)" if len(used) > 10 else "")
        )
    show({**rel, "deliveries": deliveries, "groups": groups}, as_json, line)


@releases_group.command("deliver")
def releases_deliver(
    release: Annotated[str, typer.Argument(help="Release id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Send the stored signed message to the recipient (again: same bytes, nothing spent)."""
    with labels_client(url, api_key) as client:
        out = client.deliver(release)
    show(out, as_json, delivered(out))


@releases_group.command("download")
def releases_download(
    release: Annotated[str, typer.Argument(help="Release id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet file to write (example_id, bin).")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """The release's stored output, exactly as delivered (reading it is free)."""
    with labels_client(url, api_key) as client:
        data = client.noisy_labels(release)
    save(out, data)


# --- budget and ledger --------------------------------------------------------------------------------


@commands.command("budget")
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


@commands.command("ledger")
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
