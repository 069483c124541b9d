"""facts.public_id: random public memory ids

Revision ID: 0003_fact_public_ids
Revises: 0002_jobs_outbox
Create Date: 2026-12-02 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_fact_public_ids"
down_revision: str | None = "0002_jobs_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing facts get random ids too (gen_random_uuid: Postgres 13+, no extension).
    op.add_column(
        "facts",
        sa.Column("public_id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"),
                  nullable=False),
    )  # fmt: skip
    op.create_unique_constraint("uq_facts_public_id", "facts", ["public_id"])


def downgrade() -> None:
    op.drop_constraint("uq_facts_public_id", "facts", type_="unique")
    op.drop_column("facts", "public_id")
