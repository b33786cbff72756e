"""Feature tables.

Revision ID: f0003
Revises: f0002
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "f0003"
down_revision = "f0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "feature_tables",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", "name"),
    )
    op.create_index("ix_feature_tables_tenant_id", "feature_tables", ["tenant_id"])


def downgrade() -> None:
    op.drop_table("feature_tables")
