"""User-level privacy: per-user spend, a per-user budget, and what user-level releases state.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_spend_shards",
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True),
        sa.Column("keys", sa.LargeBinary(), nullable=False),
        sa.Column("spent", sa.LargeBinary(), nullable=False),
    )
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("user_budget_micro", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("users", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("user_epsilon_micro", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("privacy_unit", sa.String(16), nullable=False, server_default="example"))
        batch.add_column(sa.Column("epsilon_user_micro", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("contribution_bound", sa.String(16), nullable=True))
        batch.add_column(sa.Column("users", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("examples_capped", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        for column in (
            "examples_capped",
            "users",
            "contribution_bound",
            "epsilon_user_micro",
            "privacy_unit",
        ):
            batch.drop_column(column)
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("user_epsilon_micro")
        batch.drop_column("users")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("user_budget_micro")
    op.drop_table("user_spend_shards")
