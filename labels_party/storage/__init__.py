"""SQL storage of the labels party (SQLAlchemy 2 + Alembic)."""
