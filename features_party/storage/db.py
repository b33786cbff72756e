"""The features party's database: the shared engine helpers plus its own migrations."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from labeldp.common import db
from labeldp.common.db import make_engine, session_factory

MIGRATIONS = Path(__file__).resolve().parent / "migrations"

__all__ = ["MIGRATIONS", "make_engine", "migrate", "session_factory"]


def migrate(engine: Engine, revision: str = "head") -> None:
    db.migrate(engine, MIGRATIONS, revision)
