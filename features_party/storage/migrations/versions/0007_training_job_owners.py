"""Training jobs record the process that runs them and its lease, so that a restart fails only the
jobs whose owner is gone, never those another live process is running.

Revision ID: f0007
Revises: f0006
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "f0007"
down_revision = "f0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(120), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
