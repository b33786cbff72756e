"""``labeldp labels|features tenant|key …``: tenants and their API keys, one transaction on the party's
database each (migrated first; a ``ValueError`` inside is exit 2 with nothing committed). A new API key
is shown once — or written to a 0600 file for deployments — and stored only as a hash."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.terminal import error, number, print_json, print_table

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

labels_tenants = typer.Typer(help="Labels-party tenants and API keys.", no_args_is_help=True)
features_tenants = typer.Typer(help="Features-party tenants and API keys.", no_args_is_help=True)

KeyFile = Annotated[
    Path | None,
    typer.Option(help="Write the API key to this file (mode 0600) instead of printing it (for deployments)."),
]
ExistOk = Annotated[
    bool,
    typer.Option("--exist-ok", help="An existing tenant of this name is fine (its key is not shown again)."),
]


# --- one transaction on a party's database ------------------------------------------------------------


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
        error(str(exc))
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


def _labels_models() -> tuple[Any, Any]:
    from labels_party.storage.orm import ApiKey, Tenant

    return Tenant, ApiKey


def _features_models() -> tuple[Any, Any]:
    from features_party.storage.orm import ApiKey, Tenant

    return Tenant, ApiKey


def _tenant_exists(session: Session, tenant_model: Any, name: str) -> bool:
    from sqlalchemy import select

    return session.execute(select(tenant_model).where(tenant_model.name == name)).first() is not None


def _tenant_id(session: Session, tenant_model: Any, name: str) -> str:
    from sqlalchemy import select

    tenant = session.execute(select(tenant_model).where(tenant_model.name == name)).scalar_one_or_none()
    if tenant is None:
        raise ValueError(f"no tenant named {name!r}")
    return str(tenant.id)


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


# --- tenants ------------------------------------------------------------------------------------------


@labels_tenants.command("create")
def labels_tenant_create(
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
    from labels_party.budget.epsilon import to_atto_floor, to_micro_floor
    from labels_party.storage.orm import Tenant
    from labels_party.tenants import create_tenant

    with _labels_transaction() as session:
        if exist_ok and _tenant_exists(session, Tenant, name):
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


@labels_tenants.command("set-budget")
def labels_tenant_set_budget(
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
        tenant_id = _tenant_id(session, Tenant, name)
        why = note or "set by labeldp CLI"
        if epsilon_per_example is not None:
            budget = to_micro_floor(epsilon_per_example, name="epsilon_per_example")
            set_budget(session, tenant_id, budget, api_key_id=None, note=why)
            typer.echo(f"tenant {name}: per-example budget is now {number(epsilon_per_example)}")
        if epsilon_per_user is not None or no_per_user_limit:
            per_user = (
                None
                if no_per_user_limit
                else to_micro_floor(epsilon_per_user or 0.0, name="epsilon_per_user")
            )
            set_user_budget(session, tenant_id, per_user, api_key_id=None, note=why)
            shown = "not limited" if per_user is None else number(epsilon_per_user or 0)
            typer.echo(f"tenant {name}: per-user budget is now {shown}")
        if delta is not None:
            set_delta_budget(
                session, tenant_id, to_atto_floor(delta, name="delta"), api_key_id=None, note=why
            )
            typer.echo(f"tenant {name}: δ budget is now {number(delta)}")


@features_tenants.command("create")
def features_tenant_create(name: str, key_file: KeyFile = None, exist_ok: ExistOk = False) -> None:
    """Create a features-party tenant and print its bearer API key (shown once)."""
    from features_party.storage.orm import Tenant
    from features_party.tenants import create_tenant

    with _features_transaction() as session:
        if exist_ok and _tenant_exists(session, Tenant, name):
            typer.echo(f"tenant {name} exists; its key is not shown again")
            return
        new = create_tenant(session, name)
    _hand_over_key(f"tenant {new.tenant_id}", new.api_key, key_file)


# --- API keys (the same four commands for each party) -------------------------------------------------


def _key_commands(
    transaction: Callable[[], AbstractContextManager[Session]], models: Callable[[], tuple[Any, Any]]
) -> typer.Typer:
    """``key create|list|revoke|rotate`` for one party's tenants (run where its database is)."""
    keys = typer.Typer(help="A tenant's API keys: create, list, revoke, rotate.", no_args_is_help=True)

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
            print_json(rows)
            return
        shown = [{**r, "prefix": f"{r['prefix']}…", "revoked_at": r["revoked_at"] or "active"} for r in rows]
        print_table(shown, ("id", "prefix", "created_at", "revoked_at"))

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

    return keys


labels_keys = _key_commands(_labels_transaction, _labels_models)
features_keys = _key_commands(_features_transaction, _features_models)
