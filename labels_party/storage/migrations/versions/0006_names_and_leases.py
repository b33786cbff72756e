"""Dataset names are unique within a tenant; a charged release records its owner and lease.

Existing duplicate names get a " (2)", " (3)", … suffix in creation order, so the constraint can be
added without losing a dataset.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    datasets = sa.table(
        "datasets",
        sa.column("id", sa.String),
        sa.column("tenant_id", sa.String),
        sa.column("name", sa.String),
        sa.column("created_at", sa.DateTime),
    )
    conn = op.get_bind()
    seen: dict[tuple[str, str], int] = {}
    rows = conn.execute(sa.select(datasets).order_by(datasets.c.created_at, datasets.c.id)).all()
    taken = {(r.tenant_id, r.name) for r in rows}
    for row in rows:
        key = (row.tenant_id, row.name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            continue
        suffix = seen[key]
        while (row.tenant_id, f"{row.name} ({suffix})") in taken:
            suffix += 1
        new_name = f"{row.name[:190]} ({suffix})"
        taken.add((row.tenant_id, new_name))
        conn.execute(datasets.update().where(datasets.c.id == row.id).values(name=new_name))
    with op.batch_alter_table("datasets") as batch:
        batch.create_unique_constraint("uq_datasets_tenant_name", ["tenant_id", "name"])
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("owner", sa.String(120), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_constraint("uq_datasets_tenant_name", type_="unique")
