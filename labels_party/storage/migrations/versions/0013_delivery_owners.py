"""A delivery is recorded before the recipient is dialled and completed after, so it names the process
that sends it: a row still ``sending`` whose owner is gone was interrupted (the recipient may hold the
release), which recovery records.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(sa.Column("owner", sa.String(120), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("owner")
