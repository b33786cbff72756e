"""Training with semi-sensitive features: the features party's non-sensitive rows per dataset, and
the models whose (ε₂, δ) charge they record.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("non_sensitive_version", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "semi_sensitive_models",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("dataset_id", sa.String(36), sa.ForeignKey("datasets.id"), nullable=False, index=True),
        sa.Column("label_release_id", sa.String(36), sa.ForeignKey("releases.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("examples", sa.BigInteger(), nullable=False),
        sa.Column("epsilon_dpsgd_micro", sa.BigInteger(), nullable=False),
        sa.Column("delta_atto", sa.BigInteger(), nullable=False),
        sa.Column("noise_multiplier", sa.Float(), nullable=False),
        sa.Column("sampling_rate", sa.Float(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("clip_norm", sa.Float(), nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=True),
        sa.Column("api_key_id", sa.String(36), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name="uq_models_tenant_key"),
    )


def downgrade() -> None:
    op.drop_table("semi_sensitive_models")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("non_sensitive_version")
