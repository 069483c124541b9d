"""jobs outbox: dispatched_at

Revision ID: 0002_jobs_outbox
Revises: 0001_initial
Create Date: 2026-12-02 03:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_jobs_outbox"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
    # Jobs from before the outbox were sent when they were created.
    op.execute("UPDATE jobs SET dispatched_at = created_at")
    # The relay's scan: only undispatched jobs, oldest first.
    op.create_index(
        "ix_jobs_undispatched",
        "jobs",
        ["created_at"],
        postgresql_where=sa.text("dispatched_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_undispatched", table_name="jobs")
    op.drop_column("jobs", "dispatched_at")
