"""``labeldp labels|features serve``: the data directory, migrations and signing key once, then the
party's uvicorn workers (the features party's each with its gRPC receiver)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from labeldp.terminal import error

labels_serve_app = typer.Typer()  # merged into `labeldp labels` (admin/__init__.py)
features_serve_app = typer.Typer()  # merged into `labeldp features`


Workers = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=64,
        help="Server processes sharing the port (default LABELDP_WORKERS or LABELDP_FEATURES_WORKERS, "
        "1); they share the database and data directory, never memory.",
    ),
]


def _prepare(data_dir: Path, database_url: str, identity: Path, db: Any) -> None:
    """Once before any worker starts (either party): the data directory, migrations, the signing key."""
    from labeldp.common.identity import Identity

    data_dir.mkdir(parents=True, exist_ok=True)
    engine = db.make_engine(database_url)
    try:
        db.migrate(engine)
    finally:
        engine.dispose()
    Identity.load_or_create(identity)


@labels_serve_app.command("serve")
def labels_serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default LABELDP_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default LABELDP_PORT or 8400).")] = None,
    workers: Workers = None,
) -> None:
    """Run the labels-party REST API (uvicorn)."""
    from labeldp.common.serving import serve
    from labels_party.config import LabelsSettings

    settings = LabelsSettings()

    def prepare() -> None:
        from labels_party.storage import db

        _prepare(settings.data_dir, settings.resolved_database_url(), settings.identity_path(), db)

    serve(
        "labels_party.api.app:create_app",
        host or settings.host,
        port or settings.port,
        workers or settings.workers,
        prepare,
    )


@features_serve_app.command("serve")
def features_serve(
    host: Annotated[
        str | None, typer.Option(help="REST bind address (default LABELDP_FEATURES_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="REST port (default LABELDP_FEATURES_PORT or 8500).")
    ] = None,
    workers: Workers = None,
) -> None:
    """Run the features-party REST API and its gRPC receiver (in each worker process)."""
    from features_party.config import FeaturesSettings
    from labeldp.common.serving import serve

    settings = FeaturesSettings()
    count = workers or settings.workers
    if count > 1 and settings.grpc_port == 0:
        error("--workers needs a fixed LABELDP_FEATURES_GRPC_PORT: each worker would pick another port")
        raise typer.Exit(code=2)
    os.environ["LABELDP_FEATURES_WORKERS"] = str(count)  # the workers' gRPC servers share the port

    def prepare() -> None:
        from features_party.storage import db

        _prepare(settings.data_dir, settings.resolved_database_url(), settings.identity_path(), db)

    serve("features_party.api.app:create_app", host or settings.host, port or settings.port, count, prepare)
