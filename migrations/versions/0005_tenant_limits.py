"""tenants.requests_per_minute, tokens_per_minute, max_concurrent_requests: per-tenant limits
(null: the settings' defaults); tenants.fair_weight: its share of the engine under contention

Revision ID: 0005_tenant_limits
Revises: 0004_mem0_scopes
Create Date: 2026-12-03 16:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_tenant_limits"
down_revision: str | None = "0004_mem0_scopes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("tenants", sa.Column(name, sa.Integer(), nullable=True))
    op.add_column("tenants", sa.Column("fair_weight", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "fair_weight")
    for name in COLUMNS:
        op.drop_column("tenants", name)
