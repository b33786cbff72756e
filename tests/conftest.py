"""Shared fixtures: every database test runs on SQLite and on a real PostgreSQL started here."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from labels_party.storage.db import make_engine, migrate, sqlite_url
from tests.support import postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    if not postgres.available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL (initdb, pg_ctl) is required in CI")
        pytest.skip("PostgreSQL binaries not found; install postgresql to run these tests")
    with postgres.cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database: a SQLite file, or a new database in the session's cluster."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        yield url
        return
    server = request.getfixturevalue("postgres_server")
    name = "t_" + uuid.uuid4().hex[:12]
    admin = create_engine(
        server.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = server.rsplit("/", 1)[0] + "/" + name
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    eng = make_engine(database_url)
    yield eng
    eng.dispose()
