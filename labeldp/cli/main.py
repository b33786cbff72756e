"""The ``labeldp`` command line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.cli import client_commands as client_cli
from labeldp.cli import resource_commands as resources
from labeldp.cli.audit_commands import audit_app

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

app = typer.Typer(
    help="labeldp: feature-oblivious label differential privacy.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from labeldp import __version__

        typer.echo(f"labeldp {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """labeldp command line."""


@app.command()
def demo(
    out: Annotated[
        Path, typer.Option(help="Folder for the report, the figures and the service logs.")
    ] = Path("demo-output"),
    dataset: Annotated[
        str, typer.Option(help="'prices' (diamond sale prices, USD) or 'weeks' (census weeks worked).")
    ] = "prices",
    epsilon: Annotated[
        float, typer.Option(help="ε of the release (charged to every released example).")
    ] = 1.0,
    privacy_unit: Annotated[
        str, typer.Option(help="example, or user: a user-level release over synthetic users.")
    ] = "example",
    epsilon_user: Annotated[
        float | None, typer.Option(help="With --privacy-unit user: ε per user (instead of --epsilon).")
    ] = None,
    contribution_bound: Annotated[
        str, typer.Option(help="With --privacy-unit user: τ, auto or private.")
    ] = "auto",
    postgres: Annotated[
        str | None, typer.Option(help="Run the labels party on this PostgreSQL URL instead of SQLite.")
    ] = None,
    labels_url: Annotated[
        str | None, typer.Option(help="Use a running labels party (with the options below) instead.")
    ] = None,
    labels_key_file: Annotated[Path | None, typer.Option(help="File holding its tenant's API key.")] = None,
    features_url: Annotated[str | None, typer.Option(help="The running features party's REST URL.")] = None,
    features_key_file: Annotated[Path | None, typer.Option(help="File holding its tenant's API key.")] = None,
    grpc_address: Annotated[
        str | None,
        typer.Option(help="host:port of the features party's gRPC receiver, as the labels party sees it."),
    ] = None,
    ca: Annotated[
        Path | None, typer.Option(help="CA that signed the receiver's certificate (mutual TLS).")
    ] = None,
    mechanism_only: Annotated[
        bool, typer.Option(help="Only the mechanism on the dataset, no services (see --epsilons).")
    ] = False,
    semi_sensitive: Annotated[
        bool,
        typer.Option(
            "--semi-sensitive",
            help="UCI Adult with 7 semi-sensitive columns: label DP, then DP-SGD at the labels party.",
        ),
    ] = False,
    epsilons: Annotated[
        str, typer.Option(help="With --mechanism-only: comma-separated ε values.")
    ] = "0.1,0.5,1,2,4",
) -> None:
    """Two-party demo: an advertiser and a publisher train a private conversion model end to end."""
    from labeldp.client import ApiError

    try:
        if mechanism_only:
            from labeldp.demo.mechanism import run_mechanism_demo

            eps = [float(e) for e in epsilons.split(",") if e.strip()]
            if not eps:
                raise ValueError("give at least one ε")
            run_mechanism_demo(dataset=dataset, epsilons=eps, out=out, echo=typer.echo)
            return
        if semi_sensitive:
            if labels_url or features_url or privacy_unit != "example":
                raise ValueError("--semi-sensitive starts its own services, example-level only")
            from labeldp.demo.semi_sensitive import run_semi_sensitive_demo

            run_semi_sensitive_demo(epsilon, out, postgres_url=postgres)
            return
        from labeldp.demo.main import Remote, run_demo

        remote = None
        if labels_url or features_url:
            if not (labels_url and features_url and labels_key_file and features_key_file and grpc_address):
                raise ValueError(
                    "with running services give --labels-url, --labels-key-file, --features-url, "
                    "--features-key-file and --grpc-address"
                )
            remote = Remote(
                labels_url,
                _read_secret(labels_key_file),
                features_url,
                _read_secret(features_key_file),
                grpc_address,
                ca.read_text() if ca else None,
            )
        if privacy_unit not in ("example", "user"):
            raise ValueError("--privacy-unit is example or user")
        bound: int | str | None = None
        if privacy_unit == "user":
            epsilon = epsilon_user if epsilon_user is not None else epsilon
            bound = contribution_bound if not contribution_bound.isdigit() else int(contribution_bound)
        elif epsilon_user is not None:
            raise ValueError("--epsilon-user needs --privacy-unit user")
        run_demo(dataset, epsilon, out, postgres_url=postgres, remote=remote, contribution_bound=bound)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    except (RuntimeError, TimeoutError) as exc:
        typer.echo(f"error: {exc} (service logs: {out / 'logs'})", err=True)
        raise typer.Exit(code=1) from exc
    except KeyboardInterrupt:
        typer.echo("interrupted: the demo's services have been stopped", err=True)
        raise typer.Exit(code=130) from None


def _read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc


labels_app = typer.Typer(
    help="The labels party (advertiser): labels, budget, releases.", no_args_is_help=True
)
tenant_app = typer.Typer(help="Labels-party tenants and API keys.", no_args_is_help=True)
labels_app.add_typer(tenant_app, name="tenant")
app.add_typer(labels_app, name="labels")


@labels_app.command("serve")
def labels_serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default LABELDP_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default LABELDP_PORT or 8400).")] = None,
) -> None:
    """Run the labels-party REST API (uvicorn)."""
    import uvicorn

    from labels_party.api.app import create_app
    from labels_party.config import LabelsSettings

    settings = LabelsSettings()
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=port or settings.port,
        log_config=None,  # the app installs JSON-lines logging (labeldp.common.logs)
        access_log=False,  # the app logs each request as a JSON line with its request id
    )


@contextmanager
def _transaction(data_dir: Path, database_url: str, migrations: Path) -> Iterator[Session]:
    """One transaction on a party's database (migrated first); a ``ValueError`` inside becomes a
    clear message and exit code 2, with nothing committed."""
    from labeldp.common.db import make_engine, migrate, session_factory

    data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(database_url)
    try:
        migrate(engine, migrations)
        with session_factory(engine).begin() as session:
            yield session
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    finally:
        engine.dispose()


def _labels_transaction() -> AbstractContextManager[Session]:
    from labels_party.config import LabelsSettings
    from labels_party.storage.db import MIGRATIONS

    settings = LabelsSettings()
    return _transaction(settings.data_dir, settings.resolved_database_url(), MIGRATIONS)


def _features_transaction() -> AbstractContextManager[Session]:
    from features_party.config import FeaturesSettings
    from features_party.storage.db import MIGRATIONS

    settings = FeaturesSettings()
    return _transaction(settings.data_dir, settings.resolved_database_url(), MIGRATIONS)


KeyFile = Annotated[
    Path | None,
    typer.Option(help="Write the API key to this file (mode 0600) instead of printing it (for deployments)."),
]
ExistOk = Annotated[
    bool,
    typer.Option("--exist-ok", help="An existing tenant of this name is fine (its key is not shown again)."),
]


def _hand_over_key(what: str, api_key: str, key_file: Path | None, verb: str = "created") -> None:
    if key_file is None:
        typer.echo(f"{what} {verb}; API key (store it now, it is not shown again):")
        typer.echo(api_key)
        return
    key_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(api_key + "\n")
    typer.echo(f"{what} {verb}; API key written to {key_file}")


@tenant_app.command("create")
def tenant_create(
    name: str,
    epsilon_per_example: Annotated[
        float, typer.Option(help="Per-example privacy budget ε (a tenant setting).")
    ],
    epsilon_per_user: Annotated[
        float | None,
        typer.Option(help="Per-user privacy budget ε over all releases (default: recorded, not limited)."),
    ] = None,
    delta: Annotated[
        float, typer.Option(help="δ budget over all (ε, δ) releases (default 0: pure-ε releases only).")
    ] = 0.0,
    key_file: KeyFile = None,
    exist_ok: ExistOk = False,
) -> None:
    """Create a tenant and print its bearer API key (shown once; stored only as a hash)."""
    from sqlalchemy import select

    from labels_party.budget.epsilon import to_atto_floor, to_micro_floor
    from labels_party.storage.orm import Tenant
    from labels_party.tenants import create_tenant

    with _labels_transaction() as session:
        if exist_ok and session.execute(select(Tenant).where(Tenant.name == name)).first() is not None:
            typer.echo(f"tenant {name} exists; its key is not shown again")
            return
        per_user = (
            None if epsilon_per_user is None else to_micro_floor(epsilon_per_user, name="epsilon_per_user")
        )
        new = create_tenant(
            session,
            name,
            to_micro_floor(epsilon_per_example, name="epsilon_per_example"),
            per_user,
            to_atto_floor(delta, name="delta"),
        )
    _hand_over_key(f"tenant {new.tenant_id}", new.api_key, key_file)


@tenant_app.command("set-budget")
def tenant_set_budget(
    name: str,
    epsilon_per_example: Annotated[
        float | None, typer.Option(help="New per-example privacy budget ε.")
    ] = None,
    epsilon_per_user: Annotated[
        float | None, typer.Option(help="New per-user privacy budget ε (over all releases).")
    ] = None,
    no_per_user_limit: Annotated[
        bool, typer.Option("--no-per-user-limit", help="Lift the per-user budget (spend is still recorded).")
    ] = False,
    delta: Annotated[float | None, typer.Option(help="New δ budget over all (ε, δ) releases.")] = None,
    note: Annotated[str, typer.Option(help="Why (recorded in the ledger).")] = "",
) -> None:
    """Change a tenant's per-example, per-user and/or δ budget; each change is a ledger entry."""
    from sqlalchemy import select

    from labels_party.budget.epsilon import to_atto_floor, to_micro_floor
    from labels_party.budget.ledger import set_budget, set_delta_budget, set_user_budget
    from labels_party.storage.orm import Tenant

    with _labels_transaction() as session:  # (turns a ValueError into a clear exit 2)
        if (
            epsilon_per_example is None
            and epsilon_per_user is None
            and not no_per_user_limit
            and delta is None
        ):
            raise ValueError("give --epsilon-per-example, --epsilon-per-user, --no-per-user-limit or --delta")
        if epsilon_per_user is not None and no_per_user_limit:
            raise ValueError("give --epsilon-per-user or --no-per-user-limit, not both")
        tenant = session.execute(select(Tenant).where(Tenant.name == name)).scalar_one_or_none()
        if tenant is None:
            raise ValueError(f"no tenant named {name!r}")
        why = note or "set by labeldp CLI"
        if epsilon_per_example is not None:
            budget = to_micro_floor(epsilon_per_example, name="epsilon_per_example")
            set_budget(session, tenant.id, budget, api_key_id=None, note=why)
            typer.echo(f"tenant {name}: per-example budget is now {epsilon_per_example:g}")
        if epsilon_per_user is not None or no_per_user_limit:
            per_user = (
                None
                if no_per_user_limit
                else to_micro_floor(epsilon_per_user or 0.0, name="epsilon_per_user")
            )
            set_user_budget(session, tenant.id, per_user, api_key_id=None, note=why)
            shown = "not limited" if per_user is None else f"{epsilon_per_user:g}"
            typer.echo(f"tenant {name}: per-user budget is now {shown}")
        if delta is not None:
            set_delta_budget(
                session, tenant.id, to_atto_floor(delta, name="delta"), api_key_id=None, note=why
            )
            typer.echo(f"tenant {name}: δ budget is now {delta:g}")


