"""``labeldp labels priors fetch|list|show|delete``: priors a pinned features party signs for a dataset's
examples (each example's group, each group's prior on the support), for a feature-aware release."""

from __future__ import annotations

from typing import Annotated

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
)
from labeldp.terminal import number, print_json, print_table, show

priors_group = typer.Typer(
    help="Priors from a features party for feature-aware releases: fetch, list, show, delete.",
    no_args_is_help=True,
)


@priors_group.command("fetch")
def priors_fetch(
    dataset: Dataset,
    recipient: Annotated[
        str, typer.Option(help="A registered recipient (features party) with a pinned key.")
    ],
    max_groups: Annotated[int, typer.Option(help="G: the most groups (1 to 1,024).")] = 64,
    loss: Annotated[
        str | None, typer.Option(help="The loss of the release they are for (default: the label type's).")
    ] = None,
    example_ids: ExampleIdsFile = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    quiet: Quiet = False,
    as_json: AsJson = False,
) -> None:
    """Ask the recipient to price the dataset's examples (default: those a release lists) with its model;
    the signed answer is checked and stored (nothing is charged, no label leaves). Prints the priors id."""
    with labels_client(url, api_key) as client:
        out = client.fetch_priors(
            client.dataset_id(dataset), recipient, max_groups, loss, read_example_ids(example_ids)
        )
    if quiet:
        typer.echo(out["id"])
        return
    line = (
        f"priors {out['id']}: {out['groups']} groups over {out['examples_priced']:,} of "
        f"{out['examples_requested']:,} examples (model {out['model_id']})\nrule: {out['rule']}"
    )
    show(out, as_json, line)


@priors_group.command("list")
def priors_list(
    dataset: Annotated[str | None, typer.Option(help="Only this dataset's (name or id).")] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Stored priors, oldest first: groups, examples priced, model."""
    with labels_client(url, api_key) as client:
        rows = client.priors(client.dataset_id(dataset) if dataset else None)
    if as_json:
        print_json(rows)
        return
    print_table(rows, ("id", "groups", "examples_priced", "examples_requested", "model_id", "created_at"))


@priors_group.command("show")
def priors_show(
    priors: Annotated[str, typer.Argument(help="Priors id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Stored priors in full: the rule, each group's size and the support point its prior favours most."""
    with labels_client(url, api_key) as client:
        d = client.get_priors(priors)
    support = d["support"]
    lines = [
        f"priors {d['id']}: {d['groups']} groups over {d['examples_priced']:,} of "
        f"{d['examples_requested']:,} examples ({d['examples_without_group']:,} without a group), "
        f"model {d['model_id']}",
        f"rule: {d['rule']}",
    ]
    for g in d["group_priors"]:
        masses = g["masses"]
        top = max(range(len(masses)), key=masses.__getitem__)
        mean = sum(m * v for m, v in zip(masses, support, strict=True))
        lines.append(
            f"  group {g['group']}: {g['examples']:,} examples, mean {number(mean)}, "
            f"mode {number(support[top])} ({number(masses[top], 3)})"
        )
    show(d, as_json, "\n".join(lines))


@priors_group.command("delete")
def priors_delete(
    priors: Annotated[str, typer.Argument(help="Priors id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
) -> None:
    """Delete stored priors (refused while a charged release that uses them runs)."""
    with labels_client(url, api_key) as client:
        client.delete_priors(priors)
    typer.echo(f"priors {priors} deleted")
