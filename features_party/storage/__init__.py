"""SQL storage of the features party (SQLAlchemy 2 + Alembic)."""
