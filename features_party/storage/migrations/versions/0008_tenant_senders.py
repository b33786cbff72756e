"""Senders, and what they deliver, belong to the tenant that pinned them: a sender id is unique per
tenant (two tenants may each pin their own key under one sender id), and received releases and models
carry the tenant whose pin their signature verified under.

Existing rows: pins never recorded who made them. With exactly one tenant, that tenant is the only
one that could have pinned through the API, so every pin — and every release or model whose sender it
pinned — becomes that tenant's. Otherwise no tenant can be credited: the pins and what they delivered
keep ``tenant_id`` NULL, which the service reads as "every tenant" (what they were before), until an
operator assigns them (``UPDATE senders SET tenant_id = …``; received rows the same way).

Revision ID: f0008
Revises: f0007
Create Date: 2026-12-02
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "f0008"
down_revision = "f0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    tenants = conn.execute(sa.text("SELECT id FROM tenants")).scalars().all()
    owner = tenants[0] if len(tenants) == 1 else None
    senders = conn.execute(sa.text("SELECT id FROM senders")).scalars().all()
    # the primary key changes (sender id -> a pin of its own): a new table, then the rows copied in SQL
    op.create_table(
        "sender_pins",
        sa.Column("pin_id", sa.String(36), nullable=False),
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), nullable=True),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("key_id", sa.String(80), nullable=False),
        sa.Column("public_key_pem", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("pin_id", name="pk_sender_pins"),
        sa.UniqueConstraint("tenant_id", "id", name="uq_senders_tenant_id_id"),
    )
    for sender_id in senders:
        conn.execute(
            sa.text(
                "INSERT INTO sender_pins (pin_id, tenant_id, id, key_id, public_key_pem, created_at) "
                "SELECT :pin, :owner, id, key_id, public_key_pem, created_at FROM senders WHERE id = :id"
            ),
            {"pin": str(uuid.uuid4()), "owner": owner, "id": sender_id},
        )
    op.drop_table("senders")
    op.rename_table("sender_pins", "senders")
    op.create_index("ix_senders_tenant_id", "senders", ["tenant_id"])
    op.create_index("ix_senders_id", "senders", ["id"])
    for table in ("received_releases", "received_models"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("tenant_id", sa.String(36), nullable=True))
            batch.create_foreign_key(f"fk_{table}_tenant_id", "tenants", ["tenant_id"], ["id"])
        op.create_index(f"ix_{table}_tenant_id", table, ["tenant_id"])
        if owner is not None:  # what a pin of the one tenant delivered is that tenant's
            conn.execute(
                sa.text(
                    f"UPDATE {table} SET tenant_id = :owner "  # a fixed table name, never input
                    "WHERE sender_id IN (SELECT id FROM senders WHERE tenant_id = :owner)"
                ),
                {"owner": owner},
            )


def downgrade() -> None:
    for table in ("received_models", "received_releases"):
        op.drop_index(f"ix_{table}_tenant_id", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_tenant_id", type_="foreignkey")
            batch.drop_column("tenant_id")
    conn = op.get_bind()
    pins = conn.execute(sa.text("SELECT pin_id, id FROM senders ORDER BY created_at, pin_id")).all()
    first: dict[str, str] = {}
    for pin_id, sender_id in pins:  # one pin per sender id: the earliest
        first.setdefault(sender_id, pin_id)
    op.drop_index("ix_senders_id", table_name="senders")
    op.drop_index("ix_senders_tenant_id", table_name="senders")
    op.rename_table("senders", "sender_pins")
    op.create_table(
        "senders",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("key_id", sa.String(80), nullable=False),
        sa.Column("public_key_pem", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    for pin_id in first.values():
        conn.execute(
            sa.text(
                "INSERT INTO senders (id, key_id, public_key_pem, created_at) "
                "SELECT id, key_id, public_key_pem, created_at FROM sender_pins WHERE pin_id = :pin"
            ),
            {"pin": pin_id},
        )
    op.drop_table("sender_pins")