def _tenant_id(session: Session, tenant_model: Any, name: str) -> str:
    from sqlalchemy import select

    tenant = session.execute(select(tenant_model).where(tenant_model.name == name)).scalar_one_or_none()
    if tenant is None:
        raise ValueError(f"no tenant named {name!r}")
    return str(tenant.id)


def _key_commands(
    party: typer.Typer,
    transaction: Callable[[], AbstractContextManager[Session]],
    models: Callable[[], tuple[Any, Any]],
) -> None:
    """``key create|list|revoke|rotate`` for one party's tenants (run where its database is)."""
    keys = typer.Typer(help="A tenant's API keys: create, list, revoke, rotate.", no_args_is_help=True)
    party.add_typer(keys, name="key")

    @keys.command("create")
    def key_create(tenant: str, key_file: KeyFile = None) -> None:
        """Issue another API key for TENANT (shown once, stored only as a hash)."""
        from labeldp.common.api_keys import issue_key

        tenant_model, key_model = models()
        with transaction() as session:
            issued = issue_key(session, key_model, _tenant_id(session, tenant_model, tenant))
        _hand_over_key(f"{tenant}: key {issued.key_id}", issued.api_key, key_file, verb="issued")

    @keys.command("list")
    def key_list(
        tenant: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
    ) -> None:
        """TENANT's keys: id, prefix, created, revoked (never the keys themselves)."""
        from labeldp.common.api_keys import keys_of

        tenant_model, key_model = models()
        with transaction() as session:
            rows = [
                {
                    "id": k.id,
                    "prefix": k.prefix,
                    "created_at": k.created_at.isoformat(),
                    "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
                }
                for k in keys_of(session, key_model, _tenant_id(session, tenant_model, tenant))
            ]
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for r in rows:
            state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "active"
            typer.echo(f"{r['id']}  {r['prefix']}…  created {r['created_at']}  {state}")

    @keys.command("revoke")
    def key_revoke(key_id: str) -> None:
        """Revoke one key by its id: its next request answers 401."""
        from labeldp.common.api_keys import revoke_key

        _, key_model = models()
        with transaction() as session:
            revoke_key(session, key_model, key_id)
        typer.echo(f"key {key_id} revoked")

    @keys.command("rotate")
    def key_rotate(tenant: str, key_file: KeyFile = None) -> None:
        """Issue a new key for TENANT and revoke all its other keys, in one transaction."""
        from labeldp.common.api_keys import rotate_keys

        tenant_model, key_model = models()
        with transaction() as session:
            issued, revoked = rotate_keys(session, key_model, _tenant_id(session, tenant_model, tenant))
        _hand_over_key(
            f"{tenant}: key {issued.key_id} ({revoked} revoked)", issued.api_key, key_file, verb="issued"
        )


