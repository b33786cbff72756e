"""Per-example spend stored column-wise in 256 shards per tenant (replaces one row per example).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from collections import defaultdict

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    shards = op.create_table(
        "example_spend_shards",
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True),
        sa.Column("keys", sa.LargeBinary(), nullable=False),
        sa.Column("spent", sa.LargeBinary(), nullable=False),
    )
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # the arrays are random-looking integers: skip TOAST compression, store out of line
        op.execute(
            "ALTER TABLE example_spend_shards "
            "ALTER COLUMN keys SET STORAGE EXTERNAL, ALTER COLUMN spent SET STORAGE EXTERNAL"
        )
    # carry existing per-example rows over into shards
    rows = bind.execute(sa.text("SELECT tenant_id, example_key, spent_micro FROM example_spend")).all()
    by_tenant: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tenant_id, key, spent in rows:
        by_tenant[tenant_id].append((int(key), int(spent)))
    for tenant_id, pairs in by_tenant.items():
        keys = np.array([k for k, _ in pairs], dtype=np.int64)
        spent = np.array([v for _, v in pairs], dtype=np.int64)
        order = np.argsort(keys.view(np.uint64), kind="stable")
        keys, spent = keys[order], spent[order]
        shard = (keys.view(np.uint64) >> np.uint64(56)).astype(np.int64)
        bounds = np.searchsorted(shard, np.arange(257))
        op.bulk_insert(
            shards,
            [
                {
                    "tenant_id": tenant_id,
                    "shard": s,
                    "keys": keys[bounds[s] : bounds[s + 1]].astype("<i8").tobytes(),
                    "spent": spent[bounds[s] : bounds[s + 1]].astype("<i8").tobytes(),
                }
                for s in range(256)
                if bounds[s + 1] > bounds[s]
            ],
        )
    op.drop_table("example_spend")


def downgrade() -> None:
    op.create_table(
        "example_spend",
        sa.Column("tenant_id", sa.String(36), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("example_key", sa.BigInteger(), primary_key=True),
        sa.Column("spent_micro", sa.BigInteger(), nullable=False),
    )
    bind = op.get_bind()
    for tenant_id, keys, spent in bind.execute(
        sa.text("SELECT tenant_id, keys, spent FROM example_spend_shards")
    ).all():
        k = np.frombuffer(keys, dtype="<i8")
        v = np.frombuffer(spent, dtype="<i8")
        bind.execute(
            sa.text("INSERT INTO example_spend VALUES (:t, :k, :v)"),
            [{"t": tenant_id, "k": int(a), "v": int(b)} for a, b in zip(k, v, strict=True)],
        )
    op.drop_table("example_spend_shards")
