"""Releases store their mechanism as a PublishedMechanism; defaulted/universe facts get columns.

Earlier releases kept a hand-built dict (``epsilon_randomize``, ``bin_edges`` or ``classes``, …) with
two facts about the example set mixed in. This converts each stored dict into the published form —
the map from support points to bins is rebuilt from the bin intervals (RR-on-Bins) or the reported
classes (RR-Top-k) — and moves the two facts into their own columns. Self-contained on purpose: a
migration must not depend on application code that keeps changing.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

import math
from fractions import Fraction
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _published(old: dict[str, Any], loss: str, epsilon_micro: int) -> dict[str, Any]:
    kind = old["kind"]
    prior = [float(p) for p in old["prior"]]
    if kind == "rr_top_k":
        classes = [int(c) for c in old["classes"]]
        support = [float(c) for c in range(int(old["num_classes"]))]
        position = {c: j for j, c in enumerate(classes)}
        support_bins = [position.get(c, -1) for c in range(len(support))]
        bin_values = [float(c) for c in classes]
    else:
        support = [float(v) for v in old["support"]]
        edges = [(float(lo), float(hi)) for lo, hi in old["bin_edges"]]
        support_bins = [next(j for j, (lo, hi) in enumerate(edges) if lo <= v <= hi) for v in support]
        bin_values = [float(v) for v in old["bin_values"]]
    eps_prior, eps_randomize = float(old["epsilon_prior"]), float(old["epsilon_randomize"])
    total = epsilon_micro / 1_000_000
    if Fraction(eps_prior) + Fraction(eps_randomize) > Fraction(total):  # what was actually spent
        total = float(Fraction(eps_prior) + Fraction(eps_randomize))
        if Fraction(total) < Fraction(eps_prior) + Fraction(eps_randomize):
            total = math.nextafter(total, math.inf)
    return {
        "kind": kind,
        "loss": loss,
        "epsilon": total,
        "epsilon_prior": eps_prior,
        "epsilon_randomize": eps_randomize,
        "implemented_epsilon": float(old["implemented_epsilon"]),
        "support": support,
        "prior": prior,
        "support_bins": support_bins,
        "bin_values": bin_values,
        "privacy_unit": "example",
        "contribution_bound": None,
    }


def upgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.add_column(sa.Column("examples_defaulted", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("universe_declared", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    releases = sa.table(
        "releases",
        sa.column("id", sa.String),
        sa.column("loss", sa.String),
        sa.column("epsilon_micro", sa.BigInteger),
        sa.column("mechanism", sa.JSON),
        sa.column("examples_defaulted", sa.BigInteger),
        sa.column("universe_declared", sa.Boolean),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(releases).where(releases.c.mechanism.is_not(None))).all()
    for row in rows:
        old = dict(row.mechanism)
        if "support_bins" in old:  # already published
            continue
        conn.execute(
            releases.update()
            .where(releases.c.id == row.id)
            .values(
                mechanism=_published(old, row.loss, row.epsilon_micro),
                examples_defaulted=int(old.get("examples_defaulted", 0)),
                universe_declared=bool(old.get("universe_declared", False)),
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("releases") as batch:
        batch.drop_column("universe_declared")
        batch.drop_column("examples_defaulted")
