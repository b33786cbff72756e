"""Recipients' transport details and the delivery log.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recipients") as batch:
        batch.add_column(sa.Column("grpc_address", sa.String(300), nullable=True))
        batch.add_column(sa.Column("tls_ca_pem", sa.Text(), nullable=True))
        batch.add_column(sa.Column("fingerprint", sa.String(80), nullable=True))
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("release_id", sa.String(36), sa.ForeignKey("releases.id"), nullable=False),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("recipient_id", sa.String(36), sa.ForeignKey("recipients.id"), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("receipt_sha256", sa.String(64), nullable=True),
        sa.Column("wire_bytes", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_deliveries_release_id", "deliveries", ["release_id"])
    op.create_index("ix_deliveries_tenant_id", "deliveries", ["tenant_id"])


def downgrade() -> None:
    op.drop_table("deliveries")
    with op.batch_alter_table("recipients") as batch:
        batch.drop_column("fingerprint")
        batch.drop_column("tls_ca_pem")
        batch.drop_column("grpc_address")
