"""Models trained with semi-sensitive features, received and verified like releases; the feature
columns a table declares non-sensitive.

Revision ID: f0006
Revises: f0005
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "f0006"
down_revision = "f0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("feature_tables") as batch:
        batch.add_column(sa.Column("non_sensitive", sa.JSON(), nullable=False, server_default="[]"))
    op.create_table(
        "received_models",
        sa.Column("model_id", sa.String(64), primary_key=True),
        sa.Column("sender_id", sa.String(200), nullable=False),
        sa.Column("sender_key_id", sa.String(80), nullable=False),
        sa.Column("message_sha256", sa.String(64), nullable=False),
        sa.Column("label_release_id", sa.String(64), nullable=False),
        sa.Column("guarantee", sa.JSON(), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("received_models")
    with op.batch_alter_table("feature_tables") as batch:
        batch.drop_column("non_sensitive")
