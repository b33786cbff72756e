"""Feature-aware priors: a tenant's pricing grants (which model prices which sender's examples) and the
record of every answered pricing request.

Revision ID: f0010
Revises: f0009
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "f0010"
down_revision = "f0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pricing_grants",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("sender_id", sa.String(200), nullable=False),
        sa.Column("model_id", sa.String(36), sa.ForeignKey("training_jobs.id"), nullable=False),
        sa.Column("max_groups", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", "sender_id", name="uq_pricing_grants_tenant_sender"),
    )
    op.create_table(
        "pricings",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("sender_id", sa.String(200), nullable=False),
        sa.Column("sender_key_id", sa.String(80), nullable=False),
        sa.Column("request_id", sa.String(36), nullable=False),
        sa.Column("model_id", sa.String(36), nullable=False),
        sa.Column("examples", sa.BigInteger(), nullable=False),
        sa.Column("priced", sa.BigInteger(), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=False),
        sa.Column("support_k", sa.Integer(), nullable=False),
        sa.Column("answer_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", "request_id", name="uq_pricings_tenant_request"),
    )
    for table in ("pricing_grants", "pricings"):
        op.create_index(f"ix_{table}_tenant_id", table, ["tenant_id"])


def downgrade() -> None:
    for table in ("pricing_grants", "pricings"):
        op.drop_index(f"ix_{table}_tenant_id", table)
    op.drop_table("pricings")
    op.drop_table("pricing_grants")
