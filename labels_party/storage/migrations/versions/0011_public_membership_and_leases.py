"""A universe declares its examples' users (membership never depends on label rows), and models
get owners and leases like releases (one path for every charged job).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("universe_users", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("semi_sensitive_models") as batch:
        batch.add_column(sa.Column("owner", sa.String(120), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("semi_sensitive_models") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("universe_users")
