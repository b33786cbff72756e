"""The table of training jobs is named for what it holds.

Revision ID: f0005
Revises: f0004
Create Date: 2026-11-22
"""

from alembic import op

revision = "f0005"
down_revision = "f0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.rename_table("models", "training_jobs")
    op.drop_index("ix_models_tenant_id", table_name="training_jobs")
    op.create_index("ix_training_jobs_tenant_id", "training_jobs", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_training_jobs_tenant_id", table_name="training_jobs")
    op.create_index("ix_models_tenant_id", "training_jobs", ["tenant_id"])
    op.rename_table("training_jobs", "models")
