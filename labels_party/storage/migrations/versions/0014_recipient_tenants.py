"""A recipient may name its tenant at the features party (``recipient_tenant``), which every message
to it then names, signed: the features party files it for that tenant alone, whoever else pinned this
party's key. Existing recipients name none (their messages are filed as before).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recipients") as batch:
        batch.add_column(sa.Column("recipient_tenant", sa.String(36), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("recipients") as batch:
        batch.drop_column("recipient_tenant")
