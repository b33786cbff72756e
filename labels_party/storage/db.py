"""The labels party's database: the shared engine helpers plus its own migrations."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from labeldp.common import db
from labeldp.common.db import make_engine, session_factory

MIGRATIONS = Path(__file__).resolve().parent / "migrations"

__all__ = ["MIGRATIONS", "make_engine", "migrate", "session_factory", "sqlite_url"]


def sqlite_url(data_dir: Path) -> str:
    return db.sqlite_url(data_dir, "labels.db")


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the labels party's schema to an Alembic revision (idempotent)."""
    db.migrate(engine, MIGRATIONS, revision)
