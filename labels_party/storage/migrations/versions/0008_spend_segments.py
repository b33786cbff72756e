"""Spend shards may live in segment files; the tenant's ledger version orders partitioned charges.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SHARD_TABLES = ("example_spend_shards", "user_spend_shards")


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("ledger_version", sa.BigInteger(), nullable=False, server_default="0"))
    for table in SHARD_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("segment", sa.String(120), nullable=True))
            batch.add_column(sa.Column("segment_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    # Shards held in segment files cannot be represented before 0008: refuse rather than lose spend.
    bind = op.get_bind()
    for table in SHARD_TABLES:
        held = bind.execute(sa.text(f"SELECT COUNT(*) FROM {table} WHERE segment IS NOT NULL")).scalar()
        if held:
            raise RuntimeError(f"{held} rows of {table} live in segment files; downgrading would lose spend")
    for table in SHARD_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("segment_sha256")
            batch.drop_column("segment")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("ledger_version")
