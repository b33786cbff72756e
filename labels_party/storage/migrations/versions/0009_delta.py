"""Charges may carry δ: a tenant-wide δ budget and spend, and the δ of each ledger entry.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("delta_budget_atto", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("delta_spent_atto", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("delta_atto", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # δ already spent cannot be represented before 0009: refuse rather than forget it.
    spent = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM tenants WHERE delta_spent_atto > 0")).scalar()
    if spent:
        raise RuntimeError(f"{spent} tenants have spent δ; downgrading would forget it")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("delta_atto")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("delta_spent_atto")
        batch.drop_column("delta_budget_atto")
