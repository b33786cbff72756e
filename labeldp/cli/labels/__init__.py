"""``labeldp labels …``: the advertiser's commands against the labels party's REST API.

One command per route, so that a whole exchange needs neither curl nor jq: the identity to hand the
publisher (here), datasets and their uploads (``datasets.py``), recipients, the free preview, releases
and their deliveries, the budget and the ledger (``releases.py``), priors from the features party
(``priors.py``), and models trained with
semi-sensitive features (``semi_sensitive_models.py``). Each prints a short human answer (lists as a
table) or, with ``--json``, the server's answer; commands that create something take ``-q`` to print
only its ID (for ``$(…)`` in scripts). The operator's ``serve``, ``tenant`` and ``key`` live in
``admin/``.
"""

from __future__ import annotations

import typer

from labeldp.cli.labels import datasets, priors, releases, semi_sensitive_models
from labeldp.cli.options import LABELS_URL, AsJson, LabelsKey, LabelsUrl, labels_client
from labeldp.terminal import show

app = typer.Typer()  # merged into `labeldp labels` (main.py)


@app.command("identity")
def identity(url: LabelsUrl = LABELS_URL, api_key: LabelsKey = "", as_json: AsJson = False) -> None:
    """This labels party's ID and signing key: give the --json output to the features party."""
    with labels_client(url, api_key) as client:
        me = client.identity()
    show(me, as_json, f"{me['party_id']}: signing key {me['key_id']}")


# The order --help lists them in: the everyday commands, then the groups.
app.add_typer(datasets.commands)
app.add_typer(releases.commands)
app.add_typer(datasets.datasets_group, name="datasets")
app.add_typer(releases.recipients_group, name="recipients")
app.add_typer(releases.releases_group, name="releases")
app.add_typer(priors.priors_group, name="priors")
app.add_typer(semi_sensitive_models.models_group, name="semi-sensitive-models")