def _labels_models() -> tuple[Any, Any]:
    from labels_party.storage.orm import ApiKey, Tenant

    return Tenant, ApiKey


def _features_models() -> tuple[Any, Any]:
    from features_party.storage.orm import ApiKey, Tenant

    return Tenant, ApiKey


_key_commands(labels_app, _labels_transaction, _labels_models)


features_app = typer.Typer(
    help="The features party (publisher): receive releases, train, serve.", no_args_is_help=True
)
features_tenant_app = typer.Typer(help="Features-party tenants and API keys.", no_args_is_help=True)
features_app.add_typer(features_tenant_app, name="tenant")
app.add_typer(features_app, name="features")
keys_app = typer.Typer(help="Signing keys and development certificates.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@features_app.command("serve")
def features_serve(
    host: Annotated[
        str | None, typer.Option(help="REST bind address (default LABELDP_FEATURES_HOST).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="REST port (default LABELDP_FEATURES_PORT or 8500).")
    ] = None,
) -> None:
    """Run the features-party REST API and its gRPC receiver in one process."""
    import uvicorn

    from features_party.api.app import create_app
    from features_party.config import FeaturesSettings

    settings = FeaturesSettings()
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=port or settings.port,
        log_config=None,
        access_log=False,
    )


@features_tenant_app.command("create")
def features_tenant_create(name: str, key_file: KeyFile = None, exist_ok: ExistOk = False) -> None:
    """Create a features-party tenant and print its bearer API key (shown once)."""
    from sqlalchemy import select

    from features_party.storage.orm import Tenant
    from features_party.tenants import create_tenant

    with _features_transaction() as session:
        if exist_ok and session.execute(select(Tenant).where(Tenant.name == name)).first() is not None:
            typer.echo(f"tenant {name} exists; its key is not shown again")
            return
        new = create_tenant(session, name)
    _hand_over_key(f"tenant {new.tenant_id}", new.api_key, key_file)


@keys_app.command("generate")
def keys_generate(path: Path) -> None:
    """Create an Ed25519 identity key at PATH (0600) and print its fingerprint; keeps an existing key."""
    from labeldp.common.identity import Identity

    existed = path.exists()
    identity = Identity.load_or_create(path)
    typer.echo(f"{'existing' if existed else 'new'} key {identity.key_id} at {path}")


@keys_app.command("dev-ca")
def keys_dev_ca(
    out: Annotated[Path, typer.Option(help="Folder for ca.pem and both parties' certificates.")] = Path(
        "dev-certs"
    ),
    host: Annotated[
        list[str] | None, typer.Option(help="Names/IPs of the gRPC receiver (repeatable).")
    ] = None,
    keep_existing: Annotated[
        bool, typer.Option("--keep-existing", help="Do nothing if OUT already holds a CA (restarts).")
    ] = False,
) -> None:
    """A development CA plus a server certificate (features party) and a client certificate (labels party)."""
    from labeldp.common.tls import dev_ca

    if keep_existing and (out / "ca.pem").exists():
        typer.echo(f"{out / 'ca.pem'} exists; keeping the existing certificates")
        return
    paths = dev_ca(out, tuple(host or ("localhost", "127.0.0.1")))
    for label, p in (
        ("CA", paths.ca),
        ("features-party server cert", paths.server_cert),
        ("features-party server key", paths.server_key),
        ("labels-party client cert", paths.client_cert),
        ("labels-party client key", paths.client_key),
    ):
        typer.echo(f"{label:28} {p}")


_key_commands(features_app, _features_transaction, _features_models)

labels_app.command("upload")(client_cli.labels_upload)
labels_app.command("identity")(resources.labels_identity)
labels_app.command("budget")(resources.labels_budget)
labels_app.command("ledger")(resources.labels_ledger)
labels_app.add_typer(resources.labels_datasets, name="datasets")
labels_app.add_typer(resources.labels_recipients, name="recipients")
labels_app.add_typer(resources.labels_releases, name="releases")
labels_app.add_typer(resources.labels_models, name="models")
features_app.command("identity")(resources.features_identity)
features_app.command("join")(resources.features_join)
features_app.command("predict")(resources.features_predict)
features_app.command("non-sensitive-rows")(resources.features_non_sensitive_rows)
features_app.add_typer(resources.features_senders, name="senders")
features_app.add_typer(resources.features_releases, name="releases")
features_app.add_typer(resources.features_tables, name="tables")
features_app.add_typer(resources.features_models, name="models")
features_app.add_typer(resources.features_semi_sensitive_models, name="semi-sensitive-models")
labels_app.command("release")(client_cli.labels_release)
labels_app.command("preview")(client_cli.labels_preview)
features_app.command("upload")(client_cli.features_upload)
features_app.command("train")(client_cli.features_train)
app.add_typer(audit_app, name="audit")


if __name__ == "__main__":
    app()
