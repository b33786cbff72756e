"""A received model may come from DP-SGD alone, without a label release.

Revision ID: f0009
Revises: f0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "f0009"
down_revision = "f0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("received_models") as batch:
        batch.alter_column("label_release_id", existing_type=sa.String(64), nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("received_models") as batch:
        batch.alter_column("label_release_id", existing_type=sa.String(64), nullable=False)
