"""Charged jobs keep the request they were made with, resolved (defaults applied; example_ids as a
digest): a retry with the same Idempotency-Key is compared with it field by field, so one that leaves
out a defaulted field is a replay, and one that differs is told which fields differ. Rows made before
keep none (their retries are compared by digest, as before).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLES = ("releases", "semi_sensitive_models")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("request", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("request")
