"""Tenants, API keys and the privacy-budget ledger.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("budget_micro", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("release_id", sa.String(36), nullable=True),
        sa.Column("epsilon_micro", sa.BigInteger(), nullable=False),
        sa.Column("examples", sa.BigInteger(), nullable=False),
        sa.Column("api_key_id", sa.String(36), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ledger_entries_tenant_id", "ledger_entries", ["tenant_id"])
    op.create_index("ix_ledger_entries_release_id", "ledger_entries", ["release_id"])
    op.create_index("ix_ledger_tenant_created", "ledger_entries", ["tenant_id", "created_at"])
    op.create_table(
        "example_spend",
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("example_key", sa.BigInteger(), primary_key=True),
        sa.Column("spent_micro", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("example_spend")
    op.drop_index("ix_ledger_tenant_created", "ledger_entries")
    op.drop_index("ix_ledger_entries_release_id", "ledger_entries")
    op.drop_index("ix_ledger_entries_tenant_id", "ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_index("ix_api_keys_tenant_id", "api_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")
