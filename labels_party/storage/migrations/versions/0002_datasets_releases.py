"""Recipients, datasets and releases.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "recipients",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("tenant_id", "name"),
    )
    op.create_index("ix_recipients_tenant_id", "recipients", ["tenant_id"])
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("labels_version", sa.Integer(), nullable=False),
        sa.Column("label_count", sa.BigInteger(), nullable=False),
        sa.Column("universe_version", sa.Integer(), nullable=False),
        sa.Column("universe_count", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_datasets_tenant_id", "datasets", ["tenant_id"])
    op.create_table(
        "releases",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("dataset_id", sa.String(36), sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("recipient_id", sa.String(36), sa.ForeignKey("recipients.id"), nullable=False),
        sa.Column("epsilon_micro", sa.BigInteger(), nullable=False),
        sa.Column("epsilon_prior", sa.Float(), nullable=False),
        sa.Column("loss", sa.String(16), nullable=False),
        sa.Column("examples", sa.BigInteger(), nullable=False),
        sa.Column("api_key_id", sa.String(36), nullable=True),
        sa.Column("mechanism", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("tenant_id", "idempotency_key"),
    )
    op.create_index("ix_releases_tenant_id", "releases", ["tenant_id"])
    op.create_index("ix_releases_dataset_id", "releases", ["dataset_id"])


def downgrade() -> None:
    op.drop_table("releases")
    op.drop_table("datasets")
    op.drop_table("recipients")
