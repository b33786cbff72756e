"""Training jobs and models.

Revision ID: f0004
Revises: f0003
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "f0004"
down_revision = "f0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("release_id", sa.String(64), nullable=False),
        sa.Column("feature_table", sa.String(200), nullable=False),
        sa.Column("feature_table_version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("debias", sa.String(16), nullable=False),
        sa.Column("loss", sa.String(16), nullable=False),
        sa.Column("validation_fraction", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_models_tenant_id", "models", ["tenant_id"])


def downgrade() -> None:
    op.drop_table("models")
