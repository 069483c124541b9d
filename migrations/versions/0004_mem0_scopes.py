"""facts.agent_id, app_id, run_id, categories: Mem0's memory scopes and categories

Revision ID: 0004_mem0_scopes
Revises: 0003_fact_public_ids
Create Date: 2026-12-03 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_mem0_scopes"
down_revision: str | None = "0003_fact_public_ids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPES = ("agent_id", "app_id", "run_id")


def upgrade() -> None:
    for scope in SCOPES:
        op.add_column("facts", sa.Column(scope, sa.String(200), nullable=True))
        op.create_index(f"ix_facts_tenant_{scope}", "facts", ["tenant_id", scope])
    op.add_column(
        "facts",
        sa.Column("categories", postgresql.JSONB(), server_default=sa.text("'[]'::jsonb"),
                  nullable=False),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_column("facts", "categories")
    for scope in SCOPES:
        op.drop_index(f"ix_facts_tenant_{scope}", table_name="facts")
        op.drop_column("facts", scope)
