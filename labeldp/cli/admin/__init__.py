"""The operator's commands, run where a party's database and files are (no server needed): ``serve``
(``serve.py``), tenants and their API keys for both parties (``tenants.py``; ``labeldp labels|features
serve|tenant|key …``), and signing keys and development certificates (``signing.py``; ``labeldp keys
…``). Each registers its commands on its own typer app; this module merges them under each party.
"""

from __future__ import annotations

import typer

from labeldp.cli.admin.serve import features_serve_app, labels_serve_app
from labeldp.cli.admin.signing import keys_app
from labeldp.cli.admin.tenants import features_keys, features_tenants, labels_keys, labels_tenants

labels_app = typer.Typer()  # merged into `labeldp labels` (main.py)
features_app = typer.Typer()  # merged into `labeldp features`

labels_app.add_typer(labels_serve_app)
labels_app.add_typer(labels_tenants, name="tenant")
labels_app.add_typer(labels_keys, name="key")
features_app.add_typer(features_serve_app)
features_app.add_typer(features_tenants, name="tenant")
features_app.add_typer(features_keys, name="key")

__all__ = ["features_app", "keys_app", "labels_app"]
