"""Migrations carry data forward (per-example spend rows, revision 0002, become spend shards, 0003), and
every migration goes down as well as up: head to base and back gives the same schema (an operator
rolling back a release of labeldp needs this)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, inspect, text

from labels_party.budget.ledger_keys import example_keys
from labels_party.budget.summaries import spend_of_tenant
from labels_party.storage.db import MIGRATIONS, make_engine, migrate, session_factory, sqlite_url
from tests.support import postgres
from tests.support.ledger import SEGMENTS

pytestmark = pytest.mark.postgresql


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path)
    return postgres.create_database(request.getfixturevalue("postgres_server"), prefix="m")


def test_spend_rows_become_shards(empty_database: str) -> None:
    engine = make_engine(empty_database)
    migrate(engine, "0002")
    keys = example_keys(f"ex-{i}" for i in range(5000))
    spent = (np.arange(keys.size) % 7 + 1) * 100_000
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO tenants VALUES ('t1', 'acme', 1000000, CURRENT_TIMESTAMP)"),
        )
        conn.execute(
            text("INSERT INTO example_spend VALUES ('t1', :k, :v)"),
            [{"k": int(k), "v": int(v)} for k, v in zip(keys, spent, strict=True)],
        )
    migrate(engine)
    with session_factory(engine)() as s:
        got_keys, got_spent = spend_of_tenant(s, "t1", SEGMENTS)
    engine.dispose()
    assert dict(zip(got_keys.tolist(), got_spent.tolist(), strict=True)) == dict(
        zip(keys.tolist(), spent.tolist(), strict=True)
    )


def _schema(engine: Engine) -> dict[str, list[tuple[str, str, bool]]]:
    seen = inspect(engine)
    return {
        table: sorted((c["name"], str(c["type"]), bool(c["nullable"])) for c in seen.get_columns(table))
        for table in sorted(seen.get_table_names())
    }


def _downgrade(engine: Engine, revision: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_head_to_base_and_back_gives_the_same_schema(engine: Engine) -> None:
    head = _schema(engine)
    assert "releases" in head and any(c[0] == "request" for c in head["releases"])
    _downgrade(engine, "0014")  # the last step alone: its column goes
    assert not any(c[0] == "request" for c in _schema(engine)["releases"])
    _downgrade(engine, "base")
    assert set(_schema(engine)) <= {"alembic_version"}
    migrate(engine)
    assert _schema(engine) == head
