"""Database engines and migrations shared by both parties: SQLite (WAL) by default, PostgreSQL via
psycopg 3.

Writers must not interleave: on SQLite a write transaction begins with ``BEGIN IMMEDIATE`` (one writer
at a time, others wait up to the busy timeout); on PostgreSQL the code takes row locks explicitly.
Readers must not wait for writers: a service's ``Sessions`` open reads (``sessions()``) on a second,
query-only SQLite engine whose deferred transactions read a WAL snapshot — never queued behind the
writer's lock — and writes (``sessions.begin()``) on the writing engine. On PostgreSQL (MVCC) both are
one engine.

A request's short reads (its API key, a row, a page) run where they cost least: ``Sessions.read`` runs
them on the event loop on SQLite — a snapshot of a local file, tens of microseconds, never waiting
for a writer — and in the thread pool on PostgreSQL, where each is a network round trip the loop must
not wait for. Under 16 connections a hop to the thread pool and back cost the server more CPU than the
reads themselves (BENCHMARKS.md, "The data path against the machine").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread
from alembic import command
from alembic.config import Config
from sqlalchemy import DateTime, Dialect, Engine, TypeDecorator, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.errors import not_found
from labeldp.common.inputs import is_uuid

R = TypeVar("R")
SQLITE_BUSY_TIMEOUT_MS = 60_000
SQLITE_POOL_SIZE = 40


def sqlite_url(data_dir: Path, name: str) -> str:
    return f"sqlite:///{(data_dir / name).resolve()}"


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    """An engine for ``url``. On SQLite, ``read_only`` gives the readers' engine: deferred transactions
    (a WAL snapshot, no lock) on ``query_only`` connections, which refuse any write."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            # as many kept connections as request threads (AnyIO's 40): a connection opened beyond the
            # pool is closed when returned, and the next one reconnects and runs the PRAGMAs again
            pool_size=SQLITE_POOL_SIZE,
            max_overflow=SQLITE_POOL_SIZE,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            if not read_only:
                cur.execute("PRAGMA journal_mode=WAL")  # persistent: the writer sets it once
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            if read_only:
                cur.execute("PRAGMA query_only=ON")
            cur.close()

        begin = "BEGIN" if read_only else "BEGIN IMMEDIATE"

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # straight to the driver: one statement, without SQLAlchemy's execution machinery around it
            # (a tenth of a short read's time went there)
            conn.connection.driver_connection.execute(begin).close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url, pool_size=10, max_overflow=70, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


class Sessions(sessionmaker[Session]):
    """A service's sessions: ``sessions()`` reads — on SQLite on the query-only engine, a snapshot that
    never waits for a writer (and a write there fails loudly) — and ``sessions.begin()`` writes, on the
    writing engine (``BEGIN IMMEDIATE``: one writer at a time)."""

    def __init__(self, writer: Engine, reader: Engine) -> None:
        super().__init__(reader, expire_on_commit=False)
        self.writer, self.reader = writer, reader
        self._writes = sessionmaker(writer, expire_on_commit=False)
        self.local = writer.dialect.name == "sqlite"

    async def read(self, work: Callable[[], R]) -> R:
        """Run a request's short read: on the event loop on SQLite, in the thread pool otherwise. Only
        for work bounded by a page or a row: anything that may take long goes to the thread pool."""
        if self.local:
            return work()
        return await anyio.to_thread.run_sync(work)

    def begin(self) -> AbstractContextManager[Session]:
        return self._writes.begin()

    def dispose(self) -> None:
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()


def service_sessions(url: str) -> Sessions:
    """Reads and writes of one service on ``url`` (two SQLite engines, one PostgreSQL engine)."""
    writer = make_engine(url)
    return Sessions(writer, make_engine(url, read_only=True) if url.startswith("sqlite") else writer)


def migrate(engine: Engine, migrations: Path, revision: str = "head") -> None:
    """Bring the schema to an Alembic revision, by default the newest (idempotent)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # processes starting together migrate one at a time
            # (on SQLite the transaction's BEGIN IMMEDIATE already serializes them)
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_lock_key(migrations.parent.parent.name)})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for one party's migrations."""
    return int.from_bytes(hashlib.sha256(f"labeldp-migrate:{name}".encode()).digest()[:8], "big", signed=True)


class _Owned(Protocol):
    tenant_id: Any


Row = TypeVar("Row", bound=_Owned)


def owned(
    session: Session, model: type[Row], ident: object, tenant_id: str, what: str, *, lock: bool = False
) -> Row:
    """A tenant's row by primary key; another tenant's row is indistinguishable from a missing one
    (404 either way). ``lock`` holds the row's write lock on PostgreSQL until the transaction ends.
    Every id labeldp issues is a UUID: anything else is answered 404 without a query."""
    if not is_uuid(ident):
        raise not_found(what, ident)
    row = session.get(model, ident, with_for_update=lock and session.get_bind().dialect.name == "postgresql")
    if row is None or row.tenant_id != tenant_id:
        raise not_found(what, ident)
    return row


def utcnow() -> datetime:
    """Now, timezone-aware (every timestamp both parties store is UTC)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend: SQLite stores no zone and hands back naive
    datetimes, which this reads as the UTC they were written in."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value
