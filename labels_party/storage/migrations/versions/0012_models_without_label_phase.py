"""A semi-sensitive model may run DP-SGD alone (no label release, when the public plan finds that the
label phase does not pay for its ε), so it names its recipient itself.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("semi_sensitive_models") as batch:
        batch.alter_column("label_release_id", existing_type=sa.String(36), nullable=True)
        batch.add_column(
            sa.Column(
                "recipient_id",
                sa.String(36),
                sa.ForeignKey("recipients.id", name="fk_models_recipient"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("semi_sensitive_models") as batch:
        batch.drop_column("recipient_id")
        batch.alter_column("label_release_id", existing_type=sa.String(36), nullable=False)
