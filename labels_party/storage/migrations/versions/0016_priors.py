"""Priors from the features party for feature-aware releases: the stored priors of a dataset, and the
priors a release used.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "priors",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("dataset_id", sa.String(36), sa.ForeignKey("datasets.id"), nullable=False),
        sa.Column("recipient_id", sa.String(36), sa.ForeignKey("recipients.id"), nullable=False),
        sa.Column("features_priors_id", sa.String(36), nullable=False),
        sa.Column("request_id", sa.String(36), nullable=False),
        sa.Column("model_id", sa.String(36), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("loss", sa.String(16), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=False),
        sa.Column("max_groups", sa.Integer(), nullable=False),
        sa.Column("support_k", sa.Integer(), nullable=False),
        sa.Column("examples_requested", sa.BigInteger(), nullable=False),
        sa.Column("examples_priced", sa.BigInteger(), nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_priors_tenant_id", "priors", ["tenant_id"])
    op.create_index("ix_priors_dataset_id", "priors", ["dataset_id"])
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("priors_id", sa.String(36), nullable=True))
        batch.create_index("ix_releases_priors_id", ["priors_id"])


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_index("ix_releases_priors_id")
        batch.drop_column("priors_id")
    op.drop_index("ix_priors_dataset_id", "priors")
    op.drop_index("ix_priors_tenant_id", "priors")
    op.drop_table("priors")
