"""Shared fixtures: every database test runs on SQLite and on a real PostgreSQL started here."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import threadpoolctl
from sqlalchemy import Engine

from labels_party.config import LabelsSettings
from labels_party.storage.db import make_engine, migrate, sqlite_url
from tests.support import postgres
from tests.support.labels_api import Api
from tests.support.servers import labels_server_thread

if os.environ.get("OMP_NUM_THREADS") == "1":  # as tests/__init__.py set it, unless you chose otherwise
    threadpoolctl.threadpool_limits(1)  # any pool a plugin loaded before (OpenMP's: in this thread)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    if not postgres.available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL (initdb, pg_ctl) is required in CI")
        pytest.skip("PostgreSQL binaries not found; install postgresql to run these tests")
    with postgres.cluster() as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to head once per test worker: each test gets a copy of it."""
    folder = tmp_path_factory.mktemp("migrated")
    engine = make_engine(sqlite_url(folder))
    migrate(engine)
    engine.dispose()
    return folder / "labels.db"


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server: str) -> str:
    """A PostgreSQL database migrated to head once per test worker, the template each test's copies
    (no connection to it stays open: ``CREATE DATABASE … TEMPLATE`` needs none)."""
    url = postgres.create_database(postgres_server, "migrated")
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    return url.rsplit("/", 1)[1]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database at the schema's head: a SQLite file, or a new database in the session's
    cluster — each a copy of one migrated per test worker (the same schema as migrating each, without
    running every migration for every test; tests/labels_party/test_migrations.py runs them)."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        with (
            contextlib.closing(sqlite3.connect(request.getfixturevalue("migrated_sqlite"))) as source,
            contextlib.closing(sqlite3.connect(tmp_path / "labels.db")) as copy,
        ):
            source.backup(copy)
        yield url
        return
    server = request.getfixturevalue("postgres_server")
    url = postgres.create_database(server, template=request.getfixturevalue("migrated_postgres"))
    yield url
    postgres.drop_database(server, url)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    eng = make_engine(database_url)
    yield eng
    eng.dispose()


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    """A labels party over real HTTP (uvicorn on loopback) on each database backend."""
    settings = LabelsSettings(data_dir=tmp_path / "data", database_url=database_url)
    with labels_server_thread(settings) as base:
        yield Api(base, database_url, settings.data_dir)


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests a measured run found slow (tests/slow_tests.txt), so that ``make
    check`` stays the inner loop as the suite grows; ``make test`` runs them all the same."""
    listed = {
        line
        for line in SLOW_TESTS.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    }
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
